"""`python -m tools.tune`: refuses a CPU machine clearly; picks the fastest row per variant and ignores rows that
failed."""
from __future__ import annotations

import torch
from click.testing import CliRunner

from tools.tune import _best, tune


def test_tune_without_gpu_exits_2(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(tune, ["--json-out", str(tmp_path / "t.json")])
    assert result.exit_code == 2
    assert "sees no GPU" in result.output


def test_best_takes_the_fastest_measured_row_per_variant():
    rows = [{"kernel": "decode", "format": "fp8", "variant": "fp8", "time_us": 30.0, "w": 4},
            {"kernel": "decode", "format": "fp8", "variant": "fp8", "time_us": 20.0, "w": 8},
            {"kernel": "decode", "format": "fp8", "variant": "fp8", "error": "RuntimeError: x", "w": 2},
            {"kernel": "decode", "format": "mxfp4", "variant": "mxfp4_unpack_ptx", "time_us": 50.0, "w": 4},
            {"kernel": "prefill", "format": "fp8", "variant": "fp8", "time_us": 1.0, "w": 4}]
    best = _best(rows, "decode")
    assert sorted((r["format"], r["w"]) for r in best) == [("fp8", 8), ("mxfp4", 4)]
