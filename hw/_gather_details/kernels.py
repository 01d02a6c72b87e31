"""Gather of quantized K tokens from a paged cache into contiguous rows (vLLM's cp_gather_indexer_k_quant_cache).

Output row i belongs to the sequence b with cu_seq_lens[b] <= i < cu_seq_lens[b + 1] and is that sequence's token
pos = i - cu_seq_lens[b], found in physical page block_table[b, pos // P] at token pos % P. Page offsets are the
writer's (hw/_quant_details/page_offsets.py), so reader and writer cannot disagree on a layout.
"""
import triton
import triton.language as tl

from .._quant_details.page_offsets import (
    MX_BLOCK,
    SCALE_BYTES,
    fp8_scale_offsets,
    fp8_value_offsets,
    mxfp4_scale_offsets,
    mxfp4_value_offsets,
)

INT32_MAX = tl.constexpr(2**31 - 1)


@triton.jit
def _locate_rows(block_table_ptr, cu_ptr, num_rows, batch, max_pages, num_pages, stride_bt0, stride_bt1,
                 page_stride, cache_ptr, P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr):
    """This program's output rows (int64), the page base of each, its token in the page (int32) and whether it
    has a token to copy (inside a sequence, with an in-range page id: anything else is written as zeros)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    live = rows < num_rows
    # seq = number of sequence ends cu_seq_lens[1..B] at or before the row (a counting search, BLOCK_B at a time).
    seq = tl.zeros((BLOCK_T,), dtype=tl.int32)
    for b0 in range(0, batch, BLOCK_B):
        b = b0 + tl.arange(0, BLOCK_B)
        ends = tl.load(cu_ptr + 1 + b, mask=b < batch, other=INT32_MAX)
        seq += tl.sum((ends[None, :] <= rows[:, None]).to(tl.int32), axis=1)
    has_seq = live & (seq < batch)
    start = tl.load(cu_ptr + seq, mask=has_seq, other=0)
    pos = rows - start
    logical_page = pos // P
    has_seq &= (pos >= 0) & (logical_page < max_pages)  # pos < 0 only for a cu_seq_lens not starting at 0
    page = tl.load(block_table_ptr + seq.to(tl.int64) * stride_bt0 + logical_page * stride_bt1, mask=has_seq,
                   other=0)
    ok = has_seq & (page >= 0) & (page < num_pages)  # never read outside the view, whatever the block table holds
    base = cache_ptr + tl.where(ok, page, 0).to(tl.int64) * page_stride
    return rows, live, ok, base, tl.where(ok, pos % P, 0).to(tl.int32)


@triton.jit
def gather_fp8_kernel(cache_ptr, block_table_ptr, cu_ptr, values_ptr, scales_ptr,
                      num_rows, batch, max_pages, num_pages, page_stride, stride_bt0, stride_bt1,
                      D: tl.constexpr, D_PAD: tl.constexpr, P: tl.constexpr,
                      BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr):
    """-> values uint8 [num_rows, D] (e4m3fn bytes), scale bits int32 [num_rows] (the fp32 scale's 4 LE bytes)."""
    rows, live, ok, base, t = _locate_rows(block_table_ptr, cu_ptr, num_rows, batch, max_pages, num_pages,
                                           stride_bt0, stride_bt1, page_stride, cache_ptr, P, BLOCK_T, BLOCK_B)
    d = tl.arange(0, D_PAD)
    in_d = (d < D)[None, :]
    v = tl.load(base[:, None] + fp8_value_offsets(t, d, D), mask=ok[:, None] & in_d, other=0)
    tl.store(values_ptr + rows[:, None] * D + d[None, :], v, mask=live[:, None] & in_d)
    i = tl.arange(0, SCALE_BYTES)
    sb = tl.load(base[:, None] + fp8_scale_offsets(t, i, P, D), mask=ok[:, None], other=0).to(tl.int32)
    tl.store(scales_ptr + rows, tl.sum(sb << (8 * i)[None, :], axis=1), mask=live)  # disjoint bits: sum == or


@triton.jit
def gather_mxfp4_kernel(cache_ptr, block_table_ptr, cu_ptr, codes_ptr, scales_ptr,
                        num_rows, batch, max_pages, num_pages, page_stride, stride_bt0, stride_bt1,
                        D: tl.constexpr, D_PAD: tl.constexpr, P: tl.constexpr, TILED: tl.constexpr,
                        BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr):
    """-> codes uint8 [num_rows, D/2] (low nibble = even element), E8M0 scales uint8 [num_rows, D/32]."""
    rows, live, ok, base, t = _locate_rows(block_table_ptr, cu_ptr, num_rows, batch, max_pages, num_pages,
                                           stride_bt0, stride_bt1, page_stride, cache_ptr, P, BLOCK_T, BLOCK_B)
    j = tl.arange(0, D_PAD // 2)
    in_j = (j < D // 2)[None, :]
    c = tl.load(base[:, None] + mxfp4_value_offsets(t, j, P, D, TILED), mask=ok[:, None] & in_j, other=0)
    tl.store(codes_ptr + rows[:, None] * (D // 2) + j[None, :], c, mask=live[:, None] & in_j)
    g = tl.arange(0, D_PAD // MX_BLOCK)
    in_g = (g < D // MX_BLOCK)[None, :]
    s = tl.load(base[:, None] + mxfp4_scale_offsets(t, g, P, D, TILED), mask=ok[:, None] & in_g, other=0)
    tl.store(scales_ptr + rows[:, None] * (D // MX_BLOCK) + g[None, :], s, mask=live[:, None] & in_g)
