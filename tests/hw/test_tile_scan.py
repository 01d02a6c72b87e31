"""hw/_topk_details/tile_scan: a row tile indexed by _row_columns holds every column once, _row_entries inverts it,
and _exclusive_prefix gives each column the number of flagged columns before it in column order (_inclusive_prefix:
up to and including it), whatever THREADS and VEC say (the layouts the kernels use, THREADS beyond the program's
threads among them, and the plain tile order of THREADS = 0), stored through _scatter_view's order; _atomic_slots
gives the flagged columns distinct slots, each thread's run in column order; _appended_slots appends each tile's
flagged columns, in column order, to a list that several programs share."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from hw._topk_details.tile_scan import (
    _appended_slots,
    _atomic_slots,
    _exclusive_prefix,
    _inclusive_prefix,
    _row_columns,
    _row_entries,
    _scatter_view,
)

pytestmark = pytest.mark.interp


@triton.jit
def _prefix_kernel(flags_ptr, out_ptr, cols_ptr, TILE: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr,
                   INCLUSIVE: tl.constexpr = False):
    if THREADS == 0:
        cols = tl.arange(0, TILE)
    else:
        cols = _row_columns(0, TILE, THREADS, VEC)
    flags = tl.load(flags_ptr + cols)
    if INCLUSIVE:
        before = _inclusive_prefix(flags, THREADS, VEC)
    else:
        before = _exclusive_prefix(flags, THREADS, VEC)
    tl.store(_scatter_view(out_ptr + cols, THREADS, VEC), _scatter_view(before, THREADS, VEC))
    tl.store(cols_ptr + tl.arange(0, TILE), cols)


@triton.jit
def _slots_kernel(flags_ptr, out_ptr, counter_ptr, TILE: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr):
    tl.store(counter_ptr, 0)
    tl.debug_barrier()
    cols = _row_columns(0, TILE, THREADS, VEC)
    flags = tl.load(flags_ptr + cols)
    slot = tl.where(flags != 0, _atomic_slots(flags, counter_ptr, THREADS, VEC), -1)
    tl.store(_scatter_view(out_ptr + cols, THREADS, VEC), _scatter_view(slot, THREADS, VEC))


@triton.jit
def _append_kernel(flags_ptr, out_ptr, first_ptr, count_ptr, counter_ptr, TILE: tl.constexpr, THREADS: tl.constexpr,
                   VEC: tl.constexpr):
    program = tl.program_id(0)
    cols = _row_columns(0, TILE, THREADS, VEC)
    flags = tl.load(flags_ptr + program * TILE + cols)
    slot, count, first, last = _appended_slots(flags, counter_ptr, THREADS, VEC)
    tl.store(_scatter_view(out_ptr + program * TILE + cols, THREADS, VEC),
             _scatter_view(tl.where(flags != 0, slot, -1), THREADS, VEC))
    tl.store(first_ptr + program + count * 0, first, mask=last)
    tl.store(count_ptr + program + count * 0, count, mask=last)


@triton.jit
def _entries_kernel(cols_ptr, entries_ptr, TILE: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr):
    tl.store(cols_ptr + tl.arange(0, TILE), _row_columns(0, TILE, THREADS, VEC))
    tl.store(entries_ptr + tl.arange(0, TILE), _row_entries(TILE, THREADS, VEC))


@pytest.mark.parametrize("tile,threads,vec", [(64, 4, 4), (64, 16, 1), (256, 16, 4), (512, 128, 1), (4096, 256, 4),
                                              (8192, 1024, 4)])
def test_row_entries_invert_row_columns(tile, threads, vec, device):
    cols = torch.empty(tile, dtype=torch.int32, device=device)
    entries = torch.empty(tile, dtype=torch.int32, device=device)
    _entries_kernel[(1,)](cols, entries, TILE=tile, THREADS=threads, VEC=vec)
    np.testing.assert_array_equal(cols.cpu().numpy()[entries.cpu().numpy()], np.arange(tile))


@pytest.mark.parametrize("tile,threads,vec", [(64, 0, 1), (64, 16, 1), (64, 4, 4), (256, 16, 4), (256, 64, 4),
                                              (512, 128, 1), (8192, 1024, 4)])
@pytest.mark.parametrize("inclusive", [False, True])
def test_prefix_in_column_order(tile, threads, vec, inclusive, device):
    rng = np.random.default_rng(tile + threads + vec)
    for density in (0.05, 0.5, 1.0):
        flags = (rng.random(tile) < density).astype(np.int32)
        out = torch.full((tile,), -1, dtype=torch.int32, device=device)
        cols = torch.full((tile,), -1, dtype=torch.int32, device=device)
        _prefix_kernel[(1,)](torch.from_numpy(flags).to(device), out, cols, TILE=tile, THREADS=threads, VEC=vec,
                             INCLUSIVE=inclusive)
        assert sorted(cols.tolist()) == list(range(tile))   # every column once
        np.testing.assert_array_equal(out.cpu().numpy(), np.cumsum(flags) - (0 if inclusive else flags))


@pytest.mark.parametrize("tile,threads,vec", [(64, 16, 1), (64, 4, 4), (256, 64, 4), (4096, 256, 4), (8192, 1024, 4)])
def test_atomic_slots(tile, threads, vec, device):
    """The flagged columns take the slots 0 .. n - 1 once each, the counter ends at n, and the columns of one thread
    (VEC x REP adjacent ones) take consecutive slots in column order."""
    rng = np.random.default_rng(tile + threads + vec)
    run = tile // threads
    for density in (0.0, 0.02, 0.5, 1.0):
        flags = (rng.random(tile) < density).astype(np.int32)
        out = torch.full((tile,), -2, dtype=torch.int32, device=device)
        counter = torch.full((1,), -7, dtype=torch.int32, device=device)   # the kernel zeroes it
        _slots_kernel[(1,)](torch.from_numpy(flags).to(device), out, counter, TILE=tile, THREADS=threads, VEC=vec)
        slots, n = out.cpu().numpy(), int(flags.sum())
        np.testing.assert_array_equal(slots[flags == 0], -1)
        np.testing.assert_array_equal(np.sort(slots[flags == 1]), np.arange(n))
        assert counter.item() == n
        for t in range(threads):
            mine = slots[t * run:(t + 1) * run][flags[t * run:(t + 1) * run] == 1]
            np.testing.assert_array_equal(mine, mine[0] + np.arange(mine.size) if mine.size else mine)


@pytest.mark.parametrize("tile,threads,vec", [(64, 16, 1), (64, 4, 4), (256, 64, 4), (1024, 128, 4)])
def test_appended_slots(tile, threads, vec, device):
    """Programs appending their tiles' flagged columns to one list (its length at the counter, 5 before them) take
    the slots 5 .. 5 + n - 1 once each; each program's flagged columns take consecutive slots in column order from
    the first slot it returns, and it returns its own count."""
    rng = np.random.default_rng(tile + threads + vec)
    programs = 6
    flags = (rng.random((programs, tile)) < np.array([0.0, 0.02, 0.3, 1.0, 0.5, 0.1])[:, None]).astype(np.int32)
    out = torch.full((programs, tile), -2, dtype=torch.int32, device=device)
    first = torch.full((programs,), -2, dtype=torch.int32, device=device)
    count = torch.full((programs,), -2, dtype=torch.int32, device=device)
    counter = torch.full((1,), 5, dtype=torch.int32, device=device)
    _append_kernel[(programs,)](torch.from_numpy(flags).to(device), out, first, count, counter, TILE=tile,
                                THREADS=threads, VEC=vec)
    slots, n = out.cpu().numpy(), int(flags.sum())
    np.testing.assert_array_equal(slots[flags == 0], -1)
    np.testing.assert_array_equal(np.sort(slots[flags == 1]), 5 + np.arange(n))
    assert counter.item() == 5 + n
    np.testing.assert_array_equal(count.cpu().numpy(), flags.sum(1))
    for p in range(programs):
        mine = slots[p][flags[p] == 1]
        np.testing.assert_array_equal(mine, first[p].item() + np.arange(mine.size))


def test_row_columns_gives_threads_adjacent_columns(device):
    """Entry e = VEC (THREADS rep + t) + v holds column VEC (REP t + rep) + v (REP = 2 here)."""
    cols = torch.full((64,), -1, dtype=torch.int32, device=device)
    _prefix_kernel[(1,)](torch.zeros(64, dtype=torch.int32, device=device),
                         torch.empty(64, dtype=torch.int32, device=device), cols, TILE=64, THREADS=8, VEC=4)
    e = np.arange(64)
    t, rep, v = e // 4 % 8, e // 32, e % 4
    np.testing.assert_array_equal(cols.cpu().numpy(), 4 * (2 * t + rep) + v)
