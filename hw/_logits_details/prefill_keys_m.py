"""Ragged prefill scorer with the keys on the MMA's M axis (DESIGN §4, §5).

    logits[i, j] = sum_h w[i, h] * relu(q[i, h, :] . k[j, :])         ks[i] <= j < ke[i]

A program owns BLOCK_Q query tokens; their BLOCK_Q * H_PAD query rows (tokens x padded heads) are the N axis of
`tl.dot`, a tile of BLOCK_K keys its M axis:

    s = tl.dot(K [BLOCK_K, D], Q^T [D, BLOCK_Q * H_PAD])              fp32 [BLOCK_K, BLOCK_Q * H_PAD]
    logit[t, i] = key_factor[t] * sum_h w'[i, h] * relu(s[t, i * H_PAD + h])

relu keeps NaN; the head sum is a register reduction per query token; the key's factor (FP8: its fp32 scale;
MXFP4: a power of two) multiplies once, after the head sum. The [keys, tokens] tile is stored transposed into
out[token, key].

Grid (cdiv(S, BLOCK_Q),), program p taking the p-th block from the end (longest rows first in causal batches);
MXFP4's fold launches it twice, after fold_keys_kernel (below). Ranges are clamped (ks < 0 acts as 0, ke > SK as SK,
ks >= ke is an empty row). Program p loads its query rows, weights and (MXFP4) their conversion once, then walks
the keys [lo, hi) of the union of its non-empty rows' ranges in BLOCK_K steps from lo rounded down to a multiple of
BLOCK_K, with a software-pipelined `tl.range`: the tiles inside [0, SK) load every key unmasked (keys no row sees
are scored, their scores never stored), only the tile reaching past SK masks its loads. With clean_logits every other
entry of its rows is -inf: the tiles of the loop store -inf where a row does not see a key; the columns before and
after them are stored by two store-only loops, after the key loop of the program scoring the mirror block (program
p's block p; the same grid) or, with the setting clean_apart (MXFP4 on NVIDIA, where the scorer without those loops
has no stack frame), by clean_outside_kernel after the scorer.

MXFP4 q.k paths (constexpr MX_MODE; the arithmetic is mxfp4_fold's):
  MX_FOLD_PTX / MX_FOLD_TL (NVIDIA / the interpreter): paged_keys_m's "fold". Every e2m1 code becomes one exact
      e4m3 byte with its block's E8M0 scale folded in relative to the key's (query row's) largest block scale,
      e4m3(e2m1 * 2^(rel + 6)) for -FOLD_SPAN <= rel <= 0; D >= 64 converts the code bytes in mxfp4_fold's split
      K order and puts its two K = D/2 operands side by side, D = 32 keeps the natural order: one K = D FP8 MMA.
      The keys are converted once, by fold_keys_kernel into a scratch copy (D + 4 bytes per key) that every
      program's key loop reads like FP8 keys; each program converts its own query rows once. Then
          q_h . k = 2^(sqmax_h - 133) * 2^(skmax - 133) * s_fold
      with 2^(sqmax_h - c) folded into the weights (c = the program's largest finite sqmax, so w' <= w) and
      2^(skmax + c - 266) applied to the key after the head sum. Keys whose block scales span more than FOLD_SPAN
      binades (their fold flushes the low blocks) are stored like the others, and the program records in an
      int32 flag that it met one (or that one of its query rows spans more, in which case its fold loop does not
      run). A second launch of the kernel (EXACT_PASS; the same grid, more warps) returns at once for a program
      with no flag and otherwise rescores those keys, overwriting them (every key of [first, end) for a wide
      query row), through mxfp4_fold's exact pass (D/32 exact block sums, E8M0 factors in fp32), so that
      the fold loop carries no fallback (the exact pass, one fp32 tile more per key tile, runs on twice the
      warps). A wide key outside [lo, hi) does not raise the flag. The fold is exact while |w_h| * 2^(sqmax_h - c) is
      0 or at least 2^-126 and 2^(skmax + c - 266) lies in [2^-149, 2^127] (mxfp4_fold's scaling range).
  MX_DOT_SCALED (AMD): tl.dot_scaled(K codes, K scales, "e2m1", Q^T codes, Q scales, "e2m1") on each key tile,
      gfx950's native scaled MFMA for D >= 64 (Triton emits a bf16 MFMA at D = 32), in one launch: no folded copy
      of the keys, no exact pass (the products are summed in fp32 whatever their blocks' scales).
NaN: an E8M0 byte 255 makes a key (query row) NaN; an FP8 key with a NaN scale is NaN; its logits are NaN.

Declared precision (DESIGN §4's n and u): declared_precision().
"""
from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from .._constant import Constant
from .._error_flag import report_ranges
from .._quant_details.codecs import E8M0_NAN
from .._quant_details.page_offsets import MX_BLOCK
from ..isa_spec import CompileSpec
from ..targets import LaunchSettings, Op, Target, Variant
from .calls import PrefillCall
from .common import (
    ALL_TARGETS,
    FP32_UNIT_ROUNDOFF,
    MMA_MIN_ROWS,
    NVIDIA_FP8_MMA_UNIT_ROUNDOFF,
    UNPROMOTED_FP8_MMA_UNIT_ROUNDOFF,
)
from .mxfp4_fold import (
    E8M0_ONE,
    EXACT_REL,
    FOLD_KEY_BIAS,
    FOLD_SPAN,
    MIN_SPLIT_K,
    MX_DOT_SCALED,
    MX_FOLD_PTX,
    MX_FOLD_TL,
    bytes_to_words,
    d8_broadcast,
    exp2_int,
    fold_codes,
    fold_split,
    mx_exact_scores,
)
from .paged_keys_m import (
    FMT_FP8,
    FMT_MXFP4,
    PATH_TARGETS,
    check_path,
    head_sum,
    promoted_dot,
)

WIDE_KEY = Constant(1)           # a program's flag bits (MXFP4): it met a key outside the fold's range
WIDE_QUERY = Constant(2)         # one of its query rows is outside the fold's range
KEY_WIDE_SHIFT = Constant(8)     # fold_keys_kernel's kmeta: the wide bit above the 8 bits of sk_max
FOLD_KEYS_BLOCK = 64                 # keys per fold_keys_kernel program
CLEAN_COLUMNS = 512                  # columns per store of clean_outside_kernel: [BLOCK_Q, 512] fp32 tiles
#: NVIDIA only: FP8 products the MMA accumulates before an fp32 promotion (tl.dot's max_num_imprecise_acc);
#: 0 = no promotion (as production FP8 prefill scorers run); declared_precision says what each choice declares
FP8_PROMOTE_K = 0
#: per target: (MMA columns BLOCK_Q * H_PAD aimed at, BLOCK_K keys per step, num_warps, num_stages). NVIDIA (at
#: D = 256; TILES_WIDE below it): 64 keys x 4 tokens x 32 heads, 4 warps, 3 stages, one m64n128k32 wgmma chain per
#: warpgroup; AMD: the same tiles; the interpreter pays per Triton operation, not per element: large tiles, no
#: pipelining
TILES = {Target.NVIDIA: (128, 64, 4, 3), Target.AMD: (128, 64, 4, 2), Target.INTERPRETER: (512, 256, 4, 1)}
#: per (target, format) up to D = 128, where they differ: 256 columns (one m64n256k32 wgmma chain), faster on the
#: H200 than 128 for both formats, FP8 at 3 stages and MXFP4 (keys folded ahead) at 4
#: (docs/perf/h200-prefill-ablation.md); at D = 256 that tile spills
TILES_WIDE = {(Target.NVIDIA, "fp8"): (256, 64, 4, 3), (Target.NVIDIA, "mxfp4"): (256, 64, 4, 4)}
TILES_WIDE_MAX_D = 128


def declared_precision(head_dim: int, target: Target) -> tuple[int, float]:
    """(n, u) of DESIGN §4's bound |kernel - ref| <= (n + H + 2) * u * sum_h |w_h| sum_d |q_hd k_d|, for both
    formats.

    n = D: the MMA sums D products (MXFP4: the folded products are exact but span up to 2 * FOLD_SPAN binades, so
    their sum is not; the exact fallback's D/32 fp32 adds of exact block sums lie inside the bound). u on NVIDIA:
    Hopper's FP8 MMA keeps about 14 bits inside each K = 32 instruction; in the model where each instruction's
    terms (its 32 products and, without promotion, the incoming sum) are truncated 13 bits below the largest
    one's leading bit, one q.k is off by less than 32 * 2^-13 of its sum of |products| with promotion every 32
    products (u = 2^-13), and by less than (33/32) * D * 2^-13 of it without (FP8_PROMOTE_K = 0, the default:
    u = 2^-12, so that (D + H + 2) u covers it at every D and H). u = 2^-24 elsewhere (fp32 accumulation; MXFP4's
    dot_scaled: the interpreter sums all D products in fp32, gfx950's scaled MFMA does not document its internal
    accumulation, so n = D as well)."""
    if target is not Target.NVIDIA:
        return head_dim, FP32_UNIT_ROUNDOFF
    return head_dim, NVIDIA_FP8_MMA_UNIT_ROUNDOFF if FP8_PROMOTE_K else UNPROMOTED_FP8_MMA_UNIT_ROUNDOFF


# ============================================================================================ the kernel
@triton.jit
def _clean_columns(out_rows, row_in, start, end, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """Store -inf into columns [start, end) of the program's rows (end <= SK)."""
    n = tl.arange(0, BLOCK_K)
    for j0 in range(start, end, BLOCK_K):
        cols = j0 + n
        tl.store(out_rows[:, None] + cols[None, :], tl.full((BLOCK_Q, BLOCK_K), float("-inf"), tl.float32),
                 mask=row_in[:, None] & (cols[None, :] < end))


@triton.jit
def key_span(ks_ptr, ke_ptr, tokens, row_in, S, SK, BLOCK_K: tl.constexpr):
    """A query block's rows `tokens` (row_in: < S): their ranges clamped to 0 <= ks, ke <= SK, the union of the
    non-empty ones [lo, hi), and the key tiles covering it [first, end), BLOCK_K-aligned (end may pass SK). The
    scorer stores every column of [first, end) of the block's rows; with clean_logits the others are -inf
    (_clean_columns)."""
    ks = tl.maximum(tl.load(ks_ptr + tokens, mask=row_in, other=0), 0)
    ke = tl.minimum(tl.load(ke_ptr + tokens, mask=row_in, other=0), SK)
    busy = row_in & (ks < ke)
    hi = tl.max(tl.where(busy, ke, 0))
    lo = tl.minimum(tl.min(tl.where(busy, ks, SK)), hi)
    return ks, ke, lo, hi, lo // BLOCK_K * BLOCK_K, tl.cdiv(hi, BLOCK_K) * BLOCK_K


@triton.jit
def _clean_outside(ks_ptr, ke_ptr, out_ptr, block, S, SK, stride_out_s, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                   COLUMNS: tl.constexpr):
    """-inf into the columns outside [first, end) (key_span) of query block `block`'s rows, COLUMNS at a time."""
    tokens = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    row_in = tokens < S
    _, _, _, _, first, end = key_span(ks_ptr, ke_ptr, tokens, row_in, S, SK, BLOCK_K)
    out_rows = out_ptr + tokens * stride_out_s
    _clean_columns(out_rows, row_in, 0, first, BLOCK_Q, COLUMNS)
    _clean_columns(out_rows, row_in, end, SK, BLOCK_Q, COLUMNS)


@triton.jit
def clean_outside_kernel(ks_ptr, ke_ptr, out_ptr, S, SK, stride_out_s, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                         COLUMNS: tl.constexpr):
    """-inf into the columns outside [first, end) (key_span) of every block of BLOCK_Q query rows: what
    prefill_keys_m_kernel leaves to it with clean_logits when it does not store them itself (CLEAN_OUTSIDE False;
    the same BLOCK_Q and BLOCK_K). ks/ke int32 [S]; out fp32 [S, SK], row stride stride_out_s. Grid (cdiv(S,
    BLOCK_Q),), block p in program p."""
    _clean_outside(ks_ptr, ke_ptr, out_ptr, tl.program_id(0).to(tl.int64), S, SK, stride_out_s, BLOCK_Q, BLOCK_K,
                   COLUMNS)


@triton.jit
def _store_tile(out_cols, cols, logits, visible, row_in, stored, SK, CLEAN: tl.constexpr, WHOLE: tl.constexpr):
    """Store the [BLOCK_K, BLOCK_Q] logits of one key tile into out[token, key] for the keys with `stored` True:
    every column < SK of the program's rows (-inf where invisible) when CLEAN, else the visible entries. WHOLE:
    every key of the tile is stored and lies below SK, so a CLEAN store masks by token only (constant along the
    contiguous key axis: vector stores)."""
    if CLEAN and WHOLE:
        tl.store(out_cols + cols[:, None], tl.where(visible, logits, float("-inf")), mask=row_in[None, :])
    elif CLEAN:
        tl.store(out_cols + cols[:, None], tl.where(visible, logits, float("-inf")),
                 mask=row_in[None, :] & (stored & (cols < SK))[:, None])
    else:
        tl.store(out_cols + cols[:, None], logits, mask=visible & stored[:, None])


@triton.jit
def fp8_tile_scores(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, cols, d, qt, w, SK, BLOCK_Q: tl.constexpr,
                    H_PAD: tl.constexpr, PROMOTE_K: tl.constexpr, MASKED: tl.constexpr):
    """The FP8 keys `cols` of one tile against every query token of the program -> (head sums fp32 [BLOCK_K,
    BLOCK_Q], the keys' scales fp32 [BLOCK_K]): logits = head sums * scales[:, None]. MASKED: the tile reaches
    past SK (its loads are masked; those keys score 0); else every key of it lies in [0, SK) and is loaded, seen by
    a row or not."""
    if MASKED:
        k_ok = cols < SK
        k = tl.load(k_v_ptr + cols[:, None] * stride_kv_t + d[None, :], mask=k_ok[:, None], other=0)
        k_scale = tl.load(k_s_ptr + cols * stride_ks_t, mask=k_ok, other=0.0)
    else:
        k = tl.load(k_v_ptr + cols[:, None] * stride_kv_t + d[None, :])
        k_scale = tl.load(k_s_ptr + cols * stride_ks_t)
    return head_sum(promoted_dot(k.to(tl.float8e4nv, bitcast=True), qt, None, PROMOTE_K), w, BLOCK_Q, H_PAD), k_scale


@triton.jit
def _fp8_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, cols, d, qt, w, ks, ke, out_cols, row_in, SK,
              BLOCK_Q: tl.constexpr, H_PAD: tl.constexpr, PROMOTE_K: tl.constexpr, CLEAN: tl.constexpr,
              MASKED: tl.constexpr):
    """Score and store the FP8 keys `cols` of one tile (fp8_tile_scores; only visible scores are stored)."""
    sums, k_scale = fp8_tile_scores(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, cols, d, qt, w, SK, BLOCK_Q, H_PAD,
                                    PROMOTE_K, MASKED)
    visible = (cols[:, None] >= ks[None, :]) & (cols[:, None] < ke[None, :])
    _store_tile(out_cols, cols, sums * k_scale[:, None], visible, row_in, cols < SK, SK, CLEAN, not MASKED)


@triton.jit
def _scaled_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, cols, jb, g_idx, qt, qs, w, ks, ke, out_cols, row_in,
                 SK, BLOCK_Q: tl.constexpr, H_PAD: tl.constexpr, CLEAN: tl.constexpr, MASKED: tl.constexpr):
    """Score and store the MXFP4 keys `cols` of one tile by tl.dot_scaled against the query rows' codes qt
    uint8 [D/2, NQ] and E8M0 scales qs [NQ, D/32] (MASKED as in _fp8_tile; masked keys load as code 0, scale 2^0,
    and are not stored)."""
    if MASKED:
        k_ok = cols < SK
        kv = tl.load(k_v_ptr + cols[:, None] * stride_kv_t + jb[None, :], mask=k_ok[:, None], other=0)
        ksc = tl.load(k_s_ptr + cols[:, None] * stride_ks_t + g_idx[None, :], mask=k_ok[:, None], other=E8M0_ONE)
    else:
        kv = tl.load(k_v_ptr + cols[:, None] * stride_kv_t + jb[None, :])                        # [BLOCK_K, D/2]
        ksc = tl.load(k_s_ptr + cols[:, None] * stride_ks_t + g_idx[None, :])                    # [BLOCK_K, D/32]
    logits = head_sum(tl.dot_scaled(kv, ksc, "e2m1", qt, qs, "e2m1"), w, BLOCK_Q, H_PAD)
    visible = (cols[:, None] >= ks[None, :]) & (cols[:, None] < ke[None, :])
    _store_tile(out_cols, cols, logits, visible, row_in, cols < SK, SK, CLEAN, not MASKED)


@triton.jit
def _fold_tile(k8_ptr, kmeta_ptr, k0, t, d, qt, w_fold, c, ks, ke, lo, hi, out_cols, row_in, SK,
               BLOCK_Q: tl.constexpr, H_PAD: tl.constexpr, PROMOTE_K: tl.constexpr, CLEAN: tl.constexpr,
               MASKED: tl.constexpr):
    """Score and store the folded MXFP4 keys k0 + t of one tile (fold_keys_kernel's operands, one K = D MMA, as
    FP8 keys; MASKED as in _fp8_tile) -> int32 [BLOCK_K]: 1 where a key in [lo, hi) is wide (the exact pass
    rescores it)."""
    D: tl.constexpr = d.shape[0]
    cols = k0 + t
    # the tile's base in 64 bits (SK * D may not fit in 32), the offsets in it in 32
    k_at = (k8_ptr + tl.cast(k0, tl.int64) * D) + (t[:, None] * D + d[None, :])
    if MASKED:
        k_ok = cols < SK
        meta = tl.load(kmeta_ptr + cols, mask=k_ok, other=E8M0_ONE)
        k8 = tl.load(k_at, mask=k_ok[:, None], other=0)
    else:
        meta = tl.load(kmeta_ptr + cols)
        k8 = tl.load(k_at)
    acc = promoted_dot(k8.to(tl.float8e4nv, bitcast=True), qt, None, PROMOTE_K)
    sk_max = meta & 0xFF
    k_factor = tl.where(sk_max == E8M0_NAN, float("nan"), exp2_int(sk_max + c - FOLD_KEY_BIAS))
    logits = head_sum(acc, w_fold, BLOCK_Q, H_PAD) * k_factor[:, None]
    visible = (cols[:, None] >= ks[None, :]) & (cols[:, None] < ke[None, :])
    _store_tile(out_cols, cols, logits, visible, row_in, cols < SK, SK, CLEAN, not MASKED)
    return (meta >> KEY_WIDE_SHIFT) & ((cols >= lo) & (cols < hi)).to(tl.int32)


@triton.jit
def _operand_cat(a, b):
    """[R, C] and [R, C] -> [R, 2C] = [a | b]: the two K = D/2 operands of the split order side by side, so that
    one K = D MMA takes both (the same K = 32 MMAs, in the same order, as two K = D/2 ones)."""
    R: tl.constexpr = a.shape[0]
    C: tl.constexpr = a.shape[1]
    return tl.reshape(tl.permute(tl.join(a, b), (0, 2, 1)), (R, 2 * C))


@triton.jit
def fold_keys_kernel(k_v_ptr, k_s_ptr, k8_ptr, kmeta_ptr, SK, stride_kv_t, stride_ks_t,
                     D: tl.constexpr, BLOCK_K: tl.constexpr, MX_MODE: tl.constexpr):
    """MXFP4 keys -> the fold loop's operands, each key converted once (not once per query block).

    k_v: codes [SK, D/2], k_s: E8M0 [SK, D/32] (strides in elements, innermost contiguous). Writes
      k8 uint8 [SK, D], key j's K = D operand: the e4m3 bytes e2m1 * 2^(rel + 6) (rel = its block's scale minus
          the key's largest, floored at -FOLD_SPAN); D >= 64: bytes [0, D/2) and [D/2, D) are the first and
          second K = D/2 operand of mxfp4_fold's split K order, D = 32: the natural order;
      kmeta int32 [SK]: bits 0-7 the key's largest block scale sk_max (E8M0_NAN: a NaN key), bit KEY_WIDE_SHIFT
          set when its scales span more than FOLD_SPAN binades (and it is not NaN): the fold flushed its low
          blocks and the exact pass rescores it.
    Grid (cdiv(SK, BLOCK_K),)."""
    pid = tl.program_id(0).to(tl.int64)
    cols = pid * BLOCK_K + tl.arange(0, BLOCK_K)
    ok = cols < SK
    G: tl.constexpr = D // MX_BLOCK
    jb = tl.arange(0, D // 2)
    kb = tl.load(k_v_ptr + cols[:, None] * stride_kv_t + jb[None, :], mask=ok[:, None], other=0)
    ksc = tl.load(k_s_ptr + cols[:, None] * stride_ks_t + tl.arange(0, G)[None, :], mask=ok[:, None],
                  other=E8M0_ONE).to(tl.int32)                                                    # [BLOCK_K, G]
    sk_max = tl.max(ksc, axis=1)
    wide = (sk_max != E8M0_NAN) & (sk_max - tl.min(ksc, axis=1) > FOLD_SPAN)
    tl.store(kmeta_ptr + cols, sk_max | (wide.to(tl.int32) << KEY_WIDE_SHIFT), mask=ok)
    k_rel = tl.maximum(ksc - sk_max[:, None], -FOLD_SPAN)
    if D >= 2 * MIN_SPLIT_K:
        k8 = _operand_cat(*fold_split(kb, d8_broadcast(k_rel, D // 2), MX_MODE))
    else:
        k8 = fold_codes(bytes_to_words(kb), k_rel, MX_MODE)
    d = tl.arange(0, D)
    tl.store(k8_ptr + cols[:, None] * D + d[None, :], k8, mask=ok[:, None])


@triton.jit
def prefill_keys_m_kernel(
    q_v_ptr, q_s_ptr, k_v_ptr, k_s_ptr, w_ptr, ks_ptr, ke_ptr, out_ptr, wide_ptr, flag_ptr, k8_ptr, kmeta_ptr,
    S, SK,
    stride_qv_s, stride_qv_h, stride_qs_s, stride_qs_h,
    stride_kv_t, stride_ks_t, stride_w_s, stride_out_s,
    H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr, KV_FORMAT: tl.constexpr, MX_MODE: tl.constexpr, PROMOTE_K: tl.constexpr,
    CLEAN: tl.constexpr, CLEAN_OUTSIDE: tl.constexpr, EXACT_PASS: tl.constexpr, HAS_FLAG: tl.constexpr,
):
    """q_v: FP8 bytes [S, H, D] or MXFP4 codes [S, H, D/2]; q_s: MXFP4 scales [S, H, D/32] (FP8: unused); k_v:
    [SK, D] e4m3 bytes or [SK, D/2] codes; k_s: fp32 [SK] or uint8 [SK, D/32]; w fp32 [S, H]; ks/ke int32 [S];
    out fp32 [S, SK]; wide: int32 [cdiv(S, BLOCK_Q)] (MXFP4: the fold pass writes WIDE_KEY | WIDE_QUERY per
    program, the exact pass (EXACT_PASS) reads them; FP8: unused); k8, kmeta: fold_keys_kernel's outputs for
    k_v and k_s (MXFP4's fold pass; else unused). Innermost
    dimensions contiguous; strides in elements; key offsets (column * stride) fit int32; flag: int32 [4] error
    flag (HAS_FLAG: a range outside 0 <= ks <= ke <= SK is reported by the first pass). CLEAN: -inf into the
    invisible columns of the key tiles; CLEAN_OUTSIDE (with CLEAN): also into the columns outside them, by the
    program whose program_id is the block's index (else clean_outside_kernel's). Grid (cdiv(S, BLOCK_Q),)."""
    tl.static_assert(CLEAN or not CLEAN_OUTSIDE)
    # the last query tokens first: in causal and ragged batches they see the most keys, so the short programs
    # fill the tail of the grid instead of the long ones. With CLEAN_OUTSIDE the program stores, after its key
    # loop, the -inf columns outside the key tiles of its mirror block (block program_id): in a causal batch the
    # long rows' programs take the short rows' many -inf columns, which then leave HBM beside other programs' MMAs
    # instead of in a burst that ends the grid
    pid = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)
    mirror = tl.program_id(0).to(tl.int64)
    tokens = pid * BLOCK_Q + tl.arange(0, BLOCK_Q)
    row_in = tokens < S
    if HAS_FLAG and not EXACT_PASS:
        report_ranges(flag_ptr, tokens, row_in, tl.load(ks_ptr + tokens, mask=row_in, other=0),
                      tl.load(ke_ptr + tokens, mask=row_in, other=0), SK)
    ks, ke, lo, hi, first, end = key_span(ks_ptr, ke_ptr, tokens, row_in, S, SK, BLOCK_K)
    whole_end = SK // BLOCK_K * BLOCK_K            # tiles below it lie inside [0, SK): unmasked loads
    out_cols = out_ptr + tokens[None, :] * stride_out_s            # [1, BLOCK_Q]

    NQ: tl.constexpr = BLOCK_Q * H_PAD
    m = tl.arange(0, NQ)
    m_tok = pid * BLOCK_Q + m // H_PAD
    m_h = m % H_PAD
    col_ok = (m_tok < S) & (m_h < H)
    q_row_v = m_tok * stride_qv_s + m_h * stride_qv_h
    w = tl.load(w_ptr + m_tok * stride_w_s + m_h, mask=col_ok, other=0.0)
    t = tl.arange(0, BLOCK_K)

    if KV_FORMAT == FMT_FP8:
        d = tl.arange(0, D)
        q = tl.load(q_v_ptr + q_row_v[:, None] + d[None, :], mask=col_ok[:, None], other=0)        # [NQ, D]
        qt = tl.trans(q.to(tl.float8e4nv, bitcast=True))                                             # [D, NQ]
        for k0 in tl.range(first, tl.minimum(hi, whole_end), BLOCK_K, num_stages=NUM_STAGES):
            _fp8_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, k0 + t, d, qt, w, ks, ke, out_cols, row_in, SK,
                      BLOCK_Q, H_PAD, PROMOTE_K, CLEAN, False)
        for k0 in tl.range(tl.maximum(first, whole_end), hi, BLOCK_K, num_stages=1):     # the tile past SK
            _fp8_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, k0 + t, d, qt, w, ks, ke, out_cols, row_in, SK,
                      BLOCK_Q, H_PAD, PROMOTE_K, CLEAN, True)
        if CLEAN_OUTSIDE:
            _clean_outside(ks_ptr, ke_ptr, out_ptr, mirror, S, SK, stride_out_s, BLOCK_Q, BLOCK_K, BLOCK_K)
    elif MX_MODE == MX_DOT_SCALED:
        jb = tl.arange(0, D // 2)
        g_idx = tl.arange(0, D // MX_BLOCK)
        q_row_s = m_tok * stride_qs_s + m_h * stride_qs_h
        qt = tl.trans(tl.load(q_v_ptr + q_row_v[:, None] + jb[None, :], mask=col_ok[:, None], other=0))  # [D/2, NQ]
        qs = tl.load(q_s_ptr + q_row_s[:, None] + g_idx[None, :], mask=col_ok[:, None], other=E8M0_ONE)  # [NQ, D/32]
        for k0 in tl.range(first, tl.minimum(hi, whole_end), BLOCK_K, num_stages=NUM_STAGES):
            _scaled_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, k0 + t, jb, g_idx, qt, qs, w, ks, ke, out_cols,
                         row_in, SK, BLOCK_Q, H_PAD, CLEAN, False)
        for k0 in tl.range(tl.maximum(first, whole_end), hi, BLOCK_K, num_stages=1):     # the tile past SK
            _scaled_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, k0 + t, jb, g_idx, qt, qs, w, ks, ke, out_cols,
                         row_in, SK, BLOCK_Q, H_PAD, CLEAN, True)
        if CLEAN_OUTSIDE:
            _clean_outside(ks_ptr, ke_ptr, out_ptr, mirror, S, SK, stride_out_s, BLOCK_Q, BLOCK_K, BLOCK_K)
    elif not EXACT_PASS:
        # the query rows, converted once
        G: tl.constexpr = D // MX_BLOCK
        jb = tl.arange(0, D // 2)
        g_idx = tl.arange(0, G)
        q_row_s = m_tok * stride_qs_s + m_h * stride_qs_h
        q_bytes = tl.load(q_v_ptr + q_row_v[:, None] + jb[None, :], mask=col_ok[:, None], other=0)  # [NQ, D/2]
        qs = tl.load(q_s_ptr + q_row_s[:, None] + g_idx[None, :], mask=col_ok[:, None],
                     other=E8M0_ONE).to(tl.int32)                                                  # [NQ, D/32]
        sq_max = tl.max(qs, axis=1)
        q_nan = sq_max == E8M0_NAN
        q_wide = tl.max((col_ok & ~q_nan & (sq_max - tl.min(qs, axis=1) > FOLD_SPAN)).to(tl.int32))     # 0 | 1
        c = tl.max(tl.where(col_ok & ~q_nan, sq_max, 0))
        w_fold = tl.where(q_nan, float("nan"), w * exp2_int(sq_max - c))
        q_rel = tl.maximum(qs - sq_max[:, None], -FOLD_SPAN)
        if D >= 2 * MIN_SPLIT_K:        # the two K = D/2 operands of the split order, side by side (as k8)
            q8 = _operand_cat(*fold_split(q_bytes, d8_broadcast(q_rel, D // 2), MX_MODE))
        else:
            q8 = fold_codes(bytes_to_words(q_bytes), q_rel, MX_MODE)
        qt = tl.trans(q8).to(tl.float8e4nv, bitcast=True)                                         # [D, NQ]

        # the fold loop over fold_keys_kernel's operands: every key is stored; the exact pass overwrites the wide
        # ones (after this launch)
        d = tl.arange(0, D)
        fold_end = tl.where(q_wide > 0, first, hi)              # a wide query row: the exact pass scores all
        wide_keys = tl.zeros((BLOCK_K,), tl.int32)      # 1 where a key of that tile position was wide
        for k0 in tl.range(first, tl.minimum(fold_end, whole_end), BLOCK_K, num_stages=NUM_STAGES):
            wide_keys |= _fold_tile(k8_ptr, kmeta_ptr, k0, t, d, qt, w_fold, c, ks, ke, lo, hi, out_cols, row_in,
                                    SK, BLOCK_Q, H_PAD, PROMOTE_K, CLEAN, False)
        for k0 in tl.range(tl.maximum(first, whole_end), fold_end, BLOCK_K, num_stages=1):   # the tile past SK
            wide_keys |= _fold_tile(k8_ptr, kmeta_ptr, k0, t, d, qt, w_fold, c, ks, ke, lo, hi, out_cols, row_in,
                                    SK, BLOCK_Q, H_PAD, PROMOTE_K, CLEAN, True)

        tl.store(wide_ptr + pid, tl.max(wide_keys) * WIDE_KEY + q_wide * WIDE_QUERY)
        if CLEAN_OUTSIDE:
            _clean_outside(ks_ptr, ke_ptr, out_ptr, mirror, S, SK, stride_out_s, BLOCK_Q, BLOCK_K, BLOCK_K)
    else:
        # the exact pass: every tile for a wide query row, else the tiles that hold a wide key
        flags = tl.load(wide_ptr + pid)
        if flags != 0:
            G: tl.constexpr = D // MX_BLOCK
            jb = tl.arange(0, D // 2)
            g_idx = tl.arange(0, G)
            q_row_s = m_tok * stride_qs_s + m_h * stride_qs_h
            q_bytes = tl.load(q_v_ptr + q_row_v[:, None] + jb[None, :], mask=col_ok[:, None], other=0)
            qs = tl.load(q_s_ptr + q_row_s[:, None] + g_idx[None, :], mask=col_ok[:, None],
                         other=E8M0_ONE).to(tl.int32)
            q_exact = tl.trans(fold_codes(bytes_to_words(q_bytes), tl.full(qs.shape, EXACT_REL, tl.int32), MX_MODE))
            q_wide = (flags & WIDE_QUERY) != 0
            for k0 in tl.range(first, hi, BLOCK_K, num_stages=1):
                cols = k0 + t
                k_ok = (cols >= lo) & (cols < hi)
                ksc = tl.load(k_s_ptr + cols[:, None] * stride_ks_t + g_idx[None, :], mask=k_ok[:, None],
                              other=E8M0_ONE).to(tl.int32)
                sk_max = tl.max(ksc, axis=1)
                exact = tl.where(q_wide, True, (sk_max != E8M0_NAN) & (sk_max - tl.min(ksc, axis=1) > FOLD_SPAN))
                if tl.max(exact.to(tl.int32)) > 0:
                    kb = tl.load(k_v_ptr + cols[:, None] * stride_kv_t + jb[None, :], mask=k_ok[:, None], other=0)
                    s = mx_exact_scores(bytes_to_words(kb), ksc, q_exact, qs, MX_MODE)
                    visible = (cols[:, None] >= ks[None, :]) & (cols[:, None] < ke[None, :])
                    _store_tile(out_cols, cols, head_sum(s, w, BLOCK_Q, H_PAD), visible, row_in, exact, SK, CLEAN,
                                False)


# ============================================================================================ launcher
@dataclasses.dataclass(frozen=True)
class KeysMPrefillSettings(LaunchSettings):
    """Constexprs and launch options of prefill_keys_m_kernel (a pure function of the target and the shapes)."""

    block_q: int        # query tokens per program: block_q * h_pad MMA columns
    h_pad: int          # heads padded to a power of two, block_q * h_pad >= MMA_MIN_ROWS
    block_k: int        # keys per step (the MMA's M)
    num_stages: int     # software-pipelining depth of the key loop
    num_warps: int
    exact_warps: int    # MXFP4: num_warps of the exact pass (its two fp32 tiles per key tile need the registers)
    mx_mode: int        # MX_FOLD_PTX | MX_FOLD_TL | MX_DOT_SCALED (unused for FP8)
    promote_k: int      # FP8_PROMOTE_K on NVIDIA, else 0
    clean_apart: bool   # clean_logits: the columns outside each program's key tiles by clean_outside_kernel


@functools.lru_cache(maxsize=256)   # pure, and asked on every launch (host time)
def keys_m_prefill_settings(target: Target, kv_dtype: str, num_heads: int, head_dim: int,
                            path: str | None = None) -> KeysMPrefillSettings:
    """The default settings on `target` for `kv_dtype` inputs, H = num_heads and D = head_dim: BLOCK_Q * H_PAD = the
    MMA columns of TILES_WIDE (TILES) where H fits (BLOCK_Q = 1 above), at least MMA_MIN_ROWS. MXFP4: on `path`
    ("fold" | "dot_scaled"; default DEFAULT_PATH[target]); ValueError for an unknown path or one that does not run on
    the target, or a path given for FP8."""
    path = check_path(kv_dtype, target, path)
    wide = TILES_WIDE.get((target, kv_dtype)) if head_dim <= TILES_WIDE_MAX_D else None
    columns, block_k, num_warps, num_stages = wide or TILES[target]
    h_pad = triton.next_power_of_2(num_heads)
    block_q = max(1, columns // h_pad)
    return KeysMPrefillSettings(
        block_q=block_q, h_pad=max(h_pad, MMA_MIN_ROWS // block_q), block_k=block_k, num_stages=num_stages,
        num_warps=num_warps, exact_warps=2 * num_warps,
        mx_mode=(MX_DOT_SCALED if path == "dot_scaled" else MX_FOLD_PTX if target is Target.NVIDIA
                 else MX_FOLD_TL).value,
        promote_k=FP8_PROMOTE_K if target is Target.NVIDIA else 0,
        clean_apart=target is Target.NVIDIA and path == "fold")


def _launcher(kv_dtype: str):
    def launch(call: PrefillCall, s: KeysMPrefillSettings) -> None:
        """Write out[i, j] for every visible (i, j) (every entry when call.clean; DESIGN §4). MXFP4's fold: three
        launches, fold_keys_kernel, the fold pass and the exact pass, with the folded keys and an int32 flag per
        program between them (allocated here); MXFP4's dot_scaled and FP8: one. With call.clean and s.clean_apart,
        clean_outside_kernel follows the scorer."""
        mx = kv_dtype == "mxfp4"
        fold = mx and s.mx_mode != MX_DOT_SCALED.value
        grid = (triton.cdiv(call.num_q, s.block_q),)
        apart = call.clean and s.clean_apart
        wide = torch.empty(grid, dtype=torch.int32, device=call.out.device) if fold else call.ks
        k8 = kmeta = call.ks
        if fold:
            k8 = torch.empty((call.num_k, call.head_dim), dtype=torch.uint8, device=call.out.device)
            kmeta = torch.empty(call.num_k, dtype=torch.int32, device=call.out.device)
            fold_keys_kernel[(triton.cdiv(call.num_k, FOLD_KEYS_BLOCK),)](
                call.k_v, call.k_s, k8, kmeta, call.num_k, call.k_v.stride(0), call.k_s.stride(0),
                D=call.head_dim, BLOCK_K=FOLD_KEYS_BLOCK, MX_MODE=s.mx_mode, num_warps=4)
        for exact_pass in (False, True) if fold else (False,):
            prefill_keys_m_kernel[grid](
                call.q_v, call.q_s, call.k_v, call.k_s, call.weights, call.ks, call.ke, call.out, wide,
                call.out if call.error_flag is None else call.error_flag, k8, kmeta,
                call.num_q, call.num_k,
                call.q_v.stride(0), call.q_v.stride(1), call.q_s.stride(0), call.q_s.stride(1),
                call.k_v.stride(0), call.k_s.stride(0), call.weights.stride(0), call.out.stride(0),
                H=call.num_heads, H_PAD=s.h_pad, D=call.head_dim, BLOCK_Q=s.block_q, BLOCK_K=s.block_k,
                NUM_STAGES=s.num_stages, KV_FORMAT=FMT_MXFP4 if mx else FMT_FP8, MX_MODE=s.mx_mode,
                PROMOTE_K=s.promote_k, CLEAN=call.clean, CLEAN_OUTSIDE=call.clean and not apart,
                EXACT_PASS=exact_pass, HAS_FLAG=call.error_flag is not None,
                num_warps=s.exact_warps if exact_pass else s.num_warps)
        if apart:
            clean_outside_kernel[grid](call.ks, call.ke, call.out, call.num_q, call.num_k, call.out.stride(0),
                                       BLOCK_Q=s.block_q, BLOCK_K=s.block_k, COLUMNS=CLEAN_COLUMNS, num_warps=4)
    return launch


# ============================================================================================ cross-compile specs
#: (D, H) of the specs: the serving shape (D 128, H 32), the small and large head dims, H 64 (BLOCK_Q 2)
ISA_SHAPES = ((128, 32), (64, 32), (32, 32), (256, 32), (128, 64))
#: the runtime integers Triton specialises as multiples of 16 at the serving shape (FP8 and MXFP4 alike)
_ALIGNED_INTS = ("stride_qv_s", "stride_qv_h", "stride_kv_t", "stride_w_s", "stride_out_s", "SK")


def isa_spec(kv_dtype: str, head_dim: int, heads: int, target: Target, exact_pass: bool = False,
             path: str | None = None) -> CompileSpec:
    """The kernel as the launcher runs it by default on `target` (NVIDIA: sm90, AMD: gfx950); MXFP4: on `path`
    (default DEFAULT_PATH[target]), the fold's fold pass or, with exact_pass, its exact pass."""
    mx = kv_dtype == "mxfp4"
    s = keys_m_prefill_settings(target, kv_dtype, heads, head_dim, path)
    pointers = {"q_v_ptr": "*u8", "q_s_ptr": "*u8", "k_v_ptr": "*u8", "k_s_ptr": "*u8" if mx else "*fp32",
                "w_ptr": "*fp32", "ks_ptr": "*i32", "ke_ptr": "*i32", "out_ptr": "*fp32", "wide_ptr": "*i32",
                "flag_ptr": "*i32", "k8_ptr": "*u8", "kmeta_ptr": "*i32"}
    scaled = s.mx_mode == MX_DOT_SCALED.value and mx
    name = "exact" if exact_pass else "dot_scaled" if scaled else "fold" if mx else "mma"
    return CompileSpec(
        label=f"prefill_keys_m/{kv_dtype}/{name}/D{head_dim}/H{heads}", fn=prefill_keys_m_kernel,
        types=pointers,
        constexprs={"H": heads, "H_PAD": s.h_pad, "D": head_dim, "BLOCK_Q": s.block_q, "BLOCK_K": s.block_k,
                    "NUM_STAGES": s.num_stages, "KV_FORMAT": (FMT_MXFP4 if mx else FMT_FP8).value,
                    "MX_MODE": s.mx_mode, "PROMOTE_K": s.promote_k, "CLEAN": True,
                    "CLEAN_OUTSIDE": not s.clean_apart, "EXACT_PASS": exact_pass, "HAS_FLAG": False},
        num_warps=s.exact_warps if exact_pass else s.num_warps, aligned=(*pointers, *_ALIGNED_INTS),
        targets=(target.isa_target,), scaled_mfma=scaled and head_dim >= 64,
        key_tile=None if exact_pass else (s.block_k, s.block_q * s.h_pad))


def fold_keys_isa_spec(head_dim: int, target: Target) -> CompileSpec:
    """fold_keys_kernel as the MXFP4 launcher runs it on `target`."""
    return CompileSpec(
        label=f"prefill_keys_m/mxfp4/fold_keys/D{head_dim}", fn=fold_keys_kernel,
        types={"k_v_ptr": "*u8", "k_s_ptr": "*u8", "k8_ptr": "*u8", "kmeta_ptr": "*i32"},
        constexprs={"D": head_dim, "BLOCK_K": FOLD_KEYS_BLOCK,
                    "MX_MODE": keys_m_prefill_settings(target, "mxfp4", 32, head_dim, "fold").mx_mode},
        aligned=("k_v_ptr", "k_s_ptr", "k8_ptr", "kmeta_ptr", "stride_kv_t", "SK"),
        targets=(target.isa_target,))


def clean_outside_isa_spec(target: Target) -> CompileSpec:
    """clean_outside_kernel as the MXFP4 launcher runs it on `target` (its tile's BLOCK_Q and BLOCK_K at H32, D128)."""
    s = keys_m_prefill_settings(target, "mxfp4", 32, 128, "fold")
    return CompileSpec(
        label="prefill_keys_m/clean_outside", fn=clean_outside_kernel,
        types={"ks_ptr": "*i32", "ke_ptr": "*i32", "out_ptr": "*fp32"},
        constexprs={"BLOCK_Q": s.block_q, "BLOCK_K": s.block_k, "COLUMNS": CLEAN_COLUMNS},
        aligned=("ks_ptr", "ke_ptr", "out_ptr", "stride_out_s", "SK"), targets=(target.isa_target,))


# ============================================================================================ registry records
def _variant(name: str, kv_dtype: str, path: str | None, targets: frozenset, summary: str) -> Variant:
    compiled = [t for t in (Target.NVIDIA, Target.AMD) if t in targets]
    fold = path == "fold"
    return Variant(
        name=name, op=Op.PREFILL, kv_dtype=kv_dtype, targets=targets,
        settings=lambda target, call: keys_m_prefill_settings(target, kv_dtype, call.num_heads, call.head_dim, path),
        launch=_launcher(kv_dtype), precision=declared_precision,
        isa_specs=lambda: tuple(isa_spec(kv_dtype, d, h, t, exact, path) for t in compiled for d, h in ISA_SHAPES
                                for exact in ((False, True) if fold else (False,)))
        + (tuple(fold_keys_isa_spec(d, t) for t in compiled for d in sorted({d for d, _ in ISA_SHAPES}))
           if fold else ())
        + (tuple(clean_outside_isa_spec(t) for t in compiled
                 if keys_m_prefill_settings(t, kv_dtype, 32, 128, path).clean_apart)),
        summary=summary)


FP8_VARIANT = _variant("fp8_keys_m", "fp8", None, ALL_TARGETS,
                       "keys on the MMA's M axis, query tokens x heads on N, Q hoisted, pipelined key loop")
MXFP4_FOLD_VARIANT = _variant("mxfp4_keys_m", "mxfp4", "fold", PATH_TARGETS["fold"],
                              "keys on M; e2m1 folded with its block scale into exact e4m3 (prmt), FP8 MMA")
MXFP4_DOT_SCALED_VARIANT = _variant("mxfp4_keys_m_dot_scaled", "mxfp4", "dot_scaled", PATH_TARGETS["dot_scaled"],
                                    "keys on M with tl.dot_scaled (gfx950's scaled MFMA), one launch")
