"""Capability gates: run MXFP4 only where it is known to work, else fall back to FP8 (DESIGN §5, §6).

Gates, in the order they are evaluated (cheap first; the self-check launches kernels):

    architecture  gfx950 (native scaled MFMA), NVIDIA sm_90 or newer (Triton's dot_scaled decomposition), or the
                  CPU through the Triton interpreter. Anything else (gfx942, sm_80, a CPU without the
                  interpreter) falls back.
    triton        compiled backends need tl.dot_scaled (triton >= 3.3). When the kernels are interpreted
                  (Platform.interpreter, whatever the device), hw's kernels need triton >= 3.7 there (the
                  interpreter's default MXFP4 scorers, the keys-on-M fold, do not use tl.dot_scaled).
    geometry      the MXFP4-specific limits of the model's geometry: the tiled layout needs D % 128 == 0 (its
                  P % 4 == 0 holds for every page size). Geometry no format supports (including head dims the
                  scorers do not tile: they take D in 32/64/128/256) is a ValueError from IndexerGeometry
                  (integration.geometry), not a fallback.
    self_check    a one-time run of the MXFP4 kernels against sim/ on a tiny case (integration.selfcheck).

A failed gate selects FP8 and logs one warning naming the gate and the reason. A gate that raises (an
unparsable version string, a self-check that cannot even be imported) fails with the exception as its reason:
the model falls back instead of crashing. The decision is a GateDecision (the config that runs, the failed gate,
the reason). Every input is injectable (Platform, the self-check callable) so tests can simulate other
architectures and versions.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

import torch

from hw.checks import INTERPRETER_MIN_TRITON, parse_version
from hw.layout import TILE_HEAD_DIM
from hw.logits import kernels_interpreted

from .config import IndexerConfig
from .geometry import IndexerGeometry

log = logging.getLogger(__name__)

GATES = ("architecture", "triton", "geometry", "self_check")
MIN_TRITON_COMPILED = (3, 3)      # tl.dot_scaled in compiled backends
NATIVE_ARCHS = ("gfx950",)        # scaled MFMA v_mfma_scale_f32_*_f8f6f4
MIN_NVIDIA_MAJOR = 9              # sm_90 (Hopper) and newer: dot_scaled through Triton's decomposition


@dataclass(frozen=True)
class Platform:
    """The gate inputs that describe the machine.

    device_type: "cuda" (NVIDIA or AMD through torch.cuda) or "cpu"
    arch:        "gfx950", "gfx942", "sm_90", "sm_100", "cpu", ...
    triton_version: e.g. "3.6.0" (local suffixes such as "+git1234" are ignored)
    interpreter: hw's kernels were defined under TRITON_INTERPRET=1 (they run on CPU tensors); the kernel
                 objects say so, whatever the environment says now
    """

    device_type: str
    arch: str
    triton_version: str
    interpreter: bool

    @classmethod
    def detect(cls, device: torch.device | str) -> "Platform":
        import triton

        device = torch.device(device)
        interpreter = kernels_interpreted()
        if device.type == "cpu":
            return cls("cpu", "cpu", triton.__version__, interpreter)
        if device.type != "cuda":
            return cls(device.type, device.type, triton.__version__, interpreter)
        props = torch.cuda.get_device_properties(device)
        if torch.version.hip:
            arch = props.gcnArchName.split(":")[0]          # "gfx950:sramecc+:xnack-" -> "gfx950"
        else:
            arch = f"sm_{props.major}{props.minor}"
        return cls("cuda", arch, triton.__version__, interpreter)


@dataclass(frozen=True)
class GateDecision:
    """What runs and why. `config` is the requested config, or the FP8 default after a failed gate."""

    requested: IndexerConfig
    config: IndexerConfig
    failed_gate: str | None     # one of GATES, or None
    reason: str

    @property
    def fell_back(self) -> bool:
        return self.failed_gate is not None

    @property
    def kv_dtype(self) -> str:
        return self.config.kv_dtype

    @property
    def layout(self) -> str:
        return self.config.resolved_layout

    def describe(self) -> str:
        if self.fell_back:
            return f"fp8 (fallback: {self.failed_gate} gate: {self.reason})"
        return f"{self.kv_dtype} (layout {self.layout}; {self.reason})"


def check_architecture(platform: Platform) -> str | None:
    """None if MXFP4 kernels run on this architecture, else the reason."""
    if platform.device_type == "cpu":
        if platform.interpreter:
            return None
        return ("kernels run on the CPU only through the Triton interpreter; set TRITON_INTERPRET=1 before "
                "importing hw (tools.runtime.choose_device does)")
    if platform.arch in NATIVE_ARCHS:
        return None
    m = re.fullmatch(r"sm_(\d+?)(\d)", platform.arch)
    if m and int(m.group(1)) >= MIN_NVIDIA_MAJOR:
        return None
    return (f"architecture {platform.arch} is not supported: MXFP4 needs gfx950 (native) or NVIDIA "
            f"sm_{MIN_NVIDIA_MAJOR}0+ (Triton's dot_scaled decomposition)")


def check_triton(platform: Platform) -> str | None:
    """None if the Triton version has what the MXFP4 kernels need, else the reason. Compiled backends need
    tl.dot_scaled; the interpreter runs hw's kernels from INTERPRETER_MIN_TRITON on."""
    version = parse_version(platform.triton_version)
    if platform.interpreter:
        if version >= INTERPRETER_MIN_TRITON:
            return None
        return (f"triton {platform.triton_version} is too old for the Triton interpreter: hw's kernels need triton "
                f">= {'.'.join(map(str, INTERPRETER_MIN_TRITON))} there")
    if version >= MIN_TRITON_COMPILED:
        return None
    return (f"triton {platform.triton_version} is too old: tl.dot_scaled in compiled backends needs triton >= "
            f"{'.'.join(map(str, MIN_TRITON_COMPILED))}")


def check_geometry(config: IndexerConfig, geometry: IndexerGeometry) -> str | None:
    """None if the MXFP4 layout supports this geometry, else the reason."""
    if config.resolved_layout == "mxfp4_tiled" and geometry.head_dim % TILE_HEAD_DIM:
        return (f"layout mxfp4_tiled needs a head dim that is a multiple of {TILE_HEAD_DIM}, "
                f"got {geometry.head_dim}")
    return None


SelfCheck = Callable[[IndexerConfig, IndexerGeometry, torch.device], "str | None"]


def decide(config: IndexerConfig, geometry: IndexerGeometry, device: torch.device | str, *,
           platform: Platform | None = None, self_check: SelfCheck | None = None) -> GateDecision:
    """Run the gates for `config` on `device` and return the decision.

    FP8 requested: no gates (FP8 is the default path). MXFP4 requested: the first failing gate selects FP8 and
    logs one warning; a gate that raises fails with "ExceptionType: message" as its reason. `platform` defaults
    to Platform.detect(device); `self_check` to integration.selfcheck.run_self_check (cached: it runs once per
    config, geometry and device).
    """
    device = torch.device(device)
    if config.kv_dtype == "fp8":
        return GateDecision(config, config, None, "requested")
    platform = platform or Platform.detect(device)
    checks = (
        ("architecture", lambda: check_architecture(platform)),
        ("triton", lambda: check_triton(platform)),
        ("geometry", lambda: check_geometry(config, geometry)),
        ("self_check", lambda: (self_check or _default_self_check())(config, geometry, device)),
    )
    for gate, check in checks:
        try:
            reason = check()
        except Exception as e:    # a gate that cannot decide has not passed: fall back rather than crash
            reason = f"{type(e).__name__}: {e}"
        if reason is not None:
            log.warning("MXFP4 indexer disabled by the %s gate: %s; falling back to FP8", gate, reason)
            return GateDecision(config, IndexerConfig(), gate, reason)
    return GateDecision(config, config, None, f"all gates passed on {platform.arch}")


def _default_self_check() -> SelfCheck:
    """integration.selfcheck.run_self_check, imported only when a gate reaches it (it imports sim/)."""
    from .selfcheck import run_self_check
    return run_self_check
