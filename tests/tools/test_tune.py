"""`python -m tools.tune`: refuses a CPU machine clearly; restores the launch settings it sweeps; picks the
fastest row per (format, path) and ignores rows that failed."""
from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from hw._logits_details import launch_config as cfg
from tools.cmd_bench import launch_settings
from tools.tune import _best, tune


def test_tune_without_gpu_exits_2(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(tune, ["--json-out", str(tmp_path / "t.json")])
    assert result.exit_code == 2
    assert "sees no GPU" in result.output


def test_config_is_restored_after_an_error():
    before = (cfg.PAGED_NUM_WARPS, cfg.PAGED_TOKENS_PER_STEP)
    with pytest.raises(RuntimeError), launch_settings(PAGED_NUM_WARPS=16, PAGED_TOKENS_PER_STEP={"fp8": 1, "mxfp4": 1}):
        assert cfg.PAGED_NUM_WARPS == 16
        raise RuntimeError
    assert (cfg.PAGED_NUM_WARPS, cfg.PAGED_TOKENS_PER_STEP) == before


def test_best_takes_the_fastest_measured_row_per_variant():
    rows = [{"kernel": "decode", "format": "fp8", "path": None, "time_us": 30.0, "w": 4},
            {"kernel": "decode", "format": "fp8", "path": None, "time_us": 20.0, "w": 8},
            {"kernel": "decode", "format": "fp8", "path": None, "error": "RuntimeError: x", "w": 2},
            {"kernel": "decode", "format": "mxfp4", "path": "unpack_ptx", "time_us": 50.0, "w": 4},
            {"kernel": "prefill", "format": "fp8", "path": None, "time_us": 1.0, "w": 4}]
    best = _best(rows, "decode")
    assert sorted((r["format"], r["w"]) for r in best) == [("fp8", 8), ("mxfp4", 4)]
