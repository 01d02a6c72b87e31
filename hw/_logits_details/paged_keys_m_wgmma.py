"""The MXFP4 paged decode scorer on Hopper (sm_90) in Gluon: paged_keys_m's "fold" path (mxfp4_fold's arithmetic),
with the key codes loaded straight into the registers of the wgmma A operand.

Same contract, arithmetic and declared precision as paged_keys_m's fold path (its module docstring: keys on the MMA's
M axis, query rows on N, e2m1 folded with its block scale relative to the token's largest into exact e4m3 by
FOLD_BYTES_PTX, the key's power-of-two factor after the head sum, the exact pass for keys or query rows whose block
scales span more than FOLD_SPAN binades, NaN for E8M0 255 and for keys on pages that are not ok). What differs is
where the codes go: `tl` cannot choose the layout of a load, so the `tl` kernel's folded bytes reach the MMA operand
through shared memory (stores, a barrier, ldmatrix per tile). Here every thread loads exactly the code bytes of the
operand registers it owns, as one vector per key (key_layout), and folds them in place.

The K order. With 8-bit operands (k_width 4) thread j = (lane % 4) of a row's quad holds the operand columns
16m + 4j + i (i < 4, m < C/16) of its rows, C = D/2. Column c of both operands reads code byte

    kperm(c) = (C/4) * ((c % 16) // 4) + 4 * (c // 16) + c % 4

so a thread holds C/4 consecutive code bytes of each of its keys (D = 128: one whole 32-element block, one fold
table). They load in natural byte order in key_layout(D), which has the A operand's ownership with the bytes
contiguous in registers; a reshape / permute to the K order then moves no data (convert_layout asserts it).
FOLD_BYTES_PTX turns code byte kperm(c)'s word a = kperm(c) // 4 into e4m3 bytes of elements 8a + c % 4 (operand 1,
column c) and 8a + 4 + c % 4 (operand 2, column c); the query operands are folded from the same bytes in the same
order, so q . k is the sum of two K = C wgmma, as in the `tl` kernel's split order.

Tiles are 64 keys (one wgmma M) of one sequence, any page size: each key finds its page (tok // P; one lookup per
tile when a page holds whole tiles) and rebases in 64 bits. A program scores TILES consecutive tiles in groups of 4
(2 when TILES is 2): a group's loads are all issued before its first tile is scored. The exact pass runs after the
loop, as in the `tl` kernel, with the other blocks of the key operand zeroed per block (the operand registers of a
column belong to one block), so one block's 32 products per pair of wgmma. The launch caps the registers
(maxnreg(): 4 programs per SM up to 64 query columns, 3 at 128), and grid_choice sizes the programs for that many
slots. More than MMA_COLUMNS = 64 query columns are scored in two halves of 64 (one wgmma N each), one after the
other, so that one half's head terms are live at a time; a token whose columns span both halves (H_PAD = 128) sums
them before its store, otherwise each half stores its own tokens.

Coverage (covers()): sm_90 devices, D 64 and 128 (D = 32 is below one FP8 wgmma's K; D = 256 spills) in the planar
layout and D 128 in the tiled one (a thread's C/4 code bytes of a key are one 16-byte block there too, so they
load as one vector; the scale bytes load one by one), N_PAD * H_PAD <= 128 query columns. The variant launches
this kernel on every call it covers and raises hw.targets.NotCovered on any other (it hands no call to the `tl`
fold); hw.variants.DEFAULTS takes it where it covers the call and, at 128 columns, the grid is long (takes), else
mxfp4_keys_m. Gluon has no interpreter: the kernel is checked by cross-compilation on the CPU and by the GPU tests.
"""
from __future__ import annotations

import dataclasses
import functools

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from .._constant import Constant
from .._error_flag import INT32_MAX
from .._pdl import grid_dependency_sync, pdl_launch
from .._quant_details.codecs import E8M0_NAN
from .._quant_details.page_offsets import MX_BLOCK, TILE_BYTES, mxfp4_value_offsets
from ..isa_spec import CompileSpec
from ..targets import LaunchSettings, NotCovered, Op, Target, Variant, nvidia_capability, register_cap, sm_count
from . import paged_keys_m as km
from .calls import DecodeCall
from .mxfp4_fold import (
    E8M0_ONE,
    EXACT_REL,
    EXACT_RESCALE,
    FOLD_KEY_BIAS,
    FOLD_SPAN,
    bit_or,
    e8m0_to_f32,
    exp2_int,
    fold_bytes_ptx,
    mx_key_scale_words,
    scale_byte,
    scale_max_min,
    table_byte,
)
from .paged_keys_m import (
    KEEP_IN_L2,
    MAX_TILES,
    lookup_pages,
    report_pages,
    visible_lengths,
)

KEYS = Constant(64)                # keys per tile: one wgmma M
WGMMA_WARPS = 4                       # one warpgroup
HEAD_DIMS = (64, 128)               # D / 2 code bytes per key = the K of each operand, a multiple of 32
MAX_QUERY_COLUMNS = 128            # N_PAD * H_PAD
MMA_COLUMNS = Constant(64)         # query columns of one MMA: 128 are scored in two halves, one after the other
CAPABILITY = (9, 0)                 # wgmma
#: the register cap, 4 programs per SM: with a group of 4 tiles' codes in flight the fold loop fits in it at up to
#: 64 query columns but for a few stack words (one reload per group); the rare exact pass spills at 64
MAXNREG = 128
#: ... and at 128 query columns (two halves), 3 programs per SM: under 128 registers the fold loop would reload
#: stack words every group, under 168 few or none
#: (docs/perf/h200-decode-ablation.md#128-query-columns-in-the-gluon-scorer-two-halves-of-64-on-long-grids-2026-12-02)
WIDE_MAXNREG = 168
#: ... where the grid holds at least this many 64-key tiles per resident program; shorter grids at 128 columns go to
#: the `tl` fold, which takes less time there (docs/perf/h200-decode-ablation.md, 128 query columns)
WIDE_MIN_TILES_PER_SLOT = 8
REGISTERS_PER_SM = 65536            # sm_90
#: 64-key tiles per program: 2 (scored as a pair) or a multiple of 4 (in groups of 4) up to MAX_TILES
TILE_RANGE = (2,) + tuple(range(4, MAX_TILES.value + 1, 4))
MIN_TILES = TILE_RANGE[0]
PROGRAM_OVERHEAD_TILES = 2          # a program's fixed work (query fold, first loads), in tiles: grid_choice's model
_CTA_BARRIER = getattr(gl, "barrier", None) or gl.thread_barrier     # renamed in triton 3.9


@gluon.jit
def _kperm(c, C: gl.constexpr):
    """Operand column c -> the code byte it reads (module docstring): runs of 4 consecutive bytes, so that the query
    rows load in 32-bit words (the hints sit here: triton 3.6 drops those put on a call's result)."""
    return gl.max_contiguous(gl.multiple_of((C // 4) * ((c % 16) // 4) + 4 * (c // 16) + c % 4, 4), 4)


@gluon.jit
def _kperm_block(c, C: gl.constexpr):
    """The MX block of the code byte _kperm(c): _kperm(c) // 16 without the c % 4 term, which never crosses one."""
    return ((C // 4) * ((c % 16) // 4) + 4 * (c // 16)) // TILE_BYTES


@gluon.jit
def _key_tile(cache_ptr, bt_row, tile, rows, byte, num_pages, max_pages, num_cache_pages, page_stride, vis_max, met,
              A: gl.constexpr, P: gl.constexpr, D: gl.constexpr, TILED: gl.constexpr, HAS_FLAG: gl.constexpr):
    """Tile `tile` of a sequence: (uint8 [KEYS, D/2] code bytes in the A operand's layout and K order, the keys'
    packed block scales (mx_key_scale_words, int32) in A's row layout, met with the tile's bad page ids). rows and
    byte: aranges in the slices of key_layout(D). Keys at or past vis_max or on a page that is not ok are not read:
    codes 0, scales 255 (NaN)."""
    C: gl.constexpr = D // 2
    tok = tile * KEYS + rows
    if P % KEYS == 0:       # the tile lies on one page: one lookup (scalars), not one per key
        page_off, page_ok, bad_id = lookup_pages(bt_row, tile // (P // KEYS), num_pages, max_pages, num_cache_pages,
                                                  page_stride)
        page_ptr = cache_ptr + page_off
    else:
        page_off, page_ok, bad_id = lookup_pages(bt_row, tok // P, num_pages, max_pages, num_cache_pages,
                                                  page_stride)
        page_ptr = (cache_ptr + page_off)[:, None]
    t_in = tok % P
    k_ok = tok < gl.where(page_ok, vis_max, 0)
    codes = gl.load(page_ptr + mxfp4_value_offsets(t_in, byte, P, D, TILED), mask=k_ok[:, None], other=0)
    # natural byte order (C/4 contiguous bytes a thread: one vector load a key) -> the K order, same registers
    codes = gl.reshape(gl.permute(gl.reshape(codes, [KEYS, 4, C // 16, 4]), (0, 2, 1, 3)), [KEYS, C])
    sw = mx_key_scale_words(cache_ptr, page_off, t_in, k_ok, P, D, TILED).to(gl.int32)
    if HAS_FLAG:
        met = gl.where(bad_id != 0, bad_id, met)
    return gl.convert_layout(codes, A, assert_trivial=True), gl.convert_layout(sw, gl.SliceLayout(1, A)), met


@functools.lru_cache(maxsize=None)
def key_layout(head_dim: int) -> gl.DistributedLinearLayout:
    """The layout the code bytes [KEYS, D/2] of a tile load in, natural byte order: A's ownership of keys and bytes
    (thread j of a row's quad: bytes (C/4) j .. (C/4) j + C/4 - 1 of rows l // 4 and l // 4 + 8 of its warp's 16),
    registers ordered along the bytes, so that the C/4 bytes load as one vector."""
    C = head_dim // 2
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 1 << k] for k in range((C // 4).bit_length() - 1)] + [[8, 0]],
        lane_bases=[[0, C // 4], [0, C // 2], [1, 0], [2, 0], [4, 0]], warp_bases=[[16, 0], [32, 0]],
        block_bases=[], shape=[KEYS.value, C])


@gluon.jit
def _store_logits(out_ptr, contrib, factor, tok, b, col_n, vis_col, stride_out_r, N: gl.constexpr,
                  N_PAD: gl.constexpr, N_FIRST: gl.constexpr, N_END: gl.constexpr):
    """out[b*N + n, tok] = factor * sum of the fp32 [KEYS, columns] head terms `contrib` over the columns of n, for
    tok < visible(b, n), for the tokens N_FIRST <= n < min(N_END, N) whose columns all lie in contrib."""
    for n in gl.static_range(N_FIRST, N_END):
        if n < N:
            if N_PAD == 1:
                logit = gl.sum(contrib, axis=1)
                limit = gl.max(vis_col, axis=0)
            else:
                logit = gl.sum(gl.where(col_n[None, :] == n, contrib, 0.0), axis=1)
                limit = gl.max(gl.where(col_n == n, vis_col, 0), axis=0)
            gl.store(out_ptr + (b * N + n) * stride_out_r + tok, logit * factor, mask=tok < limit)


@gluon.jit
def _relu_terms(acc, w):
    """w * relu(acc), relu keeping NaN."""
    return gl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL) * w[None, :]


@gluon.jit
def _q_half(qop, half: gl.constexpr, MN: gl.constexpr, SPLITS: gl.constexpr):
    """The MMA's B operand for the query columns of `half`: [C, MN] (the whole operand when SPLITS == 1)."""
    if SPLITS == 1:
        return qop.permute((1, 0))
    else:
        return qop.slice(half * MN, MN).permute((1, 0))


@gluon.jit
def _fold_tile(codes, sw, blk, c_factor, qop1, qop2, w_fold, mma: gl.constexpr, G: gl.constexpr,
               SPLITS: gl.constexpr):
    """The fold path of one tile: (fp8 key operands a1, a2, fp32 [KEYS, MN] head terms of the first MN query columns,
    key factor 2^(skmax + c - 266) or NaN [KEYS] in the MMA's row layout, int32 [KEYS] 1 where the key's block scales
    are wide). c_factor: 2^(c - 139), so that the product of two powers of two is the factor (exact: a power of two
    at or above 2^-149 is representable, and the ones below round to 0 as exp2_int's)."""
    MN: gl.constexpr = w_fold.shape[0]
    sk_max, sk_min = scale_max_min(sw, G)
    rel = gl.maximum(scale_byte(sw[:, None], blk[None, :]) - sk_max[:, None], -FOLD_SPAN)
    k1, k2 = fold_bytes_ptx(codes, table_byte(rel))
    acc = gl.zeros([KEYS, MN], gl.float32, layout=mma)
    a1 = k1.to(gl.float8e4nv, bitcast=True)
    a2 = k2.to(gl.float8e4nv, bitcast=True)
    # both MMAs in one asynchronous chain, one wait. Its deps name only acc (Triton's wait takes no 8-bit values):
    # a1 and a2 are PTX registers that nothing redefines, and ptxas keeps them until the wait
    acc = warpgroup_mma(a1, _q_half(qop1, 0, MN, SPLITS), acc, is_async=True)
    acc = warpgroup_mma(a2, _q_half(qop2, 0, MN, SPLITS), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    k_nan = sk_max == E8M0_NAN
    factor = e8m0_to_f32(sk_max) * c_factor      # 2^(sk_max + c - 266), exactly (or 0, inf); NaN for 255
    wide = (~k_nan & (sk_max - sk_min > FOLD_SPAN)).to(gl.int32)
    return a1, a2, _relu_terms(acc, w_fold), gl.convert_layout(factor, gl.SliceLayout(1, mma)), wide


@gluon.jit
def _second_half(a1, a2, qop1, qop2, w, mma: gl.constexpr):
    """fp32 [KEYS, MN] fold-path head terms of the query columns MN .. 2 MN - 1 (MN: w's width) from the key
    operands of _fold_tile."""
    MN: gl.constexpr = w.shape[0]
    acc = gl.zeros([KEYS, MN], gl.float32, layout=mma)
    acc = warpgroup_mma(a1, _q_half(qop1, 1, MN, 2), acc, is_async=True)
    acc = warpgroup_mma(a2, _q_half(qop2, 1, MN, 2), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    return _relu_terms(acc, w)


@gluon.jit
def _terms(x1, x2, sw, blk, qop1, qop2, q_s_ptr, q_col_s, col_ok, w, mma: gl.constexpr, G: gl.constexpr,
           EXACT: gl.constexpr):
    """The head terms of the second half's query columns: the fold path's of the key operands x1, x2, or (EXACT)
    the exact pass's of the codes x1 (x2 unused) against its query operands qop1, qop2."""
    if EXACT:
        return _exact_half(x1, sw, blk, qop1, qop2, q_s_ptr, q_col_s, col_ok, w, 1, mma, G, 2)
    else:
        return _second_half(x1, x2, qop1, qop2, w, mma)


@gluon.jit
def _store_halves(out_ptr, t0, x1, x2, sw, blk, qop1, qop2, q_s_ptr, q_col_s1, col_ok1, w1, factor, tok, b, col_n0,
                  col_n1, vis0, vis1, stride_out_r, mma: gl.constexpr, G: gl.constexpr, N: gl.constexpr,
                  N_PAD: gl.constexpr, H_PAD: gl.constexpr, SPLITS: gl.constexpr, EXACT: gl.constexpr):
    """A tile's logits from t0, the head terms of its first MN query columns, and (SPLITS == 2) _terms of the second
    MN (its arguments; col_n0 / vis0 and col_n1 / vis1: the halves' tokens and visible lengths). A token whose
    columns span both halves (N_PAD == 1, H_PAD = 2 MN) sums them before its store; otherwise each half stores its
    own tokens, so that one half's terms are live at a time."""
    MN: gl.constexpr = t0.shape[1]
    NPH: gl.constexpr = MN // H_PAD if MN >= H_PAD else 1      # tokens a half holds
    if SPLITS == 1:
        _store_logits(out_ptr, t0, factor, tok, b, col_n0, vis0, stride_out_r, N, N_PAD, 0, N_PAD)
    elif N_PAD == 1:
        row = gl.sum(t0, axis=1)
        row += gl.sum(_terms(x1, x2, sw, blk, qop1, qop2, q_s_ptr, q_col_s1, col_ok1, w1, mma, G, EXACT), axis=1)
        gl.store(out_ptr + b * stride_out_r + tok, row * factor, mask=tok < gl.max(vis0, axis=0))
    else:
        _store_logits(out_ptr, t0, factor, tok, b, col_n0, vis0, stride_out_r, N, N_PAD, 0, NPH)
        t1 = _terms(x1, x2, sw, blk, qop1, qop2, q_s_ptr, q_col_s1, col_ok1, w1, mma, G, EXACT)
        _store_logits(out_ptr, t1, factor, tok, b, col_n1, vis1, stride_out_r, N, N_PAD, NPH, 2 * NPH)


@gluon.jit
def _score_tile(codes, sw, first, i, wide_keys, blk, c_factor, qop1, qop2, cols, out_ptr, tok_o, b, stride_out_r,
                mma: gl.constexpr, G: gl.constexpr, N: gl.constexpr, N_PAD: gl.constexpr, H_PAD: gl.constexpr,
                SPLITS: gl.constexpr):
    """Tile first + i of the fold loop: its logits stored; returns wide_keys with bit i set for its wide keys.
    cols: the halves' (w_fold0, w_fold1, col_n0, col_n1, vis0, vis1)."""
    a1, a2, t0, factor, wide = _fold_tile(codes, sw, blk, c_factor, qop1, qop2, cols[0], mma, G, SPLITS)
    _store_halves(out_ptr, t0, a1, a2, sw, blk, qop1, qop2, out_ptr, 0, False, cols[1], factor,
                  (first + i) * KEYS + tok_o, b, cols[2], cols[3], cols[4], cols[5], stride_out_r, mma, G, N, N_PAD,
                  H_PAD, SPLITS, False)
    return wide_keys | (wide << i)


@gluon.jit
def _exact_half(codes, sw, blk, qe1, qe2, q_s_ptr, q_col_s, col_ok, w, half: gl.constexpr, mma: gl.constexpr,
                G: gl.constexpr, SPLITS: gl.constexpr):
    """The exact pass of one tile (mxfp4_fold's mx_exact_scores, blocks selected in the key operand): fp32
    [KEYS, MN] head terms of the query columns of `half` (q_col_s, col_ok, w: theirs; a padding column's scales
    are not read, and its q rows are 0)."""
    MN: gl.constexpr = w.shape[0]
    C: gl.constexpr = codes.shape[1]
    d8 = table_byte(gl.full([KEYS, C], EXACT_REL, gl.int32, layout=codes.type.layout))
    acc = gl.zeros([KEYS, MN], gl.float32, layout=mma)
    for g in range(0, G):           # not unrolled: the rare path keeps registers low
        k1, k2 = fold_bytes_ptx(gl.where(blk[None, :] == g, codes, 0), d8)      # code 0 folds to +0
        part = gl.zeros([KEYS, MN], gl.float32, layout=mma)
        part = warpgroup_mma(k1.to(gl.float8e4nv, bitcast=True), _q_half(qe1, half, MN, SPLITS), part)
        part = warpgroup_mma(k2.to(gl.float8e4nv, bitcast=True), _q_half(qe2, half, MN, SPLITS), part)
        k_scale = gl.convert_layout(e8m0_to_f32(scale_byte(sw, g)), gl.SliceLayout(1, mma))
        q_scale = e8m0_to_f32(gl.load(q_s_ptr + q_col_s + g, mask=col_ok, other=E8M0_ONE).to(gl.int32))
        # part * 2^10 is the exact block sum; k_scale * q_scale = 2^(sk + sq - 254) is exact in fp32's range
        acc += (part * EXACT_RESCALE) * (k_scale[:, None] * q_scale[None, :])
    return _relu_terms(acc, w)


@gluon.jit
def _query_codes(q_v_ptr, q_row_v, q_ok, qk):
    """The query rows' code bytes [NH, C] in the K order (padded rows: 0)."""
    return gl.load(q_v_ptr + q_row_v[:, None] + qk[None, :], mask=q_ok[:, None], other=0, eviction_policy=KEEP_IN_L2)


@gluon.jit
def _query_operand(codes, rel, layout: gl.constexpr):
    """Two NVMMA-shared fp8 [NH, C] query operands: `codes` (_query_codes) folded at `rel` ([NH, C])."""
    q1, q2 = fold_bytes_ptx(codes, table_byte(rel))
    op1 = gl.allocate_shared_memory(gl.float8e4nv, q1.shape, layout, q1.to(gl.float8e4nv, bitcast=True))
    op2 = gl.allocate_shared_memory(gl.float8e4nv, q2.shape, layout, q2.to(gl.float8e4nv, bitcast=True))
    fence_async_shared()
    return op1, op2


@gluon.jit
def _half_columns(ctx_ptr, w_ptr, b, stride_ctx_b, stride_w_r, stride_qs_b, stride_qs_n, stride_qs_h, cap,
                  half: gl.constexpr, MN: gl.constexpr, COL: gl.constexpr, N: gl.constexpr, H: gl.constexpr,
                  H_PAD: gl.constexpr, CTX_2D: gl.constexpr):
    """The query columns half * MN .. (half + 1) * MN - 1 in COL: (token n, real (not padding), visible length,
    weight, offset of the row's scales in q_s)."""
    col = gl.arange(0, MN, layout=COL) + half * MN
    col_n = col // H_PAD
    col_ok = (col_n < N) & (col % H_PAD < H)
    vis = visible_lengths(ctx_ptr, b, stride_ctx_b, col_n, N, CTX_2D, cap)
    w = gl.load(w_ptr + (b * N + col_n) * stride_w_r + col % H_PAD, mask=col_ok, other=0.0,
                eviction_policy=KEEP_IN_L2)
    return col_n, col_ok, vis, w, b * stride_qs_b + col_n * stride_qs_n + (col % H_PAD) * stride_qs_h


@gluon.jit
def _fold_weights(q_s_ptr, q_col_s, col_ok, w, c, G: gl.constexpr):
    """The fold path's weights w * 2^(sqmax - c) of query columns (NaN where the row's largest block scale is
    E8M0 255), from the rows' scales at q_col_s (_half_columns)."""
    sq_max = gl.load(q_s_ptr + q_col_s, mask=col_ok, other=E8M0_ONE, eviction_policy=KEEP_IN_L2).to(gl.int32)
    for g in gl.static_range(1, G):
        sq_max = gl.maximum(sq_max, gl.load(q_s_ptr + q_col_s + g, mask=col_ok, other=E8M0_ONE,
                                            eviction_policy=KEEP_IN_L2).to(gl.int32))
    return gl.where(sq_max == E8M0_NAN, float("nan"), w * exp2_int(sq_max - c))


@gluon.jit
def paged_keys_m_wgmma_kernel(
    q_v_ptr, q_s_ptr, cache_ptr, w_ptr, ctx_ptr, bt_ptr, out_ptr, flag_ptr,
    cap, page_stride, max_pages, num_cache_pages,
    stride_qv_b, stride_qv_n, stride_qv_h, stride_qs_b, stride_qs_n, stride_qs_h,
    stride_w_r, stride_ctx_b, stride_bt_b, stride_out_r,
    N: gl.constexpr, N_PAD: gl.constexpr, H: gl.constexpr, H_PAD: gl.constexpr, D: gl.constexpr, P: gl.constexpr,
    TILES: gl.constexpr, CTX_2D: gl.constexpr, HAS_FLAG: gl.constexpr, PDL: gl.constexpr, KL: gl.constexpr,
    TILED: gl.constexpr,
):
    """paged_keys_m_kernel's arguments for MXFP4 (its docstring), one warpgroup. Grid (B, cdiv(cdiv(cap, 64),
    TILES)); program (b, c) scores tiles c * TILES .. of sequence b. KL: key_layout(D)."""
    gl.static_assert(TILES % 2 == 0, "tiles are scored in groups of 2 or 4")
    GROUP: gl.constexpr = 4 if TILES % 4 == 0 else 2
    gl.static_assert(TILES <= MAX_TILES)
    gl.static_assert(D % (2 * 32) == 0, "each operand's K = D/2 must be a multiple of the FP8 wgmma's 32")
    NH: gl.constexpr = N_PAD * H_PAD
    MN: gl.constexpr = NH if NH < MMA_COLUMNS else MMA_COLUMNS  # query columns per MMA (its N)
    SPLITS: gl.constexpr = NH // MN                             # 1, or 2 halves of MN
    gl.static_assert(SPLITS <= 2, "at most two MMA column halves")
    C: gl.constexpr = D // 2
    G: gl.constexpr = D // MX_BLOCK
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, MN, 32])
    A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
    QC: gl.constexpr = C // 4 if C // 4 < 32 else 32           # threads along a query row's bytes
    QL: gl.constexpr = gl.BlockedLayout([1, 4], [32 // QC, QC], [4, 1], [1, 0])
    QS: gl.constexpr = gl.NVMMASharedLayout.get_default_for([NH, C], gl.float8e4nv)
    COL: gl.constexpr = gl.SliceLayout(0, mma)

    grid_dependency_sync(PDL)
    b = gl.program_id(0).to(gl.int64)
    chunk = gl.program_id(1)
    # the query columns of each half: (n, h) = (col // H_PAD, col % H_PAD); the query's loads go out beside the
    # context lengths', before the branch that needs them
    col_n0, col_ok0, vis0, w0, q_col_s0 = _half_columns(ctx_ptr, w_ptr, b, stride_ctx_b, stride_w_r, stride_qs_b,
                                                         stride_qs_n, stride_qs_h, cap, 0, MN, COL, N, H, H_PAD,
                                                         CTX_2D)
    col_n1, col_ok1, vis1, w1, q_col_s1 = col_n0, col_ok0, vis0, w0, q_col_s0
    if SPLITS == 2:
        col_n1, col_ok1, vis1, w1, q_col_s1 = _half_columns(ctx_ptr, w_ptr, b, stride_ctx_b, stride_w_r, stride_qs_b,
                                                             stride_qs_n, stride_qs_h, cap, 1, MN, COL, N, H, H_PAD,
                                                             CTX_2D)
    qr = gl.arange(0, NH, layout=gl.SliceLayout(1, QL))         # the query rows in QL: bytes in the K order
    qk = _kperm(gl.arange(0, C, layout=gl.SliceLayout(0, QL)), C)
    q_ok = (qr // H_PAD < N) & (qr % H_PAD < H)
    q_row_v = b * stride_qv_b + (qr // H_PAD) * stride_qv_n + (qr % H_PAD) * stride_qv_h
    q_row_s = b * stride_qs_b + (qr // H_PAD) * stride_qs_n + (qr % H_PAD) * stride_qs_h
    q_codes = _query_codes(q_v_ptr, q_row_v, q_ok, qk)
    qs = gl.load(q_s_ptr + q_row_s[:, None] + (qk // TILE_BYTES)[None, :], mask=q_ok[:, None], other=E8M0_ONE,
                 eviction_policy=KEEP_IN_L2).to(gl.int32)              # each byte's block scale
    vis_max = gl.maximum(gl.max(vis0, axis=0), gl.max(vis1, axis=0))
    first = chunk * TILES
    num_tiles = gl.minimum(gl.cdiv(vis_max, KEYS) - first, TILES)
    if num_tiles > 0:
        num_pages = vis_max // P + (vis_max % P != 0).to(gl.int32)
        bt_row = bt_ptr + b * stride_bt_b
        sq_max = gl.max(qs, axis=1)
        q_nan = sq_max == E8M0_NAN
        q_wide = gl.max((q_ok & ~q_nan & (sq_max - gl.min(qs, axis=1) > FOLD_SPAN)).to(gl.int32), axis=0) > 0
        c = gl.max(gl.where(q_ok & ~q_nan, sq_max, 0), axis=0)
        c_factor = exp2_int(c + 127 - FOLD_KEY_BIAS)
        if SPLITS == 1:     # the query rows' largest scales, moved to the columns
            sq_max_col = gl.convert_layout(sq_max, COL)
            w_fold0 = gl.where(sq_max_col == E8M0_NAN, float("nan"), w0 * exp2_int(sq_max_col - c))
            w_fold1 = w_fold0
        else:               # MN of the NH rows per half: loaded again per column
            w_fold0 = _fold_weights(q_s_ptr, q_col_s0, col_ok0, w0, c, G)
            w_fold1 = _fold_weights(q_s_ptr, q_col_s1, col_ok1, w1, c, G)
        cols = (w_fold0, w_fold1, col_n0, col_n1, vis0, vis1)
        qop1, qop2 = _query_operand(q_codes, gl.maximum(qs - sq_max[:, None], -FOLD_SPAN), QS)

        rows = gl.arange(0, KEYS, layout=gl.SliceLayout(1, KL))
        byte = gl.arange(0, C, layout=gl.SliceLayout(0, KL))
        blk = _kperm_block(gl.arange(0, C, layout=gl.SliceLayout(0, A)), C)
        tok_o = gl.arange(0, KEYS, layout=gl.SliceLayout(1, mma))
        met = rows * 0                                  # HAS_FLAG: an out-of-range page id met by the key's lane
        # bit i: the key of tile first + i is wide
        wide_keys = gl.zeros([KEYS], gl.int32, layout=gl.SliceLayout(1, A))
        # a group's loads all go out before its first tile is scored (tiles past num_tiles, in the last group of
        # a program that is not full, lie past vis_max: they read nothing)
        for i in range(0, gl.where(q_wide, 0, num_tiles), GROUP):
            codes0, sw0, met = _key_tile(cache_ptr, bt_row, first + i, rows, byte, num_pages, max_pages,
                                         num_cache_pages, page_stride, vis_max, met, A, P, D, TILED, HAS_FLAG)
            codes1, sw1, met = _key_tile(cache_ptr, bt_row, first + i + 1, rows, byte, num_pages, max_pages,
                                         num_cache_pages, page_stride, vis_max, met, A, P, D, TILED, HAS_FLAG)
            if GROUP == 4:
                codes2, sw2, met = _key_tile(cache_ptr, bt_row, first + i + 2, rows, byte, num_pages, max_pages,
                                             num_cache_pages, page_stride, vis_max, met, A, P, D, TILED, HAS_FLAG)
                codes3, sw3, met = _key_tile(cache_ptr, bt_row, first + i + 3, rows, byte, num_pages, max_pages,
                                             num_cache_pages, page_stride, vis_max, met, A, P, D, TILED, HAS_FLAG)
            wide_keys = _score_tile(codes0, sw0, first, i, wide_keys, blk, c_factor, qop1, qop2, cols, out_ptr,
                                    tok_o, b, stride_out_r, mma, G, N, N_PAD, H_PAD, SPLITS)
            wide_keys = _score_tile(codes1, sw1, first, i + 1, wide_keys, blk, c_factor, qop1, qop2, cols, out_ptr,
                                    tok_o, b, stride_out_r, mma, G, N, N_PAD, H_PAD, SPLITS)
            if GROUP == 4:
                wide_keys = _score_tile(codes2, sw2, first, i + 2, wide_keys, blk, c_factor, qop1, qop2, cols,
                                        out_ptr, tok_o, b, stride_out_r, mma, G, N, N_PAD, H_PAD, SPLITS)
                wide_keys = _score_tile(codes3, sw3, first, i + 3, wide_keys, blk, c_factor, qop1, qop2, cols,
                                        out_ptr, tok_o, b, stride_out_r, mma, G, N, N_PAD, H_PAD, SPLITS)
        wide_tiles = gl.reduce(wide_keys, 0, bit_or)

        # the exact pass: every key of a wide query, else the wide keys of the tiles that hold one
        if q_wide | (wide_tiles != 0):
            _CTA_BARRIER()          # the fold loop's stores of this program land before the exact pass's
            qe1, qe2 = _query_operand(_query_codes(q_v_ptr, q_row_v, q_ok, qk),
                                      gl.full([NH, C], EXACT_REL, gl.int32, layout=QL), QS)
            for i in range(0, num_tiles):
                if q_wide | (((wide_tiles >> i) & 1) != 0):
                    codes, sw, met = _key_tile(cache_ptr, bt_row, first + i, rows, byte, num_pages, max_pages,
                                               num_cache_pages, page_stride, vis_max, met, A, P, D, TILED, HAS_FLAG)
                    sk_max, sk_min = scale_max_min(sw, G)
                    redo = (sk_max != E8M0_NAN) & (sk_max - sk_min > FOLD_SPAN)
                    redo = gl.convert_layout(redo | q_wide, gl.SliceLayout(1, mma))
                    # keys not redone keep the fold loop's logits (a bad page's: NaN)
                    tok = gl.where(redo, (first + i) * KEYS + tok_o, INT32_MAX)
                    t0 = _exact_half(codes, sw, blk, qe1, qe2, q_s_ptr, q_col_s0, col_ok0, w0, 0, mma, G, SPLITS)
                    _store_halves(out_ptr, t0, codes, codes, sw, blk, qe1, qe2, q_s_ptr, q_col_s1, col_ok1, w1, 1.0,
                                  tok, b, col_n0, col_n1, vis0, vis1, stride_out_r, mma, G, N, N_PAD, H_PAD, SPLITS,
                                  True)
        if HAS_FLAG:
            report_pages(flag_ptr, b, chunk, vis_max, max_pages, num_cache_pages, met, P)


# ============================================================================================ launcher
@dataclasses.dataclass(frozen=True)
class WgmmaSettings(LaunchSettings):
    """Constexprs and launch options of paged_keys_m_wgmma_kernel."""

    n_pad: int
    h_pad: int
    tiles: int          # 64-key tiles per program, even
    pdl: bool
    maxnreg: int | None     # None: ptxas chooses


def covers(head_dim: int, next_n: int, num_heads: int, tiled: bool, device) -> bool:
    """Whether this kernel runs the call: an sm_90 CUDA device, D in HEAD_DIMS (either layout: the tiled one
    takes D 128 only), at most MAX_QUERY_COLUMNS padded query columns."""
    n_pad, h_pad = _padded(next_n, num_heads)
    return (head_dim in HEAD_DIMS and n_pad * h_pad <= MAX_QUERY_COLUMNS
            and nvidia_capability(device) == CAPABILITY)


@functools.lru_cache(maxsize=None)
def _padded(next_n: int, num_heads: int) -> tuple[int, int]:
    """(N_PAD, H_PAD): paged_keys_m's query-column padding (cached: every launch asks for it)."""
    s = km.keys_m_settings(Target.NVIDIA, "mxfp4", num_heads, next_n, 64, tokens_per_program=KEYS.value)
    return s.n_pad, s.h_pad


def maxnreg(query_columns: int) -> int:
    """The register cap of a launch with N_PAD * H_PAD = query_columns."""
    return MAXNREG if query_columns <= MMA_COLUMNS.value else WIDE_MAXNREG


def programs_per_sm(maxnreg: int) -> int:
    """Resident programs per sm_90 SM at a register cap (registers bound them; shared memory is a few KB)."""
    return REGISTERS_PER_SM // (maxnreg * 32 * WGMMA_WARPS)


@functools.lru_cache(maxsize=None)
def grid_choice(batch: int, tiles_per_row: int, sms: int, cap: int = MAXNREG) -> int:
    """Tiles per program of a launch, from a model of its time in tile rounds of one resident slot (slots = SMs x
    programs_per_sm): a grid of one wave takes one program's time, tiles + PROGRAM_OVERHEAD_TILES; a longer one
    spreads all tiles and overheads over the slots, (tiles of all rows + programs x overhead) / slots. Grids of one
    to two waves are left out (their second wave runs on a few SMs), unless every choice is one. The least time
    wins, a tie to the fewer programs. Fitted to sweeps of 7 shapes on the H200 and checked on 8
    (docs/perf/h200-decode-ablation.md, the MXFP4 scorer's grid)."""
    slots = programs_per_sm(cap) * sms

    def programs(t):
        return batch * triton.cdiv(tiles_per_row, t)

    def time(t):
        return max(t + PROGRAM_OVERHEAD_TILES,
                   (batch * tiles_per_row + programs(t) * PROGRAM_OVERHEAD_TILES) / slots)

    allowed = [t for t in TILE_RANGE if not slots < programs(t) < 2 * slots] or list(TILE_RANGE)
    return min(allowed, key=lambda t: (time(t), programs(t)))


def gluon_settings(call: DecodeCall) -> WgmmaSettings:
    """This kernel's settings for `call` (which covers() takes); a call of shapes only (no tensors) gets those of
    the `mxidx bench` shape on 132 SMs."""
    n_pad, h_pad = _padded(call.next_n, call.num_heads)
    out = getattr(call, "out", None)
    batch, cap, sms = (64, 8192, 132) if out is None else (call.q_v.shape[0], call.cap, sm_count(out.device))
    regs = maxnreg(n_pad * h_pad)
    return WgmmaSettings(n_pad, h_pad, grid_choice(batch, triton.cdiv(cap, KEYS.value), sms, regs), True, regs)


def takes_grid(batch: int, cap: int, query_columns: int, sms: int) -> bool:
    """Whether the default (takes) runs a launch this kernel covers here rather than in the `tl` fold: always up
    to MMA_COLUMNS query columns; at more where the grid holds at least WIDE_MIN_TILES_PER_SLOT 64-key tiles per
    resident program. A launch that names this variant runs it either way."""
    regs = maxnreg(query_columns)
    return regs == MAXNREG or (batch * triton.cdiv(cap, KEYS.value)
                               >= WIDE_MIN_TILES_PER_SLOT * programs_per_sm(regs) * sms)


def takes(call: DecodeCall) -> bool:
    """Whether the default runs `call` in this kernel rather than in mxfp4_keys_m's `tl` fold (hw.variants.DEFAULTS'
    row for NVIDIA MXFP4 decode): it covers the call and takes_grid. A call of shapes only (no `out`): True."""
    out = getattr(call, "out", None)
    if out is None:
        return True
    n_pad, h_pad = _padded(call.next_n, call.num_heads)
    return (covers(call.head_dim, call.next_n, call.num_heads, call.tiled, out.device)
            and takes_grid(call.q_v.shape[0], call.cap, n_pad * h_pad, sm_count(out.device)))


def check_covers(call: DecodeCall) -> None:
    """NotCovered (a ValueError) when this kernel does not cover `call` (covers()): what it covers, what the call
    has, and that the default (variant=None) takes such calls to mxfp4_keys_m. A call of shapes only (no `out`)
    passes."""
    out = getattr(call, "out", None)
    if out is None or covers(call.head_dim, call.next_n, call.num_heads, call.tiled, out.device):
        return
    n_pad, h_pad = _padded(call.next_n, call.num_heads)
    capability = nvidia_capability(out.device)
    device = f"{out.device} (" + ("not an NVIDIA GPU" if capability is None else "sm_{}{}".format(*capability)) + ")"
    raise NotCovered(
        f"variant 'mxfp4_keys_m_wgmma' covers sm_{CAPABILITY[0]}{CAPABILITY[1]} devices, head dim in {HEAD_DIMS} "
        f"and at most {MAX_QUERY_COLUMNS} padded query columns (N_PAD * H_PAD); this call has {device}, head dim "
        f"{call.head_dim} and {n_pad} x {h_pad} = {n_pad * h_pad} query columns (next_n {call.next_n}, "
        f"{call.num_heads} heads). variant=None (the defaults table, `mxidx variants`) runs mxfp4_keys_m for "
        f"such calls")


def wgmma_settings(call: DecodeCall) -> WgmmaSettings:
    """The variant's settings for `call`: gluon_settings on every call this kernel covers, whatever takes_grid
    says (that is the default's choice, hw.variants.DEFAULTS); NotCovered (check_covers) on any other."""
    check_covers(call)
    return gluon_settings(call)


def launch(c: DecodeCall, s: WgmmaSettings) -> None:
    """launch_paged_keys_m's contract for MXFP4 (its docstring), on a call this kernel covers (wgmma_settings)."""
    if s.tiles % 2 or not 0 < s.tiles <= MAX_TILES.value:
        raise ValueError(f"tiles must be even, 2..{MAX_TILES.value}, got {s.tiles}")
    batch = c.q_v.shape[0]
    if batch == 0 or c.cap <= 0:
        return
    chunks = triton.cdiv(triton.cdiv(c.cap, KEYS.value), s.tiles)
    if chunks > 65535:
        raise ValueError(f"cap = {c.cap} needs {chunks} programs per sequence (at most 65535); raise tiles")
    paged_keys_m_wgmma_kernel[(batch, chunks)](
        c.q_v, c.q_s, c.kv_cache, c.weights, c.context_lens, c.block_table, c.out,
        c.out if c.error_flag is None else c.error_flag,
        c.cap, c.page_stride, c.block_table.shape[1], c.num_cache_pages,
        c.q_v.stride(0), c.q_v.stride(1), c.q_v.stride(2), c.q_s.stride(0), c.q_s.stride(1), c.q_s.stride(2),
        c.weights.stride(0), c.context_lens.stride(0), c.block_table.stride(0), c.out.stride(0),
        N=c.next_n, N_PAD=s.n_pad, H=c.num_heads, H_PAD=s.h_pad, D=c.head_dim, P=c.page_size, TILES=s.tiles,
        CTX_2D=c.context_lens.dim() == 2, HAS_FLAG=c.error_flag is not None, KL=key_layout(c.head_dim),
        TILED=c.tiled,
        num_warps=WGMMA_WARPS, **register_cap(s.maxnreg),
        **pdl_launch(s.pdl, c.out.device),
    )


# ============================================================================================ cross-compile specs
def isa_spec(head_dim: int, page_size: int, next_n: int = 1, heads: int = 32, *, error_flag: bool = False,
             ctx_2d: bool = False, tiles: int = 16, tiled: bool = False) -> CompileSpec:
    """The kernel as the variant launches it (sm90 only), with an error flag / 2-D context lengths, at 16 tiles per
    program (groups of 4) or 2 (a pair), on planar or tiled pages."""
    n_pad, h_pad = _padded(next_n, heads)
    base = km.isa_spec("mxfp4", head_dim, page_size, next_n, heads, Target.NVIDIA)
    return CompileSpec(
        label=f"paged_keys_m_wgmma/D{head_dim}/P{page_size}/N{next_n}/H{heads}/T{tiles}" + ("/tiled" if tiled else "")
              + ("/flag" if error_flag else "") + ("/ctx2d" if ctx_2d else ""),
        fn=paged_keys_m_wgmma_kernel, types=base.types,
        constexprs={"N": next_n, "N_PAD": n_pad, "H": heads, "H_PAD": h_pad, "D": head_dim, "P": page_size,
                    "TILES": tiles, "CTX_2D": ctx_2d, "HAS_FLAG": error_flag, "PDL": True, "KL": key_layout(head_dim),
                    "TILED": tiled},
        num_warps=WGMMA_WARPS, maxnreg=maxnreg(n_pad * h_pad), aligned=base.aligned, targets=("sm90",),
        scratch_ok="under MAXNREG (4 programs per SM) triton 3.6 / 3.9 keep up to four words of the fold loop on "
                   "the stack (one reload per group of tiles), and at 64 query columns the exact pass and the query "
                   "state spill outside the loop; at 128 (WIDE_MAXNREG, 3 programs per SM) the fold loop keeps none "
                   "(3.9) or 16 words (3.6) there, the query fold and the exact pass more")


#: (D, P, next_n, H, options): the serving shape in groups of 4, in pairs, on tiled pages (and with the error flag
#: and 2-D context lengths), H 64, a small page with next_n 2, D 64, a large page with 64 query columns, and 128
#: query columns (two halves) as next_n 2 x H 64 and as H 128
ISA_SHAPES = ((128, 64, 1, 32, {}), (128, 64, 1, 32, {"tiles": 2}), (128, 64, 1, 32, {"tiled": True}),
              (128, 64, 1, 32, {"error_flag": True, "ctx_2d": True}),
              (128, 64, 1, 64, {}), (128, 16, 2, 16, {}), (64, 64, 1, 32, {}), (128, 256, 2, 32, {}),
              (128, 64, 2, 64, {}), (128, 64, 1, 128, {}))

VARIANT = Variant(
    name="mxfp4_keys_m_wgmma", op=Op.DECODE, kv_dtype="mxfp4", targets=frozenset({Target.NVIDIA}),
    settings=lambda target, call: wgmma_settings(call), launch=launch,
    precision=lambda head_dim, target: km.declared_precision("mxfp4", head_dim, target, "fold"),
    isa_specs=lambda: tuple(isa_spec(*shape, **options) for *shape, options in ISA_SHAPES),
    summary="Hopper: mxfp4_keys_m's fold in Gluon, codes loaded into the wgmma A registers (sm_90, D 64 / 128, "
            "up to 128 query columns)")
