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
    rows = [{"kernel": "decode", "format": "fp8", "variant": "fp8_keys_m", "time_us": 30.0, "w": 4},
            {"kernel": "decode", "format": "fp8", "variant": "fp8_keys_m", "time_us": 20.0, "w": 8},
            {"kernel": "decode", "format": "fp8", "variant": "fp8_keys_m", "error": "RuntimeError: x", "w": 2},
            {"kernel": "decode", "format": "mxfp4", "variant": "mxfp4_keys_m", "time_us": 50.0, "w": 4},
            {"kernel": "prefill", "format": "fp8", "variant": "fp8_keys_m", "time_us": 1.0, "w": 4}]
    best = _best(rows, "decode")
    assert sorted((r["format"], r["w"]) for r in best) == [("fp8", 8), ("mxfp4", 4)]


def test_grid_option_parses_fields_and_values():
    assert _product(_parse_grid(("tiles=4,8", "mode=a"))) == [{"tiles": 4, "mode": "a"}, {"tiles": 8, "mode": "a"}]
    for bad in ("tiles", "=4", "tiles="):
        with pytest.raises(click.BadParameter, match="FIELD=V1,V2"):
            _parse_grid((bad,))


@pytest.mark.parametrize("op", ["prefill", "decode"])
def test_default_sweeps_name_only_fields_of_each_variants_settings(op):
    """Every scorer variant's default sweep, on every target it runs on, builds settings records that the
    record's replace accepts (a field the record lacks would come back from the GPU as an error row), and
    sweeps at least two settings."""
    from types import SimpleNamespace

    from hw.targets import Op
    from hw.variants import variants
    from tools.tune import (
        DECODE_SHAPE,
        DECODE_WARPS,
        PREFILL_SHAPE,
        _decode_grid,
        _prefill_grid,
    )

    if op == "prefill":
        call = SimpleNamespace(num_heads=PREFILL_SHAPE["heads"], head_dim=PREFILL_SHAPE["head_dim"])
        sweep = _prefill_grid
    else:
        call = SimpleNamespace(num_heads=DECODE_SHAPE["heads"], next_n=DECODE_SHAPE["next_n"],
                               page_size=DECODE_SHAPE["page_size"], head_dim=DECODE_SHAPE["head_dim"])
        sweep = lambda s: _decode_grid(s, DECODE_WARPS)   # noqa: E731
    checked = 0
    for v in variants(Op.PREFILL if op == "prefill" else Op.DECODE):
        for target in sorted(v.targets, key=lambda t: t.value):
            base = v.settings(target, call)
            grid = sweep(base)
            assert len(grid) >= 2, (v.name, target, grid)
            for setting in grid:
                base.replace(**setting)
            checked += 1
    assert checked >= 3
