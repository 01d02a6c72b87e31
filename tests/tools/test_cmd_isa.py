"""`mxidx isa`: table / JSON output and exit status (0: claims hold, 1: a claim failed, 2: bad arguments)."""
from __future__ import annotations

import json

from click.testing import CliRunner

from hw.targets import Op, Target
from hw.variants import select
from tools import isa as isa_report
from tools.cli import main


def _invoke(*args):
    return CliRunner().invoke(main, ["isa", *args])


def test_json_report_of_one_kernel():
    result = _invoke("--target", "gfx950", "--kernel", "topk/k64", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["target"] == "gfx950" and report["ok"] is True
    [kernel] = report["kernels"]
    assert kernel["label"] == "topk/k64" and kernel["scratch_bytes"] == 0 and kernel["failures"] == []
    assert set(kernel["registers"]) == {"vgpr_total", "vgpr", "agpr", "sgpr"}


def test_table_for_sm90():
    result = _invoke("--target", "sm90", "--kernel", "topk/k64")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("[1/1] topk/k64  ") and result.stderr.rstrip().endswith(" s")   # progress
    assert "Warning" not in result.stderr      # triton 3.9's FP-fusion default warning: hw pins the setting
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["kernel", "warps", "matrix"]
    assert lines[2].startswith("topk/k64 ") and lines[2].rstrip().endswith("ok")
    assert "warps/SM" in result.stdout and "all claims hold" in result.stdout


def test_failed_claim_exits_1(monkeypatch):
    failing = isa_report.KernelIsa(
        label="paged_keys_m/mxfp4/D128", kernel="k", target="gfx950", num_warps=4,
        matrix_ops=(("v_mfma_f32_32x32x16_bf16", 4),), registers=(("vgpr_total", 90), ("vgpr", 90), ("agpr", 0),
                                                                   ("sgpr", 40)),
        spills=3, scratch_bytes=64, shared_bytes=0, occupancy=5, occupancy_max=8, limited_by="vgpr",
        compiler_occupancy=5, compile_s=0.0,
        failures=("scratch: 64 bytes, 3 spilled registers", "MXFP4 scorer without v_mfma_scale_f32_*_f8f6f4"))
    monkeypatch.setattr(isa_report, "report", lambda target, kernel=None, progress=None, **_: ((failing,), ()))
    result = _invoke("--target", "gfx950")
    assert result.exit_code == 1, result.output
    assert "FAIL: scratch: 64 bytes" in result.stdout and "CLAIMS FAILED" in result.stdout


def test_unknown_kernel_is_a_usage_error():
    result = _invoke("--target", "gfx950", "--kernel", "no_such_kernel")
    assert result.exit_code == 2
    assert "matches no spec for gfx950" in result.output


def test_unknown_target_is_a_usage_error():
    result = _invoke("--target", "gfx942")
    assert result.exit_code == 2 and "gfx942" in result.output


def test_per_tile_table():
    label = "paged_keys_m/mxfp4/dot_scaled/D128/P64/N1/H32"
    result = _invoke("--target", "gfx950", "--per-tile", "--kernel", label)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["op", "kernel", "variant"]
    row = lines[2].split()
    default = select(Op.DECODE, Target.AMD, "mxfp4").name == "mxfp4_keys_m_dot_scaled"
    assert row[:3] == ["decode", label, "mxfp4_keys_m_dot_scaled" + "*" * default] and "64 x 32" in lines[2]
    assert "v_mfma_scale_f32_32x32x64_f8f6f4" in lines[2] and lines[2].rstrip().endswith("ok")
    assert "per tile of 64 keys x 32 query rows" in result.stdout
    assert _invoke("--target", "sm90", "--per-tile").exit_code == 2
