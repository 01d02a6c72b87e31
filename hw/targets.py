"""What a kernel variant is and where it runs: the vocabulary of the variant registry (hw.variants).

Target          a kind of machine the launchers can run a kernel on; every launch setting is a function of it.
Op              an operation that has several kernel variants.
Variant         one way of computing an op: the targets it runs on, where it is the default, how it launches,
                the settings it launches with, what precision it declares and what the cross-compile report
                checks.
LaunchSettings  the base of every variant's settings record (one schema: frozen fields, replaced by name).
NotCovered      the ValueError a variant's settings raise for a call it does not run (a launch that names it).
"""
from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .checks import kernels_interpreted


class Target(enum.Enum):
    """Where kernels run. The launch settings and the variant choice depend on nothing else."""

    INTERPRETER = "interpreter"   #: CPU tensors through TRITON_INTERPRET=1 (any triton the package accepts)
    NVIDIA = "nvidia"             #: CUDA GPUs, tuned and verified on sm_90 (H200); cross-compiled as "sm90"
    AMD = "amd"                   #: ROCm GPUs, tuned for gfx950 (native scaled MFMA); cross-compiled as "gfx950"

    @property
    def lanes(self) -> int:
        """Threads of a warp (a wavefront on AMD's CDNA: 64) on this target."""
        return 64 if self is Target.AMD else 32

    @property
    def isa_target(self) -> str | None:
        """The cross-compile target of the ISA report (CompileSpec.targets), None for the interpreter."""
        return {Target.NVIDIA: "sm90", Target.AMD: "gfx950"}.get(self)

    @classmethod
    def of_isa(cls, isa_target: str) -> Target:
        """The Target whose isa_target is `isa_target` ("sm90", "gfx950"); ValueError for any other."""
        for target in (cls.NVIDIA, cls.AMD):
            if target.isa_target == isa_target:
                return target
        raise ValueError(f"no target cross-compiles as {isa_target!r}")


def target_of(device: torch.device | str, kernel) -> Target:
    """The Target that runs `kernel` (a @triton.jit function of hw) on `device`: INTERPRETER when the kernel was
    defined under TRITON_INTERPRET=1, else NVIDIA or AMD by torch's build."""
    if kernels_interpreted(kernel):
        return Target.INTERPRETER
    return Target.AMD if torch.device(device).type == "cuda" and torch.version.hip else Target.NVIDIA


def sm_count(device: torch.device | str) -> int:
    """The SMs (CUs) of a GPU `device` (queried once per device)."""
    device = torch.device(device)
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def nvidia_capability(device: torch.device | str) -> tuple[int, int] | None:
    """The compute capability of an NVIDIA GPU `device` (queried once per device); None for any other device
    (the CPU, AMD GPUs)."""
    device = torch.device(device)
    if device.type != "cuda" or torch.version.hip:
        return None
    return _capability(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@dataclass(frozen=True)
class LaunchSettings:
    """The base of every variant's launch settings record: a frozen dataclass whose fields are the kernel's launch
    constants (constexprs and launch options), each a pure function of the target and the call's shapes. Tuning
    and tests change them by name (`replace`); tools.tune sweeps the fields a record has (`field_names`)."""

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **changes):
        """A copy with `changes` applied; TypeError naming the record's fields for a name it does not have."""
        unknown = sorted(set(changes) - set(self.field_names()))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(map(repr, unknown))}; its fields: "
                            f"{', '.join(self.field_names())}")
        return dataclasses.replace(self, **changes)


def register_cap(maxnreg: int | None) -> dict:
    """The launch keywords of a register cap: {"maxnreg": maxnreg}, or none for None (ptxas chooses; AMD's
    launchers take no such option)."""
    return {} if maxnreg is None else {"maxnreg": maxnreg}


class NotCovered(ValueError):
    """A variant does not run this call (its settings raise it, from the call's shapes and device, before any
    kernel launch): the message says what the variant covers, what the call has, and which variant takes it. A
    launch without `variant=` never meets it: hw.variants.DEFAULTS picks a variant that covers the call."""


class Op(enum.Enum):
    """Operations with kernel variants (one registry list each)."""

    PREFILL = "prefill"   #: ragged prefill logits, hw.fp8_fp4_mqa_logits
    DECODE = "decode"     #: paged decode logits, hw.fp8_fp4_paged_mqa_logits
    TOPK = "topk"         #: per-row top-k, hw.top_k_per_row


@dataclass(frozen=True)
class Variant:
    """One kernel variant of an op.

    name        unique within its op, e.g. "mxfp4_keys_m"; the `variant=` keyword of the op's launcher takes it.
    op          the Op it computes.
    kv_dtype   "fp8" | "mxfp4" for the scorers (the q/K format it takes), None for top-k.
    targets     the Targets it runs on.
    settings    settings(target, call) -> the launch settings (a LaunchSettings record of the variant's own
                type), a pure function of the target and the call's shapes; NotCovered for a call the variant
                does not run (it never hands a call to another kernel).
    launch      launch(call, settings): runs the kernel on the op's checked call record.
    precision   precision(head_dim, target) -> (n, u) of DESIGN §4's bound gamma = (n + H + 2) u; None for
                exact ops (top-k).
    isa_specs   isa_specs() -> the CompileSpecs the cross-compile report checks (cheap: no compilation).
    summary     one line: what the variant does differently.
    """

    name: str
    op: Op
    kv_dtype: str | None
    targets: frozenset
    settings: Callable[[Target, Any], Any]
    launch: Callable[[Any, Any], None]
    precision: Callable[[int, Target], tuple[int, float]] | None
    isa_specs: Callable[[], tuple]
    summary: str

    def runs_on(self, target: Target) -> bool:
        return target in self.targets

    def settings_for(self, call, target: Target, overrides: dict | None = None):
        """The settings of `call` for `target`, fields replaced by `overrides` (tuning, tests; a field the settings
        do not have is a TypeError naming its fields). NotCovered where the variant does not run the call; no
        kernel runs."""
        settings = self.settings(target, call)
        return settings.replace(**overrides) if overrides else settings

    def run(self, call, target: Target, overrides: dict | None = None) -> None:
        """Launch `call` with settings_for(call, target, overrides)."""
        self.launch(call, self.settings_for(call, target, overrides))
