"""Exact top-k in column order (`hw.top_k_per_row(..., sorted=False)`) for compiled GPUs and the interpreter.

The selection is the sorted top-k's, bit for bit (DESIGN §4: the k_eff = min(k, visible) largest visible keys by
(value desc, index asc), +inf > finite > -inf > NaN, -0.0 == +0.0); only the order differs: the selected columns
ascending, then -1 padding. A consumer that gathers the selected keys (sparse attention) needs the set; without
the order the selection is a threshold and one compaction in column order: no composites, no sort.

Keys and the narrowing of an inclusive key interval [lo, hi] are radix_fast's (its module docstring). From a
*terminal* state (ge_lo == k_eff, or lo == hi) the selection is every key > hi plus the first need = k_eff - above
keys inside [lo, hi] in column order, so a selected column's place in the output is

    (keys > hi before it) + min(keys inside [lo, hi] before it, need)

which `_store_columns` computes from one cumsum: ties at the threshold are decided by column, never by timing. When
ge_lo == k_eff (every key >= lo selected: the usual end on rows without ties at the threshold) the on-chip store
takes the place as the 1-based rank among keys >= lo, minus one (`_store_from`: one flag and one prefix a column).

Per row:
  visible <= k   every visible column, start .. end - 1, then -1: the row is not read (the short rows of a
                 causal prefill, about k of them per prompt).
  on chip        W <= tile_w: one program per row holds its columns in a register tile (for many rows, the narrowest of
                 radix_fast's tiers, the longest rows first), narrows on the whole tile until at most CAP keys are
                 inside (radix_fast._narrow_on_row: from the row's least and largest keys, a normal fit's guess and
                 secant probes first), narrows those to a terminal state on a CAP tile (compacted through scratch by
                 one atomic add a thread: the tile's order may change between launches; its rounds only count, and
                 so do the ranks that replace them in NVIDIA's launches of three programs an SM), then
                 stores the selection from the register tile (tiles of up to 4096 columns with several groups of 4 a
                 thread gather the places into column order first, so that the writes are contiguous). One read of
                 the row; each thread holds adjacent columns of it (_row_columns; for many rows on 8192-column tiles,
                 groups of 4 spread over the tile: row_layout), so the store's prefix in column order is one scan of
                 the threads' counts; with more rows than SMs, programs share an SM (fast.COLUMNS_MAXNREG).
                 A round on the whole tile that goes down from lo = the key of 0.0 without finding a key in the
                 upper half of [lo, hi] makes the next one probe lo + 1: when fewer than k_eff keys reach it,
                 every key left inside is 0.0 and the interval closes on it (the exact zeros of ReLU-degenerate
                 rows straddling the k-th place then take a few rounds, not 32).
  long           W > tile_w, two ways to a threshold tau and its candidates (the keys >= tau):
                 sweep (FastTiling.sweep_samples > 0: rows of up to 2^17 columns at k = 2048, sweep_samples): tau
                   from a sample of the row's keys (_sample_tau_kernel: runs of adjacent columns spread over the
                   visible ones; tau lets through the sample's expected count at the k-th key plus a margin), then
                   one sweep of every visible key (_sweep_kernel, chunks of `block` columns) appends the keys >= tau;
                   one read of the row instead of two kernels before the candidates;
                 maxima (wider rows): radix_fast's group maxima and tau, then the keys >= tau of the qualifying
                   groups only.
                 Either way the candidates are appended by chunks, in column order within a chunk, each chunk
                 recording its first slot and its count. The finishing program loads the tile as appended (slot
                 order), narrows to a terminal state and stores each taken candidate at its column-order rank (the
                 taken candidates of earlier chunks plus those before it in its own: _store_chunked). When more
                 than CAP keys are >= tau (massive ties, structured rows), or fewer than k_eff (a sample that
                 misrepresents its row: tau above the k-th key), it narrows by streaming rounds over the row
                 instead and stores the selection by a streaming pass: slower, the same result.
"""
from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from .._constant import Constant
from .._pdl import grid_dependency_sync, grid_dependents_launch, pdl_launch
from ..isa_spec import CompileSpec
from ..targets import register_cap
from . import radix_fast
from .kernel import _order_key
from .radix_fast import (
    _CAND_TYPES,
    _KEY_MAX,
    _META,
    _META_COUNT,
    _META_GROUPS,
    _META_TAU,
    _RANK_BITS,
    _RANK_MASK,
    _SIGN_BIT,
    FastTiling,
    _candidates_kernel,
    _group_max_kernel,
    _key_value,
    _moments,
    _narrow,
    _narrow_on_row,
    _narrow_stream,
    _row_range,
    _split_flags,
    group_size,
    k_pad,
    probe_bits,
    row_tiers,
    row_tile,
)
from .tile_scan import (
    _appended_slots,
    _atomic_slots,
    _exclusive_prefix,
    _inclusive_prefix,
    _row_columns,
    _row_entries,
    _scatter_view,
)

#: on-chip row tiles up to this width (loaded in 16-byte vectors) store their selection through _store_gathered:
#: faster there on the H200 where a thread holds several groups of VEC columns; level or slower on tiles of 8192 and
#: where a thread holds one group (docs/perf/h200-topk.md, "Contiguous writes", "Candidates compacted by one atomic add
#: a thread")
_GATHERED_STORE_MAX_TILE = Constant(4096)
#: int32 words of scratch a row past the candidate tile: the compaction's counter at the first (rows 128-byte aligned)
_COUNTER_WORDS = Constant(32)
#: row_layout: the narrowest row tile whose many-rows launches spread each thread's columns over the tile
_SPREAD_MIN_TILE = 8192
#: the bits of +inf: a float's bits as an int32 above it are a NaN's
_POS_INF_BITS = Constant(0x7F800000)
#: the widest candidate tile _finish_by_ranks takes: a candidate's two counts share an int32, 16 bits each
_RANK_FINISH_MAX_CAP = Constant(256)
#: the sampled threshold of the long path's sweep (FastTiling.sweep_samples): sampled keys in runs of SAMPLE_RUN
#: adjacent columns (one 32-byte sector), and the sample's count at the threshold: its expected count of keys >= the
#: k-th, plus SAMPLE_SIGMAS standard deviations of that count plus SAMPLE_EXTRA (so that the row's keys >= the
#: threshold rarely number fewer than k_eff, and with SAMPLE_SLACK rarely more than the candidate tile), narrowed to
#: within SAMPLE_SLACK samples
SAMPLE_RUN = 8
_SAMPLE_SIGMAS = Constant(3.5)
_SAMPLE_EXTRA = Constant(8.0)
SAMPLE_SLACK = 16
#: the sample sizes a row may take (powers of two, smallest first); the largest holds 16 keys a thread in 16 warps
SWEEP_SAMPLES = (1024, 2048, 4096, 8192)
#: a sample is large enough when its threshold lets through at most this share of the candidate tile, in
#: expectation at its margin. On rows of independent keys the threshold then lies above the k-th key in at most
#: 0.9-2.9e-5 of the rows and lets more than the tile through in at most 0.1-1.3e-5 (binomial bounds, 16384 to 131072
#: columns at k = 2048); either costs that row streaming rounds (docs/perf/h200-topk.md, "A threshold from sampled
#: keys and one sweep")
_SWEEP_CAP_SHARE = 0.75
#: NVIDIA with PDL: the sweep reads its chunk of the row before it waits for _sample_tau_kernel, so that its first
#: programs load while the sample is narrowed. The logits and ranges were complete before the sample kernel's own
#: wait returned, and the sweep cannot start before every sample program has passed that wait (_pdl); only the
#: threshold, the counters and the scratch are read or written after the sweep's wait
SWEEP_READS_BEFORE_WAIT = True
#: why a register-capped sweep may keep a stack frame (none under triton 3.6; docs/perf/isa-sm90.md)
SWEEP_STACK = ("under fast.SWEEP_MAXNREG (twelve programs an SM, faster than ten without a stack: "
               "docs/perf/h100-topk-sweep-tiling.json) the sorted form's sweep keeps 8 bytes under triton 3.9, "
               "the column order's under 3.8 (with its late trigger) and 3.9")


# ------------------------------------------------------------------------------------------------- jit helpers
@triton.jit
def _load_mask(cols, start, end, width, VEC: tl.constexpr):
    """The columns of a _row_columns tile to read: the visible ones [start, end) (end <= width) and those sharing an
    aligned group of VEC with one (the bounds rounded out to VEC, within the row's width; their keys are then masked
    as not visible). With VEC = 4 the mask is constant over each thread's groups of 4 (Triton knows width's
    divisibility by 16 from its argument specialisation), so they load as one 16-byte vector."""
    return (cols >= start // VEC * VEC) & (cols < tl.minimum((end + VEC - 1) // VEC * VEC, width))


@triton.jit
def _store_columns(key, cols, lo, hi, need, n_above, n_inside, out_row, THREADS: tl.constexpr,
                   VEC: tl.constexpr):
    """Store the selected columns of one tile (in column order as _exclusive_prefix's THREADS and VEC say; after
    n_above / n_inside earlier keys above / inside [lo, hi]) at their output places; returns the updated (n_above,
    n_inside)."""
    is_above, inside, flags = _split_flags(key, lo, hi)
    ranks = _exclusive_prefix(flags, THREADS, VEC)
    inside_rank = (ranks & _RANK_MASK) + n_inside
    take = is_above | (inside & (inside_rank < need))
    if THREADS > 0:
        # the places summed in int32, added to the row pointer once: fewer registers and spills on the row tiles
        # (docs/perf/h200-topk.md, "The store's places summed in int32")
        place = n_above + (ranks >> _RANK_BITS) + tl.minimum(inside_rank, need)
        ptr = out_row + _scatter_view(place, THREADS, VEC)
    else:
        # each term added to the pointer: the int32 sum lets ptxas (triton 3.6, 3.7) squeeze the long path's finish
        # into 64 registers with words on the stack
        ptr = out_row + n_above + (ranks >> _RANK_BITS) + tl.minimum(inside_rank, need)
    tl.store(ptr, _scatter_view(cols, THREADS, VEC), mask=_scatter_view(take, THREADS, VEC))
    return n_above + tl.sum(is_above.to(tl.int32), 0), n_inside + tl.sum(inside.to(tl.int32), 0)


@triton.jit
def _store_chunked(key, cols, chunk, first, count, lo, hi, need, out_row, CAP: tl.constexpr):
    """_store_columns for a candidate tile in slot order (the long path's, CAP slots, every key of the row >= lo
    among them): the slots of chunk c are first[c] .. first[c] + count[c] - 1, in column order, and the chunks' ids
    are in column order. A candidate's column-order rank among flagged ones is then the flagged candidates of the
    chunks before its own plus those before it in its chunk: one packed prefix in slot order (above << 16 | inside)
    read at the chunks' first and last slots, no reordering through memory."""
    tl.static_assert(CAP <= _RANK_MASK, "a chunk's flagged count must fit a half of the packed prefix")
    is_above, inside, flags = _split_flags(key, lo, hi)
    before = tl.cumsum(flags, 0) - flags   # exclusive, slot order; each half a count < 2^16
    at_first = tl.gather(before, tl.minimum(first, CAP - 1), 0)
    at_last = tl.gather(before + flags, tl.minimum(tl.maximum(first + count - 1, 0), CAP - 1), 0)
    in_chunk = tl.where(count > 0, at_last - at_first, 0)   # per half: flagged candidates of each chunk
    # per half, every term >= 0 (no borrow between the halves): ranks in the chunk, then the chunks before it
    ranks = (before - tl.gather(at_first, chunk, 0)) + tl.gather(tl.cumsum(in_chunk, 0) - in_chunk, chunk, 0)
    inside_rank = ranks & _RANK_MASK
    take = is_above | (inside & (inside_rank < need))
    tl.store(out_row + (ranks >> _RANK_BITS) + tl.minimum(inside_rank, need), cols, mask=take)


@triton.jit
def _store_places_gathered(place, base, out_row, TILE: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr):
    """Column base + c to out_row[place] for each column c of a _row_columns tile whose place is >= 0 (-1: not
    selected), the places first gathered into column order."""
    at = tl.gather(place, _row_entries(TILE, THREADS, VEC), 0)
    tl.store(out_row + at, base + tl.arange(0, TILE), mask=at >= 0)


@triton.jit
def _store_gathered(key, base, lo, hi, need, out_row, TILE: tl.constexpr, THREADS: tl.constexpr,
                    VEC: tl.constexpr):
    """_store_columns of a whole row held in a _row_columns tile from column `base`, the places first gathered into
    column order (through shared memory), so that the lanes of a store hold adjacent columns and write adjacent
    places instead of places a thread's selection apart."""
    is_above, inside, flags = _split_flags(key, lo, hi)
    ranks = _exclusive_prefix(flags, THREADS, VEC)
    inside_rank = ranks & _RANK_MASK
    place = tl.where(is_above | (inside & (inside_rank < need)), (ranks >> _RANK_BITS) + tl.minimum(inside_rank, need),
                     -1)
    _store_places_gathered(place, base, out_row, TILE, THREADS, VEC)


@triton.jit
def _store_from(key, cols, lo, out_row, THREADS: tl.constexpr, VEC: tl.constexpr):
    """_store_columns of one whole tile when every key >= lo is selected (ge_lo == k_eff): one flag, one prefix."""
    take = key >= lo.to(tl.uint32)
    # a taken column's place is its 1-based rank - 1: no per-column select between the two prefixes
    rank = _inclusive_prefix(take.to(tl.int32), THREADS, VEC)
    tl.store(out_row - 1 + _scatter_view(rank, THREADS, VEC), _scatter_view(cols, THREADS, VEC),
             mask=_scatter_view(take, THREADS, VEC))


@triton.jit
def _store_gathered_from(key, base, lo, out_row, TILE: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr):
    """_store_gathered when every key >= lo is selected (ge_lo == k_eff)."""
    take = key >= lo.to(tl.uint32)
    place = tl.where(take, _exclusive_prefix(take.to(tl.int32), THREADS, VEC), -1)
    _store_places_gathered(place, base, out_row, TILE, THREADS, VEC)


@triton.jit
def _all_visible(start, end, k, out_row, K_PAD: tl.constexpr):
    """A row with at most k visible columns: start .. end - 1, then -1."""
    j = tl.arange(0, K_PAD)
    n = tl.maximum(end, start) - start
    tl.store(out_row + j, tl.where(j < n, start + j, -1), mask=j < k)


@triton.jit
def _finish_on_tile(key, lo, hi, ge_lo, above, k_eff, PROBE_BITS: tl.constexpr):
    """Narrow to a terminal state on a tile holding every key inside [lo, hi] (0 = empty); `above` keys are > hi
    outside the tile."""
    base = above
    while (ge_lo != k_eff) & (lo < hi):
        lo, hi, ge_lo, above = _narrow(key, base, lo, hi, ge_lo, above, k_eff, PROBE_BITS)
    return lo, hi, ge_lo, above


@triton.jit
def _finish_ranked(key, scratch, lo, hi, ge_lo, above, k_eff, PROBE_BITS: tl.constexpr, RANK_CAP: tl.constexpr):
    """_finish_on_tile with its last rounds replaced (FastTiling.finish_rank_cap; on NVIDIA the column order's finish
    after a sweep, fast.COLUMNS_SWEEP_RANK_CAP): one-probe rounds (_narrow) only until at most RANK_CAP keys are
    inside [lo, hi], then those keys compacted to `scratch` (RANK_CAP int32 words the program has read before, if
    ever) and _finish_by_ranks. On the long path's candidates after a sweep a halving finish takes up to 23 rounds
    (N(0, 1) rows of 131072 columns), 8 until 64 keys are inside (`python3 -m tools.probes.topk_finish_model`); the
    rounds are cheap, so ranks gain only at RANK_CAP 64, and lose from 128 (docs/perf/h200-topk.md, "The long
    finish's last rounds by ranks")."""
    base = above
    while (ge_lo != k_eff) & (lo < hi) & (ge_lo - above > RANK_CAP):
        lo, hi, ge_lo, above = _narrow(key, base, lo, hi, ge_lo, above, k_eff, PROBE_BITS)
    if (ge_lo != k_eff) & (lo < hi):
        inside = (key >= lo.to(tl.uint32)) & (key <= hi.to(tl.uint32))
        flags = inside.to(tl.int32)
        tl.store(scratch + tl.cumsum(flags, 0) - flags, key.to(tl.int32, bitcast=True), mask=inside)
        tl.debug_barrier()   # the candidates were stored by other threads
        n = ge_lo - above
        slots = tl.arange(0, RANK_CAP)
        cand = tl.load(scratch + slots, mask=slots < n, other=0).to(tl.uint32, bitcast=True)
        lo, hi, ge_lo, above = _finish_by_ranks(cand, scratch, n, above, k_eff, RANK_CAP)
    return lo, hi, ge_lo, above


@triton.jit
def _finish_by_ranks(cand, cand_row, n, above, k_eff, CAP: tl.constexpr):
    """A terminal state in one step from a tile holding the n keys inside [lo, hi] while need = k_eff - above of
    them are to be taken, 1 <= need < n <= CAP: `cand` uint32 [CAP], those keys in any order, then 0 (empty); the
    same keys at cand_row (int32 bits). Each candidate counts the candidates larger than it and equal to it
    (compares of RANK_CHUNK candidates at a time, read again from cand_row); the need-th largest key, t, is the
    least candidate with fewer than need larger ones, and the candidates equal to t share its counts: one min
    reduction of (key, counts) packed in 64 bits finds both. Returns (t, t, keys >= t, keys > t), `above` counted:
    the rounds of _finish_on_tile in one step. Counts, not places: the tile's order does not matter."""
    tl.static_assert(CAP <= _RANK_FINISH_MAX_CAP, "a candidate's two counts share an int32")
    RANK_CHUNK: tl.constexpr = 32   # [CAP, 32] compares at a time: the whole [CAP, CAP] tile spills
    a = cand[:, None]
    counts = tl.zeros([CAP], dtype=tl.int32)   # larger | equal << 16
    for c in tl.static_range(0, CAP, RANK_CHUNK):
        j = c + tl.arange(0, RANK_CHUNK)
        b = tl.load(cand_row + j, mask=j < n, other=0).to(tl.uint32, bitcast=True)[None, :]
        counts += tl.sum(tl.where(b > a, 1, tl.where(b == a, 1 << 16, 0)), 1)
    packed = (cand.to(tl.uint64) << 32) | counts.to(tl.uint64)
    least = tl.min(tl.where((cand != 0) & ((counts & 0xFFFF) < k_eff - above), packed, 0xFFFFFFFFFFFFFFFF), 0)
    t = (least >> 32).to(tl.int64)
    larger = (least & 0xFFFF).to(tl.int32)
    equal = ((least >> 16) & 0xFFFF).to(tl.int32)
    return t, t, above + larger + equal, above + larger


@triton.jit
def _columns_on_chip(row_ptr, base, start, end, width, k_eff, out_row, cand_row, CAP: tl.constexpr,
                     TILE: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr, PROBE_BITS: tl.constexpr,
                     SECANT_ROUNDS: tl.constexpr, SPREAD: tl.constexpr, RANK_FINISH: tl.constexpr,
                     SHARED_SM: tl.constexpr):
    """The on-chip path for a row of more than k visible columns [start, end), held in a register tile of columns
    base .. base + TILE - 1 (base <= start, end - base <= TILE; base a multiple of 16) ordered as _row_columns says;
    SPREAD: _narrow_on_row's. cand_row: CAP candidate words, then the compaction's counter. The candidate tile is
    finished by _finish_by_ranks with RANK_FINISH, else by rounds of 2^PROBE_BITS - 1 probes. SHARED_SM: the launch
    has more rows than SMs (TIERS > 1)."""
    tl.store(cand_row + CAP, 0)   # the narrowing's reductions pass barriers before the compaction adds to it
    cols = _row_columns(base, TILE, THREADS, VEC)
    visible = (cols >= start) & (cols < end)
    x = tl.load(row_ptr + cols, mask=_load_mask(cols, start, end, width, VEC), other=0.0)
    # JOINED (True): the ends and moments as two-column reductions (_narrow_on_row says why here only). SHARED_SM:
    # the moments of the loaded tile as it is (beside the visible columns at most VEC - 1 at either end of the visible
    # range, _load_mask: they move only the fit's guess, never a result) and the ends without `visible`, two selects
    # a column fewer (docs/perf/h200-topk.md, "Two selects a column fewer for many rows")
    total, squares, _, _ = _moments(x if SHARED_SM else tl.where(visible, x, 0.0), True)
    key = _order_key(x, visible, SHARED_SM)
    # the positive values' fit on rows of no negative value, but no shape fit: its two more sums a column cost this
    # kernel more than its rounds save (docs/perf/h200-topk.md, "First probes from the rows' shape")
    lo, hi, ge_lo, above = _narrow_on_row(key, None if SHARED_SM else visible, end - start, k_eff, total, squares,
                                          CAP, SECANT_ROUNDS, 0, SPREAD, True, 0.0, 0.0, False, True)
    if (ge_lo != k_eff) & (lo < hi):   # at most CAP keys inside: finish on a tile of them
        inside = (key >= lo.to(tl.uint32)) & (key <= hi.to(tl.uint32))
        # the tile rounds only count: slots in any order, no scan across the threads
        slot = cand_row + _atomic_slots(inside.to(tl.int32), cand_row + CAP, THREADS, VEC)
        tl.store(_scatter_view(slot, THREADS, VEC), _scatter_view(key.to(tl.int32, bitcast=True), THREADS, VEC),
                 mask=_scatter_view(inside, THREADS, VEC))
        tl.debug_barrier()   # the candidates were stored by other threads
        slots = tl.arange(0, CAP)
        n = ge_lo - above
        cand = tl.load(cand_row + slots, mask=slots < n, other=0).to(tl.uint32, bitcast=True)
        if RANK_FINISH:
            lo, hi, ge_lo, above = _finish_by_ranks(cand, cand_row, n, above, k_eff, CAP)
        else:
            lo, hi, ge_lo, above = _finish_on_tile(cand, lo, hi, ge_lo, above, k_eff, PROBE_BITS)
    if (TILE <= _GATHERED_STORE_MAX_TILE) and (VEC == 4) and (TILE // (VEC * THREADS) > 1):
        if ge_lo == k_eff:
            _store_gathered_from(key, base, lo, out_row, TILE, THREADS, VEC)
        else:
            _store_gathered(key, base, lo, hi, k_eff - above, out_row, TILE, THREADS, VEC)
    else:
        if ge_lo == k_eff:
            _store_from(key, cols, lo, out_row, THREADS, VEC)
        else:
            _store_columns(key, cols, lo, hi, k_eff - above, 0, 0, out_row, THREADS, VEC)


@triton.jit
def _columns_stream(row_ptr, start, end, lo, hi, above, k_eff, out_row, BLOCK: tl.constexpr):
    """_store_columns over the visible columns, streaming (a terminal [lo, hi])."""
    n_above = start * 0
    n_inside = start * 0
    for off in range(start, end, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        visible = cols < end
        key = _order_key(tl.load(row_ptr + cols, mask=visible, other=0.0), visible)
        n_above, n_inside = _store_columns(key, cols, lo, hi, k_eff - above, n_above, n_inside, out_row, 0, 1)


@triton.jit
def _inside_stream(row_ptr, start, end, lo, hi, cand_row, BLOCK: tl.constexpr):
    """The keys inside [lo, hi] (at most the scratch's width), compacted to cand_row in column order, streaming."""
    n = start * 0
    for off in range(start, end, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        visible = cols < end
        key = _order_key(tl.load(row_ptr + cols, mask=visible, other=0.0), visible)
        inside = (key >= lo.to(tl.uint32)) & (key <= hi.to(tl.uint32))
        flags = inside.to(tl.int32)
        tl.store(cand_row + n + tl.cumsum(flags, 0) - flags, key.to(tl.int32, bitcast=True), mask=inside)
        n += tl.sum(flags, 0)


# ----------------------------------------------------------------------------------------------------- kernels
@triton.jit
def _columns_row_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] first visible column (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows] one past the last visible column (clamped to width)
    out_ptr,              # *i32 [rows, k] contiguous: the selected columns ascending, then -1
    cand_ptr,             # *i32 [rows, CAP + COUNTER_WORDS] scratch: the keys of the final narrowing, a counter
    width,                # i32 W <= TILE_W
    stride_row,           # elements between rows of logits
    k,                    # i32, 1 <= k <= K_PAD
    HAS_STARTS: tl.constexpr,
    K_PAD: tl.constexpr,  # power of two >= k
    TILE_W: tl.constexpr,  # power of two >= width: the row tile held in registers
    TIERS: tl.constexpr,  # 1, or 2 / 3: a row whose columns fit TILE_W / 2 (/ 4) is held in that narrower tile
    THREADS: tl.constexpr,  # _row_columns' threads: the program's, at most the narrowest tile / VEC
    VEC: tl.constexpr,    # 4 when rows load in 16-byte vectors (logits, width and row stride 16-aligned), else 1
    CAP: tl.constexpr,    # candidate tile
    PROBE_BITS: tl.constexpr,   # probes per round on the candidate tile: 2^PROBE_BITS - 1
    SECANT_ROUNDS: tl.constexpr,   # radix_fast.SECANT_ROUNDS
    RANK_FINISH: tl.constexpr,   # FastTiling.rank_finish: the candidate tile finished by ranks, not rounds
    PDL: tl.constexpr,
):
    grid_dependency_sync(PDL)
    # the first round on a row: a bracket of 3/4 CAP keys about the fit's quantile for one program a row, the
    # quantile alone for many rows (docs/perf/h200-topk.md, "A bracket about the fit's quantile")
    SPREAD: tl.constexpr = 3 * CAP // 8 if TIERS == 1 else 0
    if TIERS == 1:
        row = tl.program_id(0).to(tl.int64)
    else:   # the last rows first: in causal batches they are the longest, so the short ones fill the tail
        row = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    out_row = out_ptr + row * k
    cand_row = cand_ptr + row * (CAP + _COUNTER_WORDS)
    start, end, k_eff = _row_range(starts_ptr, ends_ptr, row, width, k, HAS_STARTS)
    if tl.maximum(end, start) - start <= k:   # end - start could wrap in int32
        _all_visible(start, end, k, out_row, K_PAD)
    elif TIERS == 1:
        _columns_on_chip(row_ptr, 0, start, end, width, k_eff, out_row, cand_row, CAP, TILE_W, THREADS,
                             VEC, PROBE_BITS, SECANT_ROUNDS, SPREAD, RANK_FINISH, TIERS > 1)
    else:
        # the narrowest tile that holds the row's columns from `base` (16-aligned: vector loads) to its end
        base = tl.multiple_of(start // 16 * 16, 16)
        if end - base > TILE_W // 2:
            _columns_on_chip(row_ptr, 0, start, end, width, k_eff, out_row, cand_row, CAP, TILE_W, THREADS,
                             VEC, PROBE_BITS, SECANT_ROUNDS, SPREAD, RANK_FINISH, TIERS > 1)
        elif TIERS == 2:
            _columns_on_chip(row_ptr, base, start, end, width, k_eff, out_row, cand_row, CAP, TILE_W // 2, THREADS,
                             VEC, PROBE_BITS, SECANT_ROUNDS, SPREAD, RANK_FINISH, TIERS > 1)
        elif end - base > TILE_W // 4:
            _columns_on_chip(row_ptr, base, start, end, width, k_eff, out_row, cand_row, CAP, TILE_W // 2, THREADS,
                             VEC, PROBE_BITS, SECANT_ROUNDS, SPREAD, RANK_FINISH, TIERS > 1)
        else:
            _columns_on_chip(row_ptr, base, start, end, width, k_eff, out_row, cand_row, CAP, TILE_W // 4, THREADS,
                             VEC, PROBE_BITS, SECANT_ROUNDS, SPREAD, RANK_FINISH, TIERS > 1)


@triton.jit
def _sample_tau_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows]
    meta_ptr,             # *i32 [rows, META] receives the threshold (uint32 bits) and a zero count
    width,                # i32 W
    stride_row,
    k,                    # i32, 1 <= k
    HAS_STARTS: tl.constexpr,
    SAMPLES: tl.constexpr,  # keys sampled: SAMPLES // RUN runs of RUN adjacent columns (powers of two)
    RUN: tl.constexpr,
    SLACK: tl.constexpr,
    CAP: tl.constexpr,
    SECANT_ROUNDS: tl.constexpr,
    PDL: tl.constexpr,
):
    """The sweep's threshold t of one row, from a sample: runs of RUN columns evenly spaced over the visible ones
    (each run's first column rounded down to a multiple of RUN; fewer than SAMPLES visible columns are sampled
    several times). t has between r and r + SLACK of the m visible samples >= it, r the expected count of samples >=
    the row's k_eff-th key plus a margin (SAMPLE_SIGMAS, SAMPLE_EXTRA); t = 1 (every visible key) when m <= r + SLACK
    or the row shows at most k keys. Only the work depends on t, never the result: the finishing kernel falls back
    to streaming rounds when fewer than k_eff or more than CAP keys reach it."""
    grid_dependency_sync(PDL)
    row = tl.program_id(0).to(tl.int64)
    start, end, k_eff = _row_range(starts_ptr, ends_ptr, row, width, k, HAS_STARTS)
    n = tl.maximum(end, start) - start
    RUNS: tl.constexpr = SAMPLES // RUN
    first = start + (tl.arange(0, RUNS).to(tl.int64) * n // RUNS).to(tl.int32)
    cols = tl.reshape((first // RUN * RUN)[:, None] + tl.arange(0, RUN)[None, :], (SAMPLES,))
    visible = (cols >= start) & (cols < end)
    key = _order_key(tl.load(logits_ptr + row * stride_row + cols, mask=visible, other=0.0), visible)
    m = tl.sum(visible.to(tl.int32), 0)
    expected = k_eff.to(tl.float32) * m.to(tl.float32) / tl.maximum(n, 1).to(tl.float32)
    r = tl.minimum(tl.maximum(tl.ceil(expected + _SAMPLE_SIGMAS * tl.sqrt(expected) + _SAMPLE_EXTRA).to(tl.int32), 1),
                   m)
    t = start * 0 + 1
    if (n > k) & (m > r + SLACK):
        # the fit with skewness and kurtosis, and the positive values' fit on rows of no negative value: fewer rounds
        # on decode-like and ReLU-degenerate rows (docs/perf/h200-topk.md, "First probes from the rows' shape")
        total, squares, cubes, fourths = _moments(tl.where(visible, _key_value(key), 0.0), False, True)
        lo, _, _, _ = _narrow_on_row(key, visible, m, r, total, squares, CAP, SECANT_ROUNDS, SLACK, 0, False, cubes,
                                     fourths, True, True)
        t = lo.to(tl.int32)
    meta_row = meta_ptr + row * _META
    tl.store(meta_row + _META_TAU, t)
    tl.store(meta_row + _META_COUNT, 0)


@triton.jit
def _sweep_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows]
    meta_ptr,             # *i32 [rows, META] from _sample_tau_kernel; the count grows by this program's candidates
    cand_ptr,             # *i32 [rows, 2 * CAP] receives candidate columns and keys, in any order
    chunk_ptr,            # *i32 [rows, num_programs(1), 2] (COLUMN_ORDER) receives each chunk's first slot and count
    width,                # i32 W
    stride_row,
    k,                    # i32, 1 <= k
    HAS_STARTS: tl.constexpr,
    CAP: tl.constexpr,
    BLOCK: tl.constexpr,  # columns per program (a chunk)
    THREADS: tl.constexpr,  # _row_columns' threads
    VEC: tl.constexpr,    # 4 when rows load in 16-byte vectors (vectors()), else 1
    READ_BEFORE_WAIT: tl.constexpr,   # SWEEP_READS_BEFORE_WAIT
    LATE_DEPENDENTS: tl.constexpr,   # FastTiling.sweep_late_dependents: the next kernel scheduled after the stores
    COLUMN_ORDER: tl.constexpr,   # rows of at most k keys not read, each chunk's first slot and count recorded;
                                  # else (the sorted form) every row read, nothing recorded
    PDL: tl.constexpr,
):
    """Append the visible keys >= the row's sampled threshold among one chunk of BLOCK columns to the row's
    candidates, in column order within the chunk (_candidates_kernel's contract, every group qualifying): one read
    of every visible key, the only one when the threshold holds. Grid (rows, cdiv(W, BLOCK)); in column order a row
    showing at most k keys is not read (its chunks record no candidates). A chunk wholly visible under a threshold
    above the key of 0.0 (the usual chunk of the indexer's rows) compares the bits of its values instead of order
    keys: less than half the instructions for its keys, and the sweep's time follows its instruction count
    (docs/perf/h200-topk.md, "The sweep's keys by their bits"). The chunk's slots come from one scan across its
    threads, whose last thread adds the chunk's count to the row's (_appended_slots: two exchanges between the warps
    instead of three)."""
    if not READ_BEFORE_WAIT:
        grid_dependency_sync(PDL, LATE_DEPENDENTS)
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    start, end, _ = _row_range(starts_ptr, ends_ptr, row, width, 1, HAS_STARTS)
    if COLUMN_ORDER:
        end = tl.where(tl.maximum(end, start) - start > k, end, start)   # a row of at most k keys: none read
    meta_row = meta_ptr + row * _META
    cols = _row_columns(chunk * BLOCK, BLOCK, THREADS, VEC)
    # each key is read once: its lines leave the L2 first, before the counters', the candidates' and other data's
    # (docs/perf/h200-topk.md, "The sweep's slots from one scan; its loads evict first")
    x = tl.load(logits_ptr + row * stride_row + cols, mask=_load_mask(cols, start, end, width, VEC), other=0.0,
                eviction_policy="evict_first")
    if READ_BEFORE_WAIT:
        grid_dependency_sync(PDL, LATE_DEPENDENTS)
    tau = tl.load(meta_row + _META_TAU).to(tl.uint32, bitcast=True)
    if (tau > _SIGN_BIT) & (chunk * BLOCK >= start) & (chunk * BLOCK + BLOCK <= end):
        # every column visible, the threshold above the key of 0.0: the keys >= tau are the positive values (not NaN)
        # whose bits, as an int32, reach tau's without its sign bit; their keys are their bits with it
        bits = x.to(tl.int32, bitcast=True)
        flags = ((bits >= (tau ^ _SIGN_BIT).to(tl.int32, bitcast=True)) & (bits <= _POS_INF_BITS)).to(tl.int32)
        key = bits.to(tl.uint32, bitcast=True) | _SIGN_BIT
    else:
        key = _order_key(x, (cols >= start) & (cols < end))
        flags = (key >= tau).to(tl.int32)   # tau >= 1: never an invisible column
    slot, count, first, last = _appended_slots(flags, meta_row + _META_COUNT, THREADS, VEC)
    keep = _scatter_view((flags != 0) & (slot < CAP), THREADS, VEC)
    cand_row = cand_ptr + row * (2 * CAP)
    tl.store(_scatter_view(cand_row + slot, THREADS, VEC), _scatter_view(cols, THREADS, VEC), mask=keep)
    tl.store(_scatter_view(cand_row + CAP + slot, THREADS, VEC),
             _scatter_view(key.to(tl.int32, bitcast=True), THREADS, VEC), mask=keep)
    if COLUMN_ORDER:
        chunk_row = chunk_ptr + (row * tl.num_programs(1) + chunk) * 2
        tl.store(chunk_row + count * 0, first, mask=last)
        tl.store(chunk_row + 1 + count * 0, count, mask=last)
    if LATE_DEPENDENTS:
        grid_dependents_launch(PDL)


@triton.jit
def _columns_long_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows]
    meta_ptr,             # *i32 [rows, META]: tau and the qualifying groups (_tau_kernel), the candidate count
    cand_ptr,             # *i32 [rows, 3 * CAP]: _candidates_kernel's columns, keys and chunk ids (SWEEP: [rows,
                          #     2 * CAP], _sweep_kernel's columns and keys); scratch
    chunk_ptr,            # *i32 [rows, chunk_w, 2]: each chunk's first candidate slot and its count
    out_ptr,              # *i32 [rows, k] contiguous: the selected columns ascending, then -1
    width,                # i32 W
    stride_row,
    k,                    # i32, 1 <= k <= K_PAD
    chunk_w,              # i32: the candidate launch's chunks per row
    HAS_STARTS: tl.constexpr,
    K_PAD: tl.constexpr,
    CAP: tl.constexpr,
    CHUNKS: tl.constexpr,  # power of two >= chunk_w
    GROUPS: tl.constexpr,  # qualifying groups per chunk (SWEEP: not read)
    BLOCK: tl.constexpr,   # columns per streaming chunk of the fallback
    PROBE_BITS: tl.constexpr,
    SWEEP: tl.constexpr,   # the candidates are _sweep_kernel's (every chunk recorded), not _candidates_kernel's
    SWEEP_BLOCK: tl.constexpr,   # SWEEP: columns a sweep chunk (a candidate's chunk is its column // SWEEP_BLOCK)
    RANK_CAP: tl.constexpr,   # FastTiling.finish_rank_cap: 0, or the candidate tile finished by _finish_ranked
    PDL: tl.constexpr,
):
    grid_dependency_sync(PDL)
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    out_row = out_ptr + row * k
    cand_row = cand_ptr + row * ((2 if SWEEP else 3) * CAP)
    start, end, k_eff = _row_range(starts_ptr, ends_ptr, row, width, k, HAS_STARTS)
    if tl.maximum(end, start) - start <= k:
        _all_visible(start, end, k, out_row, K_PAD)
    else:
        meta_row = meta_ptr + row * _META
        lo = tl.load(meta_row + _META_TAU).to(tl.uint32, bitcast=True).to(tl.int64)
        ge_lo = tl.load(meta_row + _META_COUNT)
        hi = lo * 0 + _KEY_MAX
        above = start * 0
        reached = ge_lo >= k_eff   # always, but for a sampled threshold (SWEEP) above the k_eff-th key
        if ge_lo < k_eff:   # the keys >= it are all selected; the rest from the keys below it, by streaming rounds
            hi = lo - 1
            above = ge_lo
            lo = lo * 0 + 1
            ge_lo = end - start
        if (ge_lo <= CAP) & reached:
            # the tile in slot order; each chunk's slots and their count place its candidates in column order
            slots = tl.arange(0, CAP)
            filled = slots < ge_lo
            cols = tl.load(cand_row + slots, mask=filled, other=0)
            key = tl.load(cand_row + CAP + slots, mask=filled, other=0)
            c = tl.arange(0, CHUNKS)
            if SWEEP:
                chunk = cols // SWEEP_BLOCK
                live = c < chunk_w
            else:
                chunk = tl.load(cand_row + 2 * CAP + slots, mask=filled, other=0)
                live = c < tl.cdiv(tl.load(meta_row + _META_GROUPS), GROUPS)
            first = tl.load(chunk_ptr + (row * chunk_w + c) * 2, mask=live, other=0)
            count = tl.load(chunk_ptr + (row * chunk_w + c) * 2 + 1, mask=live, other=0)
            key = key.to(tl.uint32, bitcast=True)
            # no key lies between the largest candidate and hi: `above` stays exact
            hi = tl.maximum(tl.minimum(hi, tl.max(key, 0).to(tl.int64)), lo)
            if RANK_CAP == 0:
                lo, hi, ge_lo, above = _finish_on_tile(key, lo, hi, ge_lo, above, k_eff, PROBE_BITS)
            else:
                lo, hi, ge_lo, above = _finish_ranked(key, cand_row, lo, hi, ge_lo, above, k_eff, PROBE_BITS,
                                                      RANK_CAP)
            _store_chunked(key, cols, chunk, first, count, lo, hi, k_eff - above, out_row, CAP)
        else:   # more than CAP keys reach tau, or fewer than k_eff the sampled threshold: streaming rounds
            lo, hi, ge_lo, above = _narrow_stream(row_ptr, start, end, lo, hi, ge_lo, above, k_eff, CAP, BLOCK)
            if (ge_lo != k_eff) & (lo < hi):
                _inside_stream(row_ptr, start, end, lo, hi, cand_row, BLOCK)
                tl.debug_barrier()   # the candidates were stored by other threads
                slots = tl.arange(0, CAP)
                key = tl.load(cand_row + slots, mask=slots < ge_lo - above, other=0).to(tl.uint32, bitcast=True)
                lo, hi, ge_lo, above = _finish_on_tile(key, lo, hi, ge_lo, above, k_eff, PROBE_BITS)
            _columns_stream(row_ptr, start, end, lo, hi, above, k_eff, out_row, BLOCK)


# ---------------------------------------------------------------------------------------------------- launcher
def sweep_samples(width: int, k: int, cap: int) -> int:
    """FastTiling.sweep_samples for rows of `width` columns at k with a candidate tile of `cap`: the least of
    SWEEP_SAMPLES whose threshold (_sample_tau_kernel's margin, SAMPLE_SLACK) lets through at most _SWEEP_CAP_SHARE
    of cap keys of a full row in expectation (a shorter row, fewer), else 0: wider rows, relative to k and cap, take
    the group maxima and tau (a sample of 8192 keys leaves 2^17 columns at k = 2048; docs/perf/h200-topk.md, "A
    threshold from sampled keys and one sweep")."""
    for samples in SWEEP_SAMPLES:
        expected = min(k, width) * samples / width
        r = math.ceil(expected + _SAMPLE_SIGMAS.value * math.sqrt(expected) + _SAMPLE_EXTRA.value)
        if (r + SAMPLE_SLACK) * width / samples <= _SWEEP_CAP_SHARE * cap:
            return samples
    return 0


def launch_columns(logits: torch.Tensor, lengths: torch.Tensor, starts: torch.Tensor | None, out: torch.Tensor,
                   tiling: FastTiling) -> None:
    """Fill `out` (int32 [rows, k] contiguous) with every row's top-k in column order, under radix_fast's launch
    constants `tiling` (its segment / ordering fields are not used). Arguments as radix_fast.top_k_radix_fast's,
    rows no wider than radix_fast.FAST_MAX_WIDTH. Sync-free and CUDA-graph safe: grids and scratch sizes come from
    shapes only; the scratch is never trusted (torch.empty)."""
    (rows, width), k = logits.shape, out.shape[1]
    starts_arg = lengths if starts is None else starts
    device = logits.device
    pdl = pdl_launch(tiling.pdl, device)
    common = _common_constexprs(tiling, k, starts is not None)
    if width <= tiling.tile_w:
        cand = torch.empty((rows, tiling.cap + _COUNTER_WORDS.value), dtype=torch.int32, device=device)
        tile = row_tile(width)
        tiers = row_tiers(tile, tiling.tiers)
        _columns_row_kernel[(rows,)](
            logits, starts_arg, lengths, out, cand, width, logits.stride(0), k, TILE_W=tile, TIERS=tiers,
            **row_layout(tiling, tile, tiers, vectors(logits)), SECANT_ROUNDS=radix_fast.SECANT_ROUNDS,
            RANK_FINISH=tiling.rank_finish, num_warps=tiling.num_warps,
            **register_cap(tiling.maxnreg), **common, **pdl)
        return
    has_starts = starts is not None
    meta = torch.empty((rows, _META.value), dtype=torch.int32, device=device)
    finish = {"BLOCK": tiling.block, "RANK_CAP": tiling.finish_rank_cap, "PDL": False,
              **register_cap(tiling.finish_maxnreg), **common}
    if tiling.sweep_samples:
        if tiling.sweep_late_dependents:   # scheduled once the sweep's programs have stored, not beside them
            finish.update(pdl)
        cand = torch.empty((rows, 2 * tiling.cap), dtype=torch.int32, device=device)
        chunks = launch_sweep(logits, starts_arg, lengths, has_starts, meta, cand, k, tiling, column_order=True)
        chunk_w = chunks.shape[1]
        _columns_long_kernel[(rows,)](
            logits, starts_arg, lengths, meta, cand, chunks, out, width, logits.stride(0), k, chunk_w,
            CHUNKS=triton.next_power_of_2(chunk_w), GROUPS=1, SWEEP=True, SWEEP_BLOCK=sweep_block(tiling),
            num_warps=finish_warps(tiling), **finish)
        return
    cand = torch.empty((rows, 3 * tiling.cap), dtype=torch.int32, device=device)
    gsize = group_size(width, tiling.tile_w)
    assert gsize <= tiling.block <= 2 ** 16, f"{tiling}: a candidate program holds whole groups of {gsize}"
    groups = triton.cdiv(width, gsize)
    per_program = max(1, tiling.tile_w // gsize)
    chunk_groups = tiling.block // gsize
    chunk_w = triton.cdiv(groups, chunk_groups)
    gmax = torch.empty((rows, groups), dtype=torch.int32, device=device)
    chunks = torch.empty((rows, chunk_w, 2), dtype=torch.int32, device=device)
    _group_max_kernel[(rows, triton.cdiv(groups, per_program))](
        logits, starts_arg, lengths, gmax, width, logits.stride(0), groups, HAS_STARTS=has_starts,
        GROUP=gsize, GROUPS_PER_PROGRAM=per_program, num_warps=tiling.num_warps, **pdl)
    radix_fast.launch_tau(starts_arg, lengths, gmax, meta, width, k, has_starts, tiling)
    _candidates_kernel[(rows, chunk_w)](
        logits, starts_arg, lengths, gmax, meta, cand, chunks, width, logits.stride(0), groups,
        HAS_STARTS=has_starts, CAP=tiling.cap, BLOCK=tiling.block, GROUP=gsize, CHUNK_IDS=True,
        num_warps=tiling.cand_warps, **pdl)
    # launched after the candidates end, not beside them (no PDL): 3.5-6.8 us faster at 16384 and 65536 columns, 0.4
    # slower at 32768 and 131072 (docs/perf/h200-topk.md, "The long path's finish without PDL")
    _columns_long_kernel[(rows,)](
        logits, starts_arg, lengths, meta, cand, chunks, out, width, logits.stride(0), k, chunk_w,
        CHUNKS=triton.next_power_of_2(chunk_w), GROUPS=chunk_groups, SWEEP=False, SWEEP_BLOCK=1,
        num_warps=tiling.num_warps, **finish)


def launch_sweep(logits: torch.Tensor, starts_arg: torch.Tensor, lengths: torch.Tensor, has_starts: bool,
                 meta: torch.Tensor, cand: torch.Tensor, k: int, tiling: FastTiling,
                 column_order: bool) -> torch.Tensor | None:
    """Either form's long-path candidates by the sample and one sweep (FastTiling.sweep_samples): meta's tau and
    count, cand's columns and keys ([rows, 2 * CAP] or wider). Column order: rows of at most k keys not read, and
    returns the chunks' first slots and counts, int32 [rows, cdiv(W, sweep_block(tiling)), 2]; else every row read
    (the sorted finish selects those too) and None."""
    (rows, width), device = logits.shape, logits.device
    pdl = pdl_launch(tiling.pdl, device)
    chunk_w = triton.cdiv(width, sweep_block(tiling))
    chunks = torch.empty((rows, chunk_w, 2), dtype=torch.int32, device=device) if column_order else None
    _sample_tau_kernel[(rows,)](
        logits, starts_arg, lengths, meta, width, logits.stride(0), k, HAS_STARTS=has_starts,
        SAMPLES=tiling.sweep_samples, RUN=SAMPLE_RUN, SLACK=SAMPLE_SLACK, CAP=tiling.cap,
        SECANT_ROUNDS=radix_fast.SECANT_ROUNDS, num_warps=sample_warps(tiling), **pdl)
    _sweep_kernel[(rows, chunk_w)](
        logits, starts_arg, lengths, meta, cand, meta if chunks is None else chunks, width, logits.stride(0), k,
        HAS_STARTS=has_starts, CAP=tiling.cap, BLOCK=sweep_block(tiling), **_sweep_layout(tiling, vectors(logits)),
        READ_BEFORE_WAIT=SWEEP_READS_BEFORE_WAIT, LATE_DEPENDENTS=tiling.sweep_late_dependents,
        COLUMN_ORDER=column_order, num_warps=tiling.cand_warps,
        **register_cap(tiling.sweep_maxnreg), **pdl)
    return chunks


def _sweep_layout(tiling: FastTiling, vec: bool) -> dict:
    """_sweep_kernel's THREADS and VEC for chunks of sweep_block(tiling) columns in tiling.cand_warps warps: VEC = 4
    with `vec` (vectors()), else 1; THREADS the program's threads, at most that chunk / VEC."""
    v = 4 if vec else 1
    return {"THREADS": min(tiling.lanes * tiling.cand_warps, sweep_block(tiling) // v), "VEC": v}


def sample_warps(tiling: FastTiling) -> int:
    """Warps of the sweep's sample kernel: tiling.sample_warps, else tiling.num_warps."""
    return tiling.sample_warps or tiling.num_warps


def finish_warps(tiling: FastTiling) -> int:
    """Warps of the column order's long finish after a sweep: tiling.finish_warps, else tiling.num_warps."""
    return tiling.finish_warps or tiling.num_warps


def sweep_block(tiling: FastTiling) -> int:
    """Columns a sweep program reads (a chunk of the candidates): tiling.sweep_block, else tiling.block."""
    return tiling.sweep_block or tiling.block


def vectors(logits: torch.Tensor) -> bool:
    """Whether the rows of `logits` load in 16-byte vectors: the base, the row stride and the width 16-aligned, as
    Triton's argument specialisation then tells the compiler (_load_mask)."""
    return logits.data_ptr() % 16 == 0 and logits.stride(0) % 16 == 0 and logits.shape[1] % 16 == 0


@functools.lru_cache(maxsize=256)
def row_layout(tiling: FastTiling, tile: int, tiers: int, vec: bool) -> dict:
    """_columns_row_kernel's THREADS and VEC: VEC = 4 with `vec` (vectors()), else 1; THREADS the program's threads
    (tiling.lanes x num_warps), at most the narrowest tile (tile / 2^(tiers - 1)) / VEC. For many rows (several
    tiers) on tiles of at least _SPREAD_MIN_TILE columns with VEC 4, THREADS is the narrowest tile / 4 instead:
    each thread then holds groups of 4 adjacent columns spread over the tile, so that the lanes of a scattered store
    write nearby places (faster there on the H200; slower for one program a row and on tiles of 4096 columns:
    docs/perf/h200-topk.md, "Columns spread over the threads for many rows")."""
    per_thread = 4 if vec else 1
    narrowest = (tile >> (tiers - 1)) // per_thread
    spread = tiers > 1 and vec and tile >= _SPREAD_MIN_TILE
    return {"THREADS": narrowest if spread else min(tiling.lanes * tiling.num_warps, narrowest), "VEC": per_thread}


# the constexprs of a launch, asked on every launch: cached (host time; the dict returned is only unpacked)
@functools.lru_cache(maxsize=256)
def _common_constexprs(tiling: FastTiling, k: int, has_starts: bool) -> dict:
    return dict(HAS_STARTS=has_starts, K_PAD=k_pad(k), CAP=tiling.cap, PROBE_BITS=probe_bits(tiling.cap))


# ------------------------------------------------------------------------------------------- cross-compile specs
# the column-order kernels' pointer types (hw.isa_spec.kernel_signature)
_COLUMNS_ROW_TYPES = {"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "out_ptr": "*i32",
                      "cand_ptr": "*i32"}
_COLUMNS_LONG_TYPES = {"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "meta_ptr": "*i32",
                       "cand_ptr": "*i32", "chunk_ptr": "*i32", "out_ptr": "*i32"}
_SAMPLE_TAU_TYPES = {"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "meta_ptr": "*i32"}
_SWEEP_TYPES = {"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "meta_ptr": "*i32",
                "cand_ptr": "*i32", "chunk_ptr": "*i32"}


def sweep_specs(tiling: FastTiling, width: int, has_starts: bool, label: str, targets: tuple[str, ...],
                column_order: bool) -> tuple[CompileSpec, CompileSpec]:
    """The sample's and the sweep's kernels of one launch of either form."""
    # rows of `width` columns, contiguous: the sweep loads in 16-byte vectors
    ints = ("width", "stride_row") if width % 16 == 0 else ()
    return (
        CompileSpec(label=label + "/sample_tau", fn=_sample_tau_kernel, types=_SAMPLE_TAU_TYPES,
                    num_warps=sample_warps(tiling), targets=targets,
                    constexprs={"HAS_STARTS": has_starts, "SAMPLES": tiling.sweep_samples, "RUN": SAMPLE_RUN,
                                "SLACK": SAMPLE_SLACK, "CAP": tiling.cap, "SECANT_ROUNDS": radix_fast.SECANT_ROUNDS,
                                "PDL": tiling.pdl}),
        CompileSpec(label=label + "/sweep", fn=_sweep_kernel, types=_SWEEP_TYPES,
                    num_warps=tiling.cand_warps, maxnreg=tiling.sweep_maxnreg, targets=targets,
                    scratch_ok="" if tiling.sweep_maxnreg is None else SWEEP_STACK, aligned=(*_SWEEP_TYPES, *ints),
                    constexprs={"HAS_STARTS": has_starts, "CAP": tiling.cap, "BLOCK": sweep_block(tiling),
                                **_sweep_layout(tiling, bool(ints)), "PDL": tiling.pdl,
                                "READ_BEFORE_WAIT": SWEEP_READS_BEFORE_WAIT,
                                "LATE_DEPENDENTS": tiling.sweep_late_dependents,
                                "COLUMN_ORDER": column_order}))


def isa_specs(tiling: FastTiling, width: int, k: int, has_starts: bool, label: str,
              targets: tuple[str, ...]) -> tuple[CompileSpec, ...]:
    """The column-order kernels of one launch (the long path's group maxima and tau are the sorted form's, listed
    by radix_fast.isa_specs: both forms take them at the same widths)."""
    common = {"HAS_STARTS": has_starts, "K_PAD": k_pad(k), "CAP": tiling.cap, "PROBE_BITS": probe_bits(tiling.cap),
              "PDL": tiling.pdl}
    if width <= tiling.tile_w:
        tile = row_tile(width)
        tiers = row_tiers(tile, tiling.tiers)
        why = "" if tiling.maxnreg is None else (
            f"{65536 // (32 * tiling.num_warps * tiling.maxnreg)} programs per SM in {tiling.maxnreg} registers, "
            "words spilled: faster for many rows than fewer programs per SM (docs/perf/h200-topk-cap.json)")
        # rows of `width` columns, contiguous: Triton specialises width and the row stride as multiples of 16
        ints = ("width", "stride_row") if width % 16 == 0 else ()
        return (CompileSpec(label=label + "/columns", fn=_columns_row_kernel, types=_COLUMNS_ROW_TYPES,
                            num_warps=tiling.num_warps, maxnreg=tiling.maxnreg, targets=targets, scratch_ok=why,
                            aligned=(*_COLUMNS_ROW_TYPES, *ints),
                            constexprs=common | {"TILE_W": tile, "TIERS": tiers,
                                                 "SECANT_ROUNDS": radix_fast.SECANT_ROUNDS,
                                                 "RANK_FINISH": tiling.rank_finish,
                                                 **row_layout(tiling, tile, tiers, bool(ints))}),)
    if tiling.sweep_samples:
        chunk_w = triton.cdiv(width, sweep_block(tiling))
        return (
            *sweep_specs(tiling, width, has_starts, label + "/columns", targets, column_order=True),
            CompileSpec(label=label + "/columns", fn=_columns_long_kernel, types=_COLUMNS_LONG_TYPES,
                        num_warps=finish_warps(tiling), maxnreg=tiling.finish_maxnreg, targets=targets,
                        constexprs=common | {"PDL": tiling.pdl and tiling.sweep_late_dependents,
                                             "CHUNKS": triton.next_power_of_2(chunk_w), "GROUPS": 1,
                                             "BLOCK": tiling.block, "SWEEP": True,
                                             "SWEEP_BLOCK": sweep_block(tiling),
                                             "RANK_CAP": tiling.finish_rank_cap}))
    gsize = group_size(width, tiling.tile_w)
    chunk_w = triton.cdiv(triton.cdiv(width, gsize), tiling.block // gsize)
    return (
        CompileSpec(label=label + "/columns/candidates", fn=_candidates_kernel, types=_CAND_TYPES,
                    num_warps=tiling.cand_warps, targets=targets,
                    constexprs={"HAS_STARTS": has_starts, "CAP": tiling.cap, "BLOCK": tiling.block, "GROUP": gsize,
                                "CHUNK_IDS": True, "PDL": tiling.pdl}),
        CompileSpec(label=label + "/columns", fn=_columns_long_kernel, types=_COLUMNS_LONG_TYPES,
                    num_warps=tiling.num_warps, maxnreg=tiling.finish_maxnreg, targets=targets,
                    constexprs=common | {"PDL": False, "CHUNKS": triton.next_power_of_2(chunk_w),
                                         "GROUPS": tiling.block // gsize, "BLOCK": tiling.block, "SWEEP": False,
                                         "SWEEP_BLOCK": 1, "RANK_CAP": tiling.finish_rank_cap}))
