"""`mxidx demo` through the click entry point: a tiny run on the default device, and bad input."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tools.cli import main

TINY = ["--layers", "1", "--prompt-len", "12", "--decode-steps", "1", "--heads", "2", "--top-k", "4"]


@pytest.fixture(autouse=True)
def keep_interpreter_setting(monkeypatch):
    """choose_device writes TRITON_INTERPRET; restore it after each test."""
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))


@pytest.mark.interp
def test_demo_tiny_run():
    """The demo shows MXFP4 by default."""
    result = CliRunner().invoke(main, ["demo", *TINY])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "gate decision     mxfp4 (layout mxfp4; all gates passed" in out
    assert "cache bytes/token fp8 132, mxfp4 68 per layer" in out
    assert "recall@4 of mxfp4 vs the bf16 reference" in out
    assert "with Hadamard" in out and "without Hadamard" in out
    assert "[hadamard] decode: step 1/1" in out        # progress lines (stderr, mixed into output by CliRunner)
    assert "the MXFP4 self-check runs the kernels once" in out
    _assert_readme_sample_matches(out)


def _masked(line: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", line.rstrip())


def _assert_readme_sample_matches(output: str) -> None:
    """The README's sample (the end of a CPU demo) has the demo's lines, in order, from the gate decision on: the
    same labels, and each sample line (numbers masked, up to its first parenthesis or bracket, before a trailing
    ", ...") a prefix of the demo's."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(readme) if line.rstrip().endswith("The end of a CPU demo:"))
    sample = []
    for line in readme[start + 2:]:
        if not line.startswith("    "):
            break
        sample.append(line[4:])
    demo = [line for line in output.splitlines() if not line.startswith("[")]
    demo = demo[next(i for i, line in enumerate(demo) if line.startswith("gate decision")):]
    assert [_masked(line)[:18] for line in sample] == [_masked(line)[:18] for line in demo], (sample, demo)
    for want, got in zip(sample, demo):
        head = re.split(r"[(\[]", _masked(want.removesuffix(", ...")), maxsplit=1)[0]
        assert _masked(got).startswith(head), (want, got)


@pytest.mark.interp
def test_fp8_demo_does_not_announce_a_self_check():
    result = CliRunner().invoke(main, ["demo", *TINY, "--attention-config", '{"indexer_kv_dtype": "fp8"}'])
    assert result.exit_code == 0, result.output
    assert "gate decision     fp8 (layout fp8; requested)" in result.output
    assert "self-check" not in result.output


@pytest.mark.parametrize("args, message", [
    (["--attention-config", '{"indexer_kv_dtype": "int4"}'], "indexer_kv_dtype must be one of ['fp8', 'mxfp4']"),
    (["--attention-config", "mxfp4"], "is not valid JSON"),
    (["--attention-config", '{"dtype": "mxfp4"}'], "valid keys are ['indexer_kv_dtype', 'indexer_layout', "
     "'indexer_scale_rule', 'scale_rule']"),
    (["--attention-config", '{"indexer_kv_dtype": "mxfp4",\n "indexer_layout": "tiled"}'],
     "indexer_layout must be one of ['mxfp4', 'mxfp4_tiled'], got 'tiled'"),
    (["--top-k", "4096"], "top_k must be in 1..2048, got 4096"),
    (["--heads", "100000"], "num_heads: the scorers take 1 to 128 heads, got 100000"),
    (["--prompt-len", "100000000"], "this demo needs about "),
    (["--attention-config", '{"indexer_layout": "mxfp4_tiled"}'], "--attention-config: indexer_layout and "),
    (["--attention-config", ""], "--attention-config is empty; leave the option out for the demo's default "
                                 '{"indexer_kv_dtype": "mxfp4"}'),
    (["--attention-config", "  "], "--attention-config is empty"),
])
def test_bad_settings_exit_2_with_one_line(args, message):
    """Errors in the indexer config or the demo settings: exit 2, one line (no usage block, no traceback), before
    any kernel runs."""
    result = CliRunner().invoke(main, ["demo", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.output


@pytest.mark.parametrize("args, message", [
    (["--layers", "0"], "0 is not in the range x>=1"),
    (["--device", "tpu"], "'tpu' is not one of 'auto', 'cuda', 'cpu'"),
])
def test_bad_input_is_a_usage_error(args, message):
    result = CliRunner().invoke(main, ["demo", *args])
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when no GPU is present")
def test_cuda_without_a_gpu_is_a_usage_error():
    result = CliRunner().invoke(main, ["demo", "--device", "cuda"])
    assert result.exit_code == 2 and "torch sees no GPU; use --device cpu" in result.output
