"""The registry of kernel variants: every way hw can compute an op, in one list per op.

Dispatch (the launchers), the tests, `mxidx diff`, `mxidx bench`, `tools.tune` and `mxidx isa` all iterate this
registry, so a variant exists in one place. Adding one (docs/kernels.md, "Adding a kernel variant"): write its
module (kernel, settings, launch, precision, ISA specs, ending in a `Variant` record, see hw.targets.Variant) and add
that record to REGISTRY below.

What a launch runs without `variant=` is the first row of DEFAULTS for its (op, target, kv_dtype) whose
condition holds for the call and whose variant runs there; `variant="name"` on a launcher picks one explicitly,
which runs its own kernels only: on a call it does not cover its settings raise hw.targets.NotCovered before any
kernel runs (the rows here, not the variants, send a call to another variant). `mxidx variants` prints the table.
"""
from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

from ._logits_details import paged_keys_m, paged_keys_m_wgmma, prefill_keys_m
from ._topk_details import fast as topk_fast
from ._topk_details import radix_fast as topk_radix
from ._topk_details import variants as topk_variants
from ._topk_details.radix_fast import FAST_MAX_WIDTH
from .isa_spec import CompileSpec
from .targets import Op, Target, Variant

REGISTRY: dict[Op, tuple[Variant, ...]] = {
    Op.PREFILL: (prefill_keys_m.FP8_VARIANT, prefill_keys_m.MXFP4_FOLD_VARIANT,
                 prefill_keys_m.MXFP4_DOT_SCALED_VARIANT),
    Op.DECODE: (paged_keys_m.FP8_VARIANT, paged_keys_m_wgmma.VARIANT, paged_keys_m.MXFP4_FOLD_VARIANT,
                paged_keys_m.MXFP4_DOT_SCALED_VARIANT),
    Op.TOPK: (topk_fast.VARIANT, topk_variants.PER_ROW, topk_variants.ROWS_TILE),
}


@dataclass(frozen=True)
class Default:
    """One row of DEFAULTS: on `target`, `op` on `kv_dtype` inputs (None: top-k, any logits) runs the registered
    variant named `variant` when `applies(call)` holds (None: every call; `condition` says it in words). A row
    whose variant does not run on the target (this triton cannot build it there) is passed over."""

    op: Op
    target: Target
    kv_dtype: str | None
    variant: str
    why: str
    condition: str = ""
    applies: Callable[[Any], bool] | None = None


_N, _A, _I = Target.NVIDIA, Target.AMD, Target.INTERPRETER
_NVIDIA_FASTEST = "timed fastest on the H200 (docs/perf/h200-bench.md)"
_AMD_KEYS_M = ("keys on M: scaled MFMA / MFMA kept, no scratch, fewer instructions per key tile at the same or a "
               "higher occupancy than heads on M (docs/perf/isa-gfx950-structures.md)")
_INTERPRETER_AS_NVIDIA = "the structure and arithmetic NVIDIA runs, so that CPU tests check them"
#: top-k rows too wide for radix_fast
_WIDE_ROWS = dict(why="radix_fast's long path holds at most 4096 columns per group",
                  condition=f"rows wider than 2^{FAST_MAX_WIDTH.bit_length() - 1} columns (FAST_MAX_WIDTH)",
                  applies=lambda call: not topk_radix.covers_width(call.logits.shape[1]))

#: What runs without `variant=`, in precedence order (the first row that applies wins). Conditional rows come
#: before the unconditional one of their (op, target, kv_dtype): a fallback is a row here, with its condition.
DEFAULTS: tuple[Default, ...] = (
    Default(Op.DECODE, _N, "fp8", "fp8_keys_m", _NVIDIA_FASTEST),
    Default(Op.DECODE, _N, "mxfp4", "mxfp4_keys_m",
            "the Gluon kernel does not cover the call, or its grid is too short for it",
            condition="not sm_90, a head dim or query-column count the Gluon kernel lacks, or more than 64 query "
                      "columns on fewer than 8 key tiles per resident program",
            applies=lambda call: not paged_keys_m_wgmma.takes(call)),
    Default(Op.DECODE, _N, "mxfp4", "mxfp4_keys_m_wgmma", _NVIDIA_FASTEST),
    Default(Op.DECODE, _A, "fp8", "fp8_keys_m", _AMD_KEYS_M),
    Default(Op.DECODE, _A, "mxfp4", "mxfp4_keys_m_dot_scaled", _AMD_KEYS_M),
    Default(Op.DECODE, _I, "fp8", "fp8_keys_m", _INTERPRETER_AS_NVIDIA),
    Default(Op.DECODE, _I, "mxfp4", "mxfp4_keys_m", _INTERPRETER_AS_NVIDIA),
    Default(Op.PREFILL, _N, "fp8", "fp8_keys_m", _NVIDIA_FASTEST),
    Default(Op.PREFILL, _N, "mxfp4", "mxfp4_keys_m", _NVIDIA_FASTEST),
    Default(Op.PREFILL, _A, "fp8", "fp8_keys_m", _AMD_KEYS_M),
    Default(Op.PREFILL, _A, "mxfp4", "mxfp4_keys_m_dot_scaled", _AMD_KEYS_M),
    Default(Op.PREFILL, _I, "fp8", "fp8_keys_m", _INTERPRETER_AS_NVIDIA),
    Default(Op.PREFILL, _I, "mxfp4", "mxfp4_keys_m", _INTERPRETER_AS_NVIDIA),
    Default(Op.TOPK, _N, None, "per_row", **_WIDE_ROWS),
    Default(Op.TOPK, _N, None, "radix_fast", _NVIDIA_FASTEST),
    Default(Op.TOPK, _A, None, "per_row", **_WIDE_ROWS),
    Default(Op.TOPK, _A, None, "radix_fast",
            "the NVIDIA default's kernels, both forms: no scratch on gfx950 (docs/perf/isa-gfx950.md)"),
    Default(Op.TOPK, _I, None, "rows_tile", "tiles sized for NumPy: the CPU tests' time"),
)


def _named(op: Op, name: str) -> Variant | None:
    return next((v for v in REGISTRY[op] if v.name == name), None)


@functools.lru_cache(maxsize=None)   # every default launch asks (host time); DEFAULTS is a constant
def defaults(op: Op, target: Target, kv_dtype: str | None = None) -> tuple[Default, ...]:
    """The rows of DEFAULTS for (op, target, kv_dtype), in precedence order."""
    return tuple(d for d in DEFAULTS if d.op is op and d.target is target and d.kv_dtype == kv_dtype)


def variants(op: Op, kv_dtype: str | None = None, target: Target | None = None) -> tuple[Variant, ...]:
    """The variants of `op` (of `kv_dtype`, running on `target`, when given), in registry order."""
    return tuple(v for v in REGISTRY[op] if (kv_dtype is None or v.kv_dtype == kv_dtype)
                 and (target is None or v.runs_on(target)))


def select(op: Op, target: Target, kv_dtype: str | None = None, name: str | None = None, call=None) -> Variant:
    """The variant a launch of `op` takes on `target`: `name` when given (ValueError if it is not a variant of
    this op and format, or does not run on the target), else the first row of DEFAULTS that applies to `call`
    and whose variant runs there (without a call: the rows without a condition)."""
    if name is not None:
        found = _named(op, name)
        if found is None or (kv_dtype is not None and found.kv_dtype != kv_dtype):
            names = [v.name for v in variants(op, kv_dtype)]
            raise ValueError(f"variant must be one of {names} for {op.value}"
                             + (f" with {kv_dtype} inputs" if kv_dtype else "") + f", got {name!r}")
        if not found.runs_on(target):
            where = sorted(t.value for t in found.targets)
            raise ValueError(f"variant {name!r} does not run on {target.value} (it runs on {where}); "
                             f"variants that do: {[v.name for v in variants(op, kv_dtype, target)]}")
        return found
    for row in defaults(op, target, kv_dtype):
        if row.applies is not None and (call is None or not row.applies(call)):
            continue
        chosen = _named(op, row.variant)
        if chosen is not None and chosen.runs_on(target):
            return chosen
    raise AssertionError(f"no default {op.value} variant for {kv_dtype} on {target.value}")   # a DEFAULTS bug


def isa_specs() -> tuple:
    """Every variant's cross-compile specs (the scorers' and top-k's; other kernel packages export their own)."""
    return tuple(spec for op_variants in REGISTRY.values() for v in op_variants for spec in v.isa_specs())


def kernel_packages() -> tuple[str, ...]:
    """Every hw/_<name>_details package, by module name (found on disk, so a new package is never forgotten)."""
    here = os.path.dirname(__file__)
    return tuple(sorted(f"{__package__}.{m.name}" for m in pkgutil.iter_modules([here])
                        if m.ispkg and m.name.startswith("_") and m.name.endswith("_details")))


def load_specs(modules: tuple[str, ...] | None = None) -> tuple[tuple[CompileSpec, ...], tuple[str, ...]]:
    """(the ISA_SPECS of `modules` (default: every kernel package of hw/, plus every registered variant's specs),
    the modules that export none).

    ValueError when a (label, target) pair repeats."""
    specs, missing = [], []
    if modules is None:   # the kernel variants' specs (scorers, top-k) come with their records
        specs.extend(isa_specs())
    for name in kernel_packages() if modules is None else modules:
        module_specs = getattr(importlib.import_module(name), "ISA_SPECS", None)
        if module_specs is None:
            missing.append(name)
            continue
        specs.extend(module_specs)
    keys = [(s.label, t) for s in specs for t in s.targets]
    duplicated = sorted({x for x in keys if keys.count(x) > 1})
    if duplicated:
        raise ValueError(f"ISA_SPECS labels must be unique per target; repeated (label, target): {duplicated}")
    return tuple(specs), tuple(missing)
