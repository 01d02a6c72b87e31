"""The one-time self-check against sim/: it passes on the real kernels, fails (naming the kernel) on a broken one,
and runs once per configuration."""
from __future__ import annotations

import pytest
import torch

import hw
from hw.targets import Op
from integration import selfcheck
from integration.config import IndexerConfig
from integration.gates import decide
from integration.geometry import IndexerGeometry

pytestmark = pytest.mark.interp

GEOMETRY = IndexerGeometry(num_heads=3, head_dim=128, page_size=16)


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(selfcheck, "_results", {})


@pytest.mark.parametrize("config", [IndexerConfig("mxfp4"), IndexerConfig("mxfp4", "mxfp4_tiled", "floor")],
                         ids=lambda c: c.resolved_layout)
def test_real_kernels_pass_and_the_gate_keeps_mxfp4(config, device, fresh_cache):
    assert selfcheck.run_self_check(config, GEOMETRY, device) is None
    decision = decide(config, GEOMETRY, device)
    assert (decision.kv_dtype, decision.layout, decision.fell_back) == ("mxfp4", config.resolved_layout, False)


def test_runs_once_per_configuration(device, fresh_cache, monkeypatch):
    calls = []
    real = hw.quantize_q_mxfp4

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hw, "quantize_q_mxfp4", counting)
    for _ in range(3):
        assert selfcheck.run_self_check(IndexerConfig("mxfp4"), GEOMETRY, device) is None
    assert len(calls) == 1


def test_a_kernel_that_disagrees_with_sim_fails_the_gate(device, fresh_cache, monkeypatch):
    real = hw.quantize_q_mxfp4

    def off_by_one_scale(q, scale_rule="rceil"):
        codes, scales = real(q, scale_rule)
        return codes, scales + 1

    monkeypatch.setattr(hw, "quantize_q_mxfp4", off_by_one_scale)
    reason = selfcheck.run_self_check(IndexerConfig("mxfp4"), GEOMETRY, device)
    assert reason is not None
    assert reason.startswith("hw.quantize_q_mxfp4: q scales: first difference from sim at (0, 0, 0)")
    decision = decide(IndexerConfig("mxfp4"), GEOMETRY, device)
    assert (decision.failed_gate, decision.kv_dtype, decision.reason) == ("self_check", "fp8", reason)


def test_a_kernel_that_raises_fails_the_gate_with_its_name(device, fresh_cache, monkeypatch):
    def missing(*args, **kwargs):
        raise NotImplementedError("not written yet")

    monkeypatch.setattr(hw, "fp8_fp4_paged_mqa_logits", missing)
    reason = selfcheck.run_self_check(IndexerConfig("mxfp4"), GEOMETRY, device)
    assert reason.startswith("NotImplementedError in missing (") and reason.endswith("not written yet")


def test_a_wrong_logit_fails_the_gate(device, fresh_cache, monkeypatch):
    real = hw.fp8_fp4_mqa_logits

    def nudged(*args, **kwargs):
        logits = real(*args, **kwargs)
        # twice the value plus one: outside the bound of every declared precision (on the H200 the keys-on-M
        # MXFP4 prefill declares unpromoted FP8 accumulation, u = 2^-12, where a 0.1 % nudge stays inside)
        logits[1, -1] = logits[1, -1] * 2 + 1
        return logits

    monkeypatch.setattr(hw, "fp8_fp4_mqa_logits", nudged)
    reason = selfcheck.run_self_check(IndexerConfig("mxfp4"), GEOMETRY, device)
    assert reason.startswith("hw.fp8_fp4_mqa_logits outside the fp32 bound") and "first violation at (1, " in reason


def test_cached_per_device_not_per_spelling(fresh_cache, monkeypatch):
    """"cuda" and "cuda:0" name one device (when 0 is the current one): the check runs once for both."""
    calls = []
    monkeypatch.setattr(selfcheck, "_check", lambda config, geometry, device: calls.append(device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for spelling in ("cuda", "cuda:0", torch.device("cuda", 0)):
        assert selfcheck.run_self_check(IndexerConfig("mxfp4"), GEOMETRY, spelling) is None
    assert calls == [torch.device("cuda", 0)]
    selfcheck.run_self_check(IndexerConfig("mxfp4"), GEOMETRY, "cuda:1")       # another device checks again
    selfcheck.run_self_check(IndexerConfig("mxfp4", scale_rule="floor"), GEOMETRY, "cuda:0")  # another config
    assert calls == [torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cuda", 0)]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_device_that_is_not_there_fails_the_check(fresh_cache):
    reason = selfcheck.run_self_check(IndexerConfig("mxfp4"), GEOMETRY, "cuda")
    assert reason is not None and "while running the MXFP4 kernels" in reason


def test_the_bound_uses_hw_declared_precision(device, fresh_cache, monkeypatch):
    """n and u of the fp32 bound are hw.logits.declared_precision for each scorer op on the check's device (the
    default variant, the one the check launches)."""
    asked = []
    real = hw.logits.declared_precision

    def recording(op, kv_dtype, head_dim, dev, variant=None):
        asked.append((op, kv_dtype, head_dim, torch.device(dev), variant))
        return real(op, kv_dtype, head_dim, dev, variant)

    monkeypatch.setattr(hw.logits, "declared_precision", recording)
    assert selfcheck.run_self_check(IndexerConfig("mxfp4"), GEOMETRY, device) is None
    want_device = torch.device(device)
    if want_device.type == "cuda" and want_device.index is None:   # the check runs on the current CUDA device
        want_device = torch.device("cuda", torch.cuda.current_device())
    assert asked == [(op, "mxfp4", GEOMETRY.head_dim, want_device, None) for op in (Op.DECODE, Op.PREFILL)]
