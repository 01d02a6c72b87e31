"""Prefix sums in column order over a row held as a 1-D register tile, with each thread holding adjacent columns
(the column-order kernels' row tiles, _tau_kernel's group maxima), order-free slots by one atomic add a thread,
and slots appended to a list that several programs share (the sweep's candidates).

Loaded, a 1-D tile has Triton's coalesced layout: VEC entries a thread, THREADS threads, repeated REP times. A
generic tl.cumsum of such a tile in its own index order scans across the interleaved threads, REP times, and a
scattered store of its result moves the scan to a layout of one entry a thread. Indexing the columns as
_row_columns says instead gives each thread VEC x REP adjacent columns, so a prefix in column order is one scan of
the per-thread totals plus sums inside each thread (_column_prefix), and a scattered store of the tile's view
in _scatter_view's order moves no data between threads. THREADS may exceed the program's threads: each thread
then holds the runs of several, spread over the tile (column_order.row_layout for many rows). Correctness never
depends on the layout the compiler picks: another one only moves data.
"""
import triton
import triton.language as tl


@triton.jit
def _row_columns(base, TILE: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr):
    """The columns of an on-chip row tile (1-D, TILE = VEC x THREADS x REP): entry e = VEC (THREADS rep + t) + v
    holds column base + VEC (REP t + rep) + v. Loaded, the tile has Triton's coalesced 1-D layout (VEC entries a
    thread, THREADS threads, repeated REP times; VEC = 4 when the load is in 16-byte vectors, else 1), so thread t
    holds the VEC REP adjacent columns from base + VEC REP t, and a prefix in column order needs one scan across the
    threads (_exclusive_prefix)."""
    REP: tl.constexpr = TILE // (VEC * THREADS)
    tl.static_assert(VEC * REP * THREADS == TILE, "an on-chip row tile is VEC x THREADS x REP columns")
    e = tl.arange(0, TILE)
    return base + (e // VEC % THREADS) * (VEC * REP) + e // (VEC * THREADS) * VEC + e % VEC


@triton.jit
def _row_entries(TILE: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr):
    """The inverse of _row_columns (base 0): for each column c of the tile, the entry that holds it."""
    REP: tl.constexpr = TILE // (VEC * THREADS)
    c = tl.arange(0, TILE)
    return VEC * (THREADS * (c // VEC % REP) + c // VEC // REP) + c % VEC


@triton.jit
def _column_prefix(flags, THREADS: tl.constexpr, VEC: tl.constexpr, INCLUSIVE: tl.constexpr, counter=None):
    """Prefix sums of the int32 1-D tile `flags` in column order: tile order when THREADS is 0, else _row_columns'
    order (the sums of each thread's entries, scanned across the threads, then within the thread). Exclusive (the
    flags before each entry), or INCLUSIVE (a 0/1 tile's flagged entries then hold their 1-based ranks). With a
    `counter` (THREADS > 0; _atomic_slots) each thread's run starts where its atomic add lands instead of after the
    threads before it."""
    tl.static_assert((counter is None) or (THREADS > 0), "atomic slots need _row_columns' threads")
    if THREADS == 0:
        within = tl.cumsum(flags, 0)
        if INCLUSIVE:
            return within
        else:
            return within - flags
    else:
        TILE: tl.constexpr = flags.shape[0]
        REP: tl.constexpr = TILE // (VEC * THREADS)
        f = tl.reshape(flags, [REP, THREADS, VEC])     # [rep, t, v]: the tile's own layout, no data moved
        per_rep = tl.sum(f, 2)
        per_thread = tl.sum(per_rep, 0)
        if counter is None:
            first = tl.cumsum(per_thread, 0) - per_thread
        else:
            first = tl.atomic_add(counter + per_thread * 0, per_thread, mask=per_thread > 0, sem="relaxed",
                                  scope="cta")
        return _thread_runs(first, flags, f, per_rep, INCLUSIVE)


@triton.jit
def _thread_runs(first, flags, f, per_rep, INCLUSIVE: tl.constexpr):
    """The prefix of every entry of the _row_columns tile `flags` (f: it as [REP, THREADS, VEC], per_rep: f summed
    over VEC) in its thread's run of adjacent columns, from the run's start `first` ([THREADS]): exclusive, or
    INCLUSIVE."""
    TILE: tl.constexpr = flags.shape[0]
    REP: tl.constexpr = f.shape[0]
    THREADS: tl.constexpr = f.shape[1]
    before = tl.reshape(first, [1, THREADS]) + tl.cumsum(per_rep, 0) - per_rep
    if f.shape[2] == 1:
        if INCLUSIVE:
            return tl.reshape(before, [TILE]) + flags
        else:
            return tl.reshape(before, [TILE])
    else:
        within = tl.cumsum(f, 2)
        if INCLUSIVE:
            return tl.reshape(tl.reshape(before, [REP, THREADS, 1]) + within, [TILE])
        else:
            return tl.reshape(tl.reshape(before, [REP, THREADS, 1]) + within - f, [TILE])


@triton.jit
def _exclusive_prefix(flags, THREADS: tl.constexpr, VEC: tl.constexpr):
    """_column_prefix, exclusive: each entry's count of flags before it in column order."""
    return _column_prefix(flags, THREADS, VEC, False)


@triton.jit
def _inclusive_prefix(flags, THREADS: tl.constexpr, VEC: tl.constexpr):
    """_column_prefix, inclusive: a 0/1 tile's flagged entries hold their 1-based ranks in column order."""
    return _column_prefix(flags, THREADS, VEC, True)


@triton.jit
def _atomic_slots(flags, counter, THREADS: tl.constexpr, VEC: tl.constexpr):
    """Distinct slots 0 .. sum(flags) - 1 for the 1-D int32 0/1 tile `flags` of _row_columns (THREADS > 0): each
    thread's entries take consecutive slots in column order from one atomic add of the thread's count to the int32
    at `counter` (0 before the call, seen by every thread of the program; program-local: CTA scope), so the threads'
    runs come in the order of their adds, which may change from launch to launch. For tiles whose consumer only
    counts (no scan across the threads: docs/perf/h200-topk.md, "Candidates compacted by one atomic add a thread")."""
    return _column_prefix(flags, THREADS, VEC, False, counter)


@triton.jit
def _appended_slots(flags, counter, THREADS: tl.constexpr, VEC: tl.constexpr):
    """Slots for the flagged entries of the 1-D int32 0/1 tile `flags` of _row_columns (THREADS > 0) appended in
    column order to a list whose length is the int32 at `counter` (other programs append beside it): one scan of
    the threads' counts, whose last thread adds the tile's count to `counter` (relaxed, GPU scope), and one
    reduction that hands the first slot to every thread, so two exchanges between the warps where a count, an
    atomic add of it and a scan take three. Returns (slots, count, first, last): count and first are [THREADS]
    tiles that hold the tile's count and first slot at the entry flagged by `last`, the last thread's."""
    TILE: tl.constexpr = flags.shape[0]
    REP: tl.constexpr = TILE // (VEC * THREADS)
    f = tl.reshape(flags, [REP, THREADS, VEC])
    per_rep = tl.sum(f, 2)
    per_thread = tl.sum(per_rep, 0)
    inclusive = tl.cumsum(per_thread, 0)
    last = tl.arange(0, THREADS) == THREADS - 1
    landed = tl.atomic_add(counter + per_thread * 0, inclusive, mask=last, sem="relaxed")
    first = tl.sum(tl.where(last, landed, 0), 0)
    return _thread_runs(first + inclusive - per_thread, flags, f, per_rep, False), inclusive, landed, last


@triton.jit
def _scatter_view(x, THREADS: tl.constexpr, VEC: tl.constexpr):
    """`x` (a tile of _row_columns when THREADS > 0) reordered so that Triton's layout for a scattered store (one
    entry a thread, thread = index % THREADS) is where the tile already holds each entry: a store of the views of
    its pointers, values and mask moves no data between threads. The identity when THREADS is 0 or VEC is 1."""
    if THREADS == 0 or VEC == 1:
        return x
    else:
        TILE: tl.constexpr = x.shape[0]
        return tl.reshape(tl.permute(tl.reshape(x, [TILE // (VEC * THREADS), THREADS, VEC]), (0, 2, 1)), [TILE])
