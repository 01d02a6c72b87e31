"""hw._logits_details.prefill_keys_m (ragged prefill scorer, keys on the MMA's M axis) against
sim.scorer.prefill_logits and the bound of its declared (n, u), beyond what tests/hw/test_logits_prefill.py runs for
every prefill variant: MXFP4 keys and query rows whose block scales span more than the fold's exact range (the exact
fallback), NaN keys and query rows, key-tile and query-block boundaries, ragged and unclamped ranges with empty
rows, head dims 32..256 and H 1..64.

The output is pre-filled with a marker: with clean_logits=False the kernel must write every visible entry and
nothing else; with clean_logits=True every entry (-inf where invisible).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from hw._logits_details import mxfp4_fold
from hw._logits_details import prefill_keys_m as pk
from hw._logits_details.calls import PrefillCall
from hw.logits import scorer_target
from hw.targets import Target
from hw.testing import pair_as_torch
from sim import scorer
from sim.formats import E4M3_NAN, E8M0_BIAS, E8M0_NAN
from sim.testing import case_rng, sim_quantize, sim_quantize_q

pytestmark = pytest.mark.interp

UNTOUCHED = 12345.0                  # the output's fill: with clean_logits=False invisible entries keep it


@dataclass(frozen=True)
class Case:
    kv_dtype: str                   # "fp8" | "mxfp4"
    head_dim: int
    heads: int
    ranges: tuple                    # (ks, ke) per query token, as passed (the kernel clamps them)
    num_keys: int
    clean: bool = True
    spans: tuple = ()                # (key, span): MXFP4 key whose block scales span `span` binades
    wide_query: tuple | None = None  # (token, head): that MXFP4 query row's block scales span 20 binades
    nan_keys: tuple = ()             # keys made NaN as a writer leaves a non-finite row
    nan_query: tuple | None = None   # (token, head): MXFP4 query row with a NaN block / FP8 NaN weight
    tiles: tuple = ()                # (block_q, block_k): launch settings overrides (h_pad follows)
    apart: bool | None = None        # settings override clean_apart (None: the target's default)

    def __str__(self):
        return (f"{self.kv_dtype}-D{self.head_dim}-H{self.heads}-S{len(self.ranges)}-SK{self.num_keys}"
                f"{'-clean' if self.clean else ''}{'-spans' if self.spans else ''}"
                f"{'-wideq' if self.wide_query else ''}{'-nank' if self.nan_keys else ''}"
                f"{'-nanq' if self.nan_query else ''}{f'-tiles{self.tiles}' if self.tiles else ''}"
                f"{'' if self.apart is None else f'-apart{int(self.apart)}'}")


RAGGED = ((0, 70), (3, 40), (10, 10), (0, 1), (69, 70), (64, 70), (5, 64), (40, 0))   # (10, 10), (40, 0): empty
UNCLAMPED = ((-5, 3), (60, 99), (-1, 200), (7, 2), (0, 0))                             # SK = 70
CAUSAL = tuple((0, i + 1) for i in range(6))
MIDDLE = ((40, 50), (45, 60), (0, 0), (90, 100), (41, 42))     # no token sees keys 0..39 or 60..89
#: key-tile edges at block_k = 32: ranges ending / starting at 31, 32, 33, 64, 96 and SK = 97
EDGES = ((0, 31), (0, 32), (0, 33), (31, 64), (32, 65), (33, 97), (64, 96), (96, 97), (97, 97), (1, 96))
#: at block_q 2, block_k 32: key tiles every token of a block sees next to tiles some do not (unseen NaN keys
#: among the loaded ones); FULL's last block has one token
FULL = ((0, 97),) * 5
STAGGER = ((0, 97), (0, 97), (40, 97), (0, 97), (0, 64), (0, 97))
CASES = [
    # spans 11 (the fold's limit), 12 and 30 (the exact fallback) in different tiles; a NaN key seen and one unseen
    Case("mxfp4", 128, 3, RAGGED, 70, spans=((5, 11), (20, 12), (66, 30)), nan_keys=(41, 69)),
    Case("mxfp4", 64, 5, RAGGED, 70, clean=False, wide_query=(1, 4), spans=((8, 15),)),
    Case("mxfp4", 32, 2, RAGGED, 70, nan_query=(1, 0), nan_keys=(3,)),     # one block: never wide
    Case("mxfp4", 256, 2, MIDDLE, 100, spans=((45, 25),), nan_keys=(10, 95)),
    Case("mxfp4", 128, 64, CAUSAL, 6, nan_keys=(2,)),
    Case("mxfp4", 64, 1, UNCLAMPED, 70, clean=False),
    Case("fp8", 256, 2, RAGGED, 70, nan_keys=(20,)),
    Case("fp8", 32, 1, UNCLAMPED, 70),
    Case("fp8", 64, 64, CAUSAL, 6, clean=False, nan_query=(3, 63)),
    Case("fp8", 128, 17, MIDDLE, 100, nan_keys=(5, 50)),
    # several key tiles and query blocks: block_q 2 (3 for 4 tokens ...), block_k 32, SK not a multiple of it
    Case("fp8", 64, 3, EDGES, 97, tiles=(2, 32), nan_keys=(32,)),
    Case("fp8", 128, 2, EDGES, 97, clean=False, tiles=(4, 32)),
    Case("mxfp4", 64, 3, EDGES, 97, tiles=(2, 32), spans=((0, 20), (63, 13), (96, 30)), nan_keys=(33,)),
    Case("mxfp4", 128, 2, EDGES, 97, clean=False, tiles=(4, 32), spans=((31, 16), (64, 12))),
    Case("mxfp4", 64, 3, EDGES, 97, tiles=(1, 32), wide_query=(5, 2)),
    Case("fp8", 64, 3, STAGGER, 97, tiles=(2, 32), nan_keys=(10, 70)),
    Case("fp8", 64, 2, FULL, 97, clean=False, tiles=(2, 32)),
    Case("mxfp4", 64, 3, STAGGER, 97, clean=False, tiles=(2, 32), spans=((35, 20),), nan_keys=(70,)),
    Case("mxfp4", 128, 2, FULL, 97, tiles=(2, 32), spans=((5, 14),)),
    # -inf columns: odd and even block counts, blocks with more -inf tiles than key tiles and the reverse, leading
    # and trailing ones, a causal batch
    Case("fp8", 64, 3, EDGES, 97, tiles=(2, 32), nan_keys=(32,)),
    Case("fp8", 64, 2, CAUSAL + MIDDLE, 100, tiles=(1, 32)),
    Case("fp8", 64, 3, EDGES[:7], 96, tiles=(2, 32)),           # SK a multiple of block_k
    Case("fp8", 32, 2, tuple((0, i + 1) for i in range(40)), 40, tiles=(4, 16)),
    Case("mxfp4", 32, 2, tuple((0, i + 1) for i in range(40)), 40, tiles=(4, 16)),
    Case("mxfp4", 64, 3, EDGES, 97, tiles=(1, 32), spans=((0, 20), (63, 13), (96, 30)), wide_query=(5, 2)),
    # the -inf columns outside the key tiles stored by clean_outside_kernel (MXFP4's NVIDIA default) and by the scorer:
    # leading and trailing columns, empty rows and unclamped ranges, wide MXFP4 keys and query rows (the exact pass)
    Case("fp8", 64, 2, CAUSAL + MIDDLE, 100, tiles=(1, 32), apart=True),
    Case("fp8", 64, 3, CAUSAL + MIDDLE, 100, tiles=(2, 32), apart=False),
    Case("fp8", 32, 1, UNCLAMPED, 70, apart=True),
    Case("fp8", 64, 3, EDGES[:7], 96, tiles=(2, 32), apart=True),
    Case("mxfp4", 64, 3, EDGES, 97, tiles=(1, 32), spans=((0, 20), (63, 13), (96, 30)), wide_query=(5, 2),
         apart=True),
    Case("mxfp4", 128, 3, RAGGED, 70, spans=((5, 11), (20, 12), (66, 30)), nan_keys=(41, 69), apart=True),
]


def _set_span(scales: np.ndarray, span: int) -> None:
    """One token's (query row's) block scales [D/32]: the largest keeps its byte, another lies `span` binades
    below."""
    low = 1 if scales.argmax() != 1 else 0
    scales[low] = int(scales.max()) - span


def _inputs(case: Case, rng: np.random.Generator):
    """(q values, q scales, k values, k scales as sim pairs; weights for the kernel; exact q and k float64)."""
    num_q = len(case.ranges)
    q = rng.standard_normal((num_q, case.heads, case.head_dim)).astype(np.float32)
    w = rng.standard_normal((num_q, case.heads)).astype(np.float32)
    q_v, q_s, q64, w = sim_quantize_q(case.kv_dtype, q, w)
    k_v, k_s = sim_quantize(case.kv_dtype, rng.standard_normal((case.num_keys, case.head_dim)).astype(np.float32))
    for key, span in case.spans:
        _set_span(k_s[key], span)
    for key in case.nan_keys:
        if case.kv_dtype == "fp8":
            k_v[key] = E4M3_NAN
            k_s[key] = np.nan
        else:
            k_s[key, -1] = E8M0_NAN
    if case.wide_query is not None:
        _set_span(q_s[case.wide_query], 20)
    if case.nan_query is not None:
        if case.kv_dtype == "fp8":
            w[case.nan_query] = np.nan
        else:
            q_s[case.nan_query][0] = E8M0_NAN
    if case.kv_dtype == "mxfp4":
        q64 = scorer.dequantize_q(q_v, q_s)
    return q_v, q_s, k_v, k_s, w, q64, scorer.dequantize_kv(k_v, k_s)


def _settings_overrides(case: Case) -> dict | None:
    overrides = {} if case.apart is None else {"clean_apart": case.apart}
    if case.tiles:
        block_q, block_k = case.tiles
        overrides.update(block_q=block_q, block_k=block_k,
                         h_pad=max(1 << (case.heads - 1).bit_length(), 16 // block_q))
    return overrides or None


def run_case(case: Case, device):
    """(kernel output numpy, reference, bound, visible mask) of one case."""
    variant, target = _variant_here(case.kv_dtype, device)
    rng = case_rng(str(case))
    q_v, q_s, k_v, k_s, w, q64, k64 = _inputs(case, rng)
    ks = np.array([r[0] for r in case.ranges], np.int32)
    ke = np.array([r[1] for r in case.ranges], np.int32)
    q_t, q_st = pair_as_torch(case.kv_dtype, q_v, q_s, device)
    k_t, k_st = pair_as_torch(case.kv_dtype, k_v, k_s, device)
    out = torch.full((len(ks), case.num_keys), UNTOUCHED, dtype=torch.float32, device=device)
    q_u8 = q_t.view(torch.uint8)
    call = PrefillCall(q_u8, q_u8 if q_st is None else q_st, k_t.view(torch.uint8), k_st,
                       torch.from_numpy(w).to(device), torch.from_numpy(ks).to(device),
                       torch.from_numpy(ke).to(device), out, case.heads, case.head_dim, case.clean)
    variant.run(call, target, _settings_overrides(case))
    # the documented clamping: ks < 0 acts as 0, ke > SK as SK, ks >= ke is an empty row
    cks = np.clip(ks, 0, case.num_keys)
    cke = np.maximum(np.minimum(ke, case.num_keys), cks)
    n, u = variant.precision(case.head_dim, target)
    ref = scorer.prefill_logits(q64, k64, w, cks, cke, clean_logits=True)
    bound = scorer.prefill_error_bound(q64, k64, w, cks, cke, n_roundings=n, u=u)
    return out.cpu().numpy(), ref, bound, scorer.visible_mask(cke, case.num_keys, starts=cks)


def _variant_here(kv_dtype: str, device):
    """(the variant of kv_dtype, the target of device); skips where the variant does not run."""
    target = scorer_target(device)
    variant = pk.FP8_VARIANT if kv_dtype == "fp8" else pk.MXFP4_FOLD_VARIANT
    if not variant.runs_on(target):
        pytest.skip(f"{variant.name} does not run on {target.value}")
    return variant, target


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_reference(case: Case, device):
    out, ref, bound, visible = run_case(case, device)
    result = scorer.check_logits(out, ref, bound, visible=None if case.clean else visible)
    assert result.ok, result.describe()
    assert result.compared > 0
    if not case.clean:
        assert (out[~visible] == UNTOUCHED).all(), "an invisible entry was written"
    for key in case.nan_keys:       # the NaN key makes exactly the logits of the tokens that see it NaN
        assert np.isnan(out[visible[:, key], key]).all()
        assert not np.isnan(out[~visible[:, key], key]).any()
    if case.nan_query is not None:
        token = case.nan_query[0]
        assert visible[token].any() and np.isnan(out[token][visible[token]]).all()


@pytest.mark.parametrize("case", [c for c in CASES if c.kv_dtype == "mxfp4" and c.tiles], ids=str)
def test_scratch_is_never_trusted(case: Case, device, monkeypatch):
    """The MXFP4 launcher's scratch (the folded keys, their scale bytes, the per-program flags) comes from
    torch.empty: filled with garbage that reads as NaN (bytes 0x7F: e4m3 NaN; int32 -1: a NaN scale byte with
    the wide bit, every flag set), the logits do not change: every key the loops read was written first."""
    want = run_case(case, device)[0]
    real_empty = torch.empty

    def poisoned_empty(*shape, dtype=None, device=None, **kw):
        t = real_empty(*shape, dtype=dtype, device=device, **kw)
        return t.fill_(0x7F) if dtype == torch.uint8 else t.fill_(-1) if dtype == torch.int32 else t
    monkeypatch.setattr(torch, "empty", poisoned_empty)
    got = run_case(case, device)[0]
    np.testing.assert_array_equal(got, want)


def test_cases_exercise_what_they_claim():
    """The span cases plant keys at the fold's limit and past it (the exact fallback), wide and NaN query rows,
    empty rows, unclamped ranges, every head dim, H from 1 to 64 and ranges ending at key-tile edges."""
    spans = [s for c in CASES for _, s in c.spans]
    assert mxfp4_fold.FOLD_SPAN.value in spans and any(s > mxfp4_fold.FOLD_SPAN.value for s in spans)
    assert any(c.wide_query for c in CASES) and any(c.nan_query for c in CASES if c.kv_dtype == "mxfp4")
    assert {c.head_dim for c in CASES} == {32, 64, 128, 256} and {1, 64} <= {c.heads for c in CASES}
    assert any(ks >= ke for c in CASES for ks, ke in c.ranges)
    assert any(ks < 0 or ke > c.num_keys for c in CASES for ks, ke in c.ranges)
    for block_k in {c.tiles[1] for c in CASES if c.tiles}:
        ends = {e for c in CASES if c.tiles and c.tiles[1] == block_k for _, e in c.ranges}
        assert {block_k - 1, block_k, block_k + 1} <= ends


def test_wide_key_is_scored_exactly(device):
    """D = 128, H = 1, one key: q all 1.0; the key has 1.0 at element 0 (the rest of block 0 zero) and 2^-26 in
    all 96 elements of blocks 1..3 (block scales 26 binades apart): q.k = 1 + 96 * 2^-26. One fp32 sum of the D
    products would give 1.0; the exact fallback adds exact block sums and returns q.k exactly."""
    variant, target = _variant_here("mxfp4", device)
    D, tiny, one_both_nibbles = 128, -26, 0x22        # e2m1 code 2 = 1.0 in the low and high nibble
    q_codes = torch.full((1, 1, D // 2), one_both_nibbles, dtype=torch.uint8)
    q_scales = torch.full((1, 1, D // 32), E8M0_BIAS, dtype=torch.uint8)
    k_codes = torch.full((1, D // 2), one_both_nibbles, dtype=torch.uint8)
    k_codes[0, :16] = 0
    k_codes[0, 0] = 0x02                                  # element 0 (low nibble) = 1.0
    k_scales = torch.tensor([[E8M0_BIAS] + [E8M0_BIAS + tiny] * 3], dtype=torch.uint8)
    out = torch.full((1, 1), UNTOUCHED, device=device)
    call = PrefillCall(q_codes.to(device), q_scales.to(device), k_codes.to(device), k_scales.to(device),
                       torch.ones((1, 1), device=device), torch.zeros(1, dtype=torch.int32, device=device),
                       torch.ones(1, dtype=torch.int32, device=device), out, 1, D, True)
    variant.run(call, target)
    assert float(out[0, 0]) == 1 + 96 * 2.0 ** tiny


@pytest.mark.parametrize("kv_dtype,heads,head_dim,block_q,h_pad,stages", [
    ("fp8", 32, 128, 8, 32, 3), ("fp8", 64, 128, 4, 64, 3), ("fp8", 1, 128, 256, 1, 3), ("fp8", 3, 128, 64, 4, 3),
    ("fp8", 128, 128, 2, 128, 3), ("fp8", 32, 256, 4, 32, 3), ("mxfp4", 32, 128, 8, 32, 4),
    ("mxfp4", 128, 64, 2, 128, 4), ("mxfp4", 32, 256, 4, 32, 3)])
def test_nvidia_settings(kv_dtype, heads, head_dim, block_q, h_pad, stages):
    """On the H200: 64-key tiles, BLOCK_Q tokens x H_PAD heads = 256 MMA columns up to D = 128 (faster there than
    128, docs/perf/h200-prefill-ablation.md; FP8 at 3 stages, MXFP4 at 4), 128 columns and 3 stages at D = 256,
    4 warps, no FP8 promotion; declared u = 2^-12 (unpromoted Hopper FP8 MMA), n = D."""
    s = pk.keys_m_prefill_settings(Target.NVIDIA, kv_dtype, heads, head_dim)
    assert (s.block_q, s.h_pad, s.block_k, s.num_warps, s.num_stages) == (block_q, h_pad, 64, 4, stages)
    assert s.exact_warps == 8 and s.mx_mode == mxfp4_fold.MX_FOLD_PTX.value and s.promote_k == pk.FP8_PROMOTE_K == 0
    assert s.clean_apart == (kv_dtype == "mxfp4")
    assert pk.declared_precision(128, Target.NVIDIA) == (128, 2.0 ** -12)
    assert pk.declared_precision(64, Target.INTERPRETER) == (64, 2.0 ** -24)
