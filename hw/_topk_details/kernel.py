"""@triton.jit bodies of the top-k (launcher: hw/topk.py; semantics: DESIGN §4).

Two kernels, one algorithm. top_k_per_row_kernel runs one program per row (compiled GPUs). top_k_rows_kernel runs
a tile of ROWS rows per program, every step vectorised over the rows, and orders the selected candidates by ranking
instead of tl.sort: it exists for the CPU interpreter, where a Triton op costs about as much for one row as for
hundreds and tl.sort's xor reductions run element by element in Python.

A row's visible columns are start <= j < end. Every fp32 logit is mapped to an order-preserving uint32 *key*
(larger value -> larger key) computed from its bits, so comparisons are exact integer comparisons, independent of
denormal flushing or NaN compare rules:

    key 0                    invisible / padding (never selected)
    key 1                    NaN (any sign, any payload: all NaNs are equal and rank below -inf)
    key 0x007FFFFF           -inf
    key ~bits                other negative values (bits >= 0x80000000): larger magnitude -> smaller key
    key 0x80000000           +0.0 and -0.0 (equal values; -0.0 is canonicalised to +0.0 first)
    key bits | 0x80000000    positive values, up to +inf = 0xFF800000

The k-th largest key T is found by an exact radix select (4 passes of 8-bit digits, most significant first, each a
256-bin histogram of the candidates that match the digits chosen so far; the tile kernel gives row i the bins
i * 256 .. i * 256 + 255 of one histogram). Then everything with key > T is selected, plus the first `take_eq`
columns (in index order) with key == T, where take_eq is what is left of k after the larger keys: that is exactly
the (value desc, index asc) tie rule, so no tied candidate is ever dropped or duplicated. The selected column
indices are compacted into the output row (used as scratch) and read back with their keys; the 64-bit composite
(signed key << 32 | (index ^ (2^31 - 1))) orders them by (value desc, index asc) as plain descending order. The
row kernel sorts the composites; the tile kernel stores each selected index at its rank (the number of selected
composites greater than its own; composites are distinct because indices are). Slots past the number of visible
columns are -1.

Memory traffic per row: 5 passes over the visible range (4 histograms + 1 compaction) and k gathered reloads (the
tile kernel: 1 + K_PAD / RANK_CHUNK reloads).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .._constant import Constant

RADIX_BITS = 8
RADIX = 1 << RADIX_BITS           # histogram bins per pass
NUM_PASSES = 32 // RADIX_BITS     # digits of a 32-bit key

_RADIX_BITS = Constant(RADIX_BITS)
_RADIX = Constant(RADIX)
_NUM_PASSES = Constant(NUM_PASSES)
_DIGIT_MASK = Constant(RADIX - 1)
_KEY_NONE = Constant(0)                  # invisible column or empty slot
_KEY_NAN = Constant(1)                   # NaN ranks below -inf
_SIGN = Constant(0x80000000)             # fp32 sign bit; also the key of +-0.0
_NO_KEY = Constant(0xFFFFFFFF)           # threshold that selects nothing (no key reaches it)
_INT32_MAX = Constant(0x7FFFFFFF)
_EMPTY_SLOT = Constant(-(2 ** 63))       # composite of an empty slot: below every real composite


@triton.jit
def _order_key(x, visible, ZERO_BY_ADD: tl.constexpr = False):
    """uint32 key of fp32 `x` (see the module docstring); 0 where `visible` is False. ZERO_BY_ADD: -0.0 made +0.0
    by adding +0.0 (exact: fp32 adds keep denormals, no flush to zero, on every target compiled for) instead of a
    compare and a select."""
    if ZERO_BY_ADD:
        bits = (x + 0.0).to(tl.uint32, bitcast=True)
    else:
        bits = x.to(tl.uint32, bitcast=True)
        bits = tl.where(bits == _SIGN, 0, bits)                   # -0.0 == +0.0
    # negative values: every bit flipped; the others: the sign bit set (the sign spread by an arithmetic shift)
    flip = (bits.to(tl.int32, bitcast=True) >> 31).to(tl.uint32, bitcast=True) | _SIGN
    key = tl.where(x != x, _KEY_NAN, bits ^ flip)                 # NaN ranks below -inf
    return tl.where(visible, key, _KEY_NONE).to(tl.uint32)


@triton.jit
def _keys_at(row_ptr, cols, visible):
    """Keys of the logits at columns `cols` of the rows at `row_ptr`; 0 (and not read) where `visible` is False."""
    return _order_key(tl.load(row_ptr + cols, mask=visible, other=0.0), visible)


@triton.jit
def _sort_composite(key, idx):
    """int64 that orders (key desc, idx asc) as plain descending order: signed key << 32 | (2^31 - 1 - idx).
    Distinct for distinct idx >= 0; key 0 (invisible / empty) gives the least composites."""
    signed_key = (key ^ _SIGN).to(tl.int32, bitcast=True)        # same order as key, as a signed int
    return (signed_key.to(tl.int64) << 32) | (idx ^ _INT32_MAX).to(tl.int64)


@triton.jit
def _selected(row_ptr, out_row, slots, filled):
    """(column index, sort composite) of the compacted slots `slots` of the rows; composite as in
    _sort_composite, for empty slots (filled False) the least possible one."""
    idx = tl.load(out_row + slots, mask=filled, other=0)
    return idx, _sort_composite(_keys_at(row_ptr, idx, filled), idx)


@triton.jit
def top_k_per_row_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] first visible column (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows] one past the last visible column (clamped to width)
    out_ptr,              # *i32 [rows, k] contiguous
    width,                # i32 W
    stride_row,           # i64/i32 elements between rows of logits
    k,                    # i32, 1 <= k <= K_PAD
    HAS_STARTS: tl.constexpr,
    K_PAD: tl.constexpr,  # power of two >= k: the register-resident sort size
    BLOCK: tl.constexpr,  # columns per chunk of the streaming passes
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    out_row = out_ptr + row * k

    end = tl.minimum(tl.load(ends_ptr + row), width)
    if HAS_STARTS:
        start = tl.maximum(tl.load(starts_ptr + row), 0)
    else:
        start = 0
    # how many real indices this row outputs (end - start could wrap in int32: end may be -2^31)
    k_eff = tl.minimum(tl.maximum(end, start) - start, k)

    # ---- radix select: the exact key T of the k_eff-th largest visible logit
    bins = tl.arange(0, _RADIX)
    prefix = tl.zeros([1], dtype=tl.uint32)     # digits of T chosen so far
    known = tl.zeros([1], dtype=tl.uint32)      # which bits of T are chosen
    remaining = tl.zeros([1], dtype=tl.int32) + k_eff   # how many more to take among the matching keys
    for p in tl.static_range(_NUM_PASSES):
        shift = 32 - _RADIX_BITS * (p + 1)     # constexpr: p is a static_range index
        counts = tl.zeros([_RADIX], dtype=tl.int32)
        for off in range(start, end, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            inside = cols < end
            key = _keys_at(row_ptr, cols, inside)
            match = inside & ((key & known) == prefix)
            digit = ((key >> shift) & _DIGIT_MASK).to(tl.int32)
            counts += tl.histogram(digit, _RADIX, mask=match)
        above = tl.cumsum(counts, 0, reverse=True) - counts     # matching keys in strictly higher bins
        hit = (above < remaining) & (remaining <= above + counts)
        digit_t = tl.max(tl.where(hit, bins, 0), 0)              # the one bin holding the k_eff-th key
        remaining -= tl.sum(tl.where(bins == digit_t, above, 0), 0)
        prefix |= digit_t.to(tl.uint32) << shift
        known |= tl.full([1], _DIGIT_MASK, tl.uint32) << shift
    threshold = tl.where(k_eff > 0, prefix, _NO_KEY).to(tl.uint32)
    take_eq = remaining                                           # keys == T to take, lowest indices first

    # ---- compaction: selected column indices, in column order, into out_row[0:k_eff]
    n_eq = tl.zeros([1], dtype=tl.int32)
    n_sel = tl.zeros([1], dtype=tl.int32)
    for off in range(start, end, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        inside = cols < end
        key = _keys_at(row_ptr, cols, inside)
        eq = (key == threshold).to(tl.int32)
        eq_rank = n_eq + tl.cumsum(eq, 0) - eq
        sel = ((key > threshold) | ((eq != 0) & (eq_rank < take_eq))).to(tl.int32)
        slot = n_sel + tl.cumsum(sel, 0) - sel
        tl.store(out_row + slot, cols, mask=sel != 0)
        n_eq += tl.sum(eq, 0)
        n_sel += tl.sum(sel, 0)
    tl.debug_barrier()   # other threads of this program read back what was just stored

    # ---- order the k_eff selected by (value desc, index asc); pad with -1
    slots = tl.arange(0, K_PAD)
    filled = slots < k_eff
    _, composite = _selected(row_ptr, out_row, slots, filled)
    composite = tl.sort(tl.where(filled, composite, _EMPTY_SLOT), descending=True)
    result = tl.where(composite == _EMPTY_SLOT, -1, composite.to(tl.int32) ^ _INT32_MAX)
    tl.store(out_row + slots, result, mask=slots < k)


@triton.jit
def top_k_rows_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] first visible column (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows] one past the last visible column (clamped to width)
    out_ptr,              # *i32 [rows, k] contiguous
    rows,                 # i32 number of rows
    width,                # i32 W
    stride_row,           # i64/i32 elements between rows of logits
    k,                    # i32, 1 <= k <= K_PAD
    HAS_STARTS: tl.constexpr,
    K_PAD: tl.constexpr,  # power of two >= k: the slots ranked per row
    ROWS: tl.constexpr,   # rows per program
    BLOCK: tl.constexpr,  # columns per chunk of the streaming passes
    RANK_CHUNK: tl.constexpr,   # power of two <= K_PAD: slots compared at a time when ranking
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)   # [ROWS]
    live = row < rows
    row_ptr = (logits_ptr + row * stride_row)[:, None]                # [ROWS, 1]
    out_row = (out_ptr + row * k)[:, None]

    end = tl.minimum(tl.load(ends_ptr + row, mask=live, other=0), width)
    if HAS_STARTS:
        start = tl.maximum(tl.load(starts_ptr + row, mask=live, other=0), 0)
    else:
        start = tl.zeros([ROWS], dtype=tl.int32)
    k_eff = tl.minimum(tl.maximum(end, start) - start, k)    # not end - start, which could wrap in int32
    first, last = tl.min(start, 0), tl.max(end, 0)    # the column span any row of this program sees
    start, end = start[:, None], end[:, None]

    # ---- radix select, every row at once: row i's histogram is bins i * RADIX .. i * RADIX + RADIX - 1
    bins = tl.arange(0, _RADIX)[None, :]
    row_bins = tl.arange(0, ROWS)[:, None] * _RADIX
    prefix = tl.zeros([ROWS], dtype=tl.uint32)
    known = tl.zeros([1], dtype=tl.uint32)
    remaining = k_eff
    for p in tl.static_range(_NUM_PASSES):
        shift = 32 - _RADIX_BITS * (p + 1)
        counts = tl.zeros([ROWS * _RADIX], dtype=tl.int32)
        for off in range(first, last, BLOCK):
            cols = off + tl.arange(0, BLOCK)[None, :]
            inside = (cols >= start) & (cols < end)
            key = _keys_at(row_ptr, cols, inside)
            match = inside & ((key & known) == prefix[:, None])
            digit = ((key >> shift) & _DIGIT_MASK).to(tl.int32) + row_bins
            counts += tl.histogram(tl.reshape(digit, [ROWS * BLOCK]), ROWS * _RADIX,
                                   mask=tl.reshape(match, [ROWS * BLOCK]))
        row_counts = tl.reshape(counts, [ROWS, _RADIX])
        above = tl.cumsum(row_counts, 1, reverse=True) - row_counts
        want = remaining[:, None]
        hit = (above < want) & (want <= above + row_counts)
        digit_t = tl.max(tl.where(hit, bins, 0), 1)
        remaining -= tl.sum(tl.where(bins == digit_t[:, None], above, 0), 1)
        prefix |= digit_t.to(tl.uint32) << shift
        known |= tl.full([1], _DIGIT_MASK, tl.uint32) << shift
    threshold = tl.where(k_eff > 0, prefix, _NO_KEY).to(tl.uint32)[:, None]
    take_eq = remaining[:, None]

    # ---- compaction into out_row[0:k_eff]
    n_eq = tl.zeros([ROWS, 1], dtype=tl.int32)
    n_sel = tl.zeros([ROWS, 1], dtype=tl.int32)
    for off in range(first, last, BLOCK):
        cols = off + tl.arange(0, BLOCK)[None, :]
        inside = (cols >= start) & (cols < end)
        key = _keys_at(row_ptr, cols, inside)
        eq = (key == threshold).to(tl.int32)
        eq_rank = n_eq + tl.cumsum(eq, 1) - eq
        sel = ((key > threshold) | ((eq != 0) & (eq_rank < take_eq))).to(tl.int32)
        slot = n_sel + tl.cumsum(sel, 1) - sel
        tl.store(out_row + slot, tl.broadcast_to(cols, [ROWS, BLOCK]), mask=sel != 0)
        n_eq += tl.sum(eq, 1, keep_dims=True)
        n_sel += tl.sum(sel, 1, keep_dims=True)
    tl.debug_barrier()   # other threads of this program read back what was just stored

    # ---- order: selected slot i goes to position rank_i = #(selected composites greater than its own); all
    # composites are distinct (distinct indices) and every filled slot outranks every empty one
    slots = tl.arange(0, K_PAD)[None, :]
    filled = slots < k_eff[:, None]
    idx, composite = _selected(row_ptr, out_row, slots, filled)
    composite = composite[:, :, None]
    rank = tl.zeros([ROWS, K_PAD], dtype=tl.int32)
    for other in range(0, K_PAD, RANK_CHUNK):   # [ROWS, K_PAD, RANK_CHUNK] comparisons at a time
        other_slots = other + tl.arange(0, RANK_CHUNK)[None, :]
        _, other_composite = _selected(row_ptr, out_row, other_slots, other_slots < k_eff[:, None])
        rank += tl.sum((other_composite[:, None, :] > composite).to(tl.int32), 2)
    tl.debug_barrier()   # every slot of the row was read before any is overwritten
    tl.store(out_row + rank, idx, mask=filled)
    tl.store(out_row + slots, -1, mask=(slots >= k_eff[:, None]) & (slots < k) & live[:, None])
