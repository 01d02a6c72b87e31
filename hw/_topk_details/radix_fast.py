"""A faster exact per-row top-k for compiled GPUs (same results as top_k_per_row_kernel, DESIGN §4).

Launcher: `top_k_radix_fast(logits, lengths, starts, k, out)` (checked arguments; see its docstring).

Keys are the order-preserving uint32 keys of kernel.py (`_order_key`: 0 invisible, 1 NaN, ..., +inf largest), so
every comparison is an exact integer comparison. The k_eff-th largest visible key T (k_eff = min(k, visible
columns)) is found by narrowing an inclusive key interval [lo, hi] that always contains T, with

    ge_lo = #keys >= lo  (>= k_eff)          above = #keys > hi  (< k_eff)

A narrowing round counts the keys >= a few probe values inside the interval (one compare and one add per key and
probe) and keeps the sub-interval that still brackets the k_eff-th key. It stops in a *terminal* state: ge_lo ==
k_eff (every key in the interval is taken) or lo == hi (the interval is T itself). The result is then

    every key > hi, plus the first (k_eff - above) keys inside [lo, hi] in column order

which is the (value desc, index asc) rule: no tied key at the threshold is dropped or duplicated.

Rounds on many keys are cheap per key but each ends in a block-wide reduction, so the interval is first narrowed
on the whole row only until at most CAP keys are inside it (on chip: from the row's least and largest keys, one
probe a round, a guess from a normal fit of the row, then secant steps on the counts before halvings:
_narrow_on_row); those *candidates* (column, key) are compacted into a per-row scratch (in column order on the
on-chip path, in any order on the long path, below) and the narrowing finishes on a CAP-wide register tile, several
probes per round. The k_eff selected columns are compacted, as 64-bit composites (signed key << 32 | (2^31 - 1 -
column): descending composite order is the (value desc, column asc) rule), into a per-row scratch.

Ordering them is a sample sort: one tl.sort of all k_eff composites in one program is a long chain of shuffles
and barriers (most of the former kernel's time on the H200: docs/perf/h200-topk-phases.json), while the
sort of a few hundred is short. So the selecting program sorts a sample (every STRIDE-th selected composite),
takes splitters from it and scatters the selection into SEGMENTS ranges of the composite order (`_partition`);
then `_order_kernel` (rows x SEGMENTS programs, all SMs) sorts each range and stores it at its rank offset, the
sizes of the ranges above it. Composites are distinct, so the ranges and offsets are exact whatever the sample;
a sample that missed only makes a range larger (sorted wider, slower). The tail is padded with -1.

Rows held in one register tile (fewer than MANY_ROWS_PER_SM rows per SM: the decode step's) skip the
candidates, the compaction and the sample: once the row narrowing leaves at most CAP keys inside [lo, hi],
`_count_sort` counting-sorts every key >= lo (at most 2 k_pad of them) into FINE_BUCKETS buckets of falling key
ranges, and ordering program j takes the run of buckets that start at ranks [j COUNT_GROUP, (j + 1) COUNT_GROUP)
at its rank offset, the prefix sum, storing as far as rank k_eff. A row whose keys >= lo have no finite value span
or crowd one bucket (massive ties) takes the path above; a mode word per row tells the ordering which
(docs/perf/h200-topk.md).

Two paths, picked from the width alone (the grid depends only on shapes):

  W <= tile_w  one program per row (`_topk_row_kernel`): the row is loaded once into registers and every round
               and the compaction run on chip. Global traffic: one read of the visible row, candidates written
               and read back once (<= CAP), k selected composites written and read back twice. For many rows
               (MANY_ROWS_PER_SM per SM) a row whose columns, from its start rounded down to 16 to its end, fit
               half (a quarter) of the register tile is held in that narrower tile, which halves (quarters) the
               work of its rounds and compaction, and the programs take the rows from the last (the longest in a
               causal prefill) to the first.
  W >  tile_w  four selecting kernels. `_group_max_kernel` (rows x column blocks, all SMs) reduces every
               GROUP consecutive columns to their largest visible key (G = cdiv(W, GROUP) <= tile_w groups).
               `_tau_kernel` (one program per row) narrows on the G maxima to a bound tau: when >= k_eff group
               maxima are >= tau, at least k_eff keys are, so T >= tau; it lists the groups whose maximum is
               >= tau. `_candidates_kernel` (rows x chunks of those groups, all SMs) appends the keys >= tau
               (typically little more than k_eff) to the row's candidates, in no particular order, and
               `_topk_long_kernel` (one program per row) finishes on the register tile: a tie at the threshold
               is then resolved by a bound on the columns, not by their order. If more than CAP keys are >= tau
               (structured rows, massive ties) that program narrows by streaming rounds over the row before
               compacting: slower, same result. Global traffic: one full read for the maxima, one read of the
               qualifying groups (mostly from L2) for the candidates, then as above. Rows narrow enough for
               a sampled threshold (FastTiling.sweep_samples, column_order.sweep_samples) take column_order's
               sample and sweep for the first three: tau from sampled keys, one read of the row appending the
               keys >= tau; if fewer than k_eff keys reach it, the finish takes them all and narrows below it by
               streaming rounds.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .._constant import Constant
from .._pdl import grid_dependency_sync, pdl_launch
from ..isa_spec import CompileSpec
from ..targets import LaunchSettings, NotCovered, Target, register_cap
from .kernel import _EMPTY_SLOT, _INT32_MAX, _order_key, _sort_composite
from .tile_scan import _exclusive_prefix, _row_columns, _scatter_view

FAST_MAX_K = 4096        # the selecting program partitions all K_PAD selected composites in registers
TILE_W = 8192            # widest row kept on chip; also the most group maxima of the long path
ON_CHIP_WARPS = 8            # of the selecting kernels on the on-chip path ...
LONG_NUM_WARPS = 16      # ... and on the long path (docs/perf/h200-topk-sweep.json)
ROW_CAP = 1024           # candidates of the on-chip path: narrowing on the row stops at <= ROW_CAP keys
MIN_LONG_CAP = 1024      # candidates of the long path: 2 * K_PAD (tau lets through a bit more than k_eff) ...
MAX_LONG_CAP = 8192      # ... within these bounds
STREAM_BLOCK = 2048      # columns per candidate program and streaming chunk of the long path (at least a group) ...
MAX_BLOCK = 4096         # ... at most: the widest tile measured and cross-compiled (ISA_SHAPES' widest row)
FAST_MAX_WIDTH = TILE_W * MAX_BLOCK   # widest row: a wider one's groups would be wider than MAX_BLOCK
TAU_SLACK_DIV = 16       # the long path stops narrowing tau once at most k_eff + CAP / 16 maxima are >= tau
SEGMENT = 128            # the ordering splits the selection into ranges of about SEGMENT composites per program ...
SEGMENT_SAMPLES = 16     # ... between splitters from a sample of SEGMENT_SAMPLES per range
FINE_BUCKETS = 256       # one-tile on-chip launches: the keys >= lo counting-sorted into this many buckets by key
                         # (or value) range (_count_sort) ...
KEY_MAP_BINADES = 8      # ... by key when they have one sign and span at most this many binades
ORDER_WARPS = 4
CAND_WARPS = 4           # of the long path's candidate programs (docs/perf/h200-topk-candidates.json)
RANK_ROWS = 64           # a range of _order_kernel holding more than twice its sort width: members ranked at a
RANK_CHUNK = 16          # time against this many at a time
PROBE_ELEMS = 8192       # candidate-tile rounds compare CAP keys with 2^PROBE_BITS - 1 probes: CAP * 2^PROBE_BITS
                         # compares in registers at once (32 per thread at 8 warps of 32), at most 3 probe bits
MIN_K_PAD = 16
MANY_ROWS_PER_SM = 8     # from this many rows per SM (CU) the on-chip selecting kernel ...
SHARED_SM_MAXNREG = 128  # ... is capped (NVIDIA) at 128 registers: 8 warps x 32 x 128, two programs per SM, ...
MANY_ROWS_TIERS = 3      # ... and holds each row in the narrowest of 3 tile widths that fits it
COUNTER_STRIDE = 8           # int32 words between _count_sort's atomic counters: one per 32-byte sector
MIN_TIER_W = 1024        # narrowest tile of a tier
STREAM_BIN_BITS = 8      # the streaming narrowing (_narrow_stream) splits its key interval into 2^this bins a pass

_KEY_MAX = Constant(0xFFFFFFFF)
_STREAM_BIN_BITS = Constant(STREAM_BIN_BITS)
_STREAM_BINS = Constant(1 << STREAM_BIN_BITS)
_FINE = Constant(FINE_BUCKETS)
_SIGN_BIT = Constant(0x80000000)
_FLT_MAX = Constant(3.4028234663852886e38)
#: _normal_guess's SHAPE: the skewness and excess kurtosis its expansion takes at most (beyond them, on heavy-tailed
#: rows, the expansion's correction outgrows the quantile it corrects)
_FIT_SKEW_MAX = Constant(3.0)
_FIT_KURTOSIS_MAX = Constant(12.0)
_KEY_MAP_SPAN = Constant(KEY_MAP_BINADES << 23)   # keys of one sign: 2^23 per binade
_COUNTERS = Constant(FINE_BUCKETS + 32)           # the count scratch's word of _count_sort's first counter
_COUNTER_STRIDE = Constant(COUNTER_STRIDE)
_FLIP = Constant(0xFFFFFFFF)
_COMPOSITE_MAX = Constant(2 ** 63 - 1)   # above every composite: the top segment's bound
_TAU_SLACK_DIV = Constant(TAU_SLACK_DIV)
_RANK_BITS = Constant(16)          # two exclusive ranks < 2^16 share one cumsum
_RANK_MASK = Constant(0xFFFF)
#: per-row int32 words of the long path (tau, qualifying groups, the candidates' counter), padded to 32 bytes: each
#: row's counter in an L2 sector of its own, where the atomic adds of a row's candidate programs land (two rows to a
#: sector were slower: docs/perf/h200-topk.md, "Per-warp slots into regions (lost); a sector for each row's counter")
_META = Constant(8)
_META_TAU = Constant(0)
_META_GROUPS = Constant(1)
_META_COUNT = Constant(2)


#: the rounds on a whole row tile (both forms' on-chip kernels) and on tau's group maxima: secant probes before they
#: halve the key interval (_narrow_on_row); 8 and 16 level on the H200, 4 and 0 slower (docs/perf/h200-topk.md,
#: "Secant probes")
SECANT_ROUNDS = 8


@dataclass(frozen=True)
class FastTiling(LaunchSettings):
    """Constexprs of one launch (powers of two)."""
    tile_w: int    # widest row of the on-chip path; at most tile_w group maxima on the long path
    cap: int       # candidate tile (register tile of the final narrowing)
    block: int     # columns per candidate program and per streaming chunk (long path; <= 2^16)
    segment: int = SEGMENT   # composites per ordering program, expected (the sort width is twice that)
    samples: int = SEGMENT_SAMPLES   # splitter samples per segment
    num_warps: int = ON_CHIP_WARPS       # of the selecting kernels
    order_warps: int = ORDER_WARPS   # of _order_kernel
    cand_warps: int = CAND_WARPS     # of _candidates_kernel
    pdl: bool = False                # programmatic dependent launch of every kernel (hw._pdl)
    maxnreg: int | None = None       # register cap of the selecting kernels (NVIDIA; None: ptxas chooses)
    tiers: int = 1                   # on-chip path: 1, or 2 / 3 tile widths (TILE_W, / 2, / 4) chosen per row
    lanes: int = 32                  # threads of a warp on the target (Target.lanes): column_order's row tile
    rank_finish: bool = False        # column order on chip: the candidate tile finished by ranks (cap <= 256)
    finish_maxnreg: int | None = None  # register cap of the long path's finish (NVIDIA; None: ptxas chooses)
    sweep_samples: int = 0           # the long path: 0, group maxima and tau; else a threshold from this many
                                     # sampled keys and one sweep of the row (column_order)
    sweep_block: int = 0             # columns a sweep program (a chunk of the candidates); 0: block
    sweep_maxnreg: int | None = None  # register cap of the sweep (NVIDIA; None: ptxas chooses)
    sample_warps: int = 0            # of the sweep's sample kernel; 0: num_warps
    finish_warps: int = 0            # of the column order's long finish after a sweep; 0: num_warps
    finish_rank_cap: int = 0         # column order's long finish: rounds until at most this many keys are inside,
                                     # then ranks (column_order._finish_ranked; <= 256); 0: rounds to the end
    sweep_late_dependents: bool = False  # the sweep lets the next kernel be scheduled after its stores, not at its
                                         # start, and the column order's finish is launched with PDL


def fast_tiling(width: int, k: int, pdl: bool = False, rows: int = 0, sms: int = 0,
                register_cap: bool = False) -> FastTiling:
    """The launch constants for rows of `width` >= 1 columns at 1 <= k <= FAST_MAX_K (pdl: FastTiling.pdl, the
    variant's choice on NVIDIA). rows, sms: the launch's rows and the GPU's SMs (CUs on AMD; 0: not known). From
    MANY_ROWS_PER_SM rows per SM, the on-chip selecting kernel holds each row in the narrowest of MANY_ROWS_TIERS
    tiles and, with `register_cap` (NVIDIA's maxnreg; AMD has none), runs under SHARED_SM_MAXNREG registers, two
    programs per SM; below that, one per SM, in one tile, ordered from the counting sort (count_group), is faster
    (docs/perf/h200-topk.md)."""
    if width <= TILE_W:
        shared = 0 < sms and MANY_ROWS_PER_SM * sms <= rows
        return FastTiling(TILE_W, ROW_CAP, STREAM_BLOCK, pdl=pdl,
                          maxnreg=SHARED_SM_MAXNREG if shared and register_cap else None,
                          tiers=MANY_ROWS_TIERS if shared else 1)
    return FastTiling(TILE_W, min(max(2 * k_pad(k), MIN_LONG_CAP), MAX_LONG_CAP),
                      min(max(STREAM_BLOCK, group_size(width, TILE_W)), MAX_BLOCK),
                      num_warps=LONG_NUM_WARPS, pdl=pdl)


def target_tiling(target: Target, width: int, k: int, rows: int = 0, sms: int = 0) -> FastTiling:
    """fast_tiling as `target` (NVIDIA, AMD or the interpreter) launches it: PDL and the register cap on NVIDIA only,
    warps of the target's lanes."""
    nvidia = target is Target.NVIDIA
    return dataclasses.replace(fast_tiling(width, k, pdl=nvidia, rows=rows, sms=sms, register_cap=nvidia),
                               lanes=target.lanes)


@dataclass(frozen=True)
class Ordering:
    """Constexprs of _order_kernel for one launch."""
    segments: int   # programs per row
    stride: int     # sample stride
    seg_cap: int    # sort width of a segment


def ordering(k: int, tiling: FastTiling) -> Ordering:
    """How _order_kernel splits a selection of up to k_pad(k) columns into ranges of about tiling.segment: one
    program per row when that is all, else k_pad / segment programs sorting up to 2 * segment each, between
    splitters from a sample of tiling.samples per segment."""
    width = k_pad(k)
    if width <= tiling.segment:
        return Ordering(1, 1, width)
    return Ordering(width // tiling.segment, max(1, tiling.segment // tiling.samples), 2 * tiling.segment)


def count_group(order: Ordering, one_tile: bool) -> int:
    """COUNT_GROUP: on the on-chip path with one row tile and a split ordering, the keys (about) per ordering
    program of a row _count_sort ordered by bucket, 3/8 of seg_cap: a program's run of buckets (the group, plus
    the tail of its last bucket) then mostly fits the sort of seg_cap / 2; else 0, no counting sort (with many
    rows the capped, tiered kernel is faster without: docs/perf/h200-topk.md)."""
    return 3 * order.seg_cap // 8 if one_tile and 1 < order.segments else 0


def order_programs(order: Ordering, group: int) -> int:
    """Programs per row of _order_kernel: enough groups of `group` (count_group > 0) to cover k_pad, else the
    segments."""
    return triton.cdiv(order.segments * order.seg_cap // 2, group) if group else order.segments


def count_width(segments: int, group: int) -> int:
    """int32 words per row of the count scratch (COUNT_W): when the launch may counting-sort (group = count_group
    > 0), _count_sort's FINE_BUCKETS bucket ends, its mode word at FINE_BUCKETS and, from word FINE_BUCKETS + 32,
    its FINE_BUCKETS atomic counters COUNTER_STRIDE words apart (one per 32-byte sector: fewer increments contend
    for one L2 line, docs/perf/h200-topk.md); rows 128-byte aligned. Else _partition's counts."""
    return FINE_BUCKETS + 32 + COUNTER_STRIDE * FINE_BUCKETS if group else segments


def probe_bits(cap: int) -> int:
    """Probe bits of the candidate-tile rounds for a tile of `cap` keys: 3 (7 probes) at cap <= 1024, fewer above,
    1 (a single probe) from PROBE_ELEMS / 2."""
    return max(1, min(3, (PROBE_ELEMS // cap).bit_length() - 1))


def k_pad(k: int) -> int:
    """Sort width for k: the next power of two, at least MIN_K_PAD."""
    return max(MIN_K_PAD, triton.next_power_of_2(k))


def row_tile(width: int) -> int:
    """The on-chip path's register tile for rows of `width` columns: the next power of two, at least MIN_K_PAD."""
    return max(triton.next_power_of_2(width), MIN_K_PAD)


def row_tiers(tile: int, tiers: int) -> int:
    """The tile widths (TIERS) of an on-chip launch with register tile `tile` when `tiers` are asked for: as many
    as keep the narrowest at least MIN_TIER_W columns wide (at least 1; the kernel has three at most)."""
    assert 1 <= tiers <= 3, f"tiers = {tiers}: _topk_row_kernel holds a row in one of at most 3 tiles"
    return max(1, min(tiers, (tile // MIN_TIER_W).bit_length()))


def group_size(width: int, tile_w: int) -> int:
    """Columns per group of the long path: the least power of two that leaves at most tile_w groups."""
    return triton.next_power_of_2(triton.cdiv(width, tile_w))


# ------------------------------------------------------------------------------------------------- jit helpers
@triton.jit
def _row_range(starts_ptr, ends_ptr, row, width, k, HAS_STARTS: tl.constexpr):
    """(start, end, k_eff) of a row: visible columns start <= j < end, k_eff = min(k, visible count); start >= 0,
    end may be negative (no column visible): counts are taken as max(end, start) - start, which cannot wrap in int32
    as end - start can."""
    end = tl.minimum(tl.load(ends_ptr + row), width)
    if HAS_STARTS:
        start = tl.maximum(tl.load(starts_ptr + row), 0)
    else:
        start = end * 0
    return start, end, tl.minimum(tl.maximum(end, start) - start, k)


@triton.jit
def _narrow(key, base, lo, hi, ge_lo, above, k_eff, PROBE_BITS: tl.constexpr):
    """One narrowing round. `key` uint32 tile (0 = empty: below every lo >= 1); base: keys outside the tile that
    are > hi_at_tile_creation. lo, hi int64 (1 <= lo < hi <= 2^32 - 1), ge_lo, above, k_eff int32 as in the module
    docstring. Probes lo + floor(span * j / 2^PROBE_BITS), j = 1 .. 2^PROBE_BITS - 1; returns the new
    (lo, hi, ge_lo, above), a strictly smaller interval still holding the k_eff-th key."""
    span = hi - lo + 1
    if PROBE_BITS == 1:
        mid = lo + (span >> 1)
        c = base + tl.sum((key >= mid.to(tl.uint32)).to(tl.int32), 0)
        up = c >= k_eff
        new_lo = tl.where(up, mid, lo)
        new_hi = tl.where(up, hi, mid - 1)
        new_ge = tl.where(up, c, ge_lo)
        new_above = tl.where(up, above, c)
    else:
        NP: tl.constexpr = 1 << PROBE_BITS
        j = tl.arange(0, NP)
        probe = lo + ((span * j) >> PROBE_BITS)                 # probe[0] = lo: its count is ge_lo
        c = base + tl.sum((key[:, None] >= probe.to(tl.uint32)[None, :]).to(tl.int32), 0)
        c = tl.where(j == 0, ge_lo, c)
        pick = tl.max(tl.where(c >= k_eff, j, 0), 0)            # last probe still at or above the k_eff-th key
        nxt = pick + 1
        new_lo = lo + ((span * pick) >> PROBE_BITS)
        new_ge = tl.sum(tl.where(j == pick, c, 0), 0)
        new_hi = tl.where(nxt == NP, hi, lo + ((span * nxt) >> PROBE_BITS) - 1)
        new_above = tl.where(nxt == NP, above, tl.sum(tl.where(j == nxt, c, 0), 0))
    return new_lo, new_hi, new_ge, new_above


@triton.jit
def _probe(lo, hi, ge_lo, above, target, w_lo, w_hi, secant):
    """The next round's probe in [lo + 1, hi]: with `secant`, where the counts would reach `target` (fp32, strictly
    between above and ge_lo) if they fell linearly in value between the two ends (count ge_lo at lo, above at hi),
    their weights w_lo and w_hi applied; else, or when an end is not a finite number, the middle of the interval."""
    a = _key_value(lo.to(tl.uint32))
    b = _key_value(hi.to(tl.uint32))
    f_lo = (ge_lo.to(tl.float32) - target) * w_lo
    f_hi = (target - above.to(tl.float32)) * w_hi
    t = f_lo / (f_lo + f_hi)
    value = a * (1.0 - t) + b * t                             # no overflow between -FLT_MAX and FLT_MAX
    at = _order_key(value, True).to(tl.int64)
    numbers = (tl.abs(a) <= _FLT_MAX) & (tl.abs(b) <= _FLT_MAX)
    return tl.where(secant & numbers, tl.minimum(tl.maximum(at, lo + 1), hi), lo + ((hi - lo + 1) >> 1))


@triton.jit
def _secant_round(key, mid, lo, hi, ge_lo, above, k_eff, w_lo, w_hi, side, secant, check):
    """One round of one probe, `mid` in [lo + 1, hi], on a tile holding every key (0 = empty); returns the new (lo,
    hi, ge_lo, above), the secant state (w_lo, w_hi, side: the end the last secant step kept, 1 lo, -1 hi, 0 none;
    an end kept twice in a row has its weight halved, so both ends move) and the next `check`: whether lo is the key
    of 0.0 and this round went down from a probe above lo + 1 without finding a key at or above it."""
    c = tl.sum((key >= mid.to(tl.uint32)).to(tl.int32), 0)
    up = c >= k_eff
    check = ((check == 0) & (lo == _SIGN_BIT) & ~up & (c == above)).to(tl.int32)
    kept = tl.where(up, -1, 1)
    halve = secant & (kept == side)
    w_lo = tl.where(secant & (kept != side), 1.0, tl.where(halve & (kept == 1), w_lo * 0.5, w_lo))
    w_hi = tl.where(secant & (kept != side), 1.0, tl.where(halve & (kept == -1), w_hi * 0.5, w_hi))
    side = tl.where(secant, kept, side)
    return (tl.where(up, mid, lo), tl.where(up, hi, mid - 1), tl.where(up, c, ge_lo), tl.where(up, above, c),
            w_lo, w_hi, side, check)


@triton.jit
def _narrowing(lo, hi, ge_lo, above, k_eff, CAP: tl.constexpr, SLACK: tl.constexpr):
    """Whether _narrow_on_row goes on: not terminal, and more than CAP keys inside (more than k_eff + SLACK >= lo)."""
    return (ge_lo != k_eff) & (lo < hi) & ((ge_lo > k_eff + SLACK) if SLACK > 0 else (ge_lo - above > CAP))


@triton.jit
def _sums(a, squares_a, b, squares_b):
    return a + b, squares_a + squares_b


@triton.jit
def _sums4(a, b, c, d, a2, b2, c2, d2):
    return a + a2, b + b2, c + c2, d + d2


@triton.jit
def _moments(v, JOINED: tl.constexpr, SHAPE: tl.constexpr = False):
    """(sum, sum of squares, of cubes, of fourth powers) of the fp32 tile `v` (0.0 where the fit is not to see a
    value), in one reduction: _normal_guess's fit of a row; the last two 0.0 unless SHAPE. JOINED: as the built-in
    sum of a tile of two (SHAPE: four) columns (tl.join), else a reduction of as many operands (_narrow_on_row's
    JOINED says where each is faster)."""
    v2 = v * v
    if SHAPE:
        if JOINED:
            low, high = tl.split(tl.sum(tl.join(tl.join(v, v2), tl.join(v * v2, v2 * v2)), 0))
            total, squares = tl.split(low)
            cubes, fourths = tl.split(high)
        else:
            total, squares, cubes, fourths = tl.reduce((v, v2, v * v2, v2 * v2), 0, _sums4)
    else:
        if JOINED:
            total, squares = tl.split(tl.sum(tl.join(v, v2), 0))
        else:
            total, squares = tl.reduce((v, v2), 0, _sums)
        cubes = total * 0.0
        fourths = cubes
    return total, squares, cubes, fourths


@triton.jit
def _normal_z(tail):
    """z with P(N(0, 1) > z) = tail (fp32, 0 < tail < 1), by Abramowitz and Stegun 26.2.23 (within 4.5e-4)."""
    t = tl.sqrt(-2.0 * tl.log(tl.minimum(tail, 1.0 - tail)))
    z = t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308)))
    return tl.where(tail < 0.5, z, -z)


@triton.jit
def _normal_guess(lo, hi, total, squares, cubes, fourths, n, target, SPREAD: tl.constexpr, SHAPE: tl.constexpr):
    """Probes (a, b), lo + 1 <= a <= b <= hi: where the count of n values would reach `target` (fp32) if they were
    normal with the mean and variance of their sum `total` and sum of squares `squares` (_moments), the quantile by
    Abramowitz and Stegun 26.2.23 (within 4.5e-4), and SPREAD keys of that fit below and above it: the quantile's
    value minus / plus SPREAD over the fit's density there (a == b, the quantile, when SPREAD is 0). SHAPE: the
    quantile and the density corrected for the values' skewness and excess kurtosis (from `cubes` and `fourths`,
    each clamped) by the Cornish-Fisher expansion to its second order; the normal's where that is not a number.
    (0, 0), no guess, when the quantile is not a finite number (a NaN or an infinity among the values) or target is
    not strictly between 0 and n. Only the rounds' count depends on it, never a result."""
    m = n.to(tl.float32)
    mean = total / m
    var = tl.maximum(squares / m - mean * mean, 0.0)
    std = tl.sqrt(var)
    tail = target / m
    z = _normal_z(tail)
    if SHAPE:
        m2 = squares / m
        m3 = cubes / m
        central3 = m3 - mean * (3.0 * m2 - 2.0 * mean * mean)
        central4 = fourths / m - mean * (4.0 * m3 - mean * (6.0 * m2 - 3.0 * mean * mean))
        g1 = tl.minimum(tl.maximum(central3 / (var * std), -_FIT_SKEW_MAX), _FIT_SKEW_MAX)
        g2 = tl.minimum(tl.maximum(central4 / (var * var) - 3.0, -2.0), _FIT_KURTOSIS_MAX)
        zz = z * z
        shaped = z + (zz - 1.0) * g1 / 6.0 + z * (zz - 3.0) * g2 / 24.0 - z * (2.0 * zz - 5.0) * g1 * g1 / 36.0
        slope = 1.0 + z * g1 / 3.0 + (zz - 1.0) * g2 / 8.0 - (6.0 * zz - 5.0) * g1 * g1 / 36.0
        fine = (tl.abs(shaped) <= _FLT_MAX) & (slope > 0.0)   # False for NaN (var 0: no shape to see)
        zq = tl.where(fine, shaped, z)
        slope = tl.where(fine, tl.maximum(slope, 0.25), 1.0)
    else:
        zq = z
        slope = 1.0
    value = mean + zq * std
    # SPREAD keys of the fit span SPREAD / (n pdf(z) / (std slope)) in value; 2.5066283 = sqrt(2 pi)
    half = SPREAD * 2.5066283 * std * slope * tl.exp(0.5 * z * z) / m
    a = _order_key(value - half, True).to(tl.int64)
    b = _order_key(value + half, True).to(tl.int64)
    ok = (tail > 0.0) & (tail < 1.0) & (tl.abs(value) <= _FLT_MAX)   # False for NaN
    return (tl.where(ok, tl.minimum(tl.maximum(a, lo + 1), hi), 0),
            tl.where(ok, tl.minimum(tl.maximum(b, lo + 1), hi), 0))


@triton.jit
def _bracket_round(key, a, b, lo, hi, ge_lo, above, k_eff):
    """One round of two probes a <= b in [lo + 1, hi] on a tile holding every key (0 = empty; fewer than 2^15 of
    them: both counts in one int32 reduction, neither reaching its sign bit); returns the new (lo, hi, ge_lo,
    above)."""
    tl.static_assert(key.shape[0] < 32768, "two counts of up to 15 bits packed in one int32")
    packed = tl.sum(((key >= b.to(tl.uint32)).to(tl.int32) << 16) | (key >= a.to(tl.uint32)).to(tl.int32), 0)
    c_a = packed & 0xFFFF
    c_b = packed >> 16
    up_b = c_b >= k_eff
    up_a = c_a >= k_eff
    return (tl.where(up_b, b, tl.where(up_a, a, lo)), tl.where(up_b, hi, tl.where(up_a, b - 1, a - 1)),
            tl.where(up_b, c_b, tl.where(up_a, c_a, ge_lo)), tl.where(up_b, above, tl.where(up_a, c_b, c_a)))


@triton.jit
def _narrow_on_row(key, visible, n, k_eff, total, squares, CAP: tl.constexpr, SECANT_ROUNDS: tl.constexpr,
                   SLACK: tl.constexpr, SPREAD: tl.constexpr, JOINED: tl.constexpr, cubes=0.0, fourths=0.0,
                   SHAPE: tl.constexpr = False, POSITIVE: tl.constexpr = False):
    """Narrow a tile holding every key of a row (uint32, 0 where not `visible`, which may be None with JOINED; n
    visible, k_eff >= 1; their values' _moments total and squares) until the state is terminal or at most CAP keys
    are inside, or with SLACK > 0 (_tau_kernel, on group maxima) until at most k_eff + SLACK keys reach lo; returns
    (lo, hi, ge_lo, above) of the module docstring. When n already stops the rounds (n <= k_eff, or n <= k_eff +
    SLACK) they are the least and largest keys, n and 0.

    The interval starts at the row's least and largest keys (no round is spent above or below them). The first round
    probes where the count would reach its target if the values were normal with their mean and variance
    (_normal_guess): the quantile alone with SPREAD = 0, else two probes SPREAD keys of the fit below and above it
    (_bracket_round; SPREAD > 0 only without SLACK). On bell-shaped rows, the decode step's logits among them, the
    quantile takes about half the rounds of secant steps from the ends, and a bracket of 3/8 CAP keys on either side
    most of the rest (docs/perf/h200-topk.md, "The first probe from a normal fit", "A bracket about the fit's
    quantile"). SHAPE: the fit with the values' skewness and kurtosis (_normal_guess's; `cubes` and `fourths` from
    _moments). The next rounds up to SECANT_ROUNDS are secant steps on the counts (_secant_round), the rest halve the
    key interval: at most SECANT_ROUNDS + 32 rounds on any row. When the least key is 0.0's the first probe is the
    next key up, and so is the probe after a round that went down from lo = the key of 0.0 without finding a key
    above its probe: when fewer than k_eff keys reach it, every key left inside is 0.0 and the interval closes on it
    (ReLU-degenerate rows, thousands of exact zeros straddling the k-th place). POSITIVE: when that first round finds
    at least k_eff positive values, the next probe is the fit of those alone instead of a secant step from 0.0
    (docs/perf/h200-topk.md, "First probes from the rows' shape").

    JOINED: the least and largest keys in one built-in reduction of a two-column tile (the max of the keys and of
    the visible keys' complements, tl.join; with `visible` None, of the keys' negations, which needs no select) instead
    of a min and a max, as _moments then: faster in the column-order row kernel on the H200, not in _tau_kernel or
    the sorted form's row kernel (docs/perf/h200-topk.md, "The row's ends and moments as two-column reductions")."""
    if JOINED and visible is None:
        # the least key from the largest negation, 2^32 - key, or 0 for the invisible keys (which are 0, below every
        # visible key): no select a column; ^ _FLIP and + 1, not -: triton 3.8's interpreter cannot negate unsigned
        # integers
        hi_key, neg_lo = tl.split(tl.max(tl.join(key, (key ^ _FLIP) + 1), 0))
        neg_lo = neg_lo.to(tl.int64)
        lo = tl.where(neg_lo == 0, _KEY_MAX, (1 << 32) - neg_lo)
        hi = hi_key.to(tl.int64)
    elif JOINED:
        # ^ _FLIP, not ~: triton 3.8's interpreter cannot invert unsigned integers
        hi_key, not_lo = tl.split(tl.max(tl.join(key, tl.where(visible, key ^ _FLIP, 0)), 0))
        lo = (not_lo ^ _FLIP).to(tl.int64)
        hi = hi_key.to(tl.int64)
    else:
        lo = tl.min(tl.where(visible, key, _KEY_MAX), 0).to(tl.int64)
        hi = tl.max(key, 0).to(tl.int64)
    ge_lo = n
    above = n * 0
    check = (lo == _SIGN_BIT).to(tl.int32)
    w_lo = ge_lo.to(tl.float32) * 0 + 1.0
    w_hi = w_lo
    side = above
    rounds = above
    target = k_eff.to(tl.float32) + (0.5 * SLACK if SLACK > 0 else -0.5)
    tl.static_assert((SPREAD == 0) or (SLACK == 0), "a bracket narrows toward CAP keys inside, not toward SLACK")
    first, second = _normal_guess(lo, hi, total, squares, cubes, fourths, n, target, SPREAD, SHAPE)
    # the guess's round apart, so that the rounds' loop carries nothing more (registers of the capped kernels)
    if _narrowing(lo, hi, ge_lo, above, k_eff, CAP, SLACK) & (check == 0) & (first != 0):
        if SPREAD == 0:
            lo, hi, ge_lo, above, w_lo, w_hi, side, check = _secant_round(key, first, lo, hi, ge_lo, above, k_eff,
                                                                          w_lo, w_hi, side, True, check)
        else:   # lo stays above the key of 0.0 (check == 0): nothing for `check` to see
            lo, hi, ge_lo, above = _bracket_round(key, first, second, lo, hi, ge_lo, above, k_eff)
        rounds += 1
    if POSITIVE:
        # a row of no negative value (its least key 0.0's, ReLU-degenerate rows): once the round at lo + 1 has
        # counted its positive values, a probe from the fit of those alone (the sums are theirs: the rest are 0.0)
        if _narrowing(lo, hi, ge_lo, above, k_eff, CAP, SLACK) & (check != 0):
            lo, hi, ge_lo, above, w_lo, w_hi, side, check = _secant_round(key, lo + 1, lo, hi, ge_lo, above, k_eff,
                                                                          w_lo, w_hi, side, False, check)
            rounds += 1
            positive, _ = _normal_guess(lo, hi, total, squares, cubes, fourths, ge_lo, target, 0, SHAPE)
            if _narrowing(lo, hi, ge_lo, above, k_eff, CAP, SLACK) & (positive != 0):
                lo, hi, ge_lo, above, w_lo, w_hi, side, check = _secant_round(key, positive, lo, hi, ge_lo, above,
                                                                              k_eff, w_lo, w_hi, side, True, check)
                rounds += 1
    while _narrowing(lo, hi, ge_lo, above, k_eff, CAP, SLACK):
        secant = (rounds < SECANT_ROUNDS) & (check == 0)
        mid = tl.where(check != 0, lo + 1, _probe(lo, hi, ge_lo, above, target, w_lo, w_hi, secant))
        lo, hi, ge_lo, above, w_lo, w_hi, side, check = _secant_round(key, mid, lo, hi, ge_lo, above, k_eff, w_lo,
                                                                      w_hi, side, secant, check)
        rounds += 1
    return lo, hi, ge_lo, above


@triton.jit
def _split_flags(key, lo, hi):
    """(above flag, inside flag, the two packed as above << 16 | inside) of a tile of keys against [lo, hi]."""
    is_above = key > hi.to(tl.uint32)
    inside = (key >= lo.to(tl.uint32)) & (key <= hi.to(tl.uint32))
    return is_above, inside, (is_above.to(tl.int32) << _RANK_BITS) | inside.to(tl.int32)


@triton.jit
def _ranks(a, b):
    """Exclusive ranks, in tile order, of the True entries of two flag tiles (< 2^16 entries): one cumsum."""
    flags = (a.to(tl.int32) << _RANK_BITS) | b.to(tl.int32)
    ranks = tl.cumsum(flags, 0) - flags
    return ranks >> _RANK_BITS, ranks & _RANK_MASK


@triton.jit
def _split_ranks(key, lo, hi):
    """(above flag, inside flag, exclusive rank among the above, among the inside) of a tile, in tile order."""
    is_above, inside, flags = _split_flags(key, lo, hi)
    ranks = tl.cumsum(flags, 0) - flags
    return is_above, inside, ranks >> _RANK_BITS, ranks & _RANK_MASK


@triton.jit
def _split_store(key, cols, lo, hi, above, k_eff, n_above, n_inside, direct, out_row, cand_ptr,
                 CAP: tl.constexpr):
    """Compaction of one tile (columns `cols`, in column order) after n_above / n_inside earlier keys above /
    inside [lo, hi]: keys > hi go to out_row[their rank]; keys inside go to the candidates cand_ptr[rank] (columns)
    and cand_ptr[CAP + rank] (keys) when not `direct` (ranks >= CAP are dropped), else the first k_eff - above of
    them go to out_row[above + rank]. Returns the updated (n_above, n_inside)."""
    is_above, inside, above_rank, inside_rank = _split_ranks(key, lo, hi)
    above_rank += n_above
    inside_rank += n_inside
    # scalar limits instead of a scalar flag in the masks: ranks below them are taken / kept
    take = inside & (inside_rank < tl.where(direct != 0, k_eff - above, 0))
    tl.store(out_row + tl.where(is_above, above_rank, above + inside_rank), _sort_composite(key, cols),
             mask=is_above | take)
    keep = inside & (inside_rank < tl.where(direct != 0, 0, CAP))
    tl.store(cand_ptr + inside_rank, cols, mask=keep)
    tl.store(cand_ptr + CAP + inside_rank, key.to(tl.int32, bitcast=True), mask=keep)
    return n_above + tl.sum(is_above.to(tl.int32), 0), n_inside + tl.sum(inside.to(tl.int32), 0)


@triton.jit
def _finish_candidates(cand_ptr, count, lo, hi, ge_lo, above, k_eff, end, out_row, CAP: tl.constexpr,
                       PROBE_BITS: tl.constexpr, IN_ORDER: tl.constexpr):
    """Narrow to a terminal state on the `count` <= CAP candidates (the keys inside [lo, hi]; distinct columns
    < end) and store the selected ones to out_row[above .. k_eff) (the keys > hi are already in out_row[0 ..
    above)). A tie at the threshold holding more keys than are left to take keeps those of the smallest columns:
    the first ones when the candidates are in column order (IN_ORDER), else those below the least column bound
    under which exactly that many lie (searched; it costs registers, so only the long path does it). The long
    path's interval reaches up to KEY_MAX: without IN_ORDER it first shrinks to the largest candidate, which
    saves the rounds that would probe above it."""
    tl.debug_barrier()   # the candidates were stored by other threads (or programs)
    slots = tl.arange(0, CAP)
    filled = slots < count
    cols = tl.load(cand_ptr + slots, mask=filled, other=0)
    key = tl.load(cand_ptr + CAP + slots, mask=filled, other=0).to(tl.uint32, bitcast=True)
    base = above
    if not IN_ORDER:   # no key lies between the largest candidate and hi: `above` stays exact
        hi = tl.maximum(tl.minimum(hi, tl.max(key, 0).to(tl.int64)), lo)
    while (ge_lo != k_eff) & (lo < hi):
        lo, hi, ge_lo, above = _narrow(key, base, lo, hi, ge_lo, above, k_eff, PROBE_BITS)
    is_above, inside, above_rank, inside_rank = _split_ranks(key, lo, hi)
    need = k_eff - above
    if IN_ORDER:
        take = inside & (inside_rank < need)
        take_rank = inside_rank
    else:
        c_lo = tl.where(ge_lo - above > need, 0, end)   # a search only when the tie holds more than need
        c_hi = end
        while c_lo < c_hi:
            mid = (c_lo + c_hi) >> 1
            below = tl.sum((inside & (cols < mid)).to(tl.int32), 0)
            c_lo = tl.where(below >= need, c_lo, mid + 1)
            c_hi = tl.where(below >= need, mid, c_hi)
        take = inside & (cols < c_lo)
        above_rank, take_rank = _ranks(is_above, take)
    tl.store(out_row + tl.where(is_above, base + above_rank, above + take_rank), _sort_composite(key, cols),
             mask=is_above | take)


@triton.jit
def _narrow_stream(row_ptr, start, end, lo, hi, ge_lo, above, k_eff, CAP: tl.constexpr, BLOCK: tl.constexpr):
    """Narrow [lo, hi] (ge_lo visible keys >= lo, `above` > hi, above < k_eff <= ge_lo) by streaming passes over
    columns [start, end) until the state is terminal or at most CAP keys are inside. A pass counts the keys inside
    into 2^STREAM_BIN_BITS bins of equal key width 2^shift (the least shift that covers hi - lo; one tl.histogram a
    chunk) and keeps the bin holding the k_eff-th key: at most ceil(32 / STREAM_BIN_BITS) passes from any interval,
    against one a bit by halving (the path of rows that tau lets more than CAP keys through or, sampled, misses:
    docs/perf/h200-topk.md, "Streaming passes by key bins")."""
    bins = tl.arange(0, _STREAM_BINS)
    while (ge_lo != k_eff) & (lo < hi) & (ge_lo - above > CAP):
        # hi - lo (1 .. 2^32 - 1) is exact as a float64, whose exponent is then floor(log2(hi - lo)) (a float32's
        # rounds up just below a power of two, a bit a pass lost)
        e = ((hi - lo).to(tl.float64).to(tl.int64, bitcast=True) >> 52) - 1023
        shift = tl.maximum(e - (_STREAM_BIN_BITS - 1), 0).to(tl.int64)
        counts = tl.zeros([_STREAM_BINS], dtype=tl.int32)
        for off in range(start, end, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            visible = cols < end
            key = _order_key(tl.load(row_ptr + cols, mask=visible, other=0.0), visible).to(tl.int64)
            inside = (key >= lo) & (key <= hi)
            counts += tl.histogram(((key - lo) >> shift).to(tl.int32), _STREAM_BINS, mask=inside)
        ge = above + tl.cumsum(counts, 0, reverse=True)   # keys >= each bin's least key, non-increasing
        b = tl.max(tl.where(ge >= k_eff, bins, 0), 0)     # ge[0] == ge_lo >= k_eff
        ge_b = tl.sum(tl.where(bins == b, ge, 0), 0)
        above = ge_b - tl.sum(tl.where(bins == b, counts, 0), 0)
        lo = lo + (b.to(tl.int64) << shift)
        hi = tl.minimum(hi, lo + ((lo * 0 + 1) << shift) - 1)
        ge_lo = ge_b
    return lo, hi, ge_lo, above


@triton.jit
def _split_stream(row_ptr, start, end, lo, hi, above, k_eff, direct, out_row, cand_ptr, CAP: tl.constexpr,
                  BLOCK: tl.constexpr):
    """_split_store over the visible columns, streaming; returns the number of keys inside [lo, hi]."""
    n_above = start * 0
    n_inside = start * 0
    for off in range(start, end, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        inside = cols < end
        key = _order_key(tl.load(row_ptr + cols, mask=inside, other=0.0), inside)
        n_above, n_inside = _split_store(key, cols, lo, hi, above, k_eff, n_above, n_inside, direct, out_row,
                                         cand_ptr, CAP)
    return n_inside


@triton.jit
def _partition(sel_row, k_eff, bucket_ptr, count_ptr, lower_ptr, row, K_PAD: tl.constexpr,
               SEGMENTS: tl.constexpr, STRIDE: tl.constexpr, SEG_CAP: tl.constexpr, COUNT_W: tl.constexpr):
    """Split the k_eff selected composites sel_row[0 .. k_eff) of `row` into SEGMENTS ranges of the composite
    order for _order_kernel (SEGMENTS > 1; with one, the ordering sorts sel_row whole). The bounds come from a
    sorted sample (every STRIDE-th slot): range j is (lower[j], lower[j - 1]] with lower[j] the sample's entry
    (j + 1) * PER (_EMPTY_SLOT past the filled samples), lower[-1] = +inf.
    Stores the row's lower[j] and count[j] = the composites in range j, and the first 2 * SEG_CAP of them (any
    order) to its bucket j (the slots are taken by atomic increments of the counts, zeroed first). The count row
    holds COUNT_W words (count_width)."""
    bucket_row = bucket_ptr + row * (SEGMENTS * 2 * SEG_CAP)
    count_row = count_ptr + row * COUNT_W
    lower_row = lower_ptr + row * SEGMENTS
    SAMPLES: tl.constexpr = K_PAD // STRIDE
    PER: tl.constexpr = SAMPLES // SEGMENTS
    tl.debug_barrier()   # the selection was stored by other threads of this program
    s = tl.arange(0, SAMPLES)
    sample = tl.sort(tl.load(sel_row + s * STRIDE, mask=s * STRIDE < k_eff, other=_EMPTY_SLOT), descending=True)
    j = tl.arange(0, SEGMENTS)
    lower = tl.max(tl.where(s[None, :] == (j[:, None] + 1) * PER, sample[None, :], _EMPTY_SLOT), 1)
    tl.store(lower_row + j, lower)
    tl.store(count_row + j, tl.zeros((SEGMENTS,), tl.int32))   # here, not by a memset kernel before the launch
    slots = tl.arange(0, K_PAD)
    filled = slots < k_eff
    comp = tl.load(sel_row + slots, mask=filled, other=_EMPTY_SLOT)
    tl.debug_barrier()   # the bounds and zero counts were stored by other threads of this program
    seg = slots * 0
    for b in tl.static_range(SEGMENTS - 1):   # scalar bounds: a [K_PAD, SEGMENTS] compare tile would spill
        seg += (comp <= tl.load(lower_row + b)).to(tl.int32)
    rank = tl.atomic_add(count_row + seg, 1, mask=filled, sem="relaxed")
    tl.store(bucket_row + seg * (2 * SEG_CAP) + rank, comp, mask=filled & (rank < 2 * SEG_CAP))


@triton.jit
def _sort_store(src, count, n_store, dst, WIDTH: tl.constexpr):
    """Sort the composites src[0 .. count) (count <= WIDTH) in descending order; store the columns of the first
    n_store <= count to dst."""
    i = tl.arange(0, WIDTH)
    part = tl.sort(tl.load(src + i, mask=i < count, other=_EMPTY_SLOT), descending=True)
    tl.store(dst + i, part.to(tl.int32) ^ _INT32_MAX, mask=i < n_store)


@triton.jit
def _key_value(key):
    """The fp32 value of order keys (inverse of _order_key for keys >= 2; key 1 gives a NaN)."""
    return tl.where(key >= _SIGN_BIT, key ^ _SIGN_BIT, key ^ _FLIP).to(tl.float32, bitcast=True)


@triton.jit
def _count_sort(key, cols, lo, kmax, area_row, count_row, MAX_FINE: tl.constexpr):
    """Counting sort of the composites of the tile's keys >= lo (uint32 `key`, 0 = empty) into FINE buckets from
    the largest key kmax down to lo, stored to area_row in bucket order (any order inside a bucket); count_row[b]
    ends as the number of keys in buckets 0 .. b (count_width gives the count row's layout). The bucket b of a key
    does not decrease as the key falls and equal keys share one, so every key of bucket b is greater than every key
    of bucket b + 1:
      keys >= lo of one sign within KEY_MAP_BINADES binades: d = (kmax - key) >> pre with the least pre that
          leaves (kmax - lo) >> pre below FINE, b = (d * floor(FINE * 2^16 / (((kmax - lo) >> pre) + 1))) >> 16
          (< FINE; fits uint32): buckets of equal width in binades;
      else (both signs, or values down near zero, where most binades are empty): b = min(floor((v(kmax) - v) *
          fp32(FINE / (v(kmax) - v(lo)))), FINE - 1) on the fp32 values (monotone roundings), when v(kmax) - v(lo)
          is finite; else nothing is stored.
    The counts come from atomic increments of the row's counters; the value an increment returns numbers the key
    within its bucket (0, 1, ...). When no bucket holds more than MAX_FINE, each key is stored at its bucket's end
    (the inclusive prefix sum) less its number plus one: no second pass of atomics. Returns 1 when stored, else 0."""
    take = key >= lo.to(tl.uint32)
    lo_u = lo.to(tl.uint32)
    span = kmax.to(tl.int64) - lo
    key_map = ((lo_u >= _SIGN_BIT) | (kmax < _SIGN_BIT)) & (span <= _KEY_MAP_SPAN)
    v_max = _key_value(kmax)
    v_span = v_max - _key_value(lo_u)
    stored = take.to(tl.int32) * 0 + 0
    if key_map | (v_span <= _FLT_MAX):   # False for an infinite or NaN value span
        if key_map:
            pre = span * 0
            for i in tl.static_range(32):
                pre += ((span >> i) >= _FINE).to(tl.int64)
            scale = (_FINE << 16) // ((span >> pre) + 1)
            b = (((kmax - key) >> pre.to(tl.uint32)) * scale.to(tl.uint32)) >> 16
            b = b.to(tl.int32)
        else:
            below_max = tl.where(take, v_max - _key_value(key), 0.0)   # no NaN or inf from keys < lo
            b = tl.minimum(below_max * (_FINE / v_span), _FINE - 1).to(tl.int32)
        b = tl.where(take, b, 0)
        f = tl.arange(0, _FINE)
        counters = count_row + _COUNTERS + _COUNTER_STRIDE * f
        tl.store(counters, tl.zeros((_FINE,), tl.int32))
        tl.debug_barrier()   # the zero counts were stored by other threads of this program
        before = tl.atomic_add(count_row + _COUNTERS + _COUNTER_STRIDE * b, 1, mask=take, sem="relaxed")
        widest = tl.max(tl.where(take, before, 0), 0) + 1   # every increment has returned
        if widest <= MAX_FINE:
            tl.debug_barrier()
            # the scan takes every thread's loaded count, so no thread stores over a count still to be read
            ends = tl.cumsum(tl.load(counters, cache_modifier=".cg"), 0)
            tl.store(count_row + f, ends)
            tl.store(area_row + tl.gather(ends, b, 0) - 1 - before, _sort_composite(key, cols), mask=take)
            stored = take.to(tl.int32) * 0 + 1
    return tl.max(stored, 0)


@triton.jit
def _select_on_chip(row_ptr, base, start, end, k_eff, out_row, cand_row, bucket_row, count_row, CAP: tl.constexpr,
                    TILE: tl.constexpr, K_PAD: tl.constexpr, SEG_CAP: tl.constexpr, COUNT_GROUP: tl.constexpr,
                    SECANT_ROUNDS: tl.constexpr):
    """The on-chip path's narrowing and compaction of the row's columns [start, end), held in a register tile of
    columns base .. base + TILE - 1 (base <= start, end - base <= TILE): narrows on the whole tile (_narrow_on_row:
    one probe per round, more cost registers and time, docs/perf/h200-topk.md) until <= CAP keys are inside. Then, with
    COUNT_GROUP > 0 and at most 2 * K_PAD keys >= lo, those are counting-sorted by bucket for the ordering
    (_count_sort, no bucket wider than 2 * SEG_CAP - COUNT_GROUP, so that the run of buckets an ordering program
    takes fits its widest sort): `bucketed` = 1 when it stored them, and nothing else is stored.
    Otherwise it stores the keys above the interval (or, `direct`, every selected key) and the candidates. Returns
    (lo, hi, ge_lo, above, direct, bucketed)."""
    cols = base + tl.arange(0, TILE)
    visible = (cols >= start) & (cols < end)
    x = tl.load(row_ptr + cols, mask=visible, other=0.0)
    total, squares, _, _ = _moments(x, False)   # 0.0 where not visible
    key = _order_key(x, visible)
    lo, hi, ge_lo, above = _narrow_on_row(key, visible, tl.maximum(end, start) - start, k_eff, total, squares, CAP,
                                          SECANT_ROUNDS, 0, 0, False)
    direct = (ge_lo - above > CAP).to(tl.int32)   # terminal with more than CAP inside: select them right here
    bucketed = direct * 0
    if COUNT_GROUP > 0:   # count_group: one-tile launches with a split ordering
        if (ge_lo > 0) & (ge_lo <= 2 * K_PAD):
            bucketed = _count_sort(key, cols, lo, tl.max(key, 0), bucket_row, count_row, 2 * SEG_CAP - COUNT_GROUP)
    if bucketed == 0:
        _split_store(key, cols, lo, hi, above, k_eff, 0, 0, direct, out_row, cand_row, CAP)
    return lo, hi, ge_lo, above, direct, bucketed


# ----------------------------------------------------------------------------------------------------- kernels
@triton.jit
def _topk_row_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] first visible column (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows] one past the last visible column (clamped to width)
    sel_ptr,              # *i64 [rows, K_PAD] receives the composites of the k_eff selected columns, unordered
    cand_ptr,             # *i32 [rows, 2 * CAP] scratch: candidate columns, then their keys
    bucket_ptr,           # *i64 [rows, SEGMENTS * 2 * SEG_CAP], count_ptr *i32 [rows, COUNT_W], lower_ptr
    count_ptr,            #     *i64 [rows, SEGMENTS]: the ordering's input (untouched when SEGMENTS == 1); with
    lower_ptr,            #     COUNT_GROUP > 0, count[FINE] says whether _count_sort (1) or _partition (0) filled it
    width,                # i32 W <= TILE_W
    stride_row,           # elements between rows of logits
    k,                    # i32, 1 <= k <= K_PAD
    HAS_STARTS: tl.constexpr,
    K_PAD: tl.constexpr,  # power of two >= k
    TILE_W: tl.constexpr,  # power of two >= width: the row tile held in registers
    TIERS: tl.constexpr,  # 1, or 2 / 3: a row whose columns fit TILE_W / 2 (/ 4) is held in that narrower tile
    CAP: tl.constexpr,    # candidate tile
    PROBE_BITS: tl.constexpr,   # probes per round on the candidate tile: 2^PROBE_BITS - 1
    SEGMENTS: tl.constexpr,     # _partition's constants (Ordering)
    STRIDE: tl.constexpr,
    SEG_CAP: tl.constexpr,
    COUNT_GROUP: tl.constexpr,  # > 0: try _count_sort before the compaction (count_group)
    COUNT_W: tl.constexpr,      # count_width
    SECANT_ROUNDS: tl.constexpr,
    PDL: tl.constexpr,
):
    grid_dependency_sync(PDL)
    if TIERS == 1:
        row = tl.program_id(0).to(tl.int64)
    else:   # the last rows first: in causal batches they are the longest, so the short ones fill the tail
        row = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    out_row = sel_ptr + row * K_PAD
    cand_row = cand_ptr + row * (2 * CAP)
    bucket_row = bucket_ptr + row * (SEGMENTS * 2 * SEG_CAP)
    count_row = count_ptr + row * COUNT_W
    start, end, k_eff = _row_range(starts_ptr, ends_ptr, row, width, k, HAS_STARTS)

    if TIERS == 1:
        lo, hi, ge_lo, above, direct, bucketed = _select_on_chip(
            row_ptr, 0, start, end, k_eff, out_row, cand_row, bucket_row, count_row, CAP, TILE_W, K_PAD, SEG_CAP,
            COUNT_GROUP, SECANT_ROUNDS)
    else:
        # the narrowest tile that holds the row's columns from `base` (16-aligned: vector loads) to its end
        base = tl.multiple_of(tl.maximum(tl.minimum(start, end), 0) // 16 * 16, 16)
        if end - base > TILE_W // 2:
            lo, hi, ge_lo, above, direct, bucketed = _select_on_chip(
                row_ptr, 0, start, end, k_eff, out_row, cand_row, bucket_row, count_row, CAP, TILE_W,
                K_PAD, SEG_CAP, COUNT_GROUP, SECANT_ROUNDS)
        elif TIERS == 2:
            lo, hi, ge_lo, above, direct, bucketed = _select_on_chip(
                row_ptr, base, start, end, k_eff, out_row, cand_row, bucket_row, count_row, CAP, TILE_W // 2,
                K_PAD, SEG_CAP, COUNT_GROUP, SECANT_ROUNDS)
        elif end - base > TILE_W // 4:
            lo, hi, ge_lo, above, direct, bucketed = _select_on_chip(
                row_ptr, base, start, end, k_eff, out_row, cand_row, bucket_row, count_row, CAP, TILE_W // 2,
                K_PAD, SEG_CAP, COUNT_GROUP, SECANT_ROUNDS)
        else:
            lo, hi, ge_lo, above, direct, bucketed = _select_on_chip(
                row_ptr, base, start, end, k_eff, out_row, cand_row, bucket_row, count_row, CAP, TILE_W // 4,
                K_PAD, SEG_CAP, COUNT_GROUP, SECANT_ROUNDS)
    if bucketed == 0:
        if direct == 0:
            _finish_candidates(cand_row, ge_lo - above, lo, hi, ge_lo, above, k_eff, end, out_row, CAP, PROBE_BITS,
                               True)
        if SEGMENTS > 1:
            _partition(out_row, k_eff, bucket_ptr, count_ptr, lower_ptr, row, K_PAD, SEGMENTS, STRIDE, SEG_CAP,
                       COUNT_W)
    if COUNT_GROUP > 0:
        tl.store(count_row + _FINE, bucketed)


@triton.jit
def _group_max_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows]
    gmax_ptr,             # *i32 [rows, groups]: largest visible key (uint32 bits) of each group, 0 if none
    width,                # i32 W
    stride_row,
    groups,               # i32 cdiv(W, GROUP)
    HAS_STARTS: tl.constexpr,
    GROUP: tl.constexpr,  # columns per group (power of two)
    GROUPS_PER_PROGRAM: tl.constexpr,
    PDL: tl.constexpr,
):
    grid_dependency_sync(PDL)
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1) * GROUPS_PER_PROGRAM + tl.arange(0, GROUPS_PER_PROGRAM)
    start, end, _ = _row_range(starts_ptr, ends_ptr, row, width, 1, HAS_STARTS)
    cols = g[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    visible = (cols >= start) & (cols < end)
    key = _order_key(tl.load(logits_ptr + row * stride_row + cols, mask=visible, other=0.0), visible)
    tl.store(gmax_ptr + row * groups + g, tl.max(key, 1).to(tl.int32, bitcast=True), mask=g < groups)


@triton.jit
def _tau_kernel(
    starts_ptr,           # *i32 [rows] (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows]
    gmax_ptr,             # *i32 [rows, groups] from _group_max_kernel; overwritten by the ids of the groups
                          #     that may hold candidates, ascending
    meta_ptr,             # *i32 [rows, META] receives tau (uint32 bits), the number of those groups, a zero count
    width,                # i32 W
    groups,               # i32 <= TILE_W
    k,                    # i32, 1 <= k
    HAS_STARTS: tl.constexpr,
    TILE_W: tl.constexpr,  # power of two >= groups
    CAP: tl.constexpr,
    SECANT_ROUNDS: tl.constexpr,
    THREADS: tl.constexpr,  # the program's threads: the maxima tile is tile_scan._row_columns'
    PDL: tl.constexpr,
):
    """tau of one row: narrowed on the group maxima while more than k_eff + CAP / TAU_SLACK_DIV of them are >= it
    (T >= tau as long as >= k_eff maxima are >= tau; with fewer non-empty groups than k_eff, tau stays 1); the
    slack costs a few candidates and saves the last rounds."""
    grid_dependency_sync(PDL)
    row = tl.program_id(0).to(tl.int64)
    start, end, k_eff = _row_range(starts_ptr, ends_ptr, row, width, k, HAS_STARTS)
    # each thread holds 4 adjacent maxima (one vector load when groups is a multiple of 4): the compaction of the
    # qualifying groups below is one scan of the threads' counts
    g = _row_columns(0, TILE_W, THREADS, 4)
    gmax = tl.load(gmax_ptr + row * groups + g, mask=g < groups, other=0).to(tl.uint32, bitcast=True)
    groups_seen = tl.sum((gmax > 0).to(tl.int32), 0)
    total, squares, _, _ = _moments(tl.where(gmax > 0, _key_value(gmax), 0.0), False)
    tau, _, _, _ = _narrow_on_row(gmax, gmax > 0, groups_seen, k_eff, total, squares, CAP, SECANT_ROUNDS,
                                  CAP // _TAU_SLACK_DIV, 0, False)
    # no narrowing when few groups are non-empty: every key is a candidate (the least maximum would not bound T)
    lo = tl.where(groups_seen > k_eff + CAP // _TAU_SLACK_DIV, tau, 1)
    qualifies = gmax >= lo.to(tl.uint32)
    slot = gmax_ptr + row * groups + _exclusive_prefix(qualifies.to(tl.int32), THREADS, 4)
    tl.debug_barrier()   # each thread has read its maxima
    tl.store(_scatter_view(slot, THREADS, 4), _scatter_view(g, THREADS, 4), mask=_scatter_view(qualifies, THREADS, 4))
    meta_row = meta_ptr + row * _META
    tl.store(meta_row + _META_TAU, lo.to(tl.uint32).to(tl.int32, bitcast=True))
    tl.store(meta_row + _META_GROUPS, tl.sum(qualifies.to(tl.int32), 0))
    tl.store(meta_row + _META_COUNT, 0)


@triton.jit
def _candidates_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows]
    gid_ptr,              # *i32 [rows, groups]: _tau_kernel's group ids
    meta_ptr,             # *i32 [rows, META] from _tau_kernel; the count grows by this program's candidates
    cand_ptr,             # *i32 [rows, 2 * CAP] (CHUNK_IDS: 3 * CAP) receives candidate columns, then their
                          #     keys (then their chunks), in any order
    chunk_ptr,            # *i32 [rows, num_programs(1), 2] (CHUNK_IDS): each chunk's first slot and its count
    width,                # i32 W
    stride_row,
    groups,               # i32
    HAS_STARTS: tl.constexpr,
    CAP: tl.constexpr,
    BLOCK: tl.constexpr,  # columns per program: BLOCK // GROUP of the qualifying groups
    GROUP: tl.constexpr,  # columns per group
    CHUNK_IDS: tl.constexpr,   # record where each chunk's candidates went (column order can be restored)
    PDL: tl.constexpr,
):
    """Append the visible keys >= tau of one chunk of a row's qualifying groups (every key >= tau lies in one) to
    the row's candidates, in column order within the chunk: slots from one atomic add per program, those past CAP
    dropped (the count still grows). Grid (rows, cdiv(groups, BLOCK // GROUP)); the programs past the qualifying
    groups return."""
    grid_dependency_sync(PDL)
    row = tl.program_id(0).to(tl.int64)
    GROUPS: tl.constexpr = BLOCK // GROUP
    meta_row = meta_ptr + row * _META
    n_groups = tl.load(meta_row + _META_GROUPS)
    chunks = tl.cdiv(n_groups, GROUPS)
    if tl.program_id(1) < chunks:   # the busy programs come first in the launch order; the rest return
        # the last chunk first: the interpreter, which runs programs in order, then appends candidates out of
        # column order too, as a GPU may (the selection must not rely on it)
        chunk = chunks - 1 - tl.program_id(1)
        tau = tl.load(meta_row + _META_TAU).to(tl.uint32, bitcast=True)
        start, end, _ = _row_range(starts_ptr, ends_ptr, row, width, 1, HAS_STARTS)
        g = chunk * GROUPS + tl.arange(0, GROUPS)
        gid = tl.load(gid_ptr + row * groups + g, mask=g < n_groups, other=-1)
        cols = tl.reshape(gid[:, None] * GROUP + tl.arange(0, GROUP)[None, :], (BLOCK,))
        visible = (cols >= start) & (cols < end)
        key = _order_key(tl.load(logits_ptr + row * stride_row + cols, mask=visible, other=0.0), visible)
        is_cand = key >= tau
        flags = is_cand.to(tl.int32)
        first = tl.atomic_add(meta_row + _META_COUNT, tl.sum(flags, 0), sem="relaxed")
        slot = first + tl.cumsum(flags, 0) - flags
        keep = is_cand & (slot < CAP)
        cand_row = cand_ptr + row * ((3 if CHUNK_IDS else 2) * CAP)
        tl.store(cand_row + slot, cols, mask=keep)
        tl.store(cand_row + CAP + slot, key.to(tl.int32, bitcast=True), mask=keep)
        if CHUNK_IDS:
            tl.store(cand_row + 2 * CAP + slot, chunk + flags * 0, mask=keep)
            chunk_row = chunk_ptr + (row * tl.num_programs(1) + chunk) * 2
            tl.store(chunk_row, first)
            tl.store(chunk_row + 1, tl.sum(flags, 0))


@triton.jit
def _topk_long_kernel(
    logits_ptr,           # *fp32 [rows, width], row stride `stride_row` elements, unit column stride
    starts_ptr,           # *i32 [rows] (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows]
    meta_ptr,             # *i32 [rows, META]: tau (_tau_kernel), the number of keys >= tau (_candidates_kernel)
    sel_ptr,              # *i64 [rows, K_PAD] receives the composites of the k_eff selected columns, unordered
    cand_ptr,             # *i32 [rows, 2 * CAP] _candidates_kernel's candidates; scratch of the fallback
    bucket_ptr,           # as _topk_row_kernel's
    count_ptr,
    lower_ptr,
    width,                # i32 W
    stride_row,
    k,                    # i32, 1 <= k <= K_PAD
    HAS_STARTS: tl.constexpr,
    K_PAD: tl.constexpr,
    CAP: tl.constexpr,
    BLOCK: tl.constexpr,  # columns per streaming chunk of the fallback
    PROBE_BITS: tl.constexpr,
    SEGMENTS: tl.constexpr,
    STRIDE: tl.constexpr,
    SEG_CAP: tl.constexpr,
    COUNT_GROUP: tl.constexpr,  # 0 here (no counting sort)
    COUNT_W: tl.constexpr,
    PDL: tl.constexpr,
):
    """The selection of one row from its candidates, the keys >= tau: the register tile finishes when they fit
    CAP; else (tau let too many through) the row is narrowed by streaming rounds and compacted again."""
    grid_dependency_sync(PDL)
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    out_row = sel_ptr + row * K_PAD
    cand_row = cand_ptr + row * (2 * CAP)
    start, end, k_eff = _row_range(starts_ptr, ends_ptr, row, width, k, HAS_STARTS)
    meta_row = meta_ptr + row * _META
    lo = tl.load(meta_row + _META_TAU).to(tl.uint32, bitcast=True).to(tl.int64)
    ge_lo = tl.load(meta_row + _META_COUNT)
    hi = lo * 0 + _KEY_MAX
    above = start * 0
    missed = ge_lo < k_eff   # a sampled tau above the k_eff-th key (the sweep's): every key >= it is selected
    if missed:
        hi = lo - 1
        above = ge_lo
        lo = lo * 0 + 1
        ge_lo = tl.maximum(end, start) - start
    if (ge_lo > CAP) | missed:
        lo, hi, ge_lo, above = _narrow_stream(row_ptr, start, end, lo, hi, ge_lo, above, k_eff, CAP, BLOCK)
        direct = (ge_lo - above > CAP).to(tl.int32)
        _split_stream(row_ptr, start, end, lo, hi, above, k_eff, direct, out_row, cand_row, CAP, BLOCK)
    if ge_lo - above <= CAP:
        _finish_candidates(cand_row, ge_lo - above, lo, hi, ge_lo, above, k_eff, end, out_row, CAP, PROBE_BITS,
                           False)
    if SEGMENTS > 1:
        _partition(out_row, k_eff, bucket_ptr, count_ptr, lower_ptr, row, K_PAD, SEGMENTS, STRIDE, SEG_CAP, COUNT_W)


@triton.jit
def _order_kernel(
    starts_ptr,           # *i32 [rows] (read only when HAS_STARTS)
    ends_ptr,             # *i32 [rows]
    sel_ptr,              # *i64 [rows, K_PAD]: the composites of the k_eff selected columns of each row, any order
    bucket_ptr,           # _partition's output (SEGMENTS > 1)
    count_ptr,
    lower_ptr,
    out_ptr,              # *i32 [rows, k] contiguous
    width,                # i32 W
    k,                    # i32, 1 <= k <= K_PAD
    HAS_STARTS: tl.constexpr,
    K_PAD: tl.constexpr,
    SEGMENTS: tl.constexpr,     # 1: one program per row sorts the whole selection; else _partition's ranges
    SEG_CAP: tl.constexpr,      # sort width of a segment (twice that for a range that holds more)
    COUNT_GROUP: tl.constexpr,  # > 0: rows may be counting-sorted, about this many keys per program (count_group)
    COUNT_W: tl.constexpr,      # count_width
    RANK_ROWS: tl.constexpr,    # a range that holds more still: members ranked at a time ...
    RANK_CHUNK: tl.constexpr,   # ... against this many at a time
    PDL: tl.constexpr,
):
    """Order range `program_id(1)` of one row's selection: sort its composites and store their columns at its rank
    offset, the number of composites in the ranges above, as far as rank k_eff. When the row's mode word says so
    (COUNT_GROUP > 0), the ranges are runs of _count_sort's buckets, already at their rank offsets: range j is the
    buckets that start in [j * COUNT_GROUP, (j + 1) * COUNT_GROUP) (their keys >= lo: the ranks past k_eff are
    not stored; order_programs covers k_pad). Else they are _partition's ranges (exactly the selection; programs
    past SEGMENTS hold none). The sort is SEG_CAP wide, a half or a quarter of that for a range holding no more,
    twice that for a range holding more (a run of _count_sort's buckets holds fewer than 2 * SEG_CAP;
    _partition's sample missed). A range of _partition's holding more than 2 * SEG_CAP (skewed samples) places
    each member at its rank, the number of members greater than it, counted against the whole selection
    RANK_ROWS x RANK_CHUNK at a time: slower, same result. Program 0 pads out[k_eff .. k) with -1."""
    grid_dependency_sync(PDL)
    row = tl.program_id(0).to(tl.int64)
    seg = tl.program_id(1)
    sel_row = sel_ptr + row * K_PAD
    out_row = out_ptr + row * k
    _, _, k_eff = _row_range(starts_ptr, ends_ptr, row, width, k, HAS_STARTS)
    slots = tl.arange(0, K_PAD)
    if SEGMENTS == 1:
        ordered = tl.sort(tl.load(sel_row + slots, mask=slots < k_eff, other=_EMPTY_SLOT), descending=True)
        tl.store(out_row + slots, tl.where(slots < k_eff, ordered.to(tl.int32) ^ _INT32_MAX, -1), mask=slots < k)
    else:
        count_row = count_ptr + row * COUNT_W
        f = tl.arange(0, _FINE)
        if COUNT_GROUP > 0:   # the bucket bounds are loaded beside the mode word, in one round trip
            ends = tl.load(count_row + f)                                # keys in buckets 0 .. f
            starts = tl.load(count_row + f - 1, mask=f > 0, other=0)
            bucketed = tl.load(count_row + _FINE)
        else:                 # no row is counting-sorted
            ends = f
            starts = f
            bucketed = 0
        if bucketed != 0:
            GROUP: tl.constexpr = COUNT_GROUP
            total = tl.max(ends, 0)
            offset = tl.min(tl.where(starts >= seg * GROUP, starts, total), 0)
            count = tl.min(tl.where(starts >= (seg + 1) * GROUP, starts, total), 0) - offset
            bucket = bucket_ptr + row * (SEGMENTS * 2 * SEG_CAP) + offset
        else:
            j = tl.arange(0, SEGMENTS)
            counts = tl.load(count_row + j)
            count = tl.sum(tl.where(j == seg, counts, 0), 0)
            offset = tl.sum(tl.where(j < seg, counts, 0), 0)
            bucket = bucket_ptr + (row * SEGMENTS + seg) * (2 * SEG_CAP)
        n_store = tl.minimum(count, k_eff - offset)
        if n_store > 0:   # a selection smaller than k leaves ranges empty (short causal rows)
            # the narrowest sort that holds the range (the sort's chain grows with its width)
            if count <= SEG_CAP // 4:
                _sort_store(bucket, count, n_store, out_row + offset, SEG_CAP // 4)
            elif count <= SEG_CAP // 2:
                _sort_store(bucket, count, n_store, out_row + offset, SEG_CAP // 2)
            elif count <= SEG_CAP:
                _sort_store(bucket, count, n_store, out_row + offset, SEG_CAP)
            elif count <= 2 * SEG_CAP:
                _sort_store(bucket, count, n_store, out_row + offset, 2 * SEG_CAP)
            else:   # rank each member by counting the members above it, a chunk of the selection at a time: a
                    # K_PAD-wide sort tile here would size every program's registers (docs/perf/h200-topk.md)
                lower = tl.load(lower_ptr + row * SEGMENTS + seg)
                upper = tl.load(lower_ptr + row * SEGMENTS + tl.maximum(seg - 1, 0))
                upper = tl.where(seg == 0, _COMPOSITE_MAX, upper)
                i = tl.arange(0, RANK_ROWS)
                jj = tl.arange(0, RANK_CHUNK)
                for i0 in range(0, k_eff, RANK_ROWS):
                    comp = tl.load(sel_row + i0 + i, mask=i0 + i < k_eff, other=_EMPTY_SLOT)
                    rank = tl.zeros([RANK_ROWS], tl.int32)
                    for j0 in range(0, k_eff, RANK_CHUNK):
                        other = tl.load(sel_row + j0 + jj, mask=j0 + jj < k_eff, other=_EMPTY_SLOT)
                        other = tl.where((other <= upper) & (other > lower), other, _EMPTY_SLOT)
                        rank += tl.sum((other[None, :] > comp[:, None]).to(tl.int32), 1)
                    tl.store(out_row + offset + rank, comp.to(tl.int32) ^ _INT32_MAX,
                             mask=(comp <= upper) & (comp > lower))
        pad_from = tl.where(seg == 0, k_eff, k)   # program 0 pads
        tl.store(out_row + slots, -1, mask=(slots >= pad_from) & (slots < k))


# ---------------------------------------------------------------------------------------------------- launcher
def top_k_radix_fast(logits: torch.Tensor, lengths: torch.Tensor, starts: torch.Tensor | None, k: int,
                     out: torch.Tensor) -> None:
    """Fill `out` with the top-k of every row, bit-identical to hw.top_k_per_row(logits, lengths, k, starts=...).

    Arguments are already checked (no checks here):
      logits   float32 [rows, W], rows >= 1, W >= 1, unit column stride, row stride logits.stride(0) >= 0
      lengths  int32 [rows] contiguous: one past the last visible column (clamped to W; negative -> none)
      starts   None, or int32 [rows] contiguous: first visible column (clamped to >= 0)
      k        Python int, 1 <= k <= FAST_MAX_K
      out      int32 [rows, k] contiguous, same device: receives column indices ordered by (value desc, column
               asc), padded with -1
    Sync-free and CUDA-graph safe: grids and scratch sizes come from shapes only. Rows wider than FAST_MAX_WIDTH
    (2^25) columns raise hw.targets.NotCovered (check_width) before any launch: the per_row variant takes them.
    """
    check_width(logits.shape[1])
    _launch(logits, lengths, starts, out, fast_tiling(logits.shape[1], k))


def covers_width(width: int) -> bool:
    """Whether rows of `width` columns fit the long path: at most FAST_MAX_WIDTH (read when asked)."""
    return width <= FAST_MAX_WIDTH


def check_width(width: int) -> None:
    """NotCovered (a ValueError) for rows wider than FAST_MAX_WIDTH columns (a group of the long path would not fit
    a candidate program), naming per_row, which takes them, and variant=None, which picks it for them."""
    if not covers_width(width):
        raise NotCovered(f"variant 'radix_fast' takes rows of at most FAST_MAX_WIDTH = {FAST_MAX_WIDTH} columns, "
                         f"got {width}; variant='per_row' takes wider rows, and variant=None (the defaults table, "
                         f"`mxidx variants`) runs per_row for them")


def launch_tau(starts_arg, lengths, gmax, meta, width, k, has_starts, tiling: FastTiling) -> None:
    """_tau_kernel for every row of `gmax` (int32 [rows, groups], _group_max_kernel's), into `meta`."""
    rows, groups = gmax.shape
    _tau_kernel[(rows,)](starts_arg, lengths, gmax, meta, width, groups, k, **_tau_constexprs(tiling, has_starts),
                         num_warps=tiling.num_warps, **pdl_launch(tiling.pdl, gmax.device))


def _tau_constexprs(tiling: FastTiling, has_starts: bool) -> dict:
    return {"HAS_STARTS": has_starts, "TILE_W": tiling.tile_w, "CAP": tiling.cap, "SECANT_ROUNDS": SECANT_ROUNDS,
            "THREADS": min(tiling.lanes * tiling.num_warps, tiling.tile_w // 4)}


def _launch(logits: torch.Tensor, lengths: torch.Tensor, starts: torch.Tensor | None, out: torch.Tensor,
            tiling: FastTiling, sweep=None) -> None:
    """top_k_radix_fast with explicit launch constants (the tests shrink them to reach every path cheaply), on rows
    of at most FAST_MAX_WIDTH columns (check_width). `sweep`: the launcher of the long path's candidates by a
    sampled threshold and one sweep (column_order.launch_sweep, which imports this module), needed when
    tiling.sweep_samples."""
    (rows, width), k = logits.shape, out.shape[1]
    starts_arg = lengths if starts is None else starts
    common = dict(HAS_STARTS=starts is not None, K_PAD=k_pad(k), CAP=tiling.cap, PROBE_BITS=probe_bits(tiling.cap),
                  num_warps=tiling.num_warps, **register_cap(tiling.maxnreg))
    order = ordering(k, tiling)
    common.update(SEGMENTS=order.segments, STRIDE=order.stride, SEG_CAP=order.seg_cap)
    device = logits.device
    pdl = pdl_launch(tiling.pdl, device)
    cand = torch.empty((rows, 2 * tiling.cap), dtype=torch.int32, device=device)
    sel = torch.empty((rows, k_pad(k)), dtype=torch.int64, device=device)
    on_chip = width <= tiling.tile_w
    group = count_group(order, on_chip and tiling.tiers == 1)
    count_w = count_width(order.segments, group)
    parts = (torch.empty((rows, order.segments * 2 * order.seg_cap), dtype=torch.int64, device=device),
             torch.empty((rows, count_w), dtype=torch.int32, device=device),
             torch.empty((rows, order.segments), dtype=torch.int64, device=device))
    common.update(COUNT_GROUP=group, COUNT_W=count_w)
    if on_chip:
        tile = row_tile(width)
        _topk_row_kernel[(rows,)](logits, starts_arg, lengths, sel, cand, *parts, width, logits.stride(0), k,
                                  TILE_W=tile, TIERS=row_tiers(tile, tiling.tiers), SECANT_ROUNDS=SECANT_ROUNDS,
                                  **common, **pdl)
    else:
        gsize = group_size(width, tiling.tile_w)
        assert gsize <= tiling.block <= 2 ** 16, f"{tiling}: a candidate program holds whole groups of {gsize}"
        groups = triton.cdiv(width, gsize)
        per_program = max(1, tiling.tile_w // gsize)
        meta = torch.empty((rows, _META.value), dtype=torch.int32, device=device)
        has_starts = starts is not None
        if tiling.sweep_samples:
            assert sweep is not None, f"{tiling}: sweep_samples needs the sweep's launcher (column_order.launch_sweep)"
            sweep(logits, starts_arg, lengths, has_starts, meta, cand, k, tiling, column_order=False)
        else:
            gmax = torch.empty((rows, groups), dtype=torch.int32, device=device)
            _group_max_kernel[(rows, triton.cdiv(groups, per_program))](
                logits, starts_arg, lengths, gmax, width, logits.stride(0), groups, HAS_STARTS=has_starts,
                GROUP=gsize, GROUPS_PER_PROGRAM=per_program, num_warps=tiling.num_warps, **pdl)
            launch_tau(starts_arg, lengths, gmax, meta, width, k, has_starts, tiling)
            _candidates_kernel[(rows, triton.cdiv(groups, tiling.block // gsize))](
                logits, starts_arg, lengths, gmax, meta, cand, meta, width, logits.stride(0), groups,
                HAS_STARTS=has_starts, CAP=tiling.cap, BLOCK=tiling.block, GROUP=gsize, CHUNK_IDS=False,
                num_warps=tiling.cand_warps, **pdl)
        _topk_long_kernel[(rows,)](logits, starts_arg, lengths, meta, sel, cand, *parts, width, logits.stride(0),
                                   k, BLOCK=tiling.block, **(common | register_cap(tiling.finish_maxnreg)), **pdl)
    _order_kernel[(rows, order_programs(order, group))](
        starts_arg, lengths, sel, *parts, out, width, k, HAS_STARTS=starts is not None, K_PAD=k_pad(k),
        SEGMENTS=order.segments, SEG_CAP=order.seg_cap, COUNT_GROUP=group, COUNT_W=count_w,
        RANK_ROWS=RANK_ROWS, RANK_CHUNK=RANK_CHUNK,
        num_warps=tiling.order_warps, **pdl)


# ------------------------------------------------------------------------------------------- cross-compile specs
#: both forms' kernels are cross-compiled for both targets (gfx950: no scratch, docs/perf/isa-gfx950.md)
ISA_TARGETS = ("sm90", "gfx950")
# each kernel's pointer types (hw.isa_spec.kernel_signature)
_PARTS = {"bucket_ptr": "*i64", "count_ptr": "*i32", "lower_ptr": "*i64"}
_TOPK_ROW_TYPES = {"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "sel_ptr": "*i64",
                   "cand_ptr": "*i32", **_PARTS}
_TOPK_LONG_TYPES = _TOPK_ROW_TYPES | {"meta_ptr": "*i32"}
_ORDER_TYPES = {"starts_ptr": "*i32", "ends_ptr": "*i32", "sel_ptr": "*i64", **_PARTS, "out_ptr": "*i32"}
_GMAX_TYPES = {"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "gmax_ptr": "*i32"}
_TAU_TYPES = {"starts_ptr": "*i32", "ends_ptr": "*i32", "gmax_ptr": "*i32", "meta_ptr": "*i32"}
_CAND_TYPES = {"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "gid_ptr": "*i32",
               "meta_ptr": "*i32", "cand_ptr": "*i32", "chunk_ptr": "*i32"}


def isa_label(width: int, k: int, has_starts: bool, many_rows: bool) -> str:
    """The cross-compile labels' stem of one of ISA_SHAPES (both forms)."""
    return f"topk_fast/W{width}/k{k}" + ("/ragged" if has_starts else "") + ("/many_rows" if many_rows else "")


def isa_specs(width: int, k: int, has_starts: bool, many_rows: bool = False, target: str = "sm90",
              tiling: FastTiling | None = None) -> tuple[CompileSpec, ...]:
    """The kernels the sorted form launches on `target` (one of ISA_TARGETS) for rows of `width` columns at k, as
    CompileSpecs (hw.isa_spec); many_rows: at MANY_ROWS_PER_SM rows per SM or more (the register cap and
    programmatic dependent launch are NVIDIA's). Under `tiling` (default: target_tiling's) with sweep_samples, the
    long path's candidates come from column_order's sample and sweep, which the caller lists."""
    if tiling is None:
        tiling = target_tiling(Target.of_isa(target), width, k, rows=MANY_ROWS_PER_SM if many_rows else 0, sms=1)
    label = isa_label(width, k, has_starts, many_rows)
    order = ordering(k, tiling)
    group = count_group(order, width <= tiling.tile_w and tiling.tiers == 1)
    common = {"HAS_STARTS": has_starts, "K_PAD": k_pad(k), "CAP": tiling.cap, "PROBE_BITS": probe_bits(tiling.cap),
              "SEGMENTS": order.segments, "STRIDE": order.stride, "SEG_CAP": order.seg_cap, "COUNT_GROUP": group,
              "COUNT_W": count_width(order.segments, group), "PDL": tiling.pdl}
    order_spec = CompileSpec(
        label=label + "/order", fn=_order_kernel, types=_ORDER_TYPES, num_warps=tiling.order_warps,
        constexprs={"HAS_STARTS": has_starts, "K_PAD": k_pad(k), "SEGMENTS": order.segments,
                    "SEG_CAP": order.seg_cap, "COUNT_GROUP": group, "COUNT_W": common["COUNT_W"],
                    "RANK_ROWS": RANK_ROWS, "RANK_CHUNK": RANK_CHUNK, "PDL": tiling.pdl},
        targets=(target,))
    if width <= tiling.tile_w:
        tile = row_tile(width)
        return (CompileSpec(label=label, fn=_topk_row_kernel, types=_TOPK_ROW_TYPES, num_warps=tiling.num_warps,
                            constexprs=common | {"TILE_W": tile, "TIERS": row_tiers(tile, tiling.tiers),
                                                 "SECANT_ROUNDS": SECANT_ROUNDS},
                            maxnreg=tiling.maxnreg, targets=(target,),
                            scratch_ok="" if tiling.maxnreg is None else
                            "two programs per SM, three row tiles in 128 registers, some words spilled: faster "
                            "from 1056 rows on the H200 (docs/perf/h200-topk-rows.json, h200-topk-tiers.json)"),
                order_spec)
    long_spec = CompileSpec(label=label, fn=_topk_long_kernel, num_warps=tiling.num_warps, types=_TOPK_LONG_TYPES,
                            maxnreg=tiling.finish_maxnreg, constexprs=common | {"BLOCK": tiling.block},
                            targets=(target,))
    if tiling.sweep_samples:
        return long_spec, order_spec
    gsize = group_size(width, tiling.tile_w)
    return (
        CompileSpec(label=label + "/group_max", fn=_group_max_kernel, types=_GMAX_TYPES,
                    num_warps=tiling.num_warps, constexprs={"HAS_STARTS": has_starts, "GROUP": gsize, "PDL": tiling.pdl,
                                                     "GROUPS_PER_PROGRAM": max(1, tiling.tile_w // gsize)},
                    targets=(target,)),
        CompileSpec(label=label + "/tau", fn=_tau_kernel, types=_TAU_TYPES, num_warps=tiling.num_warps,
                    targets=(target,), constexprs=_tau_constexprs(tiling, has_starts) | {"PDL": tiling.pdl}),
        CompileSpec(label=label + "/candidates", fn=_candidates_kernel, types=_CAND_TYPES,
                    num_warps=tiling.cand_warps, targets=(target,),
                    constexprs={"HAS_STARTS": has_starts, "CAP": tiling.cap, "BLOCK": tiling.block, "GROUP": gsize,
                                "CHUNK_IDS": False, "PDL": tiling.pdl}),
        long_spec,
        order_spec,
    )


# decode rows at the reference k (on chip and long), ragged prefill rows, a small k, many rows (a prompt's prefill,
# on chip and long), the widest rows of the long path (one group of MAX_BLOCK columns per candidate program)
ISA_SHAPES = ((8192, 2048, False), (131072, 2048, False), (8192, 2048, True), (131072, 2048, True), (4096, 64, False),
              (8192, 2048, False, True), (131072, 2048, False, True), (FAST_MAX_WIDTH, 2048, False))
