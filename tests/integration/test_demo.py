"""The demo job end to end on a tiny model (CPU interpreter): both formats, the fallback, the report."""
from __future__ import annotations

import math

import pytest

from integration.config import IndexerConfig
from integration.demo import DemoSettings, VariantResult, default_top_k, format_report, run_demo
from integration.model import ModelConfig

pytestmark = pytest.mark.interp

TINY = DemoSettings(ModelConfig(num_layers=2, num_heads=2, head_dim=64), prompt_len=20, decode_steps=2, page_size=16,
                    top_k=8)


def test_demo_end_to_end(device):
    """MXFP4 through the whole job (FP8 runs end to end in the fallback test below)."""
    config = IndexerConfig("mxfp4")
    messages = []
    result = run_demo(config, TINY, device.type, progress=messages.append)
    assert result.decision.kv_dtype == config.kv_dtype and not result.decision.fell_back
    assert result.bytes_per_token == {"fp8": 68, "mxfp4": 34}
    # pages: ceil(22 / 16) = 2 for the one request + 1 spare; stride = 16 * 656 + 2 layers' pages
    assert result.pool.num_pages == 3
    assert result.pool.page_stride == 16 * 656 + 2 * 16 * result.bytes_per_token["mxfp4"]
    assert [v.rotate for v in result.variants] == [True, False]
    for v in result.variants:
        # rows that see more than k = 8 keys: positions 8..19 of the prompt and every decode row, in each layer
        assert v.rows == {"prefill": (20 - 8) * 2, "decode": 2 * 2}
        for phase in ("prefill", "decode"):
            assert 0.5 <= v.recall(phase) <= 1.0, (phase, v.recall(phase))
        assert set(v.seconds) == {"prefill", "decode", "reference"}
    assert any("decode: step 2/2" in m for m in messages)
    report = format_report(result)
    assert "gate decision     mxfp4" in report and "recall@8" in report
    assert "with Hadamard" in report and "without Hadamard" in report


def test_demo_reports_the_fallback(device):
    settings = DemoSettings(ModelConfig(num_layers=1, num_heads=2, head_dim=64), prompt_len=12, decode_steps=1,
                            page_size=16, top_k=4)
    result = run_demo(IndexerConfig("mxfp4", "mxfp4_tiled"), settings, device.type)
    assert result.decision.failed_gate == "geometry" and result.decision.kv_dtype == "fp8"
    assert result.pool.kv_dtype == "fp8" and result.pool.page_stride == 16 * 656 + 16 * 68
    for v in result.variants:
        assert v.rows == {"prefill": 12 - 4, "decode": 1} and v.recall() >= 0.5
    assert "fallback: geometry gate: layout mxfp4_tiled needs a head dim" in format_report(result)


def test_defaults_and_settings():
    cpu, gpu = DemoSettings.for_device("cpu"), DemoSettings.for_device("cuda")
    assert cpu.resolved_top_k < cpu.prompt_len and gpu.resolved_top_k == 2048 and gpu.prompt_len >= 8192
    assert DemoSettings.for_device("cpu", num_layers=3, prompt_len=None).model.num_layers == 3
    assert DemoSettings.for_device("cuda", num_heads=4).model == ModelConfig(num_layers=4, num_heads=4)
    assert (default_top_k(1024), default_top_k(8192), default_top_k(5)) == (64, 2048, 1)
    for bad in (dict(prompt_len=0), dict(decode_steps=-1)):
        with pytest.raises(ValueError, match="must be >= "):
            DemoSettings(**bad)
    for top_k in (0, 2049):            # hw.top_k_per_row's range
        with pytest.raises(ValueError, match=f"top_k must be in 1..2048, got {top_k}"):
            DemoSettings(top_k=top_k)
    assert math.isnan(VariantResult(True).recall())
