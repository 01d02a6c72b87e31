"""`mxidx diff`: a small --quick subset passes through the CLI, and planted kernel bugs are reported as failures.

conftest.py sets TRITON_INTERPRET=1 before hw/ is imported, so CliRunner can run the command in-process; the planted
bugs wrap the real hw entry points (cases look them up at call time through tools.difftest.Env.hw).
"""
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import hw
from tools import difftest
from tools.cmd_diff import diff

QUICK_SUBSET = ("writer-mxfp4-D32-P16-fp32", "qq-fp8-H3-D64-bf16", "gather-tiled-D128-P16", "topk-R6-W300-k64")


def run_diff(device, *args):
    result = CliRunner().invoke(diff, ["--device", device.type, *args])
    return result, result.output


def run_json(device, *cases, options=()):
    args = [a for c in cases for a in ("--case", c)]
    result, _ = run_diff(device, "--json", *options, *args)
    # stdout holds the JSON document after any progress lines CliRunner mixed in from stderr
    out = result.stdout
    return result.exit_code, {r["name"]: r for r in json.loads(out[out.index("["):])}


def test_matrix_is_well_formed():
    names = [c.name for c in difftest.ALL_CASES]
    assert len(names) == len(set(names))
    quick = difftest.select_cases(quick=True)
    kinds = {c.kind for c in quick}
    assert kinds == {"writer", "quant_q", "gather", "prefill", "decode", "topk", "large_address"}
    assert {id(c) for c in quick} & {id(c) for c in difftest.LARGE_ADDRESS}
    assert {id(c) for c in quick} & {id(c) for c in difftest.CORNER}
    assert len(difftest.select_cases(quick=False)) == len(names)


def test_list_and_unknown_case(device):
    result, out = run_diff(device, "--list", "--quick")
    assert result.exit_code == 0 and all(c.name in out for c in difftest.select_cases(quick=True))
    result, out = run_diff(device, "--case", "no-such-case")
    assert result.exit_code == 2 and "matches no case" in out


def test_quick_subset_passes(device):
    code, results = run_json(device, *QUICK_SUBSET)
    assert {n: r["status"] for n, r in results.items()} == {n: difftest.PASS for n in QUICK_SUBSET}
    assert code == 0


def test_jobs_report_the_cases_in_order_with_the_same_results(device):
    """--jobs 2: spawned worker processes run the cases; the report keeps the selection's order."""
    cases = (QUICK_SUBSET[1], QUICK_SUBSET[3], QUICK_SUBSET[0])
    code, serial = run_json(device, *cases)
    code_jobs, jobs = run_json(device, *cases, options=("--jobs", "2"))
    assert code == code_jobs == 0
    assert list(jobs) == list(serial) == [QUICK_SUBSET[i] for i in (0, 1, 3)]     # ALL_CASES' order
    assert {n: (r["status"], r["worst_ratio"], r["detail"]) for n, r in jobs.items()} == \
        {n: (r["status"], r["worst_ratio"], r["detail"]) for n, r in serial.items()}


def test_jobs_keep_the_given_order(device):
    """run_cases with a slow case first (the fast ones usually finish before it): the results keep the given
    order and on_result counts completions."""
    slow, *fast = (difftest.select_cases(quick=False, patterns=(n,))[0] for n in (QUICK_SUBSET[3], *QUICK_SUBSET[:2]))
    finished = []
    results = difftest.run_cases([slow, *fast], difftest.make_env(device.type),
                                 on_result=lambda n, r: finished.append((n, r.name)), jobs=2)
    assert [r.name for r in results] == [slow.name, *(c.name for c in fast)]
    assert all(r.ok for r in results)
    assert [n for n, _ in finished] == [0, 1, 2] and {name for _, name in finished} == {r.name for r in results}


def test_large_address_cases_run_alone_after_the_others():
    """--jobs: the large-address cases (a pool of tens of GB each) run one at a time after every other case, in
    their own batch of one worker; the others share the requested workers."""
    cases = difftest.select_cases(quick=False, patterns=())
    large = [i for i, c in enumerate(cases) if c.kind == "large_address"]
    assert len(large) >= 2 and len(large) < len(cases)
    batches = difftest.job_batches(cases, 4)
    assert batches == [([i for i in range(len(cases)) if i not in large], 4), (large, 1)]
    assert difftest.job_batches([cases[large[0]]], 4) == [([0], 1)]
    assert difftest.job_batches([c for c in cases if c.kind != "large_address"][:3], 4) == [([0, 1, 2], 3)]


def test_table_reports_each_case(device):
    result, out = run_diff(device, "--case", QUICK_SUBSET[0])
    assert result.exit_code == 0
    assert "1 passed, 0 failed of 1" in out and QUICK_SUBSET[0] in out


def test_planted_writer_byte_flip_fails(device, monkeypatch):
    real = hw.indexer_k_quant_and_cache

    def flipped(k, kv_cache, slot_mapping, **kw):
        real(k, kv_cache, slot_mapping, **kw)
        slot = int(slot_mapping[slot_mapping >= 0][0])
        P = kv_cache.shape[1]
        kv_cache[slot // P, slot % P, 0, -1] ^= 0x01   # one byte of a page that was written

    monkeypatch.setattr(hw, "indexer_k_quant_and_cache", flipped)
    code, results = run_json(device, "writer-mxfp4-D32-P16-fp32")
    r = results["writer-mxfp4-D32-P16-fp32"]
    assert code == 1 and r["status"] == difftest.FAIL
    assert "1 of" in r["detail"] and "first at pool byte" in r["detail"]


def test_planted_scorer_error_fails(device, monkeypatch):
    real = hw.fp8_fp4_paged_mqa_logits

    def off_by_a_little(*args, **kw):
        out = real(*args, **kw)
        # the largest finite logit (a visible one, nonzero: a planted factor must change it), off by half: far
        # outside every declared bound here, whose gamma = (n + H + 2) u is about 0.017 at the largest u (2^-12,
        # the NVIDIA MXFP4 fold's; D 64, H 3) and below 1e-5 at fp32's u
        flat = out.view(-1)
        largest = torch.where(torch.isfinite(flat), flat.abs(), 0.0).argmax()
        assert flat[largest] != 0
        flat[largest] *= 1.5
        return out

    monkeypatch.setattr(hw, "fp8_fp4_paged_mqa_logits", off_by_a_little)
    code, results = run_json(device, "decode-mxfp4-D64-P16-H3")
    r = results["decode-mxfp4-D64-P16-H3"]
    assert code == 1 and r["status"] == difftest.FAIL and "first violation" in r["detail"]


def test_planted_relu_swallowing_nan_fails(device, monkeypatch):
    """The Triton tl.maximum(x, 0) pitfall of DESIGN §4: NaN logits turned into numbers."""
    real = hw.fp8_fp4_paged_mqa_logits
    monkeypatch.setattr(hw, "fp8_fp4_paged_mqa_logits",
                        lambda *a, **kw: real(*a, **kw).nan_to_num(nan=0.0, posinf=np.inf, neginf=-np.inf))
    code, results = run_json(device, "decode-mxfp4-nan-k")
    assert code == 1 and results["decode-mxfp4-nan-k"]["status"] == difftest.FAIL


def test_planted_topk_swap_fails(device, monkeypatch):
    real = hw.top_k_per_row

    def swapped(logits, lengths, k, **options):
        out = real(logits, lengths, k, **options).clone()
        out[0, [0, 1]] = out[0, [1, 0]]
        return out

    monkeypatch.setattr(hw, "top_k_per_row", swapped)
    code, results = run_json(device, "topk-R6-W300-k64")
    r = results["topk-R6-W300-k64"]
    assert code == 1 and r["status"] == difftest.FAIL and "row 0" in r["detail"]
    assert r["detail"].startswith("top-k variant ")      # the failing variant is named


@pytest.mark.parametrize("error", [NotImplementedError, RuntimeError, ValueError])
def test_a_raising_kernel_fails_its_case_with_the_exception(device, monkeypatch, error):
    def broken(*args, **kw):
        raise error("planted")

    monkeypatch.setattr(hw, "cp_gather_indexer_k_quant_cache", broken)
    code, results = run_json(device, "gather-fp8-D64-P16")
    r = results["gather-fp8-D64-P16"]
    assert code == 1 and r["status"] == difftest.FAIL and r["detail"] == f"{error.__name__}: planted"


@pytest.mark.parametrize("op, name", [("prefill", "prefill-mxfp4-H3-D64"), ("decode", "decode-mxfp4-D64-P16-H3")])
def test_scorer_cases_check_every_variant_with_its_declared_precision(device, monkeypatch, op, name):
    """Each scorer case runs every variant of its op that runs here, each against the bound of the (n, u) hw
    declares for that variant (asked once per variant, in registry order; n = D on every MXFP4 variant)."""
    asked = []
    real = hw.logits.declared_precision

    def recording(which, kv_dtype, head_dim, dev, variant=None):
        asked.append((which.value, kv_dtype, head_dim, variant, real(which, kv_dtype, head_dim, dev, variant)))
        return asked[-1][-1]

    monkeypatch.setattr(hw.logits, "declared_precision", recording)
    code, results = run_json(device, name)
    assert code == 0 and results[name]["status"] == difftest.PASS, results[name]
    target = hw.logits.scorer_target(device)
    names = [v.name for v in hw.variants.variants(hw.targets.Op(op), "mxfp4", target)]
    assert [a[3] for a in asked] == names and names
    assert all(a[:3] == (op, "mxfp4", 64) for a in asked)
    listed = results[name]["detail"].split("variants ", 1)[1].split(", ")
    assert [entry.split(" (u = ")[0] for entry in listed] == names     # each named, a non-fp32 u noted
    for *_, variant, (n, u) in asked:
        assert n == 64, variant
