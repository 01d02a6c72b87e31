"""Capability gates: each one forces the FP8 fallback on simulated platforms, with one warning naming it."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
import torch

from hw.checks import parse_version
from integration.config import IndexerConfig
from integration.gates import GATES, Platform, check_triton, decide
from integration.geometry import IndexerGeometry

MXFP4 = IndexerConfig("mxfp4")
TILED = IndexerConfig("mxfp4", "mxfp4_tiled")
GEOMETRY = IndexerGeometry(num_heads=8, head_dim=128, page_size=64)
GFX950 = Platform("cuda", "gfx950", "3.4.0", interpreter=False)


def _passing_self_check(config, geometry, device):
    return None


def _decide(config=MXFP4, geometry=GEOMETRY, platform=GFX950, self_check=_passing_self_check):
    return decide(config, geometry, "cpu", platform=platform, self_check=self_check)


@dataclass(frozen=True)
class FallbackCase:
    name: str
    gate: str
    reason: str                  # a fragment of the reason
    platform: Platform = GFX950
    config: IndexerConfig = MXFP4
    geometry: IndexerGeometry = GEOMETRY
    self_check_reason: str | None = None

    def __str__(self):
        return self.name


FALLBACKS = [
    FallbackCase("gfx942", "architecture", "gfx942 is not supported", Platform("cuda", "gfx942", "3.6.0", False)),
    FallbackCase("ampere", "architecture", "sm_80 is not supported", Platform("cuda", "sm_80", "3.6.0", False)),
    FallbackCase("cpu-no-interpreter", "architecture", "TRITON_INTERPRET=1", Platform("cpu", "cpu", "3.9.0", False)),
    FallbackCase("hopper-old-triton", "triton", "triton 3.2.0 is too old: tl.dot_scaled in compiled backends needs "
                 "triton >= 3.3", Platform("cuda", "sm_90", "3.2.0", False)),
    FallbackCase("tiled-head-dim", "geometry", "multiple of 128, got 64", config=TILED,
                 geometry=IndexerGeometry(8, 64, 64)),
    FallbackCase("tiled-head-dim-32", "geometry", "multiple of 128, got 32", config=TILED,
                 geometry=IndexerGeometry(8, 32, 16)),
    FallbackCase("gfx90a", "architecture", "gfx90a is not supported", Platform("cuda", "gfx90a", "3.6.0", False)),
    FallbackCase("mps", "architecture", "mps is not supported", Platform("mps", "mps", "3.6.0", False)),
    FallbackCase("xpu", "architecture", "xpu is not supported", Platform("xpu", "xpu", "3.6.0", False)),
    FallbackCase("unparsable-triton", "triton", "ValueError: cannot parse a version from 'main'",
                 Platform("cuda", "sm_90", "main", False)),
    FallbackCase("self-check", "self_check", "q codes differ from sim", self_check_reason="q codes differ from sim"),
]


@pytest.mark.parametrize("case", FALLBACKS, ids=str)
def test_each_gate_forces_the_fp8_fallback(case: FallbackCase, caplog):
    with caplog.at_level(logging.WARNING, logger="integration.gates"):
        decision = _decide(case.config, case.geometry, case.platform,
                           lambda config, geometry, device: case.self_check_reason)
    assert decision.fell_back and decision.failed_gate == case.gate
    assert decision.kv_dtype == "fp8" and decision.layout == "fp8" and decision.config == IndexerConfig()
    assert decision.requested == case.config
    assert case.reason in decision.reason
    assert [r.getMessage() for r in caplog.records] == [
        f"MXFP4 indexer disabled by the {case.gate} gate: {decision.reason}; falling back to FP8"]
    assert case.gate in decision.describe() and decision.reason in decision.describe()


def test_a_self_check_that_raises_falls_back(caplog):
    """An exception in the self-check (or in importing it) is a failed gate, not a crash of the model."""
    def broken(config, geometry, device):
        raise RuntimeError("no kernel binary")

    with caplog.at_level(logging.WARNING, logger="integration.gates"):
        decision = _decide(self_check=broken)
    assert (decision.failed_gate, decision.kv_dtype) == ("self_check", "fp8")
    assert decision.reason == "RuntimeError: no kernel binary"
    assert len(caplog.records) == 1 and "self_check gate" in caplog.records[0].getMessage()


@pytest.mark.parametrize("platform", [GFX950, Platform("cuda", "sm_90", "3.3.0", False),
                                      Platform("cuda", "sm_100", "3.6.0+git1a2b", False),
                                      Platform("cuda", "sm_120", "3.9.0", False),
                                      Platform("cpu", "cpu", "3.8.0", True)], ids=lambda p: p.arch)
def test_supported_platforms_keep_mxfp4(platform, caplog):
    with caplog.at_level(logging.WARNING, logger="integration.gates"):
        decision = _decide(TILED, platform=platform)
    assert not decision.fell_back and decision.failed_gate is None
    assert (decision.kv_dtype, decision.layout) == ("mxfp4", "mxfp4_tiled")
    assert caplog.records == []


def test_gates_run_in_order_and_stop_at_the_first_failure():
    calls = []

    def self_check(config, geometry, device):
        calls.append(config)
        return None

    old = Platform("cuda", "gfx942", "3.0.0", False)   # fails the architecture *and* the triton gate
    assert _decide(platform=old, self_check=self_check).failed_gate == "architecture"
    assert calls == []                                  # the expensive self-check never ran
    assert _decide(self_check=self_check).failed_gate is None
    assert calls == [MXFP4]
    assert GATES == ("architecture", "triton", "geometry", "self_check")


def test_fp8_requested_runs_no_gate(caplog):
    def self_check(config, geometry, device):
        raise AssertionError("FP8 needs no self-check")

    with caplog.at_level(logging.WARNING, logger="integration.gates"):
        decision = _decide(IndexerConfig(), platform=Platform("cuda", "gfx942", "3.0.0", False),
                           self_check=self_check)
    assert (decision.kv_dtype, decision.fell_back, decision.reason) == ("fp8", False, "requested")
    assert caplog.records == []


def test_platform_detect_on_the_cpu(monkeypatch):
    """`interpreter` says how hw's kernels were defined: TRITON_INTERPRET changed after hw was imported does not
    change what the kernels can run on."""
    import triton

    from hw.checks import kernels_interpreted as kernel_interpreted
    from hw.logits import kernels_interpreted
    from hw.quant import q_quant_mxfp4_kernel

    defined_interpreted = kernels_interpreted()
    assert defined_interpreted == kernel_interpreted(q_quant_mxfp4_kernel)   # one TRITON_INTERPRET for all of hw
    for setting in ("1", "0"):
        monkeypatch.setenv("TRITON_INTERPRET", setting)
        assert Platform.detect("cpu") == Platform("cpu", "cpu", triton.__version__, defined_interpreted)
    assert Platform.detect("cpu").interpreter == (not torch.cuda.is_available())   # conftest's choice


@dataclass(frozen=True)
class TritonCase:
    """check_triton on one platform: the interpreter needs 3.7, compiled backends 3.3 (the device type alone does
    not decide)."""

    version: str
    device_type: str
    interpreter: bool
    passes: bool

    def __str__(self):
        return f"{self.version}-{self.device_type}-{'interp' if self.interpreter else 'compiled'}"


TRITON_CASES = [
    TritonCase("3.8.0", "cpu", True, True),
    TritonCase("3.7.1", "cpu", True, True),
    TritonCase("3.6.0", "cpu", True, False),
    TritonCase("3.6.0", "cuda", True, False),      # interpreted kernels on a GPU machine: still the interpreter
    TritonCase("3.8.0+git12", "cuda", True, True),
    TritonCase("3.3.0", "cuda", False, True),
    TritonCase("3.2.9", "cuda", False, False),
    TritonCase("3.3.0", "cpu", False, True),       # compiled kernels: the compiled rule (the arch gate rejects it)
    TritonCase("3.2.0", "cpu", False, False),
]


@pytest.mark.parametrize("case", TRITON_CASES, ids=str)
def test_triton_gate_follows_the_interpreter_flag(case: TritonCase):
    reason = check_triton(Platform(case.device_type, case.device_type, case.version, case.interpreter))
    if case.passes:
        assert reason is None, reason
    elif case.interpreter:
        assert reason == (f"triton {case.version} is too old for the Triton interpreter: hw's kernels need triton "
                          ">= 3.7 there"), reason
    else:
        assert reason == (f"triton {case.version} is too old: tl.dot_scaled in compiled backends needs triton >= "
                          "3.3"), reason


@pytest.mark.parametrize("version", ["3.7.1", "3.8.0"])
def test_interpreter_with_or_without_dot_scaled_passes(version):
    """The interpreter's MXFP4 default (the keys-on-M fold) needs no tl.dot_scaled, which 3.7 cannot interpret."""
    decision = _decide(MXFP4, IndexerGeometry(8, 128, 64), Platform("cpu", "cpu", version, True),
                       lambda config, geometry, device: None)
    assert not decision.fell_back
    assert decision.reason == "all gates passed on cpu"


def test_parse_version():
    assert parse_version("3.6.0+git9e1f") == (3, 6, 0)
    assert parse_version("3.10") == (3, 10)
    with pytest.raises(ValueError, match="cannot parse a version"):
        parse_version("main")


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_heads=0, head_dim=128, page_size=64), "num_heads: the scorers take 1 to 128 heads, got 0"),
    (dict(num_heads=129, head_dim=128, page_size=64), "num_heads: the scorers take 1 to 128 heads, got 129"),
    (dict(num_heads=8, head_dim=48, page_size=64), "head dim must be a multiple of 32"),
    (dict(num_heads=8, head_dim=288, page_size=64), "head dim must be a multiple of 32"),
    (dict(num_heads=8, head_dim=128, page_size=48), "page_size must be one of"),
    # multiples of 32 that no scorer tiles (their tiles take powers of two): an error, not an FP8 fallback
    (dict(num_heads=8, head_dim=96, page_size=64), r"power-of-two head dim \(32, 64, 128 or 256\), got 96"),
    (dict(num_heads=8, head_dim=192, page_size=64), "power-of-two head dim"),
])
def test_geometry_no_format_supports_is_an_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        IndexerGeometry(**kwargs)
