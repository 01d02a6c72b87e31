"""The hostile-input fuzzer (tools/fuzz.py) over writer, gather, every scorer variant and top-k, against sim/.

MXIDX_FUZZ_CASES (default FUZZ_CASES, about 1 minute in the CPU interpreter; thousands on a GPU) and MXIDX_FUZZ_SEED
(default 0) set the run; every case is its own test id, so a failure names the case to re-run. MXIDX_FUZZ_SHARD=i/n
runs the cases i, i + n, i + 2n, ... only (.ci/gpu spreads the cases over processes so). On a GPU every case runs
every variant, with the compact geometry (fewer kernel compilations).
"""
from __future__ import annotations

import os

import pytest
import torch

import hw
from hw.checks import ErrorKind, new_error_flag
from tools import fuzz

FUZZ_CASES = 210                  # 10 rounds of every (layout, hostile input) pair
CASES = int(os.environ.get("MXIDX_FUZZ_CASES", FUZZ_CASES))
SEED = int(os.environ.get("MXIDX_FUZZ_SEED", 0))


def _shard(spec: str) -> range:
    """The cases of MXIDX_FUZZ_SHARD=i/n (0 <= i < n); all of them when unset."""
    if not spec:
        return range(CASES)
    i, n = (int(x) for x in spec.split("/"))
    assert 0 <= i < n, f"MXIDX_FUZZ_SHARD={spec}: want i/n with 0 <= i < n"
    return range(i, CASES, n)


@pytest.mark.parametrize("index", _shard(os.environ.get("MXIDX_FUZZ_SHARD", "")))
def test_fuzz_case(index, device):
    gpu = device.type == "cuda"       # compiled kernels: every variant, few specializations (fuzz.draw_case)
    result = fuzz.run_case(SEED, index, device, all_variants=gpu or index % 7 == 0, compact=gpu)
    assert not result.failures, result.describe()


def test_every_layout_meets_every_hostile_input():
    drawn = {(c.layout, c.hostile) for c in (fuzz.draw_case(SEED, i) for i in range(len(fuzz.LAYOUTS)
                                                                                 * len(fuzz.HOSTILE)))}
    assert drawn == {(lay, h) for lay in fuzz.LAYOUTS for h in fuzz.HOSTILE}


def test_run_reports_progress(device):
    calls = []
    results = fuzz.run(SEED, 2, device, all_variants=False, progress=lambda done, failed: calls.append((done, failed)))
    assert calls == [(1, 0), (2, 0)] and len(results) == 2


def test_fuzz_catches_a_wrong_flag(device, monkeypatch):
    """The checks can fail: a flag the case does not explain, and a flag missing where it should be set."""
    flag = new_error_flag(device)
    assert fuzz._flag_failure("x", flag, set()) is None
    assert "not set" in fuzz._flag_failure("x", flag, {ErrorKind.PAGE_ID})
    flag[0], flag[1] = 1, int(ErrorKind.SLOT)
    assert "on valid input" in fuzz._flag_failure("x", flag, set())
    assert "kind" in fuzz._flag_failure("x", flag, {ErrorKind.PAGE_ID})


def test_fuzz_catches_wrong_logits(device, monkeypatch):
    """A scorer that returned 0 for a bad page's columns (what a kernel reading the view's page 0, or a zero-filled
    buffer, would give) fails the fuzz check."""
    index = next(i for i in range(42) if fuzz.draw_case(SEED, i).hostile == "page_id")
    real = hw.fp8_fp4_paged_mqa_logits

    def zeroing(*args, **kwargs):
        return torch.nan_to_num(real(*args, **kwargs), nan=0.0)
    monkeypatch.setattr(hw, "fp8_fp4_paged_mqa_logits", zeroing)
    result = fuzz.run_case(SEED, index, device, all_variants=False)
    assert any(f.startswith("decode") for f in result.failures), result.failures
