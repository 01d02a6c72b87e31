"""Gather of quantized K tokens from a paged cache into contiguous rows (vLLM's cp_gather_indexer_k_quant_cache).

Output row i belongs to the sequence b with cu_seq_lens[b] <= i < cu_seq_lens[b + 1] and is that sequence's token
pos = i - cu_seq_lens[b], found in physical page block_table[b, pos // P] at token pos % P. Page offsets are the
writer's (hw/_quant_details/page_offsets.py), so reader and writer cannot disagree on a layout.

Nothing is read outside the view, whatever the integer inputs hold. A row of a sequence whose token cannot be read
(its page id is outside [0, num_pages), its logical page is past the block-table row, or cu_seq_lens decreases so
that pos < 0) comes out as the NaN token (what the writer stores for a non-finite row: FP8 values 0x7F and scale
NaN; MXFP4 codes 0 and scale byte 255); rows past cu_seq_lens[-1] (padding) come out as zero bytes. With HAS_FLAG
the kernels report these cases and a malformed cu_seq_lens to the error flag (hw/_error_flag.py).
"""
import triton
import triton.language as tl

from .._constant import Constant
from .._error_flag import (
    INT32_MAX,
    INT32_MIN,
    KIND_CONTEXT_PAST_TABLE,
    KIND_CU_SEQ_LENS,
    KIND_PAGE_ID,
    report,
    report_if,
)
from .._quant_details.codecs import E8M0_NAN
from .._quant_details.page_offsets import (
    MX_BLOCK,
    SCALE_BYTES,
    fp8_scale_offsets,
    fp8_value_offsets,
    mxfp4_scale_offsets,
    mxfp4_value_offsets,
)

FP8_NAN_BYTE = Constant(0x7F)
F32_QNAN_BITS = Constant(0x7FC00000)


@triton.jit
def _locate_rows(block_table_ptr, cu_ptr, num_rows, batch, max_pages, num_pages, stride_bt0, stride_bt1,
                 page_stride, cache_ptr, P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr):
    """This program's output rows (int64), whether each is live (< num_rows), has a token to copy (inside a
    sequence, with an in-range page id), and is a NaN token (inside a sequence without one; the rest is padding,
    written as zeros), the page base and the token in the page (int32) of each, plus what the flag reports: the
    row's sequence, position in it and page id."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    live = rows < num_rows
    # seq = number of sequence ends cu_seq_lens[1..B] at or before the row (a counting search, BLOCK_B at a time).
    seq = tl.zeros((BLOCK_T,), dtype=tl.int32)
    for b0 in range(0, batch, BLOCK_B):
        b = b0 + tl.arange(0, BLOCK_B)
        ends = tl.load(cu_ptr + 1 + b, mask=b < batch, other=INT32_MAX)
        seq += tl.sum((ends[None, :] <= rows[:, None]).to(tl.int32), axis=1)
    in_seq = live & (seq < batch)
    start = tl.load(cu_ptr + seq, mask=in_seq, other=0)
    pos = rows - start
    logical_page = pos // P
    in_table = in_seq & (pos >= 0) & (logical_page < max_pages)  # pos < 0: a cu_seq_lens that decreases
    page = tl.load(block_table_ptr + seq.to(tl.int64) * stride_bt0 + logical_page * stride_bt1, mask=in_table,
                   other=0)
    ok = in_table & (page >= 0) & (page < num_pages)  # never read outside the view, whatever the block table holds
    base = cache_ptr + tl.where(ok, page, 0).to(tl.int64) * page_stride
    return rows, live, ok, in_seq & ~ok, base, tl.where(ok, pos % P, 0).to(tl.int32), seq, pos, page


@triton.jit
def _report(flag_ptr, cu_ptr, num_rows, batch, max_pages, bad, seq, pos, page, P: tl.constexpr,
            BLOCK_B: tl.constexpr):
    """Report this program's NaN tokens (an out-of-range page id: the largest; a position past the table: the
    largest position + 1; pos < 0 comes from a decreasing cu_seq_lens, which program 0 reports) and, from program
    0, a malformed cu_seq_lens."""
    bad_id = bad & (pos >= 0) & (pos // P < max_pages)
    past = bad & (pos // P >= max_pages)
    report_if(flag_ptr, KIND_PAGE_ID, tl.max(bad_id.to(tl.int32)) > 0, tl.max(tl.where(bad_id, seq, -1)),
              tl.max(tl.where(bad_id, page, INT32_MIN)), True)
    report_if(flag_ptr, KIND_CONTEXT_PAST_TABLE, tl.max(past.to(tl.int32)) > 0, tl.max(tl.where(past, seq, -1)),
              tl.max(tl.where(past, pos + 1, 0)), True)
    if tl.program_id(0) == 0:
        first = tl.load(cu_ptr)
        report_if(flag_ptr, KIND_CU_SEQ_LENS, first != 0, 0, first, True)
        drop = INT32_MAX          # the first b + 1 with cu_seq_lens[b + 1] < cu_seq_lens[b]
        for b0 in range(0, batch, BLOCK_B):
            b = b0 + tl.arange(0, BLOCK_B)
            lo = tl.load(cu_ptr + b, mask=b < batch, other=0)
            hi = tl.load(cu_ptr + 1 + b, mask=b < batch, other=0)
            drop = tl.minimum(drop, tl.min(tl.where((b < batch) & (hi < lo), b + 1, INT32_MAX)))
        if drop != INT32_MAX:
            report(flag_ptr, KIND_CU_SEQ_LENS, drop, tl.load(cu_ptr + drop))
        last = tl.load(cu_ptr + batch)
        report_if(flag_ptr, KIND_CU_SEQ_LENS, last > num_rows, batch, last, True)


@triton.jit
def gather_fp8_kernel(cache_ptr, block_table_ptr, cu_ptr, values_ptr, scales_ptr, flag_ptr,
                      num_rows, batch, max_pages, num_pages, page_stride, stride_bt0, stride_bt1,
                      D: tl.constexpr, D_PAD: tl.constexpr, P: tl.constexpr,
                      BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr, HAS_FLAG: tl.constexpr):
    """-> values uint8 [num_rows, D] (e4m3fn bytes), scale bits int32 [num_rows] (the fp32 scale's 4 LE bytes)."""
    rows, live, ok, nan, base, t, seq, pos, page = _locate_rows(block_table_ptr, cu_ptr, num_rows, batch, max_pages,
                                                               num_pages, stride_bt0, stride_bt1, page_stride,
                                                               cache_ptr, P, BLOCK_T, BLOCK_B)
    d = tl.arange(0, D_PAD)
    in_d = (d < D)[None, :]
    v = tl.load(base[:, None] + fp8_value_offsets(t, d, D), mask=ok[:, None] & in_d, other=0)
    v = tl.where(nan[:, None], FP8_NAN_BYTE, v)
    tl.store(values_ptr + rows[:, None] * D + d[None, :], v, mask=live[:, None] & in_d)
    i = tl.arange(0, SCALE_BYTES)
    sb = tl.load(base[:, None] + fp8_scale_offsets(t, i, P, D), mask=ok[:, None], other=0).to(tl.int32)
    bits = tl.where(nan, F32_QNAN_BITS, tl.sum(sb << (8 * i)[None, :], axis=1))    # disjoint bits: sum == or
    tl.store(scales_ptr + rows, bits, mask=live)
    if HAS_FLAG:
        _report(flag_ptr, cu_ptr, num_rows, batch, max_pages, nan, seq, pos, page, P, BLOCK_B)


@triton.jit
def gather_mxfp4_kernel(cache_ptr, block_table_ptr, cu_ptr, codes_ptr, scales_ptr, flag_ptr,
                        num_rows, batch, max_pages, num_pages, page_stride, stride_bt0, stride_bt1,
                        D: tl.constexpr, D_PAD: tl.constexpr, P: tl.constexpr, TILED: tl.constexpr,
                        BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr, HAS_FLAG: tl.constexpr):
    """-> codes uint8 [num_rows, D/2] (low nibble = even element), E8M0 scales uint8 [num_rows, D/32]."""
    rows, live, ok, nan, base, t, seq, pos, page = _locate_rows(block_table_ptr, cu_ptr, num_rows, batch, max_pages,
                                                               num_pages, stride_bt0, stride_bt1, page_stride,
                                                               cache_ptr, P, BLOCK_T, BLOCK_B)
    j = tl.arange(0, D_PAD // 2)
    in_j = (j < D // 2)[None, :]
    c = tl.load(base[:, None] + mxfp4_value_offsets(t, j, P, D, TILED), mask=ok[:, None] & in_j, other=0)
    tl.store(codes_ptr + rows[:, None] * (D // 2) + j[None, :], c, mask=live[:, None] & in_j)
    g = tl.arange(0, D_PAD // MX_BLOCK)
    in_g = (g < D // MX_BLOCK)[None, :]
    s = tl.load(base[:, None] + mxfp4_scale_offsets(t, g, P, D, TILED), mask=ok[:, None] & in_g, other=0)
    s = tl.where(nan[:, None], E8M0_NAN, s)
    tl.store(scales_ptr + rows[:, None] * (D // MX_BLOCK) + g[None, :], s, mask=live[:, None] & in_g)
    if HAS_FLAG:
        _report(flag_ptr, cu_ptr, num_rows, batch, max_pages, nan, seq, pos, page, P, BLOCK_B)
