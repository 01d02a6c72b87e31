"""hw.fp8_fp4_paged_mqa_logits (paged decode) against sim.scorer.decode_logits and its fp32 error bound.

Every case builds a hostile pool: 0xFF (NaN) everywhere that is not a visible token, shuffled physical pages, page
strides larger than a page, a non-zero view offset, partial last pages, and out-of-range sentinels in every
block-table entry past a sequence's visible span (a kernel that reads one faults or returns NaN).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import hw
import sim.layout
from hw._logits_details import paged_keys_m_wgmma
from hw.logits import declared_precision, scorer_target
from hw.targets import NotCovered, Op
from hw.testing import host_to_device, torch_cache_view
from sim import scorer
from sim.testing import case_rng, make_geometry, sim_quantize
from tests.hw._logits_fixtures import (
    ADVERSARIAL_HEAD_DIM,
    adversarial_key,
    case_variants,
    check_adversarial_key,
    poison_key,
    quantize_queries,
)

pytestmark = pytest.mark.interp

SENTINELS = (-1, 2**31 - 1, 1 << 20)   # written into block-table entries no row may read
STRIDE_PAD = 48                        # page stride = page bytes rounded to 16, plus this (not a multiple of P)
VIEW_OFFSET = 32


@dataclass(frozen=True)
class DecodeCase:
    layout: str              # "fp8" | "mxfp4" | "mxfp4_tiled"
    head_dim: int
    page_size: int
    heads: int
    next_n: int
    contexts: tuple          # context_lens rows: ints (1-D) or next_n-tuples (2-D)
    max_context_len: int
    max_pages: int
    clean: bool = False
    num_sms: int = 3
    int32_scales: bool = False
    nan_token: tuple | None = None     # (b, token): that token is NaN as a writer leaves a non-finite row

    @property
    def kv_dtype(self) -> str:
        return "fp8" if self.layout == "fp8" else "mxfp4"

    def __str__(self):
        return (f"{self.layout}-D{self.head_dim}-P{self.page_size}-H{self.heads}-N{self.next_n}-"
                f"ctx{'2d' if isinstance(self.contexts[0], tuple) else ''}{list(self.contexts)}-W{self.max_context_len}"
                f"{'-clean' if self.clean else ''}{'-i32' if self.int32_scales else ''}"
                f"{'-nan' if self.nan_token else ''}")


CASES = [
    # context 0 and 1, a partial last page, a full page; 1-D context_lens, next_n 1
    DecodeCase("mxfp4", 128, 16, 3, 1, (0, 1, 33, 16), 48, 4),
    DecodeCase("mxfp4", 64, 16, 5, 2, (17, 2, 0), 40, 3, clean=True),                    # next_n 2, 1-D
    DecodeCase("mxfp4", 32, 16, 1, 2, ((5, 9), (0, 0), (16, 1)), 20, 2, nan_token=(0, 3)),  # 2-D, D 32
    DecodeCase("mxfp4_tiled", 128, 16, 2, 1, (31, 20), 40, 2, int32_scales=True),
    DecodeCase("mxfp4_tiled", 128, 64, 3, 2, (70, 1), 100, 2, clean=True, nan_token=(0, 64)),
    DecodeCase("mxfp4", 128, 64, 4, 1, (100, 64), 80, 2),                      # max_context_len clips contexts
    DecodeCase("fp8", 128, 16, 3, 1, (0, 1, 33, 16), 48, 4, nan_token=(2, 17)),
    DecodeCase("fp8", 64, 64, 7, 2, ((65, 66), (3, 0)), 70, 2, clean=True),
    DecodeCase("fp8", 32, 16, 2, 1, (40,), 48, 2),                              # past max_pages * P: NaN columns
]


def _visible(case: DecodeCase) -> np.ndarray:
    return scorer.decode_visible(np.array(case.contexts, dtype=np.int32), case.next_n, case.max_context_len,
                                 case.max_pages, case.page_size)


def build_cache(case: DecodeCase, rng: np.random.Generator):
    """(pool uint8 numpy, geometry, block_table int32 [B, max_pages]): visible tokens written at shuffled pages of
    a 0xFF pool, everything else NaN bytes, sentinels past each sequence's span."""
    batch = len(case.contexts)
    tokens = _visible(case).reshape(batch, case.next_n).max(axis=1)
    pages = -(-tokens // case.page_size)
    num_pages = int(pages.sum()) + 2                   # two spare pages stay 0xFF
    geom = make_geometry(case.kv_dtype, case.layout, case.page_size, case.head_dim, num_pages, STRIDE_PAD,
                         VIEW_OFFSET)
    pool = sim.layout.new_pool(geom)
    physical = rng.permutation(num_pages)
    block_table = np.array([SENTINELS[i % len(SENTINELS)] for i in range(batch * case.max_pages)],
                           dtype=np.int32).reshape(batch, case.max_pages)
    nxt = 0
    for b in range(batch):
        block_table[b, :pages[b]] = physical[nxt:nxt + pages[b]]
        nxt += pages[b]
        if tokens[b] == 0:
            continue
        k = rng.standard_normal((tokens[b], case.head_dim)).astype(np.float32)
        values, scales = sim_quantize(case.kv_dtype, k)
        if case.nan_token is not None and case.nan_token[0] == b:
            poison_key(case.kv_dtype, values, scales, case.nan_token[1], block=0)
        j = np.arange(tokens[b])
        slots = block_table[b, j // case.page_size].astype(np.int64) * case.page_size + j % case.page_size
        sim.layout.write_tokens(pool, geom, slots, values, scales)
    return pool, geom, block_table


def _run(case: DecodeCase, device, rng, *, validate=False, **overrides):
    pool, geom, block_table = build_cache(case, rng)
    batch = len(case.contexts)
    q = rng.standard_normal((batch, case.next_n, case.heads, case.head_dim)).astype(np.float32)
    w = rng.standard_normal((batch * case.next_n, case.heads)).astype(np.float32)
    q_pair, w_t, q_ref, w_ref = quantize_queries(case.kv_dtype, q, w.reshape(batch, case.next_n, case.heads),
                                                 device, int32_scales=case.int32_scales)
    w_t, w_ref = w_t.reshape(batch * case.next_n, case.heads), w_ref.reshape(batch * case.next_n, case.heads)
    ctx = torch.tensor(case.contexts, dtype=torch.int32, device=device)
    bt = torch.from_numpy(block_table).to(device)
    schedule = hw.get_paged_mqa_logits_metadata(ctx, case.page_size, case.num_sms)
    args = dict(q=q_pair, kv_cache=torch_cache_view(host_to_device(pool, device), geom), weights=w_t, context_lens=ctx,
                block_table=bt, schedule_meta=schedule, max_context_len=case.max_context_len,
                clean_logits=case.clean, layout="mxfp4_tiled" if case.layout == "mxfp4_tiled" else None,
                validate=validate)
    args.update(overrides)
    return args, (q_ref, pool, geom, w_ref, np.array(case.contexts), block_table)


@pytest.mark.parametrize("case,variant", [(c, v) for c in CASES for v in case_variants(Op.DECODE, c.kv_dtype)],
                         ids=lambda x: str(x) if isinstance(x, DecodeCase) else x)
def test_paged_matches_reference(case: DecodeCase, variant, device):
    check_paged_case(case, variant, device)


@pytest.mark.parametrize("case,variant", [(CASES[0], "mxfp4_keys_m"), (CASES[4], "mxfp4_keys_m_dot_scaled"),
                                          (CASES[6], "fp8_keys_m")], ids=str)
def test_paged_padded_to_64_query_columns(case: DecodeCase, variant, device):
    """64 query columns of the MMA from padded heads: padded head columns never leak into the logits."""
    n_pad = 1 << (case.next_n - 1).bit_length()
    check_paged_case(case, variant, device, launch_settings={"h_pad": 64 // n_pad})


def check_paged_case(case: DecodeCase, variant, device, launch_settings=None):
    if variant not in case_variants(Op.DECODE, case.kv_dtype):
        pytest.skip(f"variant {variant} does not run on {scorer_target(device).value}")
    rng = case_rng(str(case))
    args, (q_ref, pool, geom, w_ref, ctx, bt) = _run(case, device, rng)
    if variant == paged_keys_m_wgmma.VARIANT.name and not paged_keys_m_wgmma.covers(
            case.head_dim, case.next_n, case.heads, case.layout == "mxfp4_tiled", device):
        # a named variant never hands a call on: the call is refused before anything runs
        with pytest.raises(NotCovered, match="runs mxfp4_keys_m"):
            hw.fp8_fp4_paged_mqa_logits(**args, variant=variant, launch_settings=launch_settings)
        return
    out = hw.fp8_fp4_paged_mqa_logits(**args, variant=variant, launch_settings=launch_settings)
    n, u = declared_precision(Op.DECODE, case.kv_dtype, case.head_dim, device, variant)
    rows = len(case.contexts) * case.next_n
    assert out.shape == (rows, case.max_context_len) and out.dtype == torch.float32
    ref = scorer.decode_logits(q_ref, pool, geom, w_ref, ctx, bt, case.max_context_len, clean_logits=True)
    bound = scorer.decode_error_bound(q_ref, pool, geom, w_ref, ctx, bt, case.max_context_len,
                                      n_roundings=n, u=u)
    columns = scorer.decode_columns(np.array(case.contexts, dtype=np.int32), case.next_n, case.max_context_len)
    visible = None if case.clean else scorer.visible_mask(columns, case.max_context_len)
    result = scorer.assert_logits_within_bound(out.cpu().numpy(), ref, bound, visible=visible)
    assert result.compared > 0
    if case.nan_token is not None:
        b, t = case.nan_token
        seen = _visible(case)[b * case.next_n:(b + 1) * case.next_n] > t
        col = out[b * case.next_n:(b + 1) * case.next_n, t].cpu().numpy()
        assert seen.any() and np.isnan(col[seen]).all(), f"rows of sequence {b} that see token {t}: {col}"


def test_schedule_with_more_programs_than_pages(device):
    """num_sms far above the work-item count: most runs are empty and the result is unchanged."""
    case = DecodeCase("fp8", 32, 16, 2, 1, (17, 0, 3), 20, 2, clean=True, num_sms=40)
    rng = np.random.default_rng(7)
    args, (q_ref, pool, geom, w_ref, ctx, bt) = _run(case, device, rng)
    out = hw.fp8_fp4_paged_mqa_logits(**args).cpu().numpy()
    ref = scorer.decode_logits(q_ref, pool, geom, w_ref, ctx, bt, case.max_context_len, clean_logits=True)
    n, u = declared_precision(Op.DECODE, "fp8", case.head_dim, device)
    bound = scorer.decode_error_bound(q_ref, pool, geom, w_ref, ctx, bt, case.max_context_len, n_roundings=n, u=u)
    scorer.assert_logits_within_bound(out, ref, bound)


def test_clean_logits_fills_only_invisible_entries(device):
    """clean_logits=True: the same visible logits as clean_logits=False, -inf everywhere else."""
    case = DecodeCase("mxfp4", 32, 16, 2, 1, (5, 0), 32, 2)
    args, _ = _run(case, device, np.random.default_rng(3))
    out = hw.fp8_fp4_paged_mqa_logits(**args).cpu()
    assert torch.isfinite(out[0, :5]).all()
    out_clean = hw.fp8_fp4_paged_mqa_logits(**{**args, "clean_logits": True}).cpu()
    assert torch.equal(out_clean[0, :5], out[0, :5])
    assert torch.isneginf(out_clean[0, 5:]).all() and torch.isneginf(out_clean[1]).all()


# ============================================================================================ validate mode
def test_validate_accepts_good_input(device):
    case = CASES[0]
    args, _ = _run(case, device, np.random.default_rng(1), validate=True)
    hw.fp8_fp4_paged_mqa_logits(**args)


@pytest.mark.parametrize("env", [False, True])
def test_validate_rejects_page_id_in_span(device, monkeypatch, env):
    case = DecodeCase("mxfp4", 32, 16, 2, 1, (20, 5), 32, 3)
    args, _ = _run(case, device, np.random.default_rng(2), validate=not env)
    if env:
        monkeypatch.setenv("MXIDX_VALIDATE", "1")
    args["block_table"] = args["block_table"].clone()
    args["block_table"][0, 1] = args["kv_cache"].shape[0]      # the last visible page of sequence 0
    with pytest.raises(ValueError, match=re.escape("block_table[0, 1]")):
        hw.fp8_fp4_paged_mqa_logits(**args)


def test_validate_rejects_stale_schedule(device):
    case = DecodeCase("fp8", 32, 16, 2, 1, (20, 5), 32, 3)
    args, _ = _run(case, device, np.random.default_rng(4), validate=True)
    args["schedule_meta"] = hw.get_paged_mqa_logits_metadata(args["context_lens"], 32, 3)   # block_kv != P
    with pytest.raises(ValueError, match="schedule_meta does not match"):
        hw.fp8_fp4_paged_mqa_logits(**args)


def test_validate_rejects_negative_context(device):
    case = DecodeCase("fp8", 32, 16, 2, 1, (20, 5), 32, 3)
    args, _ = _run(case, device, np.random.default_rng(5), validate=True)
    args["context_lens"] = torch.tensor([20, -3], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="context_lens must be >= 0"):
        hw.fp8_fp4_paged_mqa_logits(**args)


@pytest.mark.parametrize("variant", case_variants(Op.DECODE, "fp8"))
def test_negative_context_sees_nothing_as_in_sim(device, variant):
    """Unvalidated, a negative context length is an empty row in every variant, and sim.scorer agrees."""
    out = _logits_against_sim(DecodeCase("fp8", 32, 16, 2, 1, (20, 5), 32, 3), np.array([20, -3], dtype=np.int32),
                              variant, device, seed=5)
    assert np.isneginf(out[1]).all()


@pytest.mark.parametrize("variant", case_variants(Op.DECODE, "fp8") + case_variants(Op.DECODE, "mxfp4"))
def test_most_negative_context_with_next_n_2_sees_nothing(device, variant):
    """1-D context lengths of int32's minimum at next_n 2: ctx(b, 0) = max(0, -2^31 - 1) would wrap to 2^31 - 1 in
    int32 arithmetic (every column visible); every variant gives empty rows, as sim.scorer does."""
    kv_dtype = "fp8" if variant in case_variants(Op.DECODE, "fp8") else "mxfp4"
    out = _logits_against_sim(DecodeCase(kv_dtype, 64, 16, 2, 2, (20, 5), 32, 3),
                              np.array([20, -2 ** 31], dtype=np.int32), variant, device, seed=6)
    assert np.isneginf(out[2:]).all()


def _logits_against_sim(case: DecodeCase, ctx: np.ndarray, variant: str, device, *, seed: int) -> np.ndarray:
    """`variant`'s clean logits for `case` with its context lengths replaced by `ctx` (unvalidated), checked against
    sim.scorer within the variant's declared bound; returned as numpy."""
    args, (q_ref, pool, geom, w_ref, _, bt) = _run(case, device, np.random.default_rng(seed))
    args.update(context_lens=torch.from_numpy(ctx).to(device), clean_logits=True, variant=variant,
                schedule_meta=hw.get_paged_mqa_logits_metadata(torch.from_numpy(ctx).to(device), case.page_size, 2))
    out = hw.fp8_fp4_paged_mqa_logits(**args).cpu().numpy()
    ref = scorer.decode_logits(q_ref, pool, geom, w_ref, ctx, bt, case.max_context_len, clean_logits=True)
    n, u = declared_precision(Op.DECODE, case.kv_dtype, case.head_dim, device, variant)
    bound = scorer.decode_error_bound(q_ref, pool, geom, w_ref, ctx, bt, case.max_context_len, n_roundings=n, u=u)
    scorer.assert_logits_within_bound(out, ref, bound)
    return out


# ============================================================================================ rejections
def _base_args(device=torch.device("cpu")):
    case = DecodeCase("mxfp4", 32, 16, 2, 2, (20, 5), 32, 3)
    args, _ = _run(case, device, np.random.default_rng(6))
    return args


def _q(a, values=None, scales=None):
    return (a["q"][0] if values is None else values, a["q"][1] if scales is None else scales)


BAD_DECODE = {
    "clean_logits": (lambda a: {**a, "clean_logits": None}, "clean_logits"),
    "validate": (lambda a: {**a, "validate": "yes"}, "validate"),
    "logits_dtype": (lambda a: {**a, "logits_dtype": torch.float16}, "logits_dtype"),
    "max_context_len tensor": (lambda a: {**a, "max_context_len": torch.tensor(32)}, "max_context_len"),
    "max_context_len negative": (lambda a: {**a, "max_context_len": -1}, "max_context_len"),
    "q 3-D": (lambda a: {**a, "q": _q(a, a["q"][0][0], a["q"][1][0])}, "q[0] must be 4-D"),
    "q scales shape": (lambda a: {**a, "q": _q(a, scales=torch.zeros(2, 2, 2, 2, dtype=torch.uint8))},
                       "q[1] must have shape"),
    "cache dtype": (lambda a: {**a, "kv_cache": a["kv_cache"].view(torch.int8)}, "kv_cache must have dtype"),
    "cache bytes per token (format from q)": (
        lambda a: {**a, "q": (torch.zeros(2, 2, 2, 32, dtype=torch.float8_e4m3fn), None)}, "kv_cache must have shape"),
    "cache layout": (lambda a: {**a, "layout": "mxfp4_tiled"}, "multiple of 128"),
    "cache layout name": (lambda a: {**a, "layout": "fp8"}, "layout 'fp8' is not valid"),
    "cache token stride": (lambda a: {**a, "kv_cache": a["kv_cache"].as_strided(
        a["kv_cache"].shape, (a["kv_cache"].stride(0), 16, 16, 1))}, "stride(1) == bytes_per_token"),
    "weights shape": (lambda a: {**a, "weights": a["weights"][:2]}, "weights must have shape"),
    "context_lens dtype": (lambda a: {**a, "context_lens": a["context_lens"].long()}, "context_lens must have dtype"),
    "context_lens shape": (lambda a: {**a, "context_lens": torch.zeros(2, 3, dtype=torch.int32)},
                           "context_lens must be int32 [B]"),
    "block_table rows": (lambda a: {**a, "block_table": a["block_table"][:1]}, "block_table must have shape"),
    "block_table stride": (lambda a: {**a, "block_table": a["block_table"].t().contiguous().t()},
                           "block_table must have stride(1) == 1"),
    "schedule shape": (lambda a: {**a, "schedule_meta": a["schedule_meta"][:1]}, "num_sms >= 1"),
    "schedule dtype": (lambda a: {**a, "schedule_meta": a["schedule_meta"].long()}, "schedule_meta must have dtype"),
}


@pytest.mark.parametrize("name", sorted(BAD_DECODE))
def test_paged_rejects_bad_input(name):
    make, message = BAD_DECODE[name]
    with pytest.raises(ValueError, match=re.escape(message)):
        hw.fp8_fp4_paged_mqa_logits(**make(_base_args()))


def test_paged_base_args_are_accepted(device):
    """The rejection table's base arguments are valid (so each rejection is caused by its one change)."""
    out = hw.fp8_fp4_paged_mqa_logits(**_base_args(device))
    assert out.shape == (4, 32)


@pytest.mark.parametrize("variant", case_variants(Op.DECODE, "mxfp4"))
def test_adversarial_key_within_the_declared_roundings(variant, device):
    """The decode side of test_logits_prefill's adversarial-key test: every MXFP4 variant within its declared
    (n, u); dot_scaled (interpreted, where the result is exactly 1.0) outside n = D/32."""
    q_codes, q_scales, k_codes, k_scales = adversarial_key()
    D, P = ADVERSARIAL_HEAD_DIM, 16
    geom = make_geometry("mxfp4", None, P, D, 2)
    pool = sim.layout.new_pool(geom, fill=0xFF)
    sim.layout.write_tokens(pool, geom, np.array([P]), k_codes, k_scales)     # page 1, slot 0
    ctx, table, w = np.ones(1, np.int32), np.array([[1, SENTINELS[0]]], np.int32), np.ones((1, 1), np.float32)
    ctx_t = torch.from_numpy(ctx).to(device)
    meta = hw.get_paged_mqa_logits_metadata(ctx_t, P, 1)
    out = hw.fp8_fp4_paged_mqa_logits((torch.from_numpy(q_codes).to(device), torch.from_numpy(q_scales).to(device)),
                                      torch_cache_view(host_to_device(pool, device), geom),
                                      torch.from_numpy(w).to(device), ctx_t, torch.from_numpy(table).to(device),
                                      meta, 1, clean_logits=True, variant=variant).cpu().numpy()
    args = (scorer.dequantize_q(q_codes, q_scales), pool, geom, w, ctx, table, 1)
    check_adversarial_key(variant, Op.DECODE, float(out[0, 0]), scorer.decode_logits(*args)[0, 0],
                          lambda n, u: scorer.decode_error_bound(*args, n_roundings=n, u=u)[0, 0], device)
