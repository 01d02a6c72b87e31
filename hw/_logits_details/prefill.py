"""Ragged prefill scorer kernel: logits[i, j] = sum_h w[i, h] * relu(q[i, h] . k[j]) for ks[i] <= j < ke[i].

Grid (cdiv(S, BLOCK_S), cdiv(SK, KEYS_PER_PROGRAM)). A program owns BLOCK_S query tokens (one MMA tile of
BLOCK_S * H_PAD rows) and a span of KEYS_PER_PROGRAM keys, which it walks in BLOCK_N-key steps (a `for` loop, so
the compiler can pipeline the key loads). Only the steps that meet the union of its rows' ranges [lo, hi) are
scored; keys outside [lo, hi) are never read. With clean_logits the other steps store -inf without any load.
"""
import triton
import triton.language as tl

from .._error_flag import report_ranges
from .scoring import fp8_tile, mxfp4_tile, weighted_head_sum

KV_FP8 = tl.constexpr(0)
KV_MXFP4 = tl.constexpr(1)


@triton.jit
def prefill_logits_kernel(
    q_v_ptr, q_s_ptr, k_v_ptr, k_s_ptr, w_ptr, ks_ptr, ke_ptr, out_ptr, flag_ptr,
    S, SK,
    stride_qv_s, stride_qv_h, stride_qs_s, stride_qs_h,
    stride_kv_t, stride_ks_t, stride_w_s, stride_out_s,
    H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr,
    BLOCK_S: tl.constexpr, BLOCK_N: tl.constexpr, KEYS_PER_PROGRAM: tl.constexpr,
    KV_FORMAT: tl.constexpr, MX_PATH: tl.constexpr, PROMOTE_K: tl.constexpr, CLEAN: tl.constexpr,
    HAS_FLAG: tl.constexpr,
):
    """q_v: fp8 bytes [S, H, D] or MXFP4 codes [S, H, D/2] (uint8); q_s: MXFP4 scales [S, H, D/32] (unused for
    fp8); k_v: [SK, D] e4m3 bytes or [SK, D/2] codes; k_s: fp32 [SK] or uint8 [SK, D/32]; w fp32 [S, H];
    ks/ke int32 [S]; out fp32 [S, SK]; flag int32 [4] error flag (HAS_FLAG: a range outside 0 <= ks <= ke <= SK
    is reported by the programs of the first key span). Innermost dimensions contiguous; strides in elements.
    Ranges are clamped: keys outside [0, SK) are never read."""
    pid_s = tl.program_id(0).to(tl.int64)
    span0 = tl.program_id(1) * KEYS_PER_PROGRAM
    span1 = tl.minimum(span0 + KEYS_PER_PROGRAM, SK)
    rows = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    row_in = rows < S
    ks = tl.load(ks_ptr + rows, mask=row_in, other=0)
    ke = tl.load(ke_ptr + rows, mask=row_in, other=0)
    if HAS_FLAG:
        if tl.program_id(1) == 0:
            report_ranges(flag_ptr, rows, row_in, ks, ke, SK)
    ke = tl.minimum(ke, SK)
    lo = tl.min(tl.where(ks < ke, ks, SK))      # union of the non-empty ranges of the block's rows
    hi = tl.max(ke)
    first = tl.maximum(span0, lo // BLOCK_N * BLOCK_N)     # scored steps: first <= j0 < last
    last = tl.minimum(span1, hi)
    n = tl.arange(0, BLOCK_N)
    out_rows = out_ptr + rows[:, None] * stride_out_s

    if CLEAN:   # steps of the span outside [first, last): -inf, nothing loaded
        for j0 in range(span0, span1, BLOCK_N):
            if (j0 < first) | (j0 >= last):
                cols = j0 + n
                tl.store(out_rows + cols[None, :], tl.full((BLOCK_S, BLOCK_N), float("-inf"), tl.float32),
                         mask=row_in[:, None] & (cols[None, :] < SK))

    m = tl.arange(0, BLOCK_S * H_PAD)
    m_row = pid_s * BLOCK_S + m // H_PAD
    m_head = m % H_PAD
    m_ok = (m_row < S) & (m_head < H)
    w = tl.load(w_ptr + m_row * stride_w_s + m_head, mask=m_ok, other=0.0)
    for j0 in range(first, last, BLOCK_N):
        cols = j0 + n
        k_ok = (cols >= lo) & (cols < hi)
        if KV_FORMAT == KV_MXFP4:
            scores = mxfp4_tile(q_v_ptr, q_s_ptr, m_row * stride_qv_s + m_head * stride_qv_h,
                                m_row * stride_qs_s + m_head * stride_qs_h, m_ok,
                                k_v_ptr, k_s_ptr, cols * stride_kv_t, cols * stride_ks_t, k_ok, 16, 1,
                                D, MX_PATH)
        else:
            k_scale = tl.load(k_s_ptr + cols * stride_ks_t, mask=k_ok, other=1.0)
            scores = fp8_tile(q_v_ptr, m_row * stride_qv_s + m_head * stride_qv_h, m_ok,
                              k_v_ptr, cols * stride_kv_t, k_ok, k_scale, D, PROMOTE_K)
        logits = weighted_head_sum(scores, w, m_ok, BLOCK_S, H_PAD)
        visible = row_in[:, None] & (cols[None, :] >= ks[:, None]) & (cols[None, :] < ke[:, None])
        if CLEAN:
            tl.store(out_rows + cols[None, :], tl.where(visible, logits, float("-inf")),
                     mask=row_in[:, None] & (cols[None, :] < SK))
        else:
            tl.store(out_rows + cols[None, :], logits, mask=visible)
