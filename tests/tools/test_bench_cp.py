"""`python -m tools.bench_cp` (the 1-vs-R-GPU context-parallel benchmark): its refusal without GPUs, its help.
The benchmark itself needs 2 GPUs; its results are checked for exactness by the run itself."""
from __future__ import annotations

import click
import pytest
import torch
from click.testing import CliRunner

from tools.bench_cp import bench_cp


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="with 2 GPUs this would run the benchmark")
def test_refuses_without_two_gpus(tmp_path):
    result = CliRunner().invoke(bench_cp, ["--out", str(tmp_path / "cp")])
    assert result.exit_code == 2, result.output
    assert "at least 2" in result.output and f"sees {torch.cuda.device_count()} GPU" in result.output
    assert not (tmp_path / "cp").exists()


def test_every_option_has_help():
    missing = [p.name for p in bench_cp.params if isinstance(p, click.Option) and not p.help]
    assert not missing, f"options without help text: {missing}"
