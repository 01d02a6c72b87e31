"""`python -m tools.tune`: refuses a CPU machine clearly; picks the fastest row per variant and ignores rows that
failed."""
from __future__ import annotations

import click
import pytest
import torch
from click.testing import CliRunner

from tools.tune import _best, _parse_grid, _product, tune


def test_tune_without_gpu_exits_2(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(tune, ["--json-out", str(tmp_path / "t.json")])
    assert result.exit_code == 2
    assert "sees no GPU" in result.output


def test_best_takes_the_fastest_measured_row_per_variant():
    rows = [{"kernel": "decode", "format": "fp8", "variant": "fp8", "time_us": 30.0, "w": 4},
            {"kernel": "decode", "format": "fp8", "variant": "fp8", "time_us": 20.0, "w": 8},
            {"kernel": "decode", "format": "fp8", "variant": "fp8", "error": "RuntimeError: x", "w": 2},
            {"kernel": "decode", "format": "mxfp4", "variant": "mxfp4_keys_m", "time_us": 50.0, "w": 4},
            {"kernel": "prefill", "format": "fp8", "variant": "fp8", "time_us": 1.0, "w": 4}]
    best = _best(rows, "decode")
    assert sorted((r["format"], r["w"]) for r in best) == [("fp8", 8), ("mxfp4", 4)]


def test_grid_option_parses_fields_and_values():
    assert _product(_parse_grid(("tiles=4,8", "mode=a"))) == [{"tiles": 4, "mode": "a"}, {"tiles": 8, "mode": "a"}]
    for bad in ("tiles", "=4", "tiles="):
        with pytest.raises(click.BadParameter, match="FIELD=V1,V2"):
            _parse_grid((bad,))
