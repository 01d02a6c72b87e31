"""Paged decode scorer with the keys on the MMA's M axis (DESIGN §2-§5).

    logits[b*N + n, j] = sum_h w[b*N + n, h] * relu(q[b, n, h, :] . k[j, :])     j < visible(b, n)

One tile is KEYS = TILE_PAGES * P keys (pages of one sequence, at least 64 keys) on the M axis of `tl.dot`; the
N_PAD * H_PAD query rows of the sequence (next_n x padded heads) are its N axis:

    s = tl.dot(K [KEYS, D], Q^T [D, N_PAD * H_PAD])                 fp32 [KEYS, N_PAD * H_PAD]
    logit[t, n] = key_factor[t] * sum_h w'[n, h] * relu(s[t, n * H_PAD + h])

relu keeps NaN; the head sum is a register reduction over the query-column axis of the tile, per n; the key's
factor (FP8: its fp32 scale; MXFP4: a power of two, below) multiplies once, after the head sum.

Grid: (B, cdiv(cdiv(cap, P), TILES * TILE_PAGES)); it depends on shapes and max_context_len only (CUDA-graph
stable). Program (b, c) loads sequence b's query rows, weights and (MXFP4) their conversion once, then walks its up
to TILES tiles with a software-pipelined `tl.range`, stopping at the last page that holds a visible token of any of
the N rows: block-table entries and pages past the visible span are never read, nor tokens past it inside the last
page. Each page is rebased once in 64 bits (`page_id.to(int64) * page_stride`); page-local offsets are 32-bit and
come from hw/_quant_details/page_offsets.py, the writer's formulas.

MXFP4 q.k paths (launcher's `path`; constexpr MX_MODE):
  "fold": MX_FOLD_PTX / MX_FOLD_TL (NVIDIA / the interpreter; Hopper has no FP4 MMA) every e2m1 code becomes one
      exact e4m3 byte with its block's E8M0 scale folded in relative to the token's (query row's) largest block
      scale smax:
      e4m3(e2m1 * 2^(rel + 6)), rel = s_g - smax, exact as a normal e4m3 for -FOLD_SPAN <= rel <= 0 (12 binades;
      6 * 2^6 = 384 <= 448). Per 32-bit word of codes (8 elements), two byte-permute lookups into an 8-entry table
      built from the block's rel give the magnitudes of 4 elements each, two more the signs (`prmt`, inline PTX,
      9 instructions per 8 elements, MX_FOLD_PTX); MX_FOLD_TL is the same table lookup in portable Triton integer
      ops (the interpreter cannot run inline assembly). Then FP8 MMAs (the K order below), and
          q_h . k = 2^(sqmax_h - 133) * 2^(skmax - 133) * s_fold
      with 2^(sqmax_h - c) folded into the weights (c = the program's largest finite sqmax, so w' <= w) and
      2^(skmax + c - 266) applied to the key after the head sum. A key whose block scales span more than FOLD_SPAN
      binades (or a query row that does) takes the exact fallback: operands e4m3(e2m1 * 2^-5) (exact), per block g
      one K = D MMA of the keys against the query operand with every block but g zeroed (the exact block sum: 32
      products, at most 13 significant bits), times 2^10 and the two E8M0 factors in fp32, D/32 fp32 adds. It runs
      after the pipelined loop, for the tiles that hold such a key (every tile of the program for such a query row),
      and writes every visible key of those tiles.
      The fold loop: for D >= 64 the codes are converted as packed bytes (4 per 32-bit register, 12 instructions
      per word with the block's tables built in place, FOLD_BYTES_PTX) into two operands in the split K order (word
      a's elements 8a + 0..3 at columns 4a + 0..3 of the first, 8a + 4..7 of the second) and two K = D/2 MMAs sum
      them: the conversion stays in the layout of its codes, which the compiler can load straight into the MMA
      operand layout. The query is converted the same way, its block tables placed by a reshape of the broadcast
      blocks; a key's block scales are loaded packed per key (32-bit loads of 4 scales on the planar layout with
      D % 128 == 0, else a byte load per block) and each column takes its block's table byte by a select. D = 32
      (K = D/2 would be below one FP8 MMA's K) keeps one K = D MMA on the natural order: the converted words
      reordered to bytes through a join / reshape, the block tables broadcast over the block's words. Wide keys:
      the loop stores every visible key and collects per-key flags as bits (bit i: tile i), reduced once after the
      loop; the exact pass overwrites the flagged tiles after a CTA barrier. (The alternatives once selectable as
      KeysMSettings levers, and deleted after the H200 timing: docs/perf/h200-decode-ablation.md.)
  "dot_scaled": MX_DOT_SCALED (AMD, the interpreter) tl.dot_scaled(K codes, K scales, "e2m1", Q^T codes, Q scales,
      "e2m1"): gfx950's native scaled MFMA for D >= 64 (Triton emits a bf16 MFMA at D = 32).
NaN: an E8M0 byte 255 makes a key (query row) NaN; its logits (all logits of the row) are NaN, as in sim.scorer.

The fold's arithmetic, its inline PTX, the exact pass and the scaling range of the fold: mxfp4_fold.

Declared precision (DESIGN §4's n and u): declared_precision().
"""
from __future__ import annotations

import dataclasses

import triton
import triton.language as tl

from .._constant import Constant
from .._error_flag import INT32_MIN, KIND_CONTEXT_PAST_TABLE, KIND_PAGE_ID, report_if
from .._pdl import grid_dependency_sync, pdl_launch
from .._quant_details.codecs import E8M0_NAN
from .._quant_details.page_offsets import (
    MX_BLOCK,
    fp8_scale_base,
    fp8_scale_token_offset,
    fp8_value_offsets,
    mxfp4_scale_offsets,
    mxfp4_value_block_stride,
    mxfp4_value_offsets,
    mxfp4_value_token_offset,
)
from ..isa_spec import CompileSpec
from ..targets import LaunchSettings, Op, Target, Variant, sm_count, target_of
from .calls import DecodeCall
from .common import (
    FP32_UNIT_ROUNDOFF,
    NVIDIA_FP8_MMA_UNIT_ROUNDOFF,
    UNPROMOTED_FP8_MMA_UNIT_ROUNDOFF,
    dot_scaled_targets,
)
from .mxfp4_fold import (
    BLOCK_WORDS,
    E8M0_ONE,
    EXACT_REL,
    FOLD_KEY_BIAS,
    FOLD_SPAN,
    MIN_SPLIT_K,
    MX_DOT_SCALED,
    MX_FOLD_PTX,
    MX_FOLD_TL,
    WORD_BYTES,
    bit_or,
    d8_broadcast,
    exp2_int,
    fold_codes,
    fold_split,
    mx_exact_scores,
    mx_key_scale_words,
    scale_byte,
    scale_max_min,
    table_byte,
)

FMT_FP8 = Constant(0)
FMT_MXFP4 = Constant(1)

#: the L2 policy of the small inputs every program reads before or beside its keys (context lengths, block-table
#: entries, query rows, weights): kept over the key stream, which passes through L2 once (faster on the H200:
#: docs/perf/h200-decode-ablation.md)
KEEP_IN_L2 = Constant("evict_last")
MAX_TILES = Constant(31)         # tiles per program: one bit each in the fallback mask

PATHS = ("fold", "dot_scaled")       # the MXFP4 q.k paths (FP8 has one)
#: where each MXFP4 path runs. dot_scaled: gfx950's native scaled MFMA, and the interpreter's emulation; not
#: NVIDIA, where Triton's decomposition of it fails to compile at D = 32 (and the fold is the point of this kernel).
PATH_TARGETS = {"fold": frozenset({Target.NVIDIA, Target.INTERPRETER}),
                "dot_scaled": dot_scaled_targets() - {Target.NVIDIA}}
DEFAULT_PATH = {Target.NVIDIA: "fold", Target.INTERPRETER: "fold", Target.AMD: "dot_scaled"}
MIN_TILE_KEYS = 64                   # keys on M per tile: one Hopper wgmma M (several pages when P < 64)
#: the interpreter's key tile: its time goes per operation, not per element, so it takes 8x fewer, 8x larger
#: tiles (several pages a tile: the path of GPU launches with P < 64; docs/perf/cpu-interpreter-tiles.md)
INTERPRETER_TILE_KEYS = 512
MIN_MMA_N = 16                       # tl.dot needs N >= 16 query columns
AMD_MFMA_BLOCK = 32                  # gfx950: one wave's MFMA output block is AMD_MFMA_BLOCK x AMD_MFMA_BLOCK
#: keys per program and pipeline depth per target (and format). NVIDIA: the fastest of `python -m tools.tune
#: --variant ...` on the H200 (docs/perf/h200-keys-m-tune.json): 8 tiles of 64 keys, 2 stages for FP8, 3 for MXFP4
TOKENS_PER_PROGRAM = {Target.NVIDIA: 512, Target.AMD: 256, Target.INTERPRETER: INTERPRETER_TILE_KEYS}
#: where given, the keys per program follow the grid instead: the most of GRID_TOKENS_PER_PROGRAM whose grid (batch
#: x programs per sequence) still has WAVE_PROGRAMS_PER_SM programs per SM, else the fewest. Small grids get short
#: programs that spread over every SM, large ones long programs with less per-program overhead. Each value sits at
#: or a little below its kernel's occupancy on sm90 (`mxidx isa`, docs/perf/isa-sm90.md); on the H200 they pick
#: the fastest tile count or one near it at every shape measured
#: (docs/perf/h200-decode-ablation.md#tiles-per-program-from-the-grid).
WAVE_PROGRAMS_PER_SM = {(Target.NVIDIA, "fp8"): 7, (Target.NVIDIA, "mxfp4"): 3}
GRID_TOKENS_PER_PROGRAM = (256, 512, 1024)
NUM_STAGES = {(Target.NVIDIA, "fp8"): 2, (Target.NVIDIA, "mxfp4"): 3, (Target.AMD, "fp8"): 2,
              (Target.AMD, "mxfp4"): 2, (Target.INTERPRETER, "fp8"): 1, (Target.INTERPRETER, "mxfp4"): 1}
#: NVIDIA only: FP8 products the MMA accumulates before an fp32 promotion (tl.dot's max_num_imprecise_acc);
#: 0 = the backend's default (on sm_90: no promotion, as production FP8 scorers run; declared_precision says what
#: each choice declares).
FP8_PROMOTE_K = 0
#: FP8 tiles of this many query columns, of at least two tokens (N_PAD >= 2), run as two MMAs of half the columns
#: (whole tokens each) on every key tile, on NVIDIA (but on grids of at most one program per SM) and the
#: interpreter: on sm_90 the one [64, 128] fp32 accumulator fits half the programs per SM that the halves do; on
#: gfx950 the halves take more VGPRs at the same waves per SIMD, so AMD keeps one MMA
#: (docs/perf/h200-decode-ablation.md#fp8-at-128-query-columns-two-mmas-of-whole-tokens-2026-12-03)
FP8_HALVES_COLUMNS = 128


def declared_precision(kv_dtype: str, head_dim: int, target: Target, path: str | None = None) -> tuple[int, float]:
    """(n, u) of DESIGN §4's bound |kernel - ref| <= (n + H + 2) * u * sum_h |w_h| sum_d |q_hd k_d| for this kernel
    on `target` (MXFP4: on `path`, default DEFAULT_PATH[target]).

    FP8: n = D (the MMA sums D products). On NVIDIA Hopper's FP8 MMA keeps about 14 bits inside each K = 32
    instruction. In the model where every term of an instruction (its 32 products and, without promotion, the
    incoming sum) is truncated to 13 bits below the largest one's leading bit, the error of one q.k is below
    32 * 2^-13 of the sum of |products| with FP8_PROMOTE_K = 32 (declared u = 2^-13), and below
    (33/32) * D * 2^-13 of it without promotion (the default; declared u = 2^-12, so that (D + H + 2) u covers it
    at every D and H). u = 2^-24 elsewhere (fp32 accumulation).
    MXFP4 "fold": the folded products are exact, but they span up to 2 * 11 binades, so the MMA's sum of D of them
    is not exact: n = D with the same u as FP8. The exact fallback adds D/32 exact block sums (n = D/32), inside
    that. MXFP4 "dot_scaled": n = D, u = 2^-24 (the interpreter's emulation sums all D products in fp32; gfx950's
    scaled MFMA does not document its internal accumulation).
    ValueError for an unknown format, target or path, or a head dim that is not a multiple of 32."""
    path = check_path(kv_dtype, target, path)
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % MX_BLOCK.value:
        raise ValueError(f"head_dim must be a positive multiple of {MX_BLOCK.value}, got {head_dim!r}")
    mma_fp8 = kv_dtype == "fp8" or path == "fold"
    if not (mma_fp8 and target is Target.NVIDIA):
        return head_dim, FP32_UNIT_ROUNDOFF
    return head_dim, NVIDIA_FP8_MMA_UNIT_ROUNDOFF if FP8_PROMOTE_K else UNPROMOTED_FP8_MMA_UNIT_ROUNDOFF


def check_path(kv_dtype: str, target: Target, path: str | None) -> str | None:
    """The MXFP4 path a launch takes (None for FP8); ValueError for an unknown format / target / path or a path
    that does not run on the target."""
    if kv_dtype not in ("fp8", "mxfp4"):
        raise ValueError(f"kv_dtype must be 'fp8' or 'mxfp4', got {kv_dtype!r}")
    if not isinstance(target, Target):
        raise ValueError(f"target must be a hw.targets.Target, got {target!r}")
    if kv_dtype == "fp8":
        if path is not None:
            raise ValueError(f"path applies to MXFP4 only, got path={path!r} for FP8")
        return None
    path = DEFAULT_PATH[target] if path is None else path
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if target not in PATH_TARGETS[path]:
        raise ValueError(f"the MXFP4 {path!r} path does not run on {target.value}")
    return path


# ============================================================================================ conversions
@triton.jit
def _d8_select(sw, s_max, C: tl.constexpr, G: tl.constexpr):
    """uint8 [R, C = D/2] table byte of each code byte's block from the packed scale words sw (int64 [R]) and the
    keys' largest scale: each column takes its block's [R] value by a select on the column's block (no reshape;
    with triton 3.6 on sm_90 the fold's outputs then reach the MMA operand layout through shared memory)."""
    col_block = tl.arange(0, C) // (C // G)
    d8 = tl.zeros((sw.shape[0], C), tl.uint8)
    for g in tl.static_range(G):
        d_g = table_byte(tl.maximum(scale_byte(sw, g) - s_max, -FOLD_SPAN))
        d8 = tl.where(col_block[None, :] == g, d_g[:, None], d8)
    return d8


# ============================================================================================ tile pieces
@triton.jit
def visible_lengths(ctx_ptr, b, stride_ctx_b, n, N: tl.constexpr, CTX_2D: tl.constexpr, cap):
    """int32 [N_PAD] visible(b, n) = DESIGN §4's ctx(b, n) clamped to cap = max_context_len (the columns past the
    table are NaN: _tile_pages); 0 for the padding n >= N."""
    if CTX_2D:
        raw = tl.load(ctx_ptr + b * stride_ctx_b + n, mask=n < N, other=0, eviction_policy=KEEP_IN_L2)
    else:
        last = tl.load(ctx_ptr + b * stride_ctx_b, eviction_policy=KEEP_IN_L2)
        behind = N - 1 - n                  # draft tokens after row n: subtracted only from a larger last,
        raw = tl.where((n < N) & (last > behind), last - behind, 0)     # so that int32 never wraps
    return tl.minimum(tl.maximum(raw, 0), cap)


@triton.jit
def promoted_dot(a, b, acc, PROMOTE_K: tl.constexpr):
    """tl.dot(a, b, acc) (acc None: a zero accumulator), promoting FP8 partial sums to fp32 every PROMOTE_K
    products when PROMOTE_K > 0."""
    if PROMOTE_K > 0:
        return tl.dot(a, b, acc, max_num_imprecise_acc=PROMOTE_K)
    else:
        return tl.dot(a, b, acc)


@triton.jit
def head_sum(s, w, N_PAD: tl.constexpr, H_PAD: tl.constexpr):
    """fp32 [KEYS, N_PAD * H_PAD] scores, [N_PAD * H_PAD] weights -> [KEYS, N_PAD] sum_h w * relu(s), relu(NaN) =
    NaN. Padded query columns have weight 0 and finite scores (their q is 0; only a NaN key, whose logits are NaN
    anyway, makes them NaN)."""
    contrib = tl.maximum(s, 0.0, propagate_nan=tl.PropagateNan.ALL) * w[None, :]
    KEYS: tl.constexpr = s.shape[0]
    if N_PAD == 1:
        return tl.sum(contrib, axis=1)[:, None]
    else:
        return tl.sum(tl.reshape(contrib, (KEYS, N_PAD, H_PAD)), axis=2)


@triton.jit
def _tile_pages(bt_row_ptr, first, num_pages, max_pages, num_cache_pages, page_stride, t_page,
                TILE_PAGES: tl.constexpr):
    """A tile's pages: (int64 [KEYS] page byte offsets page_id.to(int64) * page_stride, page_ok, bad_id; the last two
    scalars when TILE_PAGES == 1, else bool / int32 [KEYS]). Block-table entries at or past num_pages (the visible
    span) or max_pages (the table's width) are not read; a page is ok when its entry was read and lies in
    [0, num_cache_pages). The offset of a page that is not ok is page 0's, and bad_id is its entry where one was
    read and is out of range, else 0 (an id 0 is out of range only in a cache of no pages, where report_pages
    finds every page bad anyway). One compare per page, not per key, when TILE_PAGES == 1. Callers mask a tile's
    keys with tok < where(page_ok, limit, 0), so a page that is not ok is never read."""
    if TILE_PAGES == 1:
        in_table = first < max_pages
        page_id = tl.load(bt_row_ptr + first, mask=in_table, other=0, eviction_policy=KEEP_IN_L2)
        id_ok = (page_id >= 0) & (page_id < num_cache_pages)
        ok = in_table & id_ok
        page_off = tl.where(ok, page_id, 0).to(tl.int64) * page_stride
        return tl.zeros_like(t_page).to(tl.int64) + page_off, ok, tl.where(in_table & ~id_ok, page_id, 0)
    else:
        return lookup_pages(bt_row_ptr, first + t_page, num_pages, max_pages, num_cache_pages, page_stride)


@triton.jit
def lookup_pages(bt_row_ptr, page, num_pages, max_pages, num_cache_pages, page_stride):
    """_tile_pages elementwise over int32 page indices `page` of any shape and layout: (int64 page byte offsets,
    page_ok, bad_id), each of page's shape."""
    in_table = (page < num_pages) & (page < max_pages)
    page_id = tl.load(bt_row_ptr + page, mask=in_table, other=0, eviction_policy=KEEP_IN_L2)
    id_ok = (page_id >= 0) & (page_id < num_cache_pages)
    ok = in_table & id_ok
    return tl.where(ok, page_id, 0).to(tl.int64) * page_stride, ok, tl.where(in_table & ~id_ok, page_id, 0)


@triton.jit
def _tile(i, first, t, t_page, bt_row_ptr, num_pages, max_pages, num_cache_pages, page_stride, vis_max, met,
          P: tl.constexpr, TILE_PAGES: tl.constexpr, HAS_FLAG: tl.constexpr):
    """Tile i of a program whose first page is `first`: (tok [KEYS] token positions, page_off and page_ok of
    _tile_pages, k_ok [KEYS]: the keys to read (before vis_max, on a valid page), met with the tile's bad page ids
    folded in (HAS_FLAG; see report_pages))."""
    page_first = first + i * TILE_PAGES
    tok = page_first * P + t
    page_off, page_ok, bad_id = _tile_pages(bt_row_ptr, page_first, num_pages, max_pages, num_cache_pages,
                                            page_stride, t_page, TILE_PAGES)
    if HAS_FLAG:
        met = tl.where(bad_id != 0, bad_id, met)
    return tok, page_off, page_ok, tok < tl.where(page_ok, vis_max, 0), met


@triton.jit
def report_pages(flag_ptr, b, chunk, vis_max, max_pages, num_cache_pages, met, P: tl.constexpr):
    """After a program's tile loop: report a sequence longer than its block-table row (once, by chunk 0) and the
    largest out-of-range page id the loop met (`met`: int32 [KEYS], the bad_id of _tile_pages kept per key)."""
    report_if(flag_ptr, KIND_CONTEXT_PAST_TABLE, (chunk == 0) & (vis_max > max_pages * P), b, vis_max, True)
    met_bad = (met < 0) | (met >= num_cache_pages)
    report_if(flag_ptr, KIND_PAGE_ID, tl.max(met_bad.to(tl.int32)) > 0, b,
              tl.max(tl.where(met_bad, met, INT32_MIN)), True)


@triton.jit
def _mx_query(q_v_ptr, q_s_ptr, q_row_v, q_row_s, row_ok, D: tl.constexpr):
    """The query rows' int32 [NH, D/8] code words and int32 [NH, D/32] E8M0 bytes (padded rows: 0 and 127)."""
    jw = tl.arange(0, D // (2 * WORD_BYTES))
    g = tl.arange(0, D // MX_BLOCK)
    words = tl.load((q_v_ptr + q_row_v).to(tl.pointer_type(tl.int32))[:, None] + jw[None, :], mask=row_ok[:, None],
                    other=0, eviction_policy=KEEP_IN_L2)
    scales = tl.load(q_s_ptr + q_row_s[:, None] + g[None, :], mask=row_ok[:, None], other=E8M0_ONE,
                     eviction_policy=KEEP_IN_L2)
    return words, scales.to(tl.int32)


@triton.jit
def _mx_keys(cache_ptr, page_off, t_in, k_ok, P: tl.constexpr, D: tl.constexpr, TILED: tl.constexpr):
    """A tile's int32 [KEYS, D/8] code words and int32 [KEYS, D/32] E8M0 bytes (masked keys: 0 and 255, NaN)."""
    jw = tl.arange(0, D // (2 * WORD_BYTES))
    g = tl.arange(0, D // MX_BLOCK)
    # word jw of a token: 32-bit word jw % 4 of its 16-byte block jw // 4
    word = (jw // BLOCK_WORDS) * (mxfp4_value_block_stride(P, TILED) // WORD_BYTES) + jw % BLOCK_WORDS
    token_words = (cache_ptr + page_off + mxfp4_value_token_offset(t_in, P, D, TILED)).to(tl.pointer_type(tl.int32))
    words = tl.load(token_words[:, None] + word[None, :], mask=k_ok[:, None], other=0)
    scales = tl.load(cache_ptr + page_off[:, None] + mxfp4_scale_offsets(t_in, g, P, D, TILED), mask=k_ok[:, None],
                     other=E8M0_NAN)
    return words, scales.to(tl.int32)


# ============================================================================================ the kernel
@triton.jit
def _fp8_query_half(q_v_ptr, w_ptr, ctx_ptr, out_ptr, b, stride_qv_b, stride_qv_n, stride_qv_h, stride_w_r,
                    stride_ctx_b, stride_out_r, cap, HALF: tl.constexpr, N: tl.constexpr, N_PAD: tl.constexpr,
                    H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, CTX_2D: tl.constexpr):
    """Half HALF (0 or 1) of an FP8 program's query columns, the whole tokens n in [HALF, HALF + 1) * N_PAD / 2:
    (qt e4m3 [D, N_PAD / 2 * H_PAD], their weights [N_PAD / 2 * H_PAD], output row pointers [1, N_PAD / 2],
    visible(b, n) [N_PAD / 2])."""
    HALF_N: tl.constexpr = N_PAD // 2
    m = tl.arange(0, HALF_N * H_PAD)
    m_n = HALF * HALF_N + m // H_PAD
    m_h = m % H_PAD
    row_ok = (m_n < N) & (m_h < H)
    w = tl.load(w_ptr + (b * N + m_n) * stride_w_r + m_h, mask=row_ok, other=0.0, eviction_policy=KEEP_IN_L2)
    d = tl.arange(0, D)
    q = tl.load(q_v_ptr + (b * stride_qv_b + m_n * stride_qv_n + m_h * stride_qv_h)[:, None] + d[None, :],
                mask=row_ok[:, None], other=0, eviction_policy=KEEP_IN_L2)
    n = HALF * HALF_N + tl.arange(0, HALF_N)
    return (tl.trans(q.to(tl.float8e4nv, bitcast=True)), w, out_ptr + (b * N + n)[None, :] * stride_out_r,
            visible_lengths(ctx_ptr, b, stride_ctx_b, n, N, CTX_2D, cap))


@triton.jit
def paged_keys_m_kernel(
    q_v_ptr, q_s_ptr, cache_ptr, w_ptr, ctx_ptr, bt_ptr, out_ptr, flag_ptr,
    cap, page_stride, max_pages, num_cache_pages,
    stride_qv_b, stride_qv_n, stride_qv_h, stride_qs_b, stride_qs_n, stride_qs_h,
    stride_w_r, stride_ctx_b, stride_bt_b, stride_out_r,
    N: tl.constexpr, N_PAD: tl.constexpr, H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, P: tl.constexpr,
    TILE_PAGES: tl.constexpr, TILES: tl.constexpr, NUM_STAGES: tl.constexpr,
    KV_FORMAT: tl.constexpr, TILED: tl.constexpr, CTX_2D: tl.constexpr, MX_MODE: tl.constexpr,
    PROMOTE_K: tl.constexpr, HAS_FLAG: tl.constexpr, PDL: tl.constexpr, FP8_HALVES: tl.constexpr,
):
    """q_v: FP8 bytes [B, N, H, D] or MXFP4 codes [B, N, H, D/2]; q_s: MXFP4 scales [B, N, H, D/32] (FP8: unused);
    cache: uint8 view base (page b at b * page_stride, num_cache_pages pages); w: fp32 [B*N, H]; ctx: int32 [B] or
    [B, N]; bt: int32 [B, max_pages]; out: fp32 [B*N, W]; flag: int32 [4] error flag (HAS_FLAG). Innermost
    dimensions contiguous; strides in elements. Grid (B, chunks). PDL: hw._pdl's programmatic dependent launch.
    FP8_HALVES (FP8, N_PAD >= 2): the query columns as two halves of whole tokens, one MMA each per key tile.

    Keys of a page that is not ok (_tile_pages: past the table, or an out-of-range id) are never loaded; their
    scales load as NaN (FP8 scale NaN, E8M0 255), so their visible logits are NaN."""
    tl.static_assert(TILES <= MAX_TILES)
    tl.static_assert(not FP8_HALVES or (KV_FORMAT == FMT_FP8 and N_PAD >= 2))
    grid_dependency_sync(PDL)
    b = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    n = tl.arange(0, N_PAD)
    visible = visible_lengths(ctx_ptr, b, stride_ctx_b, n, N, CTX_2D, cap)
    vis_max = tl.max(visible)
    num_pages = vis_max // P + (vis_max % P != 0).to(tl.int32)     # cdiv, without vis_max + P - 1's overflow
    first = chunk * (TILES * TILE_PAGES)
    if first < num_pages:
        KEYS: tl.constexpr = TILE_PAGES * P
        NH: tl.constexpr = N_PAD * H_PAD
        num_tiles = tl.minimum(tl.cdiv(num_pages - first, TILE_PAGES), TILES)
        bt_row = bt_ptr + b * stride_bt_b
        t = tl.arange(0, KEYS)
        t_page = t // P
        t_in = t % P
        m = tl.arange(0, NH)
        m_n = m // H_PAD
        m_h = m % H_PAD
        row_ok = (m_n < N) & (m_h < H)
        q_row_v = b * stride_qv_b + m_n * stride_qv_n + m_h * stride_qv_h
        q_row_s = b * stride_qs_b + m_n * stride_qs_n + m_h * stride_qs_h
        w = tl.load(w_ptr + (b * N + m_n) * stride_w_r + m_h, mask=row_ok, other=0.0, eviction_policy=KEEP_IN_L2)
        out_cols = out_ptr + (b * N + n)[None, :] * stride_out_r
        met = tl.zeros((KEYS,), tl.int32)           # HAS_FLAG: an out-of-range page id met by the key's lane

        if KV_FORMAT == FMT_FP8:
            d = tl.arange(0, D)
            HALF_N: tl.constexpr = N_PAD // 2
            if FP8_HALVES:
                # two MMAs of NH / 2 columns on each key tile, each half's logits stored before the next: half the
                # live accumulator of one NH-column MMA
                qt_a, w_a, out_a, vis_a = _fp8_query_half(q_v_ptr, w_ptr, ctx_ptr, out_ptr, b, stride_qv_b,
                                                          stride_qv_n, stride_qv_h, stride_w_r, stride_ctx_b,
                                                          stride_out_r, cap, 0, N, N_PAD, H, H_PAD, D, CTX_2D)
                qt_b, w_b, out_b, vis_b = _fp8_query_half(q_v_ptr, w_ptr, ctx_ptr, out_ptr, b, stride_qv_b,
                                                          stride_qv_n, stride_qv_h, stride_w_r, stride_ctx_b,
                                                          stride_out_r, cap, 1, N, N_PAD, H, H_PAD, D, CTX_2D)
            else:
                q = tl.load(q_v_ptr + q_row_v[:, None] + d[None, :], mask=row_ok[:, None], other=0,
                            eviction_policy=KEEP_IN_L2)                                            # [NH, D]
                qt = tl.trans(q.to(tl.float8e4nv, bitcast=True))                              # [D, NH]
            for i in tl.range(0, num_tiles, num_stages=NUM_STAGES):
                tok, page_off, page_ok, k_ok, met = _tile(i, first, t, t_page, bt_row, num_pages, max_pages,
                                                          num_cache_pages, page_stride, vis_max, met, P,
                                                          TILE_PAGES, HAS_FLAG)
                k = tl.load(cache_ptr + page_off[:, None] + fp8_value_offsets(t_in, d, D), mask=k_ok[:, None],
                            other=0).to(tl.float8e4nv, bitcast=True)                         # [KEYS, D]
                k_scale = tl.load((cache_ptr + page_off + fp8_scale_base(P, D) + fp8_scale_token_offset(t_in))
                                  .to(tl.pointer_type(tl.float32)), mask=k_ok, other=float("nan"))
                if FP8_HALVES:
                    logits = head_sum(promoted_dot(k, qt_a, None, PROMOTE_K), w_a, HALF_N, H_PAD) * k_scale[:, None]
                    tl.store(out_a + tok[:, None], logits, mask=tok[:, None] < vis_a[None, :])
                    logits = head_sum(promoted_dot(k, qt_b, None, PROMOTE_K), w_b, HALF_N, H_PAD) * k_scale[:, None]
                    tl.store(out_b + tok[:, None], logits, mask=tok[:, None] < vis_b[None, :])
                else:
                    logits = head_sum(promoted_dot(k, qt, None, PROMOTE_K), w, N_PAD, H_PAD) * k_scale[:, None]
                    tl.store(out_cols + tok[:, None], logits, mask=tok[:, None] < visible[None, :])
        elif MX_MODE == MX_DOT_SCALED:
            j = tl.arange(0, D // 2)
            g = tl.arange(0, D // MX_BLOCK)
            qt = tl.trans(tl.load(q_v_ptr + q_row_v[:, None] + j[None, :], mask=row_ok[:, None], other=0))  # [D/2, NH]
            qs = tl.load(q_s_ptr + q_row_s[:, None] + g[None, :], mask=row_ok[:, None], other=E8M0_ONE)
            for i in tl.range(0, num_tiles, num_stages=NUM_STAGES):
                tok, page_off, page_ok, k_ok, met = _tile(i, first, t, t_page, bt_row, num_pages, max_pages,
                                                          num_cache_pages, page_stride, vis_max, met, P,
                                                          TILE_PAGES, HAS_FLAG)
                kv = tl.load(cache_ptr + page_off[:, None] + mxfp4_value_offsets(t_in, j, P, D, TILED),
                             mask=k_ok[:, None], other=0)                                     # [KEYS, D/2]
                ks = tl.load(cache_ptr + page_off[:, None] + mxfp4_scale_offsets(t_in, g, P, D, TILED),
                             mask=k_ok[:, None], other=E8M0_NAN)                              # [KEYS, D/32]
                s = tl.dot_scaled(kv, ks, "e2m1", qt, qs, "e2m1")
                tl.store(out_cols + tok[:, None], head_sum(s, w, N_PAD, H_PAD), mask=tok[:, None] < visible[None, :])
        else:
            # the query rows, converted once
            q_words, qs = _mx_query(q_v_ptr, q_s_ptr, q_row_v, q_row_s, row_ok, D)
            sq_max = tl.max(qs, axis=1)
            q_nan = sq_max == E8M0_NAN
            q_wide = tl.max((row_ok & ~q_nan & (sq_max - tl.min(qs, axis=1) > FOLD_SPAN)).to(tl.int32)) > 0
            c = tl.max(tl.where(row_ok & ~q_nan, sq_max, 0))
            w_fold = tl.where(q_nan, float("nan"), w * exp2_int(sq_max - c))
            q_rel = tl.maximum(qs - sq_max[:, None], -FOLD_SPAN)
            SPLIT: tl.constexpr = D >= 2 * MIN_SPLIT_K
            if SPLIT:           # two K = D/2 operands in the split order (fold_split)
                jb = tl.arange(0, D // 2)
                q_bytes = tl.load(q_v_ptr + q_row_v[:, None] + jb[None, :], mask=row_ok[:, None], other=0,
                                  eviction_policy=KEEP_IN_L2)
                q1, q2 = fold_split(q_bytes, d8_broadcast(q_rel, D // 2), MX_MODE)
                qt = tl.trans(q1).to(tl.float8e4nv, bitcast=True)                             # [D/2, NH]
                qt2 = tl.trans(q2).to(tl.float8e4nv, bitcast=True)
            else:
                qt = tl.trans(fold_codes(q_words, q_rel, MX_MODE)).to(tl.float8e4nv, bitcast=True)  # [D, NH]

            # the fold loop stores every visible key; the tiles holding a wide key are overwritten by the exact
            # pass (bit i of wide_tiles)
            wide_keys = tl.zeros((KEYS,), tl.int32)     # bit i: the key's block scales in tile i are wide
            for i in tl.range(0, tl.where(q_wide, 0, num_tiles), num_stages=NUM_STAGES):
                tok, page_off, page_ok, k_ok, met = _tile(i, first, t, t_page, bt_row, num_pages, max_pages,
                                                          num_cache_pages, page_stride, vis_max, met, P,
                                                          TILE_PAGES, HAS_FLAG)
                if SPLIT:
                    kb = tl.load(cache_ptr + page_off[:, None] + mxfp4_value_offsets(t_in, jb, P, D, TILED),
                                 mask=k_ok[:, None], other=0)                                 # [KEYS, D/2]
                    sw = mx_key_scale_words(cache_ptr, page_off, t_in, k_ok, P, D, TILED)
                    sk_max, sk_min = scale_max_min(sw, D // MX_BLOCK)
                    k1, k2 = fold_split(kb, _d8_select(sw, sk_max, D // 2, D // MX_BLOCK), MX_MODE)
                    acc = promoted_dot(k1.to(tl.float8e4nv, bitcast=True), qt, None, PROMOTE_K)
                    acc = promoted_dot(k2.to(tl.float8e4nv, bitcast=True), qt2, acc, PROMOTE_K)
                else:
                    k_words, ks = _mx_keys(cache_ptr, page_off, t_in, k_ok, P, D, TILED)
                    sk_max = tl.max(ks, axis=1)
                    sk_min = tl.min(ks, axis=1)
                    k8 = fold_codes(k_words, tl.maximum(ks - sk_max[:, None], -FOLD_SPAN), MX_MODE)
                    acc = promoted_dot(k8.to(tl.float8e4nv, bitcast=True), qt, None, PROMOTE_K)
                k_nan = sk_max == E8M0_NAN
                wide_key = ~k_nan & (sk_max - sk_min > FOLD_SPAN)
                k_factor = tl.where(k_nan, float("nan"), exp2_int(sk_max + c - FOLD_KEY_BIAS))
                logits = head_sum(acc, w_fold, N_PAD, H_PAD) * k_factor[:, None]
                tl.store(out_cols + tok[:, None], logits, mask=tok[:, None] < visible[None, :])   # wide: overwritten
                wide_keys = wide_keys | (wide_key.to(tl.int32) << i)
            wide_tiles = tl.reduce(wide_keys, 0, bit_or)

            # the exact pass: every key of a wide query, else the wide keys of the tiles that hold one (the other
            # keys keep the fold loop's logits, so a key's logit does not depend on its tile-mates)
            if q_wide | (wide_tiles != 0):
                tl.debug_barrier()          # the fold loop's stores of this program land before the exact pass's
                q_words, qs = _mx_query(q_v_ptr, q_s_ptr, q_row_v, q_row_s, row_ok, D)
                q_exact = tl.trans(fold_codes(q_words, tl.full(qs.shape, EXACT_REL, tl.int32), MX_MODE))   # [D, NH]
                for i in tl.range(0, num_tiles, num_stages=1):
                    if q_wide | (((wide_tiles >> i) & 1) != 0):
                        # (met: the fold loop did not run for a wide query)
                        tok, page_off, _, k_ok, met = _tile(i, first, t, t_page, bt_row, num_pages, max_pages,
                                                            num_cache_pages, page_stride, vis_max, met, P,
                                                            TILE_PAGES, HAS_FLAG)
                        # a bad page's keys are not read: NaN scales, stored for a wide query, else not redone (they
                        # keep the fold loop's NaN)
                        k_words, ks = _mx_keys(cache_ptr, page_off, t_in, k_ok, P, D, TILED)
                        s = mx_exact_scores(k_words, ks, q_exact, qs, MX_MODE)
                        sk_max = tl.max(ks, axis=1)
                        wide_key = (sk_max != E8M0_NAN) & (sk_max - tl.min(ks, axis=1) > FOLD_SPAN)
                        redo = wide_key | (tok * 0 + q_wide.to(tl.int32) != 0)   # a block operand first
                        tl.store(out_cols + tok[:, None], head_sum(s, w, N_PAD, H_PAD),
                                 mask=redo[:, None] & (tok[:, None] < visible[None, :]))
        if HAS_FLAG:
            report_pages(flag_ptr, b, chunk, vis_max, max_pages, num_cache_pages, met, P)


# ============================================================================================ launcher
@dataclasses.dataclass(frozen=True)
class KeysMSettings(LaunchSettings):
    """Constexprs and launch options of paged_keys_m_kernel (a pure function of the target and the shapes)."""

    n_pad: int          # next_n padded to a power of two
    h_pad: int          # heads padded to a power of two, n_pad * h_pad >= MIN_MMA_N
    tile_pages: int     # pages per tile: KEYS = tile_pages * P >= MIN_TILE_KEYS
    tiles: int          # tiles per program (<= MAX_TILES)
    num_stages: int     # software-pipelining depth of the tile loop
    num_warps: int
    mx_mode: int        # MX_FOLD_PTX | MX_FOLD_TL | MX_DOT_SCALED (unused for FP8)
    promote_k: int      # FP8_PROMOTE_K on NVIDIA, else 0
    pdl: bool           # programmatic dependent launch (hw._pdl): on NVIDIA
    fp8_halves: bool    # FP8: two MMAs of n_pad / 2 tokens each per key tile (FP8_HALVES_COLUMNS)


def keys_m_settings(target: Target, kv_dtype: str, num_heads: int, next_n: int, page_size: int, *,
                    path: str | None = None, grid: tuple[int, int, int] | None = None,
                    tokens_per_program: int | None = None, num_stages: int | None = None,
                    num_warps: int | None = None) -> KeysMSettings:
    """The settings of a launch on `target` (MXFP4 `path`: DEFAULT_PATH[target] when None). grid: (batch, cap,
    SM count) of the launch; where WAVE_PROGRAMS_PER_SM has the target and format, the tiles follow it (still a
    function of shapes only), and so does fp8_halves (FP8_HALVES_COLUMNS). Tuning overrides: tokens_per_program
    (default TOKENS_PER_PROGRAM[target]: tiles = that // KEYS, at least 1; set, it wins over grid), num_stages
    (NUM_STAGES),
    num_warps (4 on NVIDIA and the interpreter; on AMD 4 while the fp32 score tile [KEYS, n_pad * h_pad] is at most
    64 x 64, i.e. 32 registers a thread, else 8, under which gfx950's FP8 kernel at 64 x 128 spills no SGPRs; 2 at
    64 x 32 and below: a wave's MFMA block is 32 x 32, so two waves cover the tile and more would repeat their
    MFMAs (docs/perf/isa-gfx950-structures.md). On the H200, 4 warps at 64 x 128 take more registers but are
    faster than 8 for both formats, docs/perf/h200-keys-m-heads.json). ValueError as declared_precision."""
    path = check_path(kv_dtype, target, path)
    n_pad = triton.next_power_of_2(next_n)
    h_pad = max(triton.next_power_of_2(num_heads), MIN_MMA_N // n_pad)
    tile_pages = max(1, (INTERPRETER_TILE_KEYS if target is Target.INTERPRETER else MIN_TILE_KEYS) // page_size)
    keys = tile_pages * page_size
    per_program = TOKENS_PER_PROGRAM[target] if tokens_per_program is None else tokens_per_program
    tiles = min(MAX_TILES.value, max(1, per_program // keys))
    wave = WAVE_PROGRAMS_PER_SM.get((target, kv_dtype))
    halves = (kv_dtype == "fp8" and target is not Target.AMD and n_pad >= 2 and n_pad * h_pad == FP8_HALVES_COLUMNS)
    if grid is not None and wave is not None and tokens_per_program is None:
        batch, cap, num_sms = grid
        pages = triton.cdiv(cap, page_size)
        choices = sorted({min(MAX_TILES.value, max(1, t // keys)) for t in GRID_TOKENS_PER_PROGRAM})
        fill = [t for t in choices if batch * triton.cdiv(pages, t * tile_pages) >= wave * num_sms]
        tiles = max(fill) if fill else min(choices)
        # a grid of at most one program per SM is not short of registers: one MMA, the shorter program
        halves = halves and batch * triton.cdiv(pages, tiles * tile_pages) > num_sms
    mx_mode = (MX_DOT_SCALED if path == "dot_scaled" else MX_FOLD_PTX if target is Target.NVIDIA else MX_FOLD_TL)
    return KeysMSettings(
        n_pad=n_pad, h_pad=h_pad, tile_pages=tile_pages, tiles=tiles,
        num_stages=NUM_STAGES[target, kv_dtype] if num_stages is None else num_stages,
        num_warps=num_warps if num_warps is not None else _default_warps(target, keys * n_pad * h_pad),
        mx_mode=mx_mode.value, promote_k=FP8_PROMOTE_K if target is Target.NVIDIA else 0,
        pdl=target is Target.NVIDIA, fp8_halves=halves)


def _default_warps(target: Target, tile: int) -> int:
    """keys_m_settings' default num_warps for a score tile of `tile` fp32 elements (KEYS x query columns)."""
    if target is not Target.AMD:    # the interpreter runs a program's warps as one
        return 4
    if tile <= MIN_TILE_KEYS * AMD_MFMA_BLOCK:
        return 2
    return 4 if tile <= MIN_TILE_KEYS * 64 else 8


def _grid(target: Target, batch: int, cap: int, device) -> tuple[int, int, int] | None:
    """keys_m_settings' grid argument for a launch of `batch` sequences up to `cap` keys on `device` (NVIDIA only)."""
    return (batch, cap, sm_count(device)) if target is Target.NVIDIA else None


def launch_paged_keys_m(q_v, q_s, kv_cache, weights, context_lens, block_table, out, *, cap: int, page_stride: int,
                        num_cache_pages: int, next_n: int, num_heads: int, head_dim: int, page_size: int,
                        kv_dtype: str, tiled: bool, target: Target, path: str | None = None,
                        settings: KeysMSettings | None = None, error_flag=None) -> None:
    """Write the visible logits of the paged decode scorer into `out` (DESIGN §4); other entries are untouched
    (fill `out` with -inf first for clean_logits).

    Arguments, already checked by the public launcher (shapes, dtypes, devices; nothing here syncs):
      q_v           uint8 [B, N, H, D] (FP8 e4m3 bytes; the q scale folded into weights) or [B, N, H, D/2]
                    (MXFP4 codes, even element in the low nibble), contiguous; MXFP4: data_ptr % 4 == 0
      q_s           uint8 [B, N, H, D/32] E8M0 scales, contiguous (MXFP4; int32-packed scales viewed as uint8);
                    ignored for FP8 (None or any tensor)
      kv_cache      uint8 tensor whose data_ptr is page 0 of the cache view (DESIGN §8's 4-D view works);
                    data_ptr % 16 == 0; page b at byte b * page_stride
      weights       fp32 [B*N, H], stride(1) == 1
      context_lens  int32 [B] or [B, N], innermost stride 1, values >= 0 (DESIGN §4's ctx(b, n))
      block_table   int32 [B, max_pages], stride(1) == 1; any values (entries outside [0, num_cache_pages) inside a
                    row's visible span: their keys are not read and their logits are NaN)
      out           fp32 [B*N, W], stride(1) == 1
      cap           W (visible columns past max_pages * P have no page: NaN)
      page_stride   bytes between pages, a multiple of 16 >= the page's bytes
      num_cache_pages  the pages of the cache view (page ids at or past it are out of range)
      next_n        N >= 1; num_heads H (1..128 tested); head_dim D in 32, 64, 128, 256; page_size P in 16..256
      kv_dtype     "fp8" | "mxfp4"; tiled: the mxfp4_tiled layout (D % 128 == 0, P % 4 == 0)
      target        hw.targets.Target (hw.targets.target_of(device, paged_keys_m_kernel)); NVIDIA needs FP8 MMA
                    (compute capability >= 8.9)
      path          MXFP4 only: "fold" | "dot_scaled" (PATH_TARGETS), default DEFAULT_PATH[target]
      settings      keys_m_settings(target, ...) with tuning overrides; default keys_m_settings's defaults
      error_flag    None or hw.checks' int32 [4] error flag: out-of-range page ids (ErrorKind.PAGE_ID) and contexts
                    longer than the table (CONTEXT_PAST_TABLE) are reported there
    declared_precision(kv_dtype, head_dim, target, path) is the (n, u) of the result's bound.
    The grid is (B, cdiv(cdiv(cap, P), tiles * tile_pages)): fixed by shapes and cap, so a CUDA graph captured with
    short contexts replays correctly with long ones. ValueError for an unknown kv_dtype / target / path, a grid
    too large for CUDA's second grid dimension (65535), or a misaligned MXFP4 q_v."""
    path = check_path(kv_dtype, target, path)
    s = settings if settings is not None else keys_m_settings(
        target, kv_dtype, num_heads, next_n, page_size, path=path, grid=_grid(target, q_v.shape[0], cap, out.device))
    mx = kv_dtype == "mxfp4"
    if mx and q_v.data_ptr() % WORD_BYTES.value:
        raise ValueError("q_v: MXFP4 codes are read as 32-bit words; data_ptr must be a multiple of 4")
    batch = q_v.shape[0]
    if batch == 0 or cap <= 0:
        return
    chunks = triton.cdiv(triton.cdiv(cap, page_size), s.tiles * s.tile_pages)
    if chunks > 65535:
        raise ValueError(f"cap = {cap} needs {chunks} programs per sequence (at most 65535); raise "
                         "tokens_per_program")
    q_s = q_s if mx else q_v        # FP8: the scale pointer is unused
    paged_keys_m_kernel[(batch, chunks)](
        q_v, q_s, kv_cache, weights, context_lens, block_table, out, out if error_flag is None else error_flag,
        cap, page_stride, block_table.shape[1], num_cache_pages,
        q_v.stride(0), q_v.stride(1), q_v.stride(2), q_s.stride(0), q_s.stride(1), q_s.stride(2),
        weights.stride(0), context_lens.stride(0), block_table.stride(0), out.stride(0),
        N=next_n, N_PAD=s.n_pad, H=num_heads, H_PAD=s.h_pad, D=head_dim, P=page_size, TILE_PAGES=s.tile_pages,
        TILES=s.tiles, NUM_STAGES=s.num_stages, KV_FORMAT=FMT_MXFP4 if mx else FMT_FP8, TILED=bool(tiled),
        CTX_2D=context_lens.dim() == 2, MX_MODE=s.mx_mode, PROMOTE_K=s.promote_k, HAS_FLAG=error_flag is not None,
        FP8_HALVES=s.fp8_halves, num_warps=s.num_warps, **pdl_launch(s.pdl, out.device),
    )


# ============================================================================================ cross-compile specs
def isa_spec(layout: str, head_dim: int, page_size: int, next_n: int = 1, heads: int = 32,
             target: Target = Target.NVIDIA) -> CompileSpec:
    """The kernel as launch_paged_keys_m launches it by default on `target` (NVIDIA: sm90, AMD: gfx950)."""
    kv_dtype = "fp8" if layout == "fp8" else "mxfp4"
    s = keys_m_settings(target, kv_dtype, heads, next_n, page_size)
    path = DEFAULT_PATH[target] if kv_dtype == "mxfp4" else "mma"
    pointers = {"q_v_ptr": "*u8", "q_s_ptr": "*u8", "cache_ptr": "*u8", "w_ptr": "*fp32", "ctx_ptr": "*i32",
                "bt_ptr": "*i32", "out_ptr": "*fp32", "flag_ptr": "*i32"}
    return CompileSpec(
        label=f"paged_keys_m/{layout}/{path}/D{head_dim}/P{page_size}/N{next_n}/H{heads}", fn=paged_keys_m_kernel,
        types=pointers,
        constexprs={"N": next_n, "N_PAD": s.n_pad, "H": heads, "H_PAD": s.h_pad, "D": head_dim, "P": page_size,
                    "TILE_PAGES": s.tile_pages, "TILES": s.tiles, "NUM_STAGES": s.num_stages,
                    "KV_FORMAT": (FMT_MXFP4 if kv_dtype == "mxfp4" else FMT_FP8).value,
                    "TILED": layout == "mxfp4_tiled", "CTX_2D": False, "MX_MODE": s.mx_mode,
                    "PROMOTE_K": s.promote_k, "HAS_FLAG": False, "PDL": s.pdl, "FP8_HALVES": s.fp8_halves},
        num_warps=s.num_warps, aligned=(*pointers, "page_stride"), targets=(target.isa_target,),
        scaled_mfma=path == "dot_scaled" and head_dim >= 64, key_tile=(s.tile_pages * page_size, s.n_pad * s.h_pad))


#: (layout, D, P, next_n, H): the serving shape (D 128, P 64, H 32, N 1) of every layout, small head dims, a small
#: page (4 pages a tile), next_n 2, H 128, FP8's halves (next_n 2 x H 64) and D 256
ISA_SHAPES = (("fp8", 128, 64, 1, 32), ("mxfp4", 128, 64, 1, 32), ("mxfp4_tiled", 128, 64, 1, 32),
              ("fp8", 64, 16, 2, 32), ("mxfp4", 64, 16, 2, 32), ("mxfp4", 32, 64, 1, 32), ("fp8", 128, 64, 1, 128),
              ("fp8", 128, 64, 2, 64), ("mxfp4", 128, 64, 1, 128), ("mxfp4", 256, 64, 1, 32))


def isa_specs(kv_dtype: str | None = None) -> tuple[CompileSpec, ...]:
    """ISA_SHAPES (of `kv_dtype`, when given) on both GPU targets, each on its default path."""
    return tuple(isa_spec(layout, d, p, n, h, target) for target in (Target.NVIDIA, Target.AMD)
                 for layout, d, p, n, h in ISA_SHAPES
                 if kv_dtype is None or (layout == "fp8") == (kv_dtype == "fp8"))


# ============================================================================================ registry records
def _variant(name: str, kv_dtype: str, path: str | None, targets, summary: str) -> Variant:
    def settings(target: Target, call: DecodeCall) -> KeysMSettings:
        # a call of shapes only (tools.tune's sweep bases) has no tensors: the default tiles
        out = getattr(call, "out", None)
        grid = None if out is None else _grid(target, call.q_v.shape[0], call.cap, out.device)
        return keys_m_settings(target, kv_dtype, call.num_heads, call.next_n, call.page_size, path=path, grid=grid)

    def launch(c: DecodeCall, s: KeysMSettings) -> None:
        launch_paged_keys_m(c.q_v, c.q_s, c.kv_cache, c.weights, c.context_lens, c.block_table, c.out, cap=c.cap,
                            page_stride=c.page_stride, num_cache_pages=c.num_cache_pages, next_n=c.next_n,
                            num_heads=c.num_heads, head_dim=c.head_dim, page_size=c.page_size, kv_dtype=kv_dtype,
                            tiled=c.tiled, target=target_of(c.out.device, paged_keys_m_kernel), path=path,
                            settings=s, error_flag=c.error_flag)

    specs = [shape for shape in ISA_SHAPES if (shape[0] == "fp8") == (kv_dtype == "fp8")]
    return Variant(name=name, op=Op.DECODE, kv_dtype=kv_dtype, targets=frozenset(targets),
                   settings=settings, launch=launch,
                   precision=lambda head_dim, target: declared_precision(kv_dtype, head_dim, target, path),
                   isa_specs=lambda: tuple(isa_spec(*shape, target=t) for t in (Target.NVIDIA, Target.AMD)
                                           if t in targets for shape in specs),
                   summary=summary)


FP8_VARIANT = _variant("fp8_keys_m", "fp8", None, frozenset(Target),
                       "keys on the MMA's M axis, query rows on N, pipelined pages, grid from shapes")
MXFP4_FOLD_VARIANT = _variant("mxfp4_keys_m", "mxfp4", "fold", PATH_TARGETS["fold"],
                              "keys on M; e2m1 folded with its block scale into exact e4m3 (prmt), one FP8 MMA")
MXFP4_DOT_SCALED_VARIANT = _variant("mxfp4_keys_m_dot_scaled", "mxfp4", "dot_scaled", PATH_TARGETS["dot_scaled"],
                                    "keys on M with tl.dot_scaled (gfx950's scaled MFMA)")
