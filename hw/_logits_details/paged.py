"""Persistent paged decode scorer kernel.

Grid = num_sms programs. Program p walks the work items (b, c) -- sequence b, page c of its block-table row -- in
lexicographic order from schedule[p] up to (excluding) schedule[p + 1] (see schedule.py), PAGES_PER_STEP items of
one sequence per step. The schedule is checked, not trusted: each program derives its two entries from
context_lens (one pass over the B lengths, _derive_run) and compares; a schedule_meta of other context lengths, of
another batch or of another library (DeepGEMM's has the same shape and counts 256-token segments) is reported
(ErrorKind.SCHEDULE) and the derived entries are used, so the logits are right whatever schedule_meta holds.

An item scores all N = next_n query rows of sequence b (N * H_PAD MMA rows, so the page is loaded once for the N
draft tokens) against the P tokens of page block_table[b, c], and stores row b*N + n,
columns c*P .. c*P + P - 1, masked to the row's visible count. A page is read only when c*P < max_n visible(b, n):
block-table entries and pages past a row's visible span are never touched; tokens past it inside the last page
are not read either. A page whose block-table entry lies past the table (a context longer than max_pages * P) or
outside [0, num_cache_pages) is not read: its visible logits are NaN (one compare per page).

Addressing: page offset = page_id.to(int64) * page_stride (one 64-bit rebase per page) plus a 32-bit page-local
offset (DESIGN §2, §3) from hw/_quant_details/page_offsets.py, the functions the writer and the gather use, so the
scorer cannot read a layout the writer did not write.
"""
import triton
import triton.language as tl

from .._error_flag import INT32_MIN, KIND_CONTEXT_PAST_TABLE, KIND_PAGE_ID, KIND_SCHEDULE, report_if
from .._quant_details.page_offsets import (
    fp8_scale_base,
    fp8_scale_token_offset,
    fp8_value_token_offset,
    mxfp4_scale_base,
    mxfp4_scale_block_stride,
    mxfp4_scale_offset,
    mxfp4_value_block_stride,
    mxfp4_value_token_offset,
)
from .prefill import KV_MXFP4
from .scoring import fp8_tile, mxfp4_tile, weighted_head_sum

BLOCK_B = tl.constexpr(128)     # context lengths per step of _derive_run's pass over the batch


@triton.jit
def _sequence_lengths(ctx_ptr, b, stride_ctx_b, n, N: tl.constexpr, CTX_2D: tl.constexpr, cap):
    """(schedule length, visible[N_PAD]) of sequence b.

    schedule length = max(0, max_n context_lens[b, n]) (2-D) or max(0, context_lens[b]) (1-D): exactly what
    schedule.py counts pages of. visible(b, n) = DESIGN §4's ctx(b, n) clamped to cap = max_context_len (the
    columns past the table are NaN); 0 for the padding n >= N.
    """
    if CTX_2D:
        raw = tl.load(ctx_ptr + b * stride_ctx_b + n, mask=n < N, other=0)
    else:
        last = tl.load(ctx_ptr + b * stride_ctx_b)
        behind = N - 1 - n                  # draft tokens after row n: subtracted only from a larger last,
        raw = tl.where((n < N) & (last > behind), last - behind, 0)     # so that int32 never wraps
    raw = tl.maximum(raw, 0)
    return tl.max(raw), tl.minimum(raw, cap)


@triton.jit
def _sequence_chunks(ctx_ptr, bb, batch, stride_ctx_b, N: tl.constexpr, N_PAD: tl.constexpr,
                     CTX_2D: tl.constexpr, P: tl.constexpr):
    """int64 [BLOCK_B] work items of sequences bb (0 past the batch): cdiv(schedule length, P), the schedule
    length of _sequence_lengths."""
    if CTX_2D:
        n = tl.arange(0, N_PAD)
        raw = tl.load(ctx_ptr + bb[:, None] * stride_ctx_b + n[None, :], mask=(bb < batch)[:, None] & (n < N)[None, :],
                      other=0)
        length = tl.max(raw, axis=1)
    else:
        length = tl.load(ctx_ptr + bb * stride_ctx_b, mask=bb < batch, other=0)
    return (tl.maximum(length, 0).to(tl.int64) + (P - 1)) // P


@triton.jit
def _derive_run(ctx_ptr, batch, stride_ctx_b, pid, num_programs, N: tl.constexpr, N_PAD: tl.constexpr,
                CTX_2D: tl.constexpr, P: tl.constexpr):
    """(r, c, r_end, c_end): entries pid and pid + 1 of get_paged_mqa_logits_metadata(context_lens, P,
    num_programs), derived on the device as schedule.py defines them (item s = floor(pid * total / num_programs),
    r = the number of sequences whose items all precede s, c = s - the items before r)."""
    total = tl.zeros((), tl.int64)
    for b0 in range(0, batch, BLOCK_B):
        total += tl.sum(_sequence_chunks(ctx_ptr, b0 + tl.arange(0, BLOCK_B), batch, stride_ctx_b, N, N_PAD, CTX_2D,
                                         P), axis=0)
    s0 = pid * total // num_programs
    s1 = (pid + 1) * total // num_programs
    r0 = tl.zeros((), tl.int64)
    r1 = tl.zeros((), tl.int64)
    f0 = tl.zeros((), tl.int64)
    f1 = tl.zeros((), tl.int64)
    before = tl.zeros((), tl.int64)
    for b0 in range(0, batch, BLOCK_B):
        bb = b0 + tl.arange(0, BLOCK_B)
        chunks = _sequence_chunks(ctx_ptr, bb, batch, stride_ctx_b, N, N_PAD, CTX_2D, P)
        ends = before + tl.cumsum(chunks, axis=0)
        done0 = (bb < batch) & (ends <= s0)
        done1 = (bb < batch) & (ends <= s1)
        r0 += tl.sum(done0.to(tl.int64), axis=0)
        r1 += tl.sum(done1.to(tl.int64), axis=0)
        f0 += tl.sum(tl.where(done0, chunks, 0), axis=0)
        f1 += tl.sum(tl.where(done1, chunks, 0), axis=0)
        before += tl.sum(chunks, axis=0)
    return r0.to(tl.int32), (s0 - f0).to(tl.int32), r1.to(tl.int32), (s1 - f1).to(tl.int32)


@triton.jit
def paged_logits_kernel(
    q_v_ptr, q_s_ptr, cache_ptr, w_ptr, ctx_ptr, bt_ptr, sched_ptr, out_ptr, flag_ptr,
    cap, page_stride, batch, max_pages, num_cache_pages,
    stride_qv_b, stride_qv_n, stride_qv_h, stride_qs_b, stride_qs_n, stride_qs_h,
    stride_w_r, stride_ctx_b, stride_bt_b, stride_out_r,
    N: tl.constexpr, N_PAD: tl.constexpr, H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, P: tl.constexpr,
    PAGES_PER_STEP: tl.constexpr,
    KV_FORMAT: tl.constexpr, TILED: tl.constexpr, CTX_2D: tl.constexpr, MX_PATH: tl.constexpr,
    PROMOTE_K: tl.constexpr, HAS_FLAG: tl.constexpr,
):
    """q_v: fp8 bytes [B, N, H, D] or MXFP4 codes [B, N, H, D/2]; q_s: MXFP4 scales [B, N, H, D/32]; cache: uint8
    view base; w fp32 [B*N, H]; ctx int32 [B] or [B, N]; bt int32 [B, max_pages]; sched int32 [num_sms + 1, 2];
    out fp32 [B*N, W]; flag int32 [4] (HAS_FLAG). batch = B; cache pages 0 .. num_cache_pages - 1. Innermost
    dimensions contiguous; strides in elements.

    A step scores up to PAGES_PER_STEP consecutive items (pages) of one sequence inside the program's run, as one
    [N_PAD * H_PAD, PAGES_PER_STEP * P] tile, so that several pages' loads are in flight at once."""
    pid = tl.program_id(0).to(tl.int64)
    r, c, r_end, c_end = _derive_run(ctx_ptr, batch, stride_ctx_b, pid, tl.num_programs(0), N, N_PAD, CTX_2D, P)
    if HAS_FLAG:
        given_r = tl.load(sched_ptr + 2 * pid)
        given = (given_r != r) | (tl.load(sched_ptr + 2 * pid + 1) != c)
        given |= (tl.load(sched_ptr + 2 * pid + 2) != r_end) | (tl.load(sched_ptr + 2 * pid + 3) != c_end)
        report_if(flag_ptr, KIND_SCHEDULE, given, pid, given_r, True)
    past_seq = tl.full((), -1, tl.int32)    # HAS_FLAG: a sequence longer than its table met here, its visible count
    past_ctx = tl.zeros((), tl.int32)
    bad_seq = tl.full((), -1, tl.int32)     # ... a sequence with an out-of-range page id, and the id
    bad_id = tl.zeros((), tl.int32)

    n = tl.arange(0, N_PAD)
    m = tl.arange(0, N_PAD * H_PAD)
    m_n = m // H_PAD
    m_head = m % H_PAD
    m_ok = (m_n < N) & (m_head < H)
    t = tl.arange(0, PAGES_PER_STEP * P)      # token of the step
    t_page = t // P                           # its page within the step
    t_in = t % P                              # its page-local token
    if KV_FORMAT == KV_MXFP4:   # per-token offsets + per-block strides of the writer's layout (planar or tiled)
        k_loc_v = mxfp4_value_token_offset(t_in, P, D, TILED)
        k_blk_v = mxfp4_value_block_stride(P, TILED)
        k_loc_s = mxfp4_scale_offset(t_in, 0, P, D, TILED)
        k_blk_s = mxfp4_scale_block_stride(P, TILED)

    while (r < r_end) | ((r == r_end) & (c < c_end)):
        b = r.to(tl.int64)
        length, visible = _sequence_lengths(ctx_ptr, b, stride_ctx_b, n, N, CTX_2D, cap)
        num_chunks = ((length.to(tl.int64) + (P - 1)) // P).to(tl.int32)     # no int32 overflow near 2^31
        vis_max = tl.max(visible)
        stop = tl.where(r == r_end, tl.minimum(c_end, num_chunks), num_chunks)   # this run's items of row r
        # ... that hold visible tokens (a cdiv without the int32 overflow of vis_max + P - 1)
        stop_read = tl.minimum(stop, vis_max // P + (vis_max % P != 0).to(tl.int32))
        if c < stop_read:
            page = c + t_page
            tok = c * P + t
            in_table = (page < stop_read) & (page < max_pages)
            page_id = tl.load(bt_ptr + b * stride_bt_b + page, mask=in_table, other=0)
            id_ok = (page_id >= 0) & (page_id < num_cache_pages)
            page_ok = in_table & id_ok                                  # one compare per page, not per element
            k_ok = page_ok & (tok < vis_max)
            page_off = tl.where(page_ok, page_id, 0).to(tl.int64) * page_stride     # the 64-bit rebase
            if HAS_FLAG:
                past = tl.max(((page < stop_read) & (page >= max_pages)).to(tl.int32)) > 0
                past_seq = tl.where(past, r, past_seq)
                past_ctx = tl.where(past, vis_max, past_ctx)
                bad = in_table & ~id_ok
                any_bad = tl.max(bad.to(tl.int32)) > 0
                bad_seq = tl.where(any_bad, r, bad_seq)
                bad_id = tl.where(any_bad, tl.max(tl.where(bad, page_id, INT32_MIN)), bad_id)
            if KV_FORMAT == KV_MXFP4:
                scores = mxfp4_tile(q_v_ptr, q_s_ptr,
                                    b * stride_qv_b + m_n * stride_qv_n + m_head * stride_qv_h,
                                    b * stride_qs_b + m_n * stride_qs_n + m_head * stride_qs_h, m_ok,
                                    cache_ptr, cache_ptr + mxfp4_scale_base(P, D), page_off + k_loc_v,
                                    page_off + k_loc_s, k_ok, k_blk_v, k_blk_s, D, MX_PATH)
            else:
                scale_ptr = (cache_ptr + page_off + fp8_scale_base(P, D) + fp8_scale_token_offset(t_in))\
                    .to(tl.pointer_type(tl.float32))
                k_scale = tl.load(scale_ptr, mask=k_ok, other=float("nan"))      # a bad page's keys: NaN
                scores = fp8_tile(q_v_ptr, b * stride_qv_b + m_n * stride_qv_n + m_head * stride_qv_h, m_ok,
                                  cache_ptr, page_off + fp8_value_token_offset(t_in, D), k_ok, k_scale, D, PROMOTE_K)
            w = tl.load(w_ptr + (b * N + m_n) * stride_w_r + m_head, mask=m_ok, other=0.0)
            logits = weighted_head_sum(scores, w, m_ok, N_PAD, H_PAD)       # keys of a bad page: NaN (masked)
            out = out_ptr + (b * N + n)[:, None] * stride_out_r + tok[None, :]
            tl.store(out, logits, mask=(page < stop_read)[None, :] & (tok[None, :] < visible[:, None]))
        c = c + PAGES_PER_STEP
        # no visible token left in this run's items of the row (a context past max_context_len leaves items
        # without one): jump to stop, the row's end (next row) or this run's end (the loop ends)
        c = tl.where(c >= stop_read, tl.maximum(c, stop), c)
        next_row = c >= num_chunks
        r = tl.where(next_row, r + 1, r)
        c = tl.where(next_row, 0, c)
    report_if(flag_ptr, KIND_CONTEXT_PAST_TABLE, past_seq >= 0, past_seq, past_ctx, HAS_FLAG)
    report_if(flag_ptr, KIND_PAGE_ID, bad_seq >= 0, bad_seq, bad_id, HAS_FLAG)
