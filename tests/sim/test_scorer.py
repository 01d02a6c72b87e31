"""sim.scorer: the float64 reference logits, visibility, the fp32 error bound and its checker.

The expected logits come from a plain float64 einsum written here. Inputs are dequantized FP8/MXFP4 values (4 and 2
significant bits times a power of two) and weights rounded to 8 significant bits, over a narrow exponent range, so
every float64 sum in these fixtures is exact: any summation order gives the same value and the comparisons are
exact (tests.sim._assert.assert_exact: bits, NaN positions and signed zeros), not approximate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from sim import fast_scorer, fp8, layout, mxfp4, scorer
from sim.formats import E8M0_NAN, MX_BLOCK
from tests.sim._assert import assert_exact

U32 = 2.0 ** -24
U64 = 2.0 ** -53


# ============================================================================================ fixtures
def weights8(rng, shape) -> np.ndarray:
    """float32 weights with 8 significant bits (bfloat16 values)."""
    w = rng.standard_normal(shape).astype(np.float32)
    return (w.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def quantized_q(rng, kv_dtype, shape):
    """(values, scales) pair of DESIGN §8 for a random q of shape [..., H, D]."""
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    if kv_dtype == "fp8":
        return fp8.quantize(x)[0], None
    return mxfp4.quantize(x)


def quantized_k(rng, kv_dtype, num_tokens, head_dim):
    """(values, scales) for random keys whose rows differ in magnitude by up to e^+-2."""
    x = rng.standard_normal((num_tokens, head_dim)) * np.exp(rng.uniform(-2, 2, (num_tokens, 1)))
    x = x.astype(np.float32)
    return fp8.quantize(x) if kv_dtype == "fp8" else mxfp4.quantize(x)


def einsum_logits(q, k, w) -> np.ndarray:
    """Plain float64 reference: [R, H, D] x [T, D] x [R, H] -> [R, T], relu keeping NaN."""
    dots = np.einsum("rhd,td->rht", q, k)
    relu = np.where(np.isnan(dots) | (dots > 0), dots, 0.0)
    return np.einsum("rh,rht->rt", np.asarray(w, dtype=np.float64), relu)


# ============================================================================================ dequantization
def test_dequantize_q_and_kv_hand_values():
    # FP8: 0x38 = 1.0, 0xB8 = -1.0, 0x7E = 448, 0x01 = 2^-9; the q scale is not applied (it lives in the weights).
    q = scorer.dequantize_q(np.array([[[0x38, 0xB8, 0x7E, 0x01]]], dtype=np.uint8), None)
    assert q.dtype == np.float64 and q.tolist() == [[[1.0, -1.0, 448.0, 2.0 ** -9]]]
    k = scorer.dequantize_kv(np.array([[0x38, 0x7E]], dtype=np.uint8), np.array([0.25], dtype=np.float32))
    assert k.tolist() == [[0.25, 112.0]]
    # MXFP4: byte 0x21 = codes 1 (0.5, low nibble, even element) and 2 (1.0); scale byte 128 = 2^1.
    codes = np.zeros((1, MX_BLOCK // 2), dtype=np.uint8)
    codes[0, 0] = 0x21
    codes[0, 1] = 0x8F  # 0xF = -6 (element 2), 0x8 = -0.0 (element 3)
    kv = scorer.dequantize_kv(codes, np.array([[128]], dtype=np.uint8))
    assert kv[0, :4].tolist() == [1.0, 2.0, -12.0, -0.0] and not kv[0, 4:].any()
    qm = scorer.dequantize_q(codes[None], np.array([[[E8M0_NAN]]], dtype=np.uint8))
    assert qm.shape == (1, 1, MX_BLOCK) and np.isnan(qm).all()


# ============================================================================================ prefill
@pytest.mark.parametrize("kv_dtype", ["fp8", "mxfp4"])
@pytest.mark.parametrize("head_dim,num_heads", [(32, 1), (64, 5), (128, 7)])
def test_prefill_matches_einsum(kv_dtype, head_dim, num_heads):
    rng = np.random.default_rng(head_dim + num_heads)
    S, SK = 11, 45
    q = scorer.dequantize_q(*quantized_q(rng, kv_dtype, (S, num_heads, head_dim)))
    k = scorer.dequantize_kv(*quantized_k(rng, kv_dtype, SK, head_dim))
    w = weights8(rng, (S, num_heads))
    ks = rng.integers(0, SK, S)
    ke = np.minimum(SK, ks + rng.integers(0, 30, S))
    ks[0], ke[0] = 0, SK          # a full row
    ks[1], ke[1] = 7, 7           # an empty row
    ks[2], ke[2] = SK - 1, SK     # one column, the last
    full = einsum_logits(q, k, w)
    cols = np.arange(SK)
    visible = (cols >= ks[:, None]) & (cols < ke[:, None])
    got = scorer.prefill_logits(q, k, w, ks.astype(np.int32), ke.astype(np.int32))
    assert got.dtype == np.float64 and got.shape == (S, SK)
    assert_exact(got, np.where(visible, full, -np.inf), "prefill logits vs einsum")
    assert_exact(fast_scorer.prefill_logits(q, k, w, ks, ke), got, "fast_scorer vs scorer")
    unclean = scorer.prefill_logits(q, k, w, ks, ke, clean_logits=False)
    assert_exact(unclean, np.where(visible, full, np.nan), "clean_logits=False")  # documented: NaN where unspecified


def test_small_temporary_budget_gives_identical_logits(monkeypatch):
    rng = np.random.default_rng(8)
    S, SK, H, D = 13, 60, 3, 32
    q, k, w = rng.standard_normal((S, H, D)), rng.standard_normal((SK, D)), rng.standard_normal((S, H))
    ks = np.array([0, 50, 1, 55, 0, 30, 30, 59, 0, 2, 40, 10, 20])           # far-apart ranges in one batch
    ke = np.minimum(SK, ks + np.array([60, 10, 3, 5, 1, 0, 30, 1, 20, 9, 20, 5, 7]))
    expected = scorer.prefill_logits(q, k, w, ks, ke)
    monkeypatch.setattr(scorer, "_BLOCK_ELEMENTS", 4 * H * 10)               # a few rows x 10 columns per group
    groups = list(scorer._row_groups(ks, ke, H))
    assert len(groups) > 3 and [g[0] for g in groups[1:]] == [g[1] for g in groups[:-1]]
    assert_exact(scorer.prefill_logits(q, k, w, ks, ke), expected, "logits with a small temporary budget")


def test_relu_drops_negative_heads_by_hand():
    q = np.zeros((1, 2, 32))
    q[0, 0, 0], q[0, 1, 0] = 1.0, -1.0      # head 0 dot = +2, head 1 dot = -2
    k = np.zeros((1, 32))
    k[0, 0] = 2.0
    got = scorer.prefill_logits(q, k, np.array([[3.0, 5.0]]), [0], [1])
    assert got.tolist() == [[6.0]]


def test_nan_propagates_through_relu():
    rng = np.random.default_rng(7)
    S, SK, H, D = 6, 9, 3, 32
    q = scorer.dequantize_q(*quantized_q(rng, "mxfp4", (S, H, D)))
    k = scorer.dequantize_kv(*quantized_k(rng, "mxfp4", SK, D))
    w = weights8(rng, (S, H)).astype(np.float64)
    q[1] = -np.abs(q[1])
    k[:] = np.abs(k)                       # row 1: every dot < 0, relu 0 everywhere ...
    q[1, 2, 5] = np.nan                    # ... except that head 2 is NaN: relu must keep it
    k[4, 0] = np.nan                       # column 4 NaN for every row that sees it
    w[3, 0] = np.inf
    q[3, 0] = -np.abs(q[3, 0])             # row 3: inf * relu(negative) = inf * 0 = NaN
    ks, ke = np.array([0, 0, 5, 0, 0, 0]), np.array([9, 9, 9, 9, 4, 9])
    got = scorer.prefill_logits(q, k, w, ks, ke)
    assert np.isnan(got[1]).all() and np.isnan(got[3]).all()
    for i in (0, 5):
        assert np.isnan(got[i, 4]) and np.isfinite(np.delete(got[i], 4)).all(), got[i]
    assert np.isfinite(got[4, :4]).all() and (got[4, 4:] == -np.inf).all()   # row 4 never sees column 4
    assert (got[2, :5] == -np.inf).all() and np.isfinite(got[2, 5:]).all()
    assert_exact(got, np.where(scorer.visible_mask(ke, SK, starts=ks), einsum_logits(q, k, w), -np.inf),
                 "logits with NaN/inf inputs vs einsum")


# ============================================================================================ decode
@dataclass(frozen=True)
class DecodeCase:
    name: str
    kv_dtype: str
    head_dim: int
    num_heads: int
    page_size: int
    next_n: int
    context_lens: tuple           # ints (1-D) or tuples of next_n ints (2-D)
    layout: str | None = None
    extra_stride: int = 0         # bytes of other data between pages (stride = page bytes rounded up + this)
    view_offset: int = 0
    max_context_len: int | None = None   # None: the largest visible context
    max_pages: int | None = None         # None: enough pages + 2 sentinel entries


DECODE_CASES = [
    DecodeCase("fp8-d128-odd-h", "fp8", 128, 7, 16, 1, (37, 0, 1, 16), extra_stride=48, view_offset=32),
    DecodeCase("mxfp4-d64-next2-1d", "mxfp4", 64, 5, 16, 2, (1, 2, 33, 0), extra_stride=1 << 10),
    DecodeCase("tiled-d128-next3-2d", "mxfp4", 128, 3, 32, 3, ((0, 5, 40), (7, 7, 1)), layout="mxfp4_tiled",
               extra_stride=16),
    DecodeCase("mxfp4-d32-truncated", "mxfp4", 32, 1, 16, 1, (50, 3), max_context_len=20),
    DecodeCase("fp8-d32-table-capacity", "fp8", 32, 3, 16, 2, ((3, 64),), max_pages=2),
    DecodeCase("mxfp4-all-zero", "mxfp4", 128, 2, 64, 1, (0, 0, 0)),
    DecodeCase("fp8-d64-short-next4", "fp8", 64, 9, 16, 4, (2, 3, 17)),
    DecodeCase("tiled-d256-p64", "mxfp4", 256, 1, 64, 1, (65, 128), layout="mxfp4_tiled", extra_stride=4096),
]


def visible_counts(case: DecodeCase, max_pages: int, width: int) -> list[int]:
    """DESIGN §4's ctx(b, n), written out row by row."""
    out = []
    for b, lens in enumerate(case.context_lens):
        for n in range(case.next_n):
            ctx = lens[n] if isinstance(lens, tuple) else max(0, lens - case.next_n + n + 1)
            out.append(min(ctx, width, max_pages * case.page_size))
    return out


def build_decode(case: DecodeCase, rng):
    """Pool with shuffled physical pages, 0xFF in every unwritten byte, and sentinels in unused table entries.

    Returns (args of decode_logits, float64 keys per sequence, visible counts, dequantized q, weights)."""
    P, D, N = case.page_size, case.head_dim, case.next_n
    B = len(case.context_lens)
    longest = [max(lens) if isinstance(lens, tuple) else lens for lens in case.context_lens]
    width = case.max_context_len if case.max_context_len is not None else max(longest)
    needed_pages = [-(-n // P) for n in longest]
    max_pages = case.max_pages if case.max_pages is not None else max(needed_pages) + 2
    used_pages = [min(n, max_pages) for n in needed_pages]
    num_pages = sum(used_pages) + 3                       # 3 never-written pages (0xFF) among the used ones
    probe = layout.PageGeometry(case.kv_dtype, P, D, 1, layout=case.layout)
    stride = -(-probe.page_bytes // 16) * 16 + case.extra_stride
    geom = layout.PageGeometry(case.kv_dtype, P, D, num_pages, page_stride=stride, layout=case.layout,
                               view_offset=case.view_offset)
    pool = layout.new_pool(geom)
    physical = rng.permutation(num_pages)
    sentinels = np.array([num_pages, 2 ** 31 - 1, -1, -(2 ** 31)], dtype=np.int64)
    table = rng.choice(sentinels, size=(B, max_pages)).astype(np.int32)
    keys, first = [], 0
    for b in range(B):
        table[b, : used_pages[b]] = physical[first: first + used_pages[b]]
        first += used_pages[b]
        stored = min(longest[b], max_pages * P)
        values, scales = quantized_k(rng, case.kv_dtype, stored, D)
        t = np.arange(stored)
        layout.write_tokens(pool, geom, table[b, t // P].astype(np.int64) * P + t % P, values, scales)
        keys.append(scorer.dequantize_kv(values, scales))
    q = scorer.dequantize_q(*quantized_q(rng, case.kv_dtype, (B, N, case.num_heads, D)))
    w = weights8(rng, (B * N, case.num_heads))
    lens = np.array(case.context_lens, dtype=np.int32)
    counts = visible_counts(case, max_pages, width)
    return (q, pool, geom, w, lens, table, width), keys, counts


@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: c.name)
def test_decode_matches_einsum_on_hostile_pools(case):
    rng = np.random.default_rng(len(case.name))
    args, keys, counts = build_decode(case, rng)
    q, _, _, w, _, table, width = args
    N = case.next_n
    expected = np.full((len(counts), width), -np.inf)
    columns = scorer.decode_columns(args[4], N, width)    # past the table's counts[r]: no page, NaN
    for r, ctx in enumerate(counts):
        b, n = divmod(r, N)
        expected[r, :ctx] = einsum_logits(q[b, n][None], keys[b][:ctx], w[r][None])[0]
        expected[r, ctx:columns[r]] = np.nan
    got = scorer.decode_logits(*args)
    assert got.dtype == np.float64 and got.shape == (len(counts), width)
    assert_exact(got, expected, f"{case.name}: decode logits vs einsum")
    assert (np.isnan(got) == np.isnan(expected)).all()   # no 0xFF byte of an unused page was read
    assert_exact(fast_scorer.decode_logits(*args), got, f"{case.name}: fast_scorer vs scorer")
    unclean = scorer.decode_logits(*args, clean_logits=False)
    assert_exact(unclean, np.where(expected == -np.inf, np.nan, expected), f"{case.name}: clean_logits=False")
    counts_api = scorer.decode_visible(args[4], N, width, table.shape[1], case.page_size)
    assert counts_api.tolist() == counts


@pytest.mark.parametrize("bad_id", [-1, 2 ** 30, -(2 ** 31), "num_pages"])
def test_decode_bad_page_ids_are_nan(bad_id):
    """The hot-path policy: a needed block-table entry outside [0, num_pages) makes exactly that page's columns NaN
    (nothing is read for it); the other pages of the row keep their logits."""
    case = DecodeCase("bad-page", "fp8", 32, 2, 16, 1, (40, 20))
    args, _, counts = build_decode(case, np.random.default_rng(3))
    q, pool, geom, w, lens, table, width = args
    good = scorer.decode_logits(*args)
    bad_table = table.copy()
    bad_table[0, 1] = geom.num_pages if bad_id == "num_pages" else bad_id
    got = scorer.decode_logits(q, pool, geom, w, lens, bad_table, width)
    page_cols = np.zeros_like(good, dtype=bool)
    page_cols[0, 16:32] = True
    assert np.isnan(got[page_cols]).all()
    assert_exact(got[~page_cols], good[~page_cols], "the other columns")
    assert not np.isnan(good).any() and counts == [40, 20]


def test_decode_visible_by_hand():
    # 1-D, N = 2: row n sees max(0, L - 2 + n + 1)
    assert scorer.decode_visible([5, 0, 1], 2, 100, 10, 16).tolist() == [4, 5, 0, 0, 0, 1]
    # clamps: max_context_len 3, then table capacity 1 page * 16
    assert scorer.decode_visible([5, 40], 1, 3, 10, 16).tolist() == [3, 3]
    assert scorer.decode_visible([[5, 40]], 2, 100, 1, 16).tolist() == [5, 16]
    # negative lengths see nothing (the kernels' hot path does the same)
    assert scorer.decode_visible([-3, 2], 2, 100, 10, 16).tolist() == [0, 0, 1, 2]
    assert scorer.decode_visible([[-1, 4]], 2, 100, 10, 16).tolist() == [0, 4]


def test_decode_reads_nan_token_inside_context():
    case = DecodeCase("nan-token", "mxfp4", 64, 3, 16, 1, (20,))
    rng = np.random.default_rng(3)
    args, keys, _ = build_decode(case, rng)
    q, pool, geom, w, lens, table, width = args
    slot = int(table[0, 1]) * 16 + 2                       # token 18 lives on logical page 1
    addr = geom.view_offset + (slot // 16) * geom.page_stride + layout.scale_offset(geom, slot % 16, 1)
    pool[addr] = E8M0_NAN
    got = scorer.decode_logits(*args)
    assert np.isnan(got[0, 18]) and np.isfinite(np.delete(got[0], 18)).all()


# ============================================================================================ error bound
def test_bound_formula_by_hand():
    q, k, w = np.ones((1, 1, 32)), np.ones((2, 32)), np.array([[-2.0]])
    bound = scorer.prefill_error_bound(q, k, w, [0], [1], n_roundings=1)
    a = 2.0 * 32                                               # sum_h |w| sum_d |q k|
    expected = ((1 + 1 + 2) * U32 + 2 * (32 + 1 + 2) * U64) * a
    assert bound.tolist() == [[expected, 0.0]]                 # 0 on the invisible column: exact -inf needed
    wide = scorer.prefill_error_bound(q, k, w, [0], [1], n_roundings=32, u=2.0 ** -14)
    assert wide[0, 0] == ((32 + 1 + 2) * 2.0 ** -14 + 2 * (32 + 1 + 2) * U64) * a
    assert scorer.dot_product_roundings("mxfp4", 128) == 4 and scorer.dot_product_roundings("mxfp4_tiled", 64) == 2
    assert scorer.dot_product_roundings("fp8", 64) == 64


def fp32_kernel(q, k, w, block: int) -> np.ndarray:
    """A plausible fp32 kernel, in an order unlike the reference: block sums of `block` products (exact for
    MXFP4 at block 32), accumulated in fp32 from the last block down, heads summed in fp32 from the last head."""
    q32, k32, w32 = q.astype(np.float32), k.astype(np.float32), w.astype(np.float32)
    R, H, D = q.shape
    out = np.zeros((R, k.shape[0]), dtype=np.float32)
    for h in reversed(range(H)):
        dot = np.zeros((R, k.shape[0]), dtype=np.float32)
        for d0 in reversed(range(0, D, block)):
            dot += np.einsum("rd,td->rt", q32[:, h, d0: d0 + block], k32[:, d0: d0 + block]).astype(np.float32)
        out += w32[:, h, None] * np.where(dot > 0, dot, np.float32(0))
    return out


@pytest.mark.parametrize("kv_dtype,block", [("fp8", 1), ("mxfp4", MX_BLOCK)])
def test_fp32_kernel_within_bound_and_wrong_value_caught(kv_dtype, block):
    rng = np.random.default_rng(11)
    S, SK, H, D = 16, 64, 9, 128
    q = scorer.dequantize_q(*quantized_q(rng, kv_dtype, (S, H, D)))
    k = scorer.dequantize_kv(*quantized_k(rng, kv_dtype, SK, D))
    w = rng.standard_normal((S, H)).astype(np.float32)        # full 24-bit weights: the fp32 sums do round
    ks, ke = np.zeros(S, dtype=np.int32), np.full(S, SK, dtype=np.int32)
    ref = scorer.prefill_logits(q, k, w, ks, ke)
    bound = scorer.prefill_error_bound(q, k, w, ks, ke, n_roundings=scorer.dot_product_roundings(kv_dtype, D))
    kernel = fp32_kernel(q, k, w, block)
    result = scorer.assert_logits_within_bound(kernel, ref, bound)
    assert 0 < result.worst_ratio <= 1 and result.compared == S * SK   # the kernel did round somewhere

    wrong = kernel.astype(np.float64)
    wrong[5, 17] = ref[5, 17] + 1.01 * bound[5, 17]
    check = scorer.check_logits(wrong, ref, bound)
    assert not check.ok and check.violation == (5, 17) and check.worst_ratio > 1
    assert check.actual == wrong[5, 17] and check.reference == ref[5, 17] and check.bound == bound[5, 17]
    with pytest.raises(AssertionError, match=r"first violation at \(5, 17\)"):
        scorer.assert_logits_within_bound(wrong, ref, bound)


def test_decode_bound_uses_visible_keys_and_geometry_format():
    case = DecodeCase("bound", "mxfp4", 64, 3, 16, 2, (20, 5))
    args, keys, counts = build_decode(case, np.random.default_rng(5))
    q, w = args[0], args[3]
    bound = scorer.decode_error_bound(*args)
    for r, ctx in enumerate(counts):
        b, n = divmod(r, 2)
        a = np.einsum("h,hd,td->t", np.abs(w[r]).astype(np.float64), np.abs(q[b, n]), np.abs(keys[b][:ctx]))
        gamma = (64 // MX_BLOCK + 3 + 2) * U32 + 2 * (64 + 3 + 2) * U64
        np.testing.assert_allclose(bound[r, :ctx], gamma * a, rtol=1e-14, err_msg=f"row {r}")
        assert not bound[r, ctx:].any()
    fp8_like = scorer.decode_error_bound(*args, n_roundings=64)
    assert (fp8_like >= bound).all() and (fp8_like > bound).any()


# ============================================================================================ checker rules
def test_checker_nonfinite_rules():
    ref = np.array([[np.nan, -np.inf, np.inf, 1.0, 2.0]])
    bound = np.array([[0.0, 0.0, 0.0, 0.5, 0.0]])
    ok = np.array([[np.nan, -np.inf, np.inf, 1.4, 2.0]], dtype=np.float32)
    assert scorer.check_logits(ok, ref, bound).ok
    cases = {0: 1.0, 1: 0.0, 2: np.nan, 3: np.inf, 4: 2.5}
    for col, value in cases.items():
        bad = ok.astype(np.float64).copy()
        bad[0, col] = value
        check = scorer.check_logits(bad, ref, bound)
        assert check.violation == (0, col) and check.worst_ratio == np.inf, (col, check)
    nan_result = ok.astype(np.float64).copy()
    nan_result[0, 3] = np.nan
    assert scorer.check_logits(nan_result, ref, bound).violation == (0, 3)   # finite reference, NaN result
    masked = scorer.check_logits(nan_result, ref, bound, visible=np.array([[1, 1, 1, 0, 1]], dtype=bool))
    assert masked.ok and masked.compared == 4


# ============================================================================================ rejections
def _prefill_args(**over):
    args = dict(q=np.zeros((2, 3, 32)), k=np.zeros((4, 32)), weights=np.zeros((2, 3)), ks=[0, 0], ke=[4, 2])
    args.update(over)
    return args


@pytest.mark.parametrize("over,match", [
    (dict(q=np.zeros((2, 3, 32), dtype=np.uint8)), "q must be a float array.*dequantize_q"),
    (dict(q=np.zeros((2, 32))), "q must have 3 dimensions"),
    (dict(k=np.zeros((4, 64))), "k head dim 64 != q head dim 32"),
    (dict(weights=np.zeros((2, 4))), r"weights must be \[S, H\]"),
    (dict(ks=[0.0, 0.0]), "ks must be an integer array"),
    (dict(ks=[0], ke=[1]), "ks and ke must both have shape"),
    (dict(ks=[0, 3], ke=[4, 2]), r"row 1 has ks = 3, ke = 2"),
    (dict(ks=[-1, 0]), r"row 0 has ks = -1"),
    (dict(ke=[5, 2]), r"<= SK = 4; row 0"),
])
def test_prefill_rejects(over, match):
    with pytest.raises(ValueError, match=match):
        scorer.prefill_logits(**_prefill_args(**over))


def test_decode_and_helpers_reject():
    case = DecodeCase("reject", "fp8", 32, 2, 16, 2, (20, 3))
    args, _, _ = build_decode(case, np.random.default_rng(2))
    q, pool, geom, w, lens, table, width = args

    def call(**over):
        a = dict(q=q, pool=pool, geom=geom, weights=w, context_lens=lens, block_table=table,
                 max_context_len=width)
        a.update(over)
        return scorer.decode_logits(**a)

    rejections = [
        (dict(q=q[..., :16]), "q head dim 16 != geom.head_dim 32"),
        (dict(q=q[0]), "q must have 4 dimensions"),
        (dict(weights=w[:2]), r"weights must be \[B\*N, H\]"),
        (dict(context_lens=np.array([[1, 2, 3], [1, 2, 3]])), r"2-D context_lens must be \[B, next_n\]"),
        (dict(context_lens=np.array([1, 2, 3])), "context_lens must be"),
        (dict(block_table=table[:1]), r"block_table must be \[B, max_pages\]"),
        (dict(max_context_len=-1), "max_context_len must be >= 0"),
        (dict(max_context_len=True), "max_context_len must be an int"),
    ]
    rejections += [
        (dict(pool=pool[:-1]), r"^pool has \d+ bytes, the geometry needs"),
        (dict(geom=(geom.kv_dtype, geom.page_size)), "geom must be a sim.layout.PageGeometry"),
    ]
    for over, match in rejections:
        with pytest.raises(ValueError, match=match):
            call(**over)
    with pytest.raises(ValueError, match="next_n must be >= 1"):
        scorer.decode_visible([1], 0, 4, 1, 16)
    with pytest.raises(ValueError, match="kv scales must be float32"):
        scorer.dequantize_kv(np.zeros((2, 16), np.uint8), np.zeros(2, np.float64))
    with pytest.raises(ValueError, match=r"kv values must be \[SK, D\]"):
        scorer.dequantize_kv(np.zeros(16, np.uint8), np.zeros((), np.float32))
    with pytest.raises(ValueError, match="kv_dtype must be"):
        scorer.dot_product_roundings("bf16", 64)
    with pytest.raises(ValueError, match=r"u \(unit roundoff"):
        scorer.prefill_error_bound(**_prefill_args(), n_roundings=1, u=1.5)
    with pytest.raises(ValueError, match="must match"):
        scorer.check_logits(np.zeros((1, 2)), np.zeros((1, 3)), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="visible must have shape"):
        scorer.check_logits(np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 2)), visible=np.ones(2, bool))
