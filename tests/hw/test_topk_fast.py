"""hw/_topk_details/radix_fast.top_k_radix_fast against sim.topk.top_k and hw.top_k_per_row: exact equality.

Every case poisons the invisible columns (past the row's length, before its start, the gap between rows of a
strided view) with +inf / NaN / 3e38, which would win if they were ever read as candidates.

Each case runs through four launch settings (radix_fast.FastTiling), small enough for the interpreter yet reaching
every branch: the launcher's own (on-chip row kernel), a tiny candidate tile (narrowing on the whole row, and rows
whose tie at the threshold overflows the tile are selected directly), and the long path (group maxima, tau,
candidates) with a small tile and with a tiny one (candidates overflow, streaming rounds).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import hw
from hw._topk_details import column_order, radix_fast
from hw._topk_details import fast as topk_fast
from hw._topk_details.radix_fast import FastTiling
from hw._topk_details.variants import TopKCall
from hw.targets import NotCovered, Target
from sim.topk import top_k as sim_top_k
from tests.hw.test_topk import POISON, _clamped_ranges  # one fixture rule for every top-k test
from tests.sim._assert import assert_exact

pytestmark = pytest.mark.interp

TIE_VALUES = np.array([-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0], dtype=np.float32)
SPECIAL_VALUES = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.5, -1.5,
                           3.4028235e38, -3.4028235e38, 1.1754944e-38], dtype=np.float32)
MIXED_ROWS = 11


@dataclass(frozen=True)
class Case:
    name: str
    width: int
    k: int
    lengths: tuple[int, ...]              # one per row; may be < 0 or > width (the kernels clamp)
    values: str = "normal"   # "normal" | "ties" | "special" | "ascending" | "equal" | "edges" | "relu" | "spread"
    #                          | "misfit"
    starts: tuple[int, ...] | None = None
    row_gap: int = 0                      # extra (poisoned) elements between rows: row stride = width + row_gap


CASES = [
    Case("normal", 1500, 40, (1500, 1499, 700, 41, 40, 39, 0)),
    # many ties at the threshold (more than the tiny tiles hold), +-0.0 equal
    Case("ties", 1300, 50, (1300, 1000, 51, 3), values="ties"),
    # NaN (both signs), +-inf, +-0, denormals, +-FLT_MAX; short rows (0, 1, < k, == k, > k)
    Case("special", 700, 64, (700, 0, 1, 5, 63, 64, 65, 300), values="special"),
    # ascending rows: the group maxima bound lets nearly everything through (the long path's fallback)
    Case("ascending", 2000, 30, (2000, 1800, 31), values="ascending"),
    # one value everywhere: only the column order decides
    Case("equal", 900, 33, (900, 500, 33, 32), values="equal"),
    Case("k_gt_width", 10, 37, (10, 3, 0, 25, -4), values="special"),
    Case("width_1", 1, 2, (1, 0, 5)),
    Case("k1", 1100, 1, (1100, 1, 0, 600), values="ties"),
    # k above one ordering range (4 ranges of the selection at the launcher's tiling), rows shorter than k padded
    Case("k300", 900, 300, (900, 299, 10, 0)),
    Case("row_stride", 333, 20, (333, 100, 333), row_gap=13),
    # ragged prefill: starts (start == end, start > end, negative start) with absolute indices; the int32
    # extremes (end - start would wrap in int32)
    Case("ragged", 1100, 50, (1100, 800, 40, 600, 1100, 30, -2 ** 31, 2 ** 31 - 1), values="ties",
         starts=(0, 300, 40, 700, -5, 10, 5, -2 ** 31)),
    Case("mixed_ragged", 600, 24, tuple(np.random.default_rng(2).integers(-5, 640, MIXED_ROWS).tolist()),
         values="special", starts=tuple(np.random.default_rng(3).integers(-5, 400, MIXED_ROWS).tolist())),
]

# launch settings: name -> FastTiling, or None for the launcher's own choice
TILINGS = {
    "launcher": None,
    "row_tiny_cap": FastTiling(tile_w=radix_fast.TILE_W, cap=16, block=radix_fast.STREAM_BLOCK),
    "long": FastTiling(tile_w=128, cap=128, block=256),
    "long_tiny_cap": FastTiling(tile_w=64, cap=16, block=128),
    # the ordering split into segments: exact splitters (every selected column sampled), and sparse samples
    "segments": FastTiling(tile_w=radix_fast.TILE_W, cap=radix_fast.ROW_CAP, block=radix_fast.STREAM_BLOCK,
                           segment=8, samples=8),
    # the same as a launch of many rows per SM takes it (tiers asked for, fewer given to narrow rows): no counting
    # sort, every row through _partition
    "segments_many_rows": FastTiling(tile_w=radix_fast.TILE_W, cap=radix_fast.ROW_CAP, block=radix_fast.STREAM_BLOCK,
                                     segment=8, samples=8, tiers=radix_fast.MANY_ROWS_TIERS),
    "long_segments_sampled": FastTiling(tile_w=128, cap=128, block=256, segment=16, samples=2),
    # the long path's candidates from a sampled threshold and one sweep, also in sweep programs narrower than the
    # finish's streaming chunk
    "long_sweep": FastTiling(tile_w=128, cap=128, block=256, sweep_samples=64),
    "long_sweep_tiny_cap": FastTiling(tile_w=64, cap=16, block=128, sweep_samples=32),
    "long_sweep_narrow": FastTiling(tile_w=128, cap=128, block=256, sweep_samples=64, sweep_block=64),
}


def _logits(case: Case, rng: np.random.Generator) -> np.ndarray:
    """fp32 [rows, width + row_gap]; invisible entries (of the clamped ranges) poisoned."""
    rows, stride = len(case.lengths), case.width + case.row_gap
    if case.values == "normal":
        x = rng.standard_normal((rows, stride)).astype(np.float32)
    elif case.values == "ties":
        x = rng.choice(TIE_VALUES, size=(rows, stride))
    elif case.values == "special":
        x = rng.choice(SPECIAL_VALUES, size=(rows, stride))
    elif case.values == "edges":    # normal, and the two largest values at each row's first and last column
        x = rng.standard_normal((rows, stride)).astype(np.float32)
        starts, ends = _clamped_ranges(case)
        for r in np.flatnonzero(ends > starts):
            x[r, starts[r]], x[r, ends[r] - 1] = 8.0, 9.0
    elif case.values == "ascending":
        x = np.broadcast_to(np.arange(stride, dtype=np.float32), (rows, stride)).copy()
    elif case.values == "relu":     # ReLU-degenerate: 4 in 5 exactly +-0.0, the rest |N(0, 1)| (and a few below)
        x = np.abs(rng.standard_normal((rows, stride))).astype(np.float32)
        x[rng.random((rows, stride)) < 0.8] = 0.0
        x[rng.random((rows, stride)) < 0.05] = -0.0
        x[rng.random((rows, stride)) < 0.01] = -1.0
    elif case.values == "spread":   # what defeats secant probes: heavy tails, distant clusters, denormals, ties
        x = (rng.choice([-1.0, 1.0], (rows, stride)) * np.exp(rng.standard_normal((rows, stride)) * 20.0))
        cluster = rng.integers(0, 4, (rows, stride))
        x = np.where(cluster == 1, 1e30 + rng.integers(0, 3, (rows, stride)) * 1e24, x)
        x = np.where(cluster == 2, rng.integers(1, 4, (rows, stride)) * 1e-45, x)
        x = np.clip(x, -3e38, 3e38).astype(np.float32)
    elif case.values == "misfit":   # a normal fit's bracket misses the k-th key: heavier tails, then lighter
        w = rng.random((rows, 8, 1))
        x = (w * np.maximum(rng.standard_normal((rows, 8, stride)), 0)).sum(1)   # like the decode step's logits
        x[rows // 2:] = rng.random((rows - rows // 2, stride))                  # uniform
        x = x.astype(np.float32)
    else:
        x = np.full((rows, stride), 0.75, dtype=np.float32)
    starts, ends = _clamped_ranges(case)
    cols = np.arange(stride)
    invisible = (cols < starts[:, None]) | (cols >= ends[:, None])
    x[invisible] = rng.choice(POISON, size=int(invisible.sum()))
    return x


def sorted_launch(logits, lengths, starts, out, tiling):
    """radix_fast._launch as the variant calls it: with the sweep's launcher for tilings that take it."""
    radix_fast._launch(logits, lengths, starts, out, tiling, sweep=column_order.launch_sweep)


@pytest.mark.parametrize("tiling", TILINGS, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_sim_and_top_k_per_row(case: Case, tiling: str, device):
    rng = np.random.default_rng(sum(map(ord, case.name)))
    x = _logits(case, rng)
    starts, ends = _clamped_ranges(case)
    want = sim_top_k(x[:, :case.width], case.k, starts=starts, ends=ends)

    logits = torch.from_numpy(x).to(device)[:, :case.width]
    lengths = torch.tensor(case.lengths, dtype=torch.int32, device=device)
    starts_t = None if case.starts is None else torch.tensor(case.starts, dtype=torch.int32, device=device)
    out = torch.full((len(case.lengths), case.k), 12345, dtype=torch.int32, device=device)
    if TILINGS[tiling] is None:
        radix_fast.top_k_radix_fast(logits, lengths, starts_t, case.k, out)
    else:
        sorted_launch(logits, lengths, starts_t, out, TILINGS[tiling])

    context = lambda i: f"row {i[0]} visible [{starts[i[0]]}, {ends[i[0]]})"   # noqa: E731
    assert_exact(out.cpu().numpy(), want, f"top-k indices ({case.name}, {tiling})", context=context)
    reference = hw.top_k_per_row(logits, lengths, case.k, starts=starts_t)
    assert_exact(out.cpu().numpy(), reference.cpu().numpy(), f"vs hw.top_k_per_row ({case.name}, {tiling})",
                 context=context)


#: rows for the narrow tiles (with MIN_TIER_W lowered to 16), their first and last visible columns always selected
#: (a tile that misses either fails): at width 1100 (tiles 2048 / 1024 / 512) rows whose columns lie past the first
#: half (a tile from column 0 would miss them) and rows whose visible count fits a narrower tile that their start
#: rounded down to 16 does not; at width 30 (tiles 32 / 16: two tiers) the same
TIER_CASES = [
    Case("tier_bases", 1100, 40, (1100, 529, 1025, 1100, 1100, 1100, 700, 520, 1040), values="edges",
         starts=(300, 17, 1, 560, 600, 1085, 0, 8, 527)),
    Case("two_tiers", 30, 5, (30, 30, 20, 9, 30, 16, 25), values="edges", starts=(0, 17, 3, 2, 15, 1, 8)),
]


@pytest.mark.parametrize("cap", [radix_fast.ROW_CAP, 16])
@pytest.mark.parametrize("case", CASES + TIER_CASES, ids=lambda c: c.name)
def test_row_tiers(case: Case, cap: int, device, monkeypatch):
    """The on-chip kernel with up to three tile widths (as it runs for many rows; the narrowest lowered to 16
    columns here): each row in the narrowest tile that holds its columns from its start rounded down to 16, the
    last row first. TIER_CASES put rows in every tile of three and of two tiers, at bases that matter; a tiny
    candidate tile also selects directly in the narrow tiles."""
    monkeypatch.setattr(radix_fast, "MIN_TIER_W", 16)
    tile = radix_fast.row_tile(case.width)
    assert radix_fast.row_tiers(tile, 3) == (3 if tile >= 64 else 1 if tile == 16 else 2)
    rng = np.random.default_rng(sum(map(ord, case.name)))
    x = _logits(case, rng)
    starts, ends = _clamped_ranges(case)
    logits = torch.from_numpy(x).to(device)[:, :case.width]
    lengths = torch.tensor(case.lengths, dtype=torch.int32, device=device)
    starts_t = None if case.starts is None else torch.tensor(case.starts, dtype=torch.int32, device=device)
    out = torch.full((len(case.lengths), case.k), 12345, dtype=torch.int32, device=device)
    sorted_launch(logits, lengths, starts_t, out, FastTiling(tile_w=radix_fast.TILE_W, cap=cap,
                                                             block=radix_fast.STREAM_BLOCK, tiers=3))
    context = lambda i: f"row {i[0]} visible [{starts[i[0]]}, {ends[i[0]]})"   # noqa: E731
    assert_exact(out.cpu().numpy(), sim_top_k(x[:, :case.width], case.k, starts=starts, ends=ends),
                 f"top-k indices ({case.name}, tiers, cap {cap})", context=context)


@pytest.mark.parametrize("target", [Target.NVIDIA, Target.AMD], ids=["nvidia", "amd"])
def test_long_path_with_the_launcher_tiling(device, target):
    """Just past the on-chip width: the launch constants the variant takes on each target (two columns per group;
    AMD's 64-lane wavefronts give tau's program twice the threads), both forms."""
    width, k = radix_fast.TILE_W + 9, 16
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, width)).astype(np.float32)
    logits = torch.from_numpy(x).to(device)
    lengths = torch.tensor([width, 5000], dtype=torch.int32, device=device)
    want = sim_top_k(x, k, ends=np.array([width, 5000]))
    for sorted_ in (True, False):
        call = TopKCall(logits, lengths, None, torch.empty((2, k), dtype=torch.int32, device=device), sorted_)
        tiling = topk_fast.VARIANT.settings(target, call)
        assert width > tiling.tile_w
        assert radix_fast._tau_constexprs(tiling, False)["THREADS"] == target.lanes * radix_fast.LONG_NUM_WARPS
        topk_fast._launch(call, tiling)
        # both rows see more than k keys: the column order is the selection sorted by column
        assert_exact(call.out.cpu().numpy(), want if sorted_ else np.sort(want, axis=1),
                     f"top-k indices (long path, {target.value} tiling, {'sorted' if sorted_ else 'column order'})")


def test_long_path_tie_spread_over_candidate_programs(device):
    """A tie at the threshold whose keys come from many candidate programs (out of column order) and must be
    trimmed: the smallest columns win. 5.0 every 97 columns, 1.0 every 31, the rest below; every group of 32
    columns reaches 1.0, so tau is 1.0 and the candidates (< cap) come from 16 programs of 4 groups."""
    width, k = 2048, 40
    cols = np.arange(width)
    x = np.where(cols % 97 == 0, 5.0, np.where(cols % 31 == 0, 1.0, -1.0 - cols / width)).astype(np.float32)
    x = np.stack([x, x[::-1].copy()])
    lengths = torch.tensor([width, width - 5], dtype=torch.int32, device=device)
    out = torch.empty((2, k), dtype=torch.int32, device=device)
    tiling = FastTiling(tile_w=64, cap=128, block=128)
    assert radix_fast.group_size(width, tiling.tile_w) == 32
    sorted_launch(torch.from_numpy(x).to(device), lengths, None, out, tiling)
    assert_exact(out.cpu().numpy(), sim_top_k(x, k, ends=np.array([width, width - 5])),
                 "top-k indices (a tie trimmed across candidate programs)")


@pytest.mark.parametrize("sorted_", [True, False], ids=["sorted", "columns"])
def test_rows_wider_than_the_long_path_are_refused(device, monkeypatch, sorted_):
    """Past FAST_MAX_WIDTH (lowered here) top_k_radix_fast and a launch that names radix_fast raise NotCovered
    (a ValueError naming per_row and variant=None) before any kernel runs: `out` keeps its bytes. Without a name
    the call runs the default, the same results as sim."""
    monkeypatch.setattr(radix_fast, "FAST_MAX_WIDTH", 300)
    x = np.random.default_rng(5).standard_normal((3, 301)).astype(np.float32)
    logits = torch.from_numpy(x).to(device)
    lengths = torch.tensor([301, 200, 0], dtype=torch.int32, device=device)
    out = torch.full((3, 40), 7, dtype=torch.int32, device=device)
    refused = [lambda: hw.top_k_per_row(logits, lengths, 40, out=out, sorted=sorted_, variant="radix_fast")]
    if sorted_:
        refused.append(lambda: radix_fast.top_k_radix_fast(logits, lengths, None, 40, out))
    for launch in refused:
        with pytest.raises(NotCovered, match="FAST_MAX_WIDTH = 300 columns, got 301; variant='per_row'.*variant=None"):
            launch()
        assert bool((out == 7).all())
    want = sim_top_k(x, 40, ends=np.array([301, 200, 0]))
    if not sorted_:     # the same selection in column order, the -1 padding last
        want = np.sort(np.where(want < 0, x.shape[1], want), axis=1)
        want[want == x.shape[1]] = -1
    got = hw.top_k_per_row(logits, lengths, 40, sorted=sorted_).cpu().numpy()
    assert_exact(got, want, "top-k indices (the default)")


def test_launch_constants():
    """Powers of two; the long path's groups fit the tile; probes x candidates within PROBE_ELEMS."""
    for width, k in [(1, 1), (8192, 2048), (8193, 2048), (131072, 2048), (131072, 4096), (2 ** 24 + 1, 64),
                     (radix_fast.FAST_MAX_WIDTH, 2048), (radix_fast.FAST_MAX_WIDTH + 1, 64), (2 ** 31 - 1, 64)]:
        t = radix_fast.fast_tiling(width, k)
        assert all(v & (v - 1) == 0 for v in (t.tile_w, t.cap, t.block, t.segment, t.samples)), (width, k, t)
        assert t.block <= radix_fast.MAX_BLOCK <= 2 ** 16 and t.cap <= radix_fast.MAX_LONG_CAP
        if width > t.tile_w:
            group = radix_fast.group_size(width, t.tile_w)
            assert -(-width // group) <= t.tile_w
            # a candidate program holds whole groups (wider rows go to the per-row kernel)
            assert group <= t.block or width > radix_fast.FAST_MAX_WIDTH
        assert t.cap << radix_fast.probe_bits(t.cap) <= max(radix_fast.PROBE_ELEMS, 2 * t.cap)
    assert radix_fast.fast_tiling(131072, 2048).cap == 4096 and radix_fast.group_size(131072, 8192) == 16


def test_count_sort_on_one_tile_launches():
    """Launches that hold each row in one register tile with a split ordering (the decode step's) may order from
    _count_sort's buckets, with enough ordering programs to cover k_pad; the tiered launch of many rows per SM, a
    single ordering program (small k) and the long path do not."""
    group = [s.constexprs["COUNT_GROUP"] for s in radix_fast.isa_specs(8192, 2048, False)]
    order = radix_fast.ordering(2048, radix_fast.fast_tiling(8192, 2048))
    assert group == [96, 96] and radix_fast.order_programs(order, 96) == 22 > order.segments
    for shape in ((8192, 2048, False, True), (4096, 64, False), (131072, 2048, False)):
        assert {s.constexprs.get("COUNT_GROUP") for s in radix_fast.isa_specs(*shape)} <= {0, None}, shape


def test_register_cap_from_rows_per_sm(monkeypatch):
    """The on-chip selecting kernel holds each row in the narrowest of MANY_ROWS_TIERS tiles from MANY_ROWS_PER_SM
    rows per SM, only when the SMs are known, never on the long path, and with register_cap (NVIDIA) shares an SM
    between two programs under a cap that leaves them room; the variant's settings ask the GPU's SMs (CUs) on NVIDIA
    and AMD, not under the interpreter, and cap registers on NVIDIA only."""
    sms = 132
    many = radix_fast.MANY_ROWS_PER_SM * sms

    def tiling(rows, width=8192, sms=sms):
        return radix_fast.fast_tiling(width, 2048, rows=rows, sms=sms, register_cap=True)

    assert tiling(many).maxnreg == radix_fast.SHARED_SM_MAXNREG
    assert tiling(many - 1).maxnreg is None and tiling(many, sms=0).maxnreg is None
    assert tiling(many, width=8193).maxnreg is None
    assert tiling(many).tiers == radix_fast.MANY_ROWS_TIERS == 3
    assert tiling(many - 1).tiers == 1 and tiling(many, width=8193).tiers == 1
    assert 2 * radix_fast.ON_CHIP_WARPS * 32 * radix_fast.SHARED_SM_MAXNREG <= 65536
    # without a register cap (AMD): the same tiers, no cap
    amd = radix_fast.fast_tiling(8192, 2048, rows=many, sms=sms)
    assert (amd.tiers, amd.maxnreg) == (radix_fast.MANY_ROWS_TIERS, None)

    def settings(target, is_cuda, cus=sms):
        """The variant's settings for `many` rows of logits that claim to live on a GPU (is_cuda) of `cus` SMs."""
        monkeypatch.setattr(topk_fast, "sm_count", lambda device: cus)
        logits = SimpleNamespace(shape=(many, 8192), is_cuda=is_cuda, device="cuda:0")
        t = topk_fast.VARIANT.settings(target, SimpleNamespace(logits=logits, k=2048, sorted=True))
        return t.tiers, t.maxnreg

    assert settings(Target.NVIDIA, True) == (3, radix_fast.SHARED_SM_MAXNREG)
    assert settings(Target.AMD, True) == (3, None)
    assert settings(Target.AMD, True, cus=sms + 1) == (1, None)     # fewer than MANY_ROWS_PER_SM rows per CU
    assert settings(Target.NVIDIA, False) == settings(Target.AMD, False) == (1, None)   # a CPU tensor: no SM count
    assert settings(Target.INTERPRETER, True) == (1, None)


def test_column_order_programs_per_sm():
    """sorted=False: one uncapped program per SM and one tile up to one row per SM (on NVIDIA 16 warps on the widest
    tiles); above, two tiles and, on NVIDIA, as many programs per SM as rows per SM under COLUMNS_MAXNREG's cap (at
    most 3 with tiles of 8192 columns, 4 with narrower ones); no cap on AMD, without the SM count or on the long
    path; the sorted form keeps radix_fast's."""
    sms = 132

    def tiling(rows, width=8192, sms=sms, by_value=False, nvidia=True):
        return topk_fast._tiling(Target.NVIDIA if nvidia else Target.AMD, width, 2048, rows, sms, by_value)

    assert (tiling(64).maxnreg, tiling(64).tiers) == (tiling(sms).maxnreg, tiling(sms).tiers) == (None, 1)
    # one program a row: COLUMNS_WIDE_TILE_WARPS on the widest tiles, radix_fast's warps on narrower ones and AMD
    assert tiling(64).num_warps == tiling(64, width=5000).num_warps == topk_fast.COLUMNS_WIDE_TILE_WARPS == 16
    assert tiling(64, width=4096).num_warps == tiling(64, nvidia=False).num_warps == radix_fast.ON_CHIP_WARPS == 8
    assert tiling(sms + 1).num_warps == radix_fast.ON_CHIP_WARPS
    assert (tiling(sms + 1).maxnreg, tiling(sms + 1).tiers) == (128, topk_fast.COLUMNS_SHARED_TIERS) == (128, 2)
    assert tiling(2 * sms + 1).maxnreg == tiling(8192).maxnreg == 80
    assert tiling(3 * sms, width=4096).maxnreg == 80 and tiling(8192, width=4096).maxnreg == 64
    assert tiling(8192, sms=0).maxnreg is None and tiling(8192, width=8193).maxnreg is None
    assert tiling(8192, by_value=True).maxnreg == radix_fast.SHARED_SM_MAXNREG
    # the candidate tile by ranks: NVIDIA at three programs per SM on tiles wider than 4096 columns only
    ranks = (topk_fast.COLUMNS_RANK_CAP, True)
    assert (tiling(8192).cap, tiling(8192).rank_finish) == (tiling(2 * sms + 1, width=5000).cap, True) == ranks
    for other in (tiling(64), tiling(2 * sms), tiling(8192, width=4096), tiling(8192, nvidia=False),
                  tiling(8192, sms=0), tiling(8192, by_value=True)):
        assert not other.rank_finish and other.cap in (topk_fast.COLUMNS_ROW_CAP, radix_fast.ROW_CAP)
    # AMD: the tiers from more than one row per CU, 8 warps, never a cap
    amd = [tiling(rows, nvidia=False) for rows in (sms, sms + 1, 8192)]
    assert [(t.tiers, t.maxnreg, t.num_warps) for t in amd] == [(1, None, 8), (2, None, 8), (2, None, 8)]
    assert (tiling(8192, sms=0, nvidia=False).tiers, tiling(8192, by_value=True, nvidia=False).maxnreg) == (1, None)
    threads = radix_fast.ON_CHIP_WARPS * 32
    for programs, cap in topk_fast.COLUMNS_MAXNREG.items():   # the cap leaves room for that many programs
        assert programs * threads * cap <= 65536 < (programs + 1) * threads * cap


_DENORMAL_FACTS = """
import json, re
from tools.isa import compile_spec
from hw._topk_details import fast
facts = {}
for target in ("sm90", "gfx950"):
    spec = [s for s in fast._column_specs(8192, 2048, False, True, target) if s.label.endswith("/columns")][0]
    compiled, _ = compile_spec(spec, target)
    if target == "sm90":
        ptx = compiled.asm["ptx"]
        facts[target] = {"tiers": spec.constexprs["TIERS"],
                         "adds_of_zero": len(re.findall(r"add(?:\\.rn)?\\.f32\\s+%r\\d+, %r\\d+, 0f00000000;", ptx)),
                         "ftz_adds": len(re.findall(r"add\\.[a-z.]*ftz", ptx))}
    else:
        asm = compiled.asm["amdgcn"]
        facts[target] = {"tiers": spec.constexprs["TIERS"],
                         "denorm_mode_32": re.findall(r"\\.amdhsa_float_denorm_mode_32 (\\d+)", asm),
                         "adds_of_zero": len(re.findall(r"v_(?:pk_)?add_f32 v[^,]+, v[^,]+, 0\\b", asm))}
print(json.dumps(facts))
"""


def test_order_key_by_an_add_keeps_denormals():
    """The many-rows column kernel makes -0.0 +0.0 by adding +0.0 (kernel._order_key's ZERO_BY_ADD), which is exact
    only where fp32 adds keep denormals (a flushed denormal would tie with 0.0): cross-compiled under the installed
    triton, its sm_90 PTX adds 0.0 without .ftz, and its gfx950 code keeps the add in the IEEE fp32 denormal mode
    (3: no flush of inputs or outputs)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}   # compilable kernels, not the interpreter's
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    run = subprocess.run([sys.executable, "-c", _DENORMAL_FACTS], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    assert facts["sm90"]["tiers"] > 1 and facts["gfx950"]["tiers"] > 1   # the launches that take ZERO_BY_ADD
    assert facts["sm90"]["adds_of_zero"] > 0 and facts["sm90"]["ftz_adds"] == 0, facts
    assert facts["gfx950"]["denorm_mode_32"] == ["3"] and facts["gfx950"]["adds_of_zero"] > 0, facts


_PDL_FACTS = """
import json, re
from hw._topk_details import fast
from tools.isa import compile_spec
facts = {}
for spec in fast.VARIANT.isa_specs():
    name = spec.label.removeprefix("topk_fast/W131072/k2048/")
    if "sm90" in spec.targets and name in ("sweep", "columns/sweep", "columns"):
        ptx = compile_spec(spec, "sm90")[0].asm["ptx"]
        at = lambda pattern: [m.start() for m in re.finditer(pattern, ptx)]
        facts[name] = {"wait": at(r"griddepcontrol\\.wait"), "launch": at(r"griddepcontrol\\.launch_dependents"),
                       "stores": at(r"\\b(?:st|atom|red)\\.global"), "loads": at(r"\\bld\\.global")}
print(json.dumps(facts))
"""


def test_sweep_lets_the_finish_launch_after_its_stores():
    """PDL in the long path's PTX (sm_90, cross-compiled under the installed triton): the column order's sweep lets
    the next kernel be scheduled after its last store (sweep_late_dependents), and its finish waits for it before its
    first load; the sorted form's sweep lets it be scheduled at its wait, before any store."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}   # compilable kernels, not the interpreter's
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    run = subprocess.run([sys.executable, "-c", _PDL_FACTS], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    late, early, finish = facts["columns/sweep"], facts["sweep"], facts["columns"]
    assert len(late["wait"]) == len(late["launch"]) == 1 and late["stores"], late
    assert late["wait"][0] < late["launch"][0] and max(late["stores"]) < late["launch"][0], late
    assert len(early["launch"]) == 1 and early["stores"] and early["launch"][0] < min(early["stores"]), early
    assert len(finish["wait"]) == 1 and finish["loads"] and finish["wait"][0] < min(finish["loads"]), finish


@pytest.mark.parametrize("by_value", [False, True], ids=["columns", "sorted"])
def test_long_finish_register_cap(by_value: bool):
    """The long path's finishing kernel (both forms) under a register cap on NVIDIA while a candidate chunk holds
    several groups (rows up to 2^23 columns at the launcher's blocks), never on AMD or on the widest rows (one group a
    chunk); the selecting kernels' cap is not touched. The column order's finish after a sweep ends its rounds by
    ranks (COLUMNS_SWEEP_RANK_CAP) under COLUMNS_SWEEP_FINISH_MAXNREG and is launched once the sweep's programs have
    stored (sweep_late_dependents) while the rows are at most one per SM (or not known); every other finish runs its
    rounds to the end under LONG_FINISH_MAXNREG."""
    def tiling(width, target=Target.NVIDIA):
        return topk_fast._tiling(target, width, 2048, 64, 132, by_value)

    for width in (8193, 16384, 131072, 2 ** 20, 2 ** 23):
        t = tiling(width)
        assert t.block // radix_fast.group_size(width, t.tile_w) > 1
        ranked = bool(t.sweep_samples) and not by_value
        expected = ((topk_fast.COLUMNS_SWEEP_FINISH_MAXNREG, topk_fast.COLUMNS_SWEEP_RANK_CAP, True) if ranked
                    else (topk_fast.LONG_FINISH_MAXNREG, 0, False))
        assert (t.finish_maxnreg, t.finish_rank_cap, t.sweep_late_dependents) == expected, width
        assert t.maxnreg is None, width
    assert tiling(131072).sweep_samples and not tiling(2 ** 20).sweep_samples   # both finishes are covered
    for width in (2 ** 24, radix_fast.FAST_MAX_WIDTH):
        t = tiling(width)
        assert t.block // radix_fast.group_size(width, t.tile_w) == 1 and t.finish_maxnreg is None, width
    assert tiling(8192).finish_maxnreg is None   # the on-chip path has no long finish
    for target in (Target.AMD, Target.INTERPRETER):
        t = tiling(131072, target)
        assert (t.finish_maxnreg, t.finish_rank_cap, t.sweep_late_dependents) == (None, 0, False), target
    # more rows than SMs: two finishing programs an SM under LONG_FINISH_MAXNREG, no ranks, no late trigger
    for rows, sms in ((133, 132), (8192, 132)):
        t = topk_fast._tiling(Target.NVIDIA, 131072, 2048, rows, sms, by_value)
        assert t.sweep_samples and (t.finish_maxnreg, t.finish_rank_cap, t.sweep_late_dependents) == (
            topk_fast.LONG_FINISH_MAXNREG, 0, False), rows
    assert topk_fast._tiling(Target.NVIDIA, 131072, 2048, 132, 132, by_value).finish_rank_cap == (
        0 if by_value else topk_fast.COLUMNS_SWEEP_RANK_CAP)


def test_many_rows_kernel_cross_compiles():
    """Under the installed triton the capped selecting kernels compile for sm_90 and keep their programs per SM
    (`mxidx isa`: two for the sorted form, three for the column order); so does the column order's long finish for
    many rows (two, under LONG_FINISH_MAXNREG), where at most one row per SM takes at least one (ranks, under
    COLUMNS_SWEEP_FINISH_MAXNREG). Their scratch is the specs' measured exception, every other top-k kernel has
    none."""
    from tools import isa

    on_chip = radix_fast.isa_label(8192, 2048, False, True)
    long_many = radix_fast.isa_label(131072, 2048, False, True)
    long_one = radix_fast.isa_label(131072, 2048, False, False)
    kernels, missing = isa.report("sm90", kernel="topk_fast")
    assert missing == () and kernels, (kernels, missing)
    programs = {k.label: k.occupancy // k.num_warps for k in kernels}
    for k in kernels:
        assert not k.failures, k
    assert programs[on_chip] == 2 and programs[on_chip + "/columns"] == 3, programs
    assert programs[long_many + "/columns"] == 2 and programs[long_one + "/columns"] >= 1, programs


def test_order_segment_overflow(device):
    """Splitters from a skewed sample leave ranges with more composites than the sort width: a range of up to
    twice that is sorted at twice the width, a larger one ranked by counting; same result. The selection of these
    rows is stored in column order and every 8th slot is sampled, so making every 8th column one of the largest
    puts the splitters at the top: the last range of row 0 holds 114 composites (ranked), of row 3 88 (ranked,
    the selection not a whole number of rank chunks), of row 1 54 (twice the width); row 4's 18, row 5's 14 and
    row 2's 3 take the sort width, a half and a quarter of it."""
    width, k = 128, 128
    # tiers asked for (as for many rows per SM): the sample sort, not the counting sort
    tiling = FastTiling(tile_w=radix_fast.TILE_W, cap=radix_fast.ROW_CAP, block=radix_fast.STREAM_BLOCK, segment=16,
                        samples=2, tiers=radix_fast.MANY_ROWS_TIERS)
    assert radix_fast.ordering(k, tiling) == radix_fast.Ordering(segments=8, stride=8, seg_cap=32)
    cols = np.arange(width)
    lengths = np.array([128, 60, 3, 100, 20, 14])
    x = np.where(cols % 8 == 0, 1000.0 + cols, cols).astype(np.float32)[None, :].repeat(len(lengths), 0)
    out = torch.full((len(lengths), k), 12345, dtype=torch.int32, device=device)
    sorted_launch(torch.from_numpy(x).to(device), torch.tensor(lengths, dtype=torch.int32, device=device),
                  None, out, tiling)
    assert_exact(out.cpu().numpy(), sim_top_k(x, k, ends=lengths), "top-k indices (skewed splitters)")


def test_counting_sorted_and_partitioned_rows(device, monkeypatch):
    """The one-tile on-chip path orders a row from _count_sort's buckets (mode word 1) when at most 2 * K_PAD keys
    are >= lo and no bucket holds more than 2 * SEG_CAP - COUNT_GROUP, else from _partition's ranges (0).
    Counting-sorted: a N(0, 1) row and a short row of positive values (bucket by key), a row whose keys >= lo have
    both signs and one whose keys >= lo reach down to 1e-25 (bucket by value), a row shorter than k (lo is its
    least key); the run holding rank k_eff is cut there. Not tried: a row of one value (more keys >= lo), a row
    shorter than k holding NaN (lo = the NaN key: no finite value span) and a row of both signs whose largest value
    is +inf. Tried and fallen back:
    a tie of 600 at the threshold, one bucket wider than 2 * SEG_CAP - COUNT_GROUP. Every row exact."""
    width, k = 2048, 300
    tiling = FastTiling(tile_w=radix_fast.TILE_W, cap=256, block=radix_fast.STREAM_BLOCK)
    order = radix_fast.ordering(k, tiling)
    group = radix_fast.count_group(order, True)
    assert (order.segments, order.seg_cap, group, radix_fast.order_programs(order, group)) == (4, 256, 96, 6)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, width)).astype(np.float32)
    x[1] = 0.25
    x[2] = -1.0
    x[2, rng.choice(width, 600, replace=False)] = 5.0
    x[4] = np.abs(x[4]) + 1.0
    x[5] -= 2.0
    x[6] = x[5]
    x[6, 7] = np.inf
    x[7, :300] = rng.uniform(0.0, 1.0, 300)
    x[7, 300:400] = rng.uniform(1e-25, 2e-25, 100)
    x[8, rng.choice(200, 5, replace=False)] = np.nan
    lengths = np.array([width, width, width, 100, 400, width, width, 400, 200])
    made = []
    real_empty = torch.empty

    def recording_empty(*shape, **kw):
        made.append(real_empty(*shape, **kw))
        return made[-1]
    monkeypatch.setattr(torch, "empty", recording_empty)
    out = real_empty((len(x), k), dtype=torch.int32, device=device)
    sorted_launch(torch.from_numpy(x).to(device), torch.tensor(lengths, dtype=torch.int32, device=device), None,
                  out, tiling)
    assert_exact(out.cpu().numpy(), sim_top_k(x, k, ends=lengths), "top-k indices (counting-sorted rows)")
    (counts,) = [t for t in made if t.dtype == torch.int32 and tuple(t.shape) == (len(x),
                                                                                  radix_fast.count_width(4, group))]
    assert counts[:, radix_fast.FINE_BUCKETS].tolist() == [1, 0, 0, 1, 1, 1, 0, 1, 0]


def test_scratch_is_never_trusted(device, monkeypatch):
    """The launcher's scratch (candidates, selection, segment buckets, counts, bounds) comes from torch.empty:
    filled here with garbage, the results do not change (the selecting kernels zero the counts they take atomic
    slots from, instead of a memset before the launch)."""
    real_empty = torch.empty

    def poisoned_empty(*shape, dtype=None, device=None, **kw):
        t = real_empty(*shape, dtype=dtype, device=device, **kw)
        return t.fill_(7 if not t.is_floating_point() else float("nan"))
    monkeypatch.setattr(torch, "empty", poisoned_empty)

    case = CASES[0]
    rng = np.random.default_rng(11)
    x = _logits(case, rng)
    starts, ends = _clamped_ranges(case)
    lengths = torch.tensor(case.lengths, dtype=torch.int32, device=device)
    for tiling in (TILINGS["segments"], TILINGS["long_segments_sampled"]):
        out = real_empty((len(case.lengths), case.k), dtype=torch.int32, device=device)
        sorted_launch(torch.from_numpy(x).to(device), lengths, None, out, tiling)
        assert_exact(out.cpu().numpy(), sim_top_k(x, case.k, starts=starts, ends=ends),
                     f"top-k indices over poisoned scratch ({tiling})")


# ------------------------------------------------------------------------------------ sorted=False (column order)
def in_column_order(indices: np.ndarray) -> np.ndarray:
    """The oracle's column-order form: a sorted top-k (-1 padded) with its selection ascending, -1 last."""
    top = np.iinfo(np.int32).max
    key = np.sort(np.where(indices < 0, top, indices), axis=1)
    return np.where(key == top, -1, key).astype(np.int32)


# the launch settings that reach every column-order branch: the launcher's (on chip), a tiny candidate tile finished
# by rounds and by ranks, the long path with a small candidate tile and with a tiny one (streaming fallback), both
# also with the sampled threshold and the sweep
COLUMN_TILINGS = {name: TILINGS[name] for name in ("launcher", "row_tiny_cap", "long", "long_tiny_cap", "long_sweep",
                                                   "long_sweep_tiny_cap", "long_sweep_narrow")} | {
    "row_ranks": FastTiling(tile_w=radix_fast.TILE_W, cap=16, block=radix_fast.STREAM_BLOCK, tiers=3,
                            rank_finish=True),
    # the long finish's rounds only until a few keys are inside, then ranks (after a sweep and after group maxima);
    # after the sweep as NVIDIA launches it, scheduled after the sweep's stores (with PDL on a GPU that has it)
    "long_sweep_ranks": FastTiling(tile_w=128, cap=128, block=256, sweep_samples=64, finish_rank_cap=16,
                                   sweep_late_dependents=True),
    "long_ranks": FastTiling(tile_w=128, cap=128, block=256, finish_rank_cap=32)}


def _run(launch, x: np.ndarray, case: Case, tiling: FastTiling | None, device) -> np.ndarray:
    """`launch` (column_order.launch_columns or sorted_launch) on the case's rows, under `tiling` or the
    launcher's own."""
    logits = torch.from_numpy(x).to(device)[:, :case.width]
    lengths = torch.tensor(case.lengths, dtype=torch.int32, device=device)
    starts_t = None if case.starts is None else torch.tensor(case.starts, dtype=torch.int32, device=device)
    out = torch.full((len(case.lengths), case.k), 12345, dtype=torch.int32, device=device)
    launch(logits, lengths, starts_t, out, tiling or radix_fast.fast_tiling(case.width, case.k))
    return out.cpu().numpy()


def _columns(x: np.ndarray, case: Case, tiling: FastTiling | None, device) -> np.ndarray:
    return _run(column_order.launch_columns, x, case, tiling, device)


#: rows that stress the threshold: thousands of equal values straddling the k-th place at k = 2048, rows of
#: lengths k - 1, k, k + 1, past W and negative; all-NaN, all -inf and +-0.0 rows (values "rowwise")
COLUMN_CASES = [
    Case("k2048_ties", 2600, 2048, (2600, 2049, 2048, 2047, 1, 0, -3, 5000), values="ties"),
    Case("nonfinite_rows", 700, 64, (700, 700, 700, 700, 65, 64), values="rowwise"),
    # the k-th key is +-0.0 with more zeros than are taken (fewer positives than k: the interval closes on the
    # zeros' key on the whole row, wider than any candidate tile), or a positive one (more positives than k,
    # zeros inside [lo, hi] on the way)
    Case("relu_zeros", 3000, 2048, (3000, 2800, 2049, 2048, 1500, 400), values="relu"),
    Case("relu_positive", 3000, 300, (3000, 2999, 1700, 301), values="relu"),
    Case("spread", 3000, 700, (3000, 2999, 1500, 701, 702), values="spread"),
    # tails heavier and lighter than a normal fit's: one program a row's bracket about its quantile misses
    Case("misfit", 4000, 900, (4000, 4000, 3999, 3000, 4000, 4000, 3500, 2000), values="misfit"),
]


def _rowwise(case: Case, rng: np.random.Generator) -> np.ndarray:
    """Row 0 all NaN, 1 all -inf, 2 +0.0 / -0.0 mixed, 3 NaN / +-inf / 0.0 mixed, the rest +-0.0 and 1.0."""
    x = _logits(dataclasses.replace(case, values="normal"), rng)
    starts, ends = _clamped_ranges(case)
    rows = [np.full(case.width, np.nan), np.full(case.width, -np.inf),
            rng.choice(np.array([0.0, -0.0], dtype=np.float32), case.width),
            rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0], dtype=np.float32), case.width)]
    for r in range(len(case.lengths)):
        vals = rows[r] if r < len(rows) else rng.choice(np.array([0.0, -0.0, 1.0], dtype=np.float32), case.width)
        x[r, starts[r]:ends[r]] = vals[starts[r]:ends[r]]
    return x


@pytest.mark.parametrize("tiling", COLUMN_TILINGS)
@pytest.mark.parametrize("case", CASES + TIER_CASES + COLUMN_CASES, ids=lambda c: c.name)
def test_column_order_matches_sim(case: Case, tiling: str, device):
    """sorted=False: the sorted top-k's selection, bit for bit, ascending by column, then -1."""
    if case.k > 1000 and tiling.startswith("long"):
        pytest.skip("k = 2048 on the tiny long-path tiles: the launcher's path covers it")
    rng = np.random.default_rng(sum(map(ord, case.name)))
    x = _rowwise(case, rng) if case.values == "rowwise" else _logits(case, rng)
    starts, ends = _clamped_ranges(case)
    want = in_column_order(sim_top_k(x[:, :case.width], case.k, starts=starts, ends=ends))
    got = _columns(x, case, COLUMN_TILINGS[tiling], device)
    assert_exact(got, want, f"column-order top-k ({case.name}, {tiling})",
                 context=lambda i: f"row {i[0]} visible [{starts[i[0]]}, {ends[i[0]]})")


@pytest.mark.parametrize("case", TIER_CASES + CASES[:3], ids=lambda c: c.name)
def test_column_order_row_tiers(case: Case, device, monkeypatch):
    """The column-order kernel holding each row in the narrowest of three tiles (many rows per SM)."""
    monkeypatch.setattr(radix_fast, "MIN_TIER_W", 16)
    rng = np.random.default_rng(sum(map(ord, case.name)))
    x = _logits(case, rng)
    starts, ends = _clamped_ranges(case)
    tiling = FastTiling(tile_w=radix_fast.TILE_W, cap=16, block=radix_fast.STREAM_BLOCK, tiers=3)
    assert_exact(_columns(x, case, tiling, device),
                 in_column_order(sim_top_k(x[:, :case.width], case.k, starts=starts, ends=ends)),
                 f"column-order top-k ({case.name}, tiers)")


@pytest.mark.parametrize("target", [Target.AMD, Target.NVIDIA], ids=str)
def test_column_order_with_many_rows_constants(target: Target, device):
    """The column-order launch AMD and NVIDIA take for three rows per SM (CU): two tiers of 8192 / 4096 columns, the
    8192-column tile indexed as 1024 runs of 8 adjacent columns in groups of 4 (THREADS 1024, VEC 4: the spread
    layout, which the row-tier tests' narrower tiles do not reach); on NVIDIA a register cap (not modelled by the
    interpreter) and the candidate tile of COLUMNS_RANK_CAP finished by ranks. Rows in both tiers, ragged starts,
    a short row written directly; the oracle's selection in column order."""
    cus = 4
    tiling = topk_fast._tiling(target, 8192, 100, 3 * cus, cus, False)
    nvidia = target is Target.NVIDIA
    assert (tiling.tiers, tiling.maxnreg is None, tiling.rank_finish) == (topk_fast.COLUMNS_SHARED_TIERS, not nvidia,
                                                                          nvidia)
    assert column_order.row_layout(tiling, 8192, 2, True) == {"THREADS": 1024, "VEC": 4}
    k = 100
    starts = np.array([0, 37, 4100, 1000, 8000], dtype=np.int32)
    ends = np.array([8192, 8000, 8192, 5001, 8050], dtype=np.int32)
    x = np.random.default_rng(11).standard_normal((len(ends), 8192)).astype(np.float32)
    cols = np.arange(8192)
    hidden = (cols[None] < starts[:, None]) | (cols[None] >= ends[:, None])
    x[hidden] = np.random.default_rng(12).choice(POISON, size=int(hidden.sum()))
    out = torch.full((len(ends), k), 12345, dtype=torch.int32, device=device)
    column_order.launch_columns(torch.from_numpy(x).to(device), torch.from_numpy(ends).to(device),
                                torch.from_numpy(starts).to(device), out, tiling)
    assert_exact(out.cpu().numpy(), in_column_order(sim_top_k(x, k, starts=starts, ends=ends)),
                 f"column order, {target}'s many-rows constants")


#: cases with launch constants drawn from fixed seeds, combinations the named tilings above do not list: seed % 4
#: picks the path (one row tile with the counting-sorted ordering; tiers of narrower tiles; the long path; the long
#: path with 64 lanes), the seed the rest (tiles, candidate tiles, streaming blocks, ordering segments and samples)
RANDOM_LAUNCHES = 8


@pytest.mark.parametrize("seed", range(RANDOM_LAUNCHES))
def test_random_launch_constants(seed: int, device, monkeypatch):
    """Both forms under random launch constants on random rows (hostile values, ragged ranges, lengths from -3 to
    past the width): the oracle's selection, bit for bit."""
    monkeypatch.setattr(radix_fast, "MIN_TIER_W", 16)   # narrow tiers on small rows
    rng = np.random.default_rng(seed)
    path = seed % 4
    on_chip = path < 2
    width = int(rng.choice([17, 100, 700, 1500, 3000] if on_chip else [700, 1500, 3000]))
    k = int(rng.choice([33, 100, 300] if path == 0 else [1, 7, 33, 100, 300]))
    lengths = rng.integers(-3, width + 5, 5)
    lengths[0] = width
    starts = tuple(rng.integers(-3, width, 5).tolist()) if seed % 3 == 0 else None
    case = Case(f"random{seed}", width, k, tuple(lengths.tolist()),
                values=str(rng.choice(["normal", "ties", "special", "relu", "spread"])), starts=starts)
    segment = int(rng.choice([8, 16]))
    tiling = FastTiling(tile_w=radix_fast.TILE_W if on_chip else int(rng.choice([64, 256])),
                        cap=int(rng.choice([16, 64, 128])), block=int(rng.choice([128, 256, 512])), segment=segment,
                        samples=int(rng.choice([2, segment])), tiers=1 if path == 0 else int(rng.choice([2, 3])),
                        lanes=64 if path == 3 else int(rng.choice([32, 64])))
    # the path the seed asked for is the one taken
    assert (width <= tiling.tile_w) == on_chip
    if path == 0:
        assert radix_fast.count_group(radix_fast.ordering(k, tiling), True) > 0
    x = _logits(case, rng)
    clamped_starts, ends = _clamped_ranges(case)
    want = sim_top_k(x[:, :width], k, starts=clamped_starts, ends=ends)
    what = f"{case}, {tiling}"
    assert_exact(_run(sorted_launch, x, case, tiling, device), want, f"sorted top-k ({what})")
    assert_exact(_columns(x, case, tiling, device), in_column_order(want), f"column-order top-k ({what})")


@pytest.mark.parametrize("secant_rounds", [0, 1, 3])
def test_rounds_past_the_secant(secant_rounds: int, device, monkeypatch):
    """The rounds on the row tile and on the group maxima (tau) with fewer secant probes than the launcher's (0:
    halvings of the key interval only), so that halvings take over from a secant step's state: the same selection,
    in both forms."""
    monkeypatch.setattr(radix_fast, "SECANT_ROUNDS", secant_rounds)
    for case in (CASES[1], CASES[2], *COLUMN_CASES[2:]):
        rng = np.random.default_rng(sum(map(ord, case.name)))
        x = _logits(case, rng)
        starts, ends = _clamped_ranges(case)
        want = sim_top_k(x[:, :case.width], case.k, starts=starts, ends=ends)
        assert_exact(_columns(x, case, None, device), in_column_order(want),
                     f"column-order top-k ({case.name}, {secant_rounds} secant rounds)")
        if case.k < 1000:   # the sorted form and the long path (tau) of k = 2048 are slow in the interpreter
            assert_exact(_run(sorted_launch, x, case, None, device), want,
                         f"sorted top-k ({case.name}, {secant_rounds} secant rounds)")
            assert_exact(_columns(x, case, TILINGS["long"], device), in_column_order(want),
                         f"column-order top-k, long path ({case.name}, {secant_rounds} secant rounds)")


def test_column_order_long_tie_over_chunks(device):
    """The long path's candidates come from chunks in any order (the interpreter appends the last chunk first):
    a tie at the threshold spread over many chunks is trimmed by column, and the column order restored."""
    width, k = 2048, 40
    cols = np.arange(width)
    x = np.where(cols % 97 == 0, 5.0, np.where(cols % 31 == 0, 1.0, -1.0 - cols / width)).astype(np.float32)
    x = np.stack([x, x[::-1].copy()])
    case = Case("tie_over_chunks", width, k, (width, width - 5))
    tiling = FastTiling(tile_w=64, cap=128, block=128)
    want = in_column_order(sim_top_k(x, k, ends=np.array([width, width - 5])))
    assert_exact(_columns(x, case, tiling, device), want, "column-order top-k (a tie over candidate chunks)")


@triton.jit
def _narrow_stream_kernel(x_ptr, state_ptr, out_ptr, width, k, CAP: tl.constexpr, BLOCK: tl.constexpr):
    """radix_fast._narrow_stream on row r of x from the state (lo, hi, ge_lo, above) at state_ptr[r]; the state it
    ends in to out_ptr[r]."""
    row = tl.program_id(0).to(tl.int64)
    lo = tl.load(state_ptr + row * 4).to(tl.int64)
    hi = tl.load(state_ptr + row * 4 + 1).to(tl.int64)
    ge_lo = tl.load(state_ptr + row * 4 + 2).to(tl.int32)
    above = tl.load(state_ptr + row * 4 + 3).to(tl.int32)
    k_eff = (row * 0 + k).to(tl.int32)   # k = 1 arrives as a Python int (specialized)
    lo, hi, ge_lo, above = radix_fast._narrow_stream(x_ptr + row * width, 0, width, lo, hi, ge_lo, above, k_eff,
                                                     CAP, BLOCK)
    tl.store(out_ptr + row * 4, lo)
    tl.store(out_ptr + row * 4 + 1, hi)
    tl.store(out_ptr + row * 4 + 2, ge_lo.to(tl.int64))
    tl.store(out_ptr + row * 4 + 3, above.to(tl.int64))


def _np_keys(x: np.ndarray) -> np.ndarray:
    """The order keys (int64) of fp32 `x` by the contract: larger values larger keys, -0.0 == +0.0, NaN below
    -inf at 1."""
    bits = np.where(x == 0, 0, x.view(np.uint32)).astype(np.int64)
    key = np.where(bits >= 2**31, bits ^ 0xFFFFFFFF, bits | 2**31)
    return np.where(np.isnan(x), 1, key)


def test_narrow_stream_by_key_bins(device):
    """The streaming narrowing by key bins ends in the state the finishes need after it: its counts exact (ge_lo
    keys >= lo, `above` > hi), the k-th key inside [lo, hi], and terminal (ge_lo == k, or lo == hi) or at most CAP
    keys inside. Rows: N(0, 1), ties straddling the k-th key, adjacent floats (bins of one key), special values (NaN,
    +-inf, +-0.0, denormals, the largest float), from the whole key range and from the states a missed or a too-low
    sampled threshold leaves."""
    width, cap, block = 3000, 64, 256
    rng = np.random.default_rng(21)
    normal = rng.standard_normal(width).astype(np.float32)
    ties = np.where(rng.random(width) < 0.6, np.float32(1.5), normal)
    adjacent = (np.float32(1.0) + np.arange(width, dtype=np.float32) * np.float32(2.0 ** -23)).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38],
                       dtype=np.float32)
    mixed = normal.copy()
    mixed[rng.choice(width, 900, replace=False)] = rng.choice(special, 900)
    rows, states, ks = [], [], []
    for x in (normal, ties, adjacent, mixed, rng.permutation(adjacent)):
        key = np.sort(_np_keys(x))[::-1]
        for k in (1, 2, 300, 1800, width - 1):
            kth = int(key[k - 1])
            starts = [(1, 2**32 - 1, width, 0)]
            tau = int(key[min(k + 500, width - 1)])    # below the k-th: more than cap keys >= it
            starts.append((tau, 2**32 - 1, int((key >= tau).sum()), 0))
            for tau in {kth + 1, int(key[k // 2])}:       # above the k-th: every key below it
                if tau > kth and (key >= tau).sum() < k:
                    starts.append((1, tau - 1, width, int((key >= tau).sum())))
            for state in starts:
                assert state[3] < k <= state[2] and state[0] <= kth <= state[1], state
                rows.append(x)
                states.append(state)
                ks.append(k)
    got = []
    for x, state, k in zip(rows, states, ks):   # one launch a row: k is a launch argument
        out = torch.empty(4, dtype=torch.int64, device=device)
        _narrow_stream_kernel[(1,)](torch.from_numpy(x).to(device), torch.tensor(state, device=device), out, width, k,
                                    CAP=cap, BLOCK=block)
        got.append(out.cpu().numpy())
    for x, state, k, (lo, hi, ge_lo, above) in zip(rows, states, ks, got):
        key = _np_keys(x)
        kth = int(np.sort(key)[::-1][k - 1])
        where = (state, k, (lo, hi, ge_lo, above))
        assert ge_lo == (key >= lo).sum() and above == (key > hi).sum(), where
        assert above < k <= ge_lo and lo <= kth <= hi, where
        assert ge_lo == k or lo == hi or ge_lo - above <= cap, where


def _sampled_columns(start: int, end: int, samples: int) -> np.ndarray:
    """The columns _sample_tau_kernel reads of a row visible in [start, end): SAMPLE_RUN adjacent ones from each of
    samples / SAMPLE_RUN evenly spaced run starts, rounded down to a multiple of SAMPLE_RUN."""
    run = column_order.SAMPLE_RUN
    runs = samples // run
    first = start + np.arange(runs) * (end - start) // runs
    cols = (first // run * run)[:, None] + np.arange(run)
    return np.unique(cols[(cols >= start) & (cols < end)])


def _sampled_threshold(x: np.ndarray, starts: np.ndarray | None, ends: np.ndarray, k: int, samples: int, cap: int,
                       device) -> np.ndarray:
    """The sweep's threshold keys (uint32) of the rows of `x`, from _sample_tau_kernel itself."""
    rows, width = x.shape
    as_i32 = lambda a: torch.from_numpy(a.astype(np.int32)).to(device)   # noqa: E731
    meta = torch.empty((rows, radix_fast._META.value), dtype=torch.int32, device=device)
    column_order._sample_tau_kernel[(rows,)](
        torch.from_numpy(x).to(device), as_i32(ends if starts is None else starts), as_i32(ends), meta, width, width,
        k, HAS_STARTS=starts is not None, SAMPLES=samples, RUN=column_order.SAMPLE_RUN,
        SLACK=column_order.SAMPLE_SLACK, CAP=cap, SECANT_ROUNDS=radix_fast.SECANT_ROUNDS, PDL=False)
    return meta[:, 0].cpu().numpy().view(np.uint32)


def _threshold_values(key: np.ndarray) -> np.ndarray:
    """The fp32 values of the order keys `key` (uint32, _sampled_threshold's): the inverse of the order key."""
    return np.where(key >= 2 ** 31, key ^ np.uint32(2 ** 31), ~key).astype(np.uint32).view(np.float32)


def test_sample_threshold_in_its_window(device):
    """_sample_tau_kernel's threshold has between r and r + SAMPLE_SLACK of the sampled keys at or above it (r: the
    sample's expected count at the k-th key plus its margin): on bell-shaped, uniform, decode-like (sums of ReLU'd
    terms), heavy-tailed and ReLU-degenerate rows (no negative value, most of them 0.0: the positive values' fit
    gives a probe), and on rows holding +-inf, where the fit gives no first probe."""
    width, k, samples = 16384, 256, 1024
    rng = np.random.default_rng(21)
    x = rng.standard_normal((7, width)).astype(np.float32)
    x[1] = rng.random(width)
    x[2] = (rng.random((8, 1)) * np.maximum(rng.standard_normal((8, width)), 0)).sum(0)
    x[3] = np.exp(rng.standard_normal(width) * 3.0)
    x[4, rng.choice(width, 40, replace=False)] = np.inf
    x[5, rng.choice(width, 40, replace=False)] = -np.inf
    x[6] = np.maximum(x[6] - 0.5, 0.0)
    ends = np.full(7, width)
    threshold = _threshold_values(_sampled_threshold(x, None, ends, k, samples, 4096, device))
    expected = k * samples / width
    r = math.ceil(expected + column_order._SAMPLE_SIGMAS.value * math.sqrt(expected)
                  + column_order._SAMPLE_EXTRA.value)
    cols = _sampled_columns(0, width, samples)
    for row in range(7):
        at_or_above = int((x[row, cols] >= threshold[row]).sum())
        assert r <= at_or_above <= r + column_order.SAMPLE_SLACK, (row, at_or_above, r)


def test_sweep_threshold_above_the_kth_key(device):
    """The sweep's threshold comes from a sample: on rows whose largest keys sit exactly at the sampled columns it
    lies above the k-th key (checked on the sample kernel's own output), and the finish takes every key >= it and
    the rest by streaming rounds below it, with the same result."""
    width, k, samples = 3000, 300, 256
    starts, ends = np.array([0, 37]), np.array([width, 2900])
    x = np.random.default_rng(5).standard_normal((2, width)).astype(np.float32)
    for r in range(2):
        x[r, _sampled_columns(starts[r], ends[r], samples)] += 10.0
    key = _sampled_threshold(x, starts, ends, k, samples, 128, device)
    threshold = _threshold_values(key)
    for r in range(2):
        assert 0 < (x[r, starts[r]:ends[r]] >= threshold[r]).sum() < k, (r, threshold[r])
    case = Case("sampled_largest", width, k, tuple(ends.tolist()), starts=tuple(starts.tolist()))
    tiling = FastTiling(tile_w=128, cap=128, block=256, sweep_samples=samples)
    want = sim_top_k(x, k, starts=starts, ends=ends)
    assert_exact(_columns(x, case, tiling, device), in_column_order(want),
                 "column-order top-k (a sampled threshold above the k-th)")
    assert_exact(_run(sorted_launch, x, case, tiling, device), want,
                 "sorted top-k (a sampled threshold above the k-th)")


def test_sweep_positive_threshold_keys_by_bits(device):
    """A sweep chunk whose columns are all visible under a threshold above 0.0 takes the keys >= it by the bits of
    the positive values (as int32) instead of by order keys: special values of both signs around it (NaNs of both
    signs and several payloads, +-inf, +-0.0, denormals, the largest float, values one ulp either side of others)
    select and order as their order keys say, and the edge chunks of ragged rows (partly visible: the order keys)
    agree."""
    width, k, samples = 3000, 300, 256
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, width)) + 2.0).astype(np.float32)
    special = np.array([0x7FC00000, 0x7F800001, 0xFFC00000, 0xFF800001, 0x7F800000, 0xFF800000, 0x80000000, 0,
                        0x00000001, 0x007FFFFF, 0x80000001, 0x7F7FFFFF], dtype=np.uint32).view(np.float32)
    for r in range(3):
        at = rng.choice(width, 600, replace=False)
        x[r, at] = rng.choice(special, 600)
        near = rng.choice(width, 400, replace=False)   # ties and one-ulp neighbours of the upper values
        x[r, near] = np.nextafter(x[r, near[::-1]], np.float32(np.inf) * rng.choice([-1, 1], 400)).astype(np.float32)
    starts, ends = np.array([0, 37, 5]), np.array([width, 2900, 2999])
    assert (_sampled_threshold(x, starts, ends, k, samples, 128, device) > 0x80000000).all(), (
        "a threshold above the key of 0.0")
    case = Case("positive_threshold", width, k, tuple(ends.tolist()), starts=tuple(starts.tolist()))
    want = sim_top_k(x, k, starts=starts, ends=ends)
    # a candidate tile that holds every key >= the threshold: the finish selects from the sweep's keys
    for tiling in (FastTiling(tile_w=128, cap=2048, block=256, sweep_samples=samples),
                   FastTiling(tile_w=128, cap=2048, block=256, sweep_samples=samples, sweep_block=64)):
        assert_exact(_columns(x, case, tiling, device), in_column_order(want), "column-order top-k (bits)")
        assert_exact(_run(sorted_launch, x, case, tiling, device), want, "sorted top-k (bits)")


def test_sweep_threshold_at_zero_takes_both_zeros(device):
    """A sampled threshold exactly at the key of 0.0 (fewer positive values than k, the rest +-0.0 spread over every
    chunk) keeps the order keys on every chunk: -0.0 equals +0.0, so both are candidates, and the first by column
    among them are selected (the bits comparison, which is only exact above 0.0, would drop every -0.0)."""
    width, k, samples = 3000, 300, 256
    rng = np.random.default_rng(12)
    x = np.where(rng.random((2, width)) < 0.5, np.float32(0.0), np.float32(-0.0)).astype(np.float32)
    for r in range(2):
        x[r, rng.choice(width, 100, replace=False)] = np.abs(rng.standard_normal(100)).astype(np.float32) + 1.0
    ends = np.array([width, 2990])
    assert (_sampled_threshold(x, None, ends, k, samples, 4096, device) == 0x80000000).all(), (
        "a threshold at the key of 0.0")
    case = Case("zero_threshold", width, k, tuple(ends.tolist()))
    want = sim_top_k(x, k, ends=ends)
    # a candidate tile that holds every key >= the threshold: the finish selects from the sweep's keys
    tiling = FastTiling(tile_w=128, cap=4096, block=256, sweep_samples=samples)
    assert_exact(_columns(x, case, tiling, device), in_column_order(want), "column-order top-k (threshold 0.0)")
    assert_exact(_run(sorted_launch, x, case, tiling, device), want, "sorted top-k (threshold 0.0)")


@triton.jit
def _store_chunked_probe(key_ptr, cols_ptr, chunk_ptr, first_ptr, count_ptr, out_ptr, lo, hi, need,
                         CAP: tl.constexpr, CHUNKS: tl.constexpr):
    slots = tl.arange(0, CAP)
    c = tl.arange(0, CHUNKS)
    column_order._store_chunked(tl.load(key_ptr + slots).to(tl.uint32, bitcast=True), tl.load(cols_ptr + slots),
                                tl.load(chunk_ptr + slots), tl.load(first_ptr + c), tl.load(count_ptr + c),
                                lo, hi, need, out_ptr, CAP)


@pytest.mark.parametrize("seed", range(4))
def test_store_chunked_in_column_order_whatever_the_slot_order(seed: int, device):
    """The long finish's store from a candidate tile in slot order: the chunks' runs of slots lie in any order (the
    order of their atomic adds on a GPU; under the interpreter the sweep's always come in the chunks' own), some
    chunks hold none, slots past the candidates are empty; every key above hi and the first `need` inside [lo, hi]
    by column land in column order, and nothing past them. Chunks past the row's (the tile of chunk records is a
    power of two) and empty ones record no slots, an empty one at slot 0 among them."""
    rng = np.random.default_rng(seed)
    cap, chunks, live, block = 64, 8, 6, 16
    key = rng.integers(1, 12, live * block)              # many ties at every key
    key[rng.permutation(live * block)[:live * block * 2 // 3]] = 0
    key[2 * block:3 * block] = 0                         # a chunk with no candidate
    tau = 5
    cand = [np.flatnonzero(key[c * block:(c + 1) * block] >= tau) + c * block for c in range(live)]
    count = np.array([len(x) for x in cand] + [0] * (chunks - live))
    assert 0 < count.sum() <= cap and count[2] == 0
    first = np.zeros(chunks, dtype=np.int64)
    slot = 0
    order = rng.permutation(live)                        # the runs' order in the tile: not the chunks'
    for c in ([2] if seed % 2 else []) + [c for c in order if not (seed % 2 and c == 2)]:
        first[c] = slot
        slot += count[c]
    tile_key, tile_col, tile_chunk = np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int64)
    for c in range(live):
        tile_col[first[c]:first[c] + count[c]] = cand[c]
        tile_key[first[c]:first[c] + count[c]] = key[cand[c]]
        tile_chunk[first[c]:first[c] + count[c]] = c
    columns = np.concatenate(cand)
    for lo, hi in ((7, 7), (6, 8), (tau, tau)):
        above, inside = columns[key[columns] > hi], columns[(key[columns] >= lo) & (key[columns] <= hi)]
        for need in sorted({0, 1, len(inside) // 2, len(inside)}):
            want = np.sort(np.concatenate([above, np.sort(inside)[:need]]))
            as_i32 = lambda a: torch.tensor(a, dtype=torch.int32, device=device)   # noqa: E731
            out = torch.full((len(want) + 1,), -7, dtype=torch.int32, device=device)
            _store_chunked_probe[(1,)](as_i32(tile_key), as_i32(tile_col), as_i32(tile_chunk), as_i32(first),
                                       as_i32(count), out, lo, hi, need, CAP=cap, CHUNKS=chunks)
            got = out.cpu().numpy()
            assert_exact(got[:-1], want.astype(np.int32), f"store from slot order (lo {lo}, hi {hi}, need {need})")
            assert got[-1] == -7, "stored past the selection"


def test_sweep_samples_by_width():
    """The sample of the sweep's threshold: the least of SWEEP_SAMPLES that keeps a full row's candidates at its
    margin within 3/4 of the candidate tile; too wide a row for the largest takes group maxima and tau. The
    launcher's column-order constants carry it, the sorted form's never."""
    def expected_candidates(width, k, samples):
        e = k * samples / width
        return (np.ceil(e + 3.5 * np.sqrt(e) + 8) + column_order.SAMPLE_SLACK) * width / samples

    for k in (64, 512, 2048):
        for width in (8193, 16384, 32768, 65536, 131072, 262144, 2 ** 20):
            cap = radix_fast.fast_tiling(width, k).cap
            m = column_order.sweep_samples(width, k, cap)
            fits = [s for s in column_order.SWEEP_SAMPLES if expected_candidates(width, k, s) <= 0.75 * cap]
            assert m == (fits[0] if fits else 0), (width, k, m)
            assert topk_fast._tiling(Target.NVIDIA, width, k, 64, 132, False).sweep_samples == m
            assert topk_fast._tiling(Target.NVIDIA, width, k, 64, 132, True).sweep_samples == m
    assert column_order.sweep_samples(131072, 2048, 4096) == 8192
    assert column_order.sweep_samples(262144, 2048, 4096) == 0


def test_sweep_block_by_target():
    """Both forms' sweep reads SWEEP_BLOCK columns a program on NVIDIA (under SWEEP_MAXNREG, its sample in
    SAMPLE_WARPS warps, the column order's finish in COLUMNS_SWEEP_FINISH_WARPS), the tiling's block elsewhere
    (uncapped, the sample and finish in the tiling's warps); the finish's streaming chunk stays the block; rows for
    group maxima take no sweep, and their finish keeps the tiling's warps."""
    for width in (16384, 65536, 131072):
        for by_value in (False, True):
            block = radix_fast.fast_tiling(width, 2048).block
            nv = topk_fast._tiling(Target.NVIDIA, width, 2048, 64, 132, by_value)
            amd = topk_fast._tiling(Target.AMD, width, 2048, 64, 256, by_value)
            assert nv.sweep_samples and amd.sweep_samples, width
            assert (column_order.sweep_block(nv), nv.block, nv.sweep_maxnreg) == (
                topk_fast.SWEEP_BLOCK, block, topk_fast.SWEEP_MAXNREG), (width, by_value)
            assert (column_order.sweep_block(amd), amd.block, amd.sweep_maxnreg) == (block, block, None), width
            assert (column_order.sample_warps(nv), column_order.sample_warps(amd)) == (
                topk_fast.SAMPLE_WARPS, amd.num_warps), width
            assert (column_order.finish_warps(nv), column_order.finish_warps(amd)) == (
                nv.num_warps if by_value else topk_fast.COLUMNS_SWEEP_FINISH_WARPS, amd.num_warps), (width, by_value)
    assert topk_fast.SWEEP_BLOCK != radix_fast.fast_tiling(131072, 2048).block   # the narrow programs are NVIDIA's
    maxima = topk_fast._tiling(Target.NVIDIA, 2 ** 20, 2048, 64, 132, False)
    assert maxima.sweep_samples == 0 and column_order.finish_warps(maxima) == maxima.num_warps


@pytest.mark.parametrize("variant", ["radix_fast", "per_row", "rows_tile"])
def test_sorted_false_through_the_launcher(variant: str, device):
    """hw.top_k_per_row(sorted=False) for every variant that runs here: the sorted selection in column order."""
    if device.type != "cpu" and variant == "rows_tile":
        pytest.skip("rows_tile runs under the interpreter only")
    case = CASES[2]   # "special": short rows, NaN, +-inf
    rng = np.random.default_rng(3)
    x = _logits(case, rng)
    starts, ends = _clamped_ranges(case)
    logits = torch.from_numpy(x).to(device)[:, :case.width]
    lengths = torch.tensor(case.lengths, dtype=torch.int32, device=device)
    got = hw.top_k_per_row(logits, lengths, case.k, sorted=False, variant=variant)
    assert_exact(got.cpu().numpy(), in_column_order(sim_top_k(x[:, :case.width], case.k, starts=starts, ends=ends)),
                 f"sorted=False ({variant})")


@pytest.mark.parametrize("lanes", [32, 64])
def test_column_order_row_tile_layouts(lanes: int, device):
    """The on-chip row tile with 16-byte vectors (VEC 4: base, row stride and width 16-aligned) and without (VEC 1:
    the same logits one column to the right), each column owned by THREADS for 32- and 64-lane warps, one tile and
    two tiers: the same selection as the oracle's, with ragged starts and poisoned invisible columns."""
    rows, width, k = 7, 1024, 100
    rng = np.random.default_rng(5)
    starts = np.array([0, 3, 17, 250, 600, 1000, 5], dtype=np.int32)
    ends = np.array([1024, 1021, 900, 251 + k, 1024, 1024, 5 + k + 1], dtype=np.int32)
    x = rng.standard_normal((rows, width + 1)).astype(np.float32)
    cols = np.arange(width)
    hidden = (cols[None] < starts[:, None]) | (cols[None] >= ends[:, None])
    x[:, 1:][hidden] = rng.choice(POISON, size=int(hidden.sum()))
    want = in_column_order(sim_top_k(x[:, 1:], k, starts=starts, ends=ends))
    padded = torch.from_numpy(x).to(device)
    aligned = torch.zeros((rows, width), dtype=torch.float32, device=device)
    aligned.copy_(padded[:, 1:])
    for logits, vec in ((aligned, True), (padded[:, 1:], False)):
        assert column_order.vectors(logits) is vec
        for tiers in (1, 2):
            tiling = dataclasses.replace(radix_fast.fast_tiling(width, k), cap=64, lanes=lanes, tiers=tiers)
            out = torch.full((rows, k), 12345, dtype=torch.int32, device=device)
            column_order.launch_columns(logits, torch.from_numpy(ends).to(device), torch.from_numpy(starts).to(device),
                                        out, tiling)
            assert_exact(out.cpu().numpy(), want, f"column order, vectors {vec}, {lanes} lanes, {tiers} tiers")
    assert column_order.row_layout(tiling, 1024, 2, True) == {"THREADS": min(lanes * 8, 128), "VEC": 4}
    assert column_order.row_layout(tiling, 1024, 1, False) == {"THREADS": lanes * 8, "VEC": 1}
    # several tiers on 8192-column tiles with vectors: groups of 4 columns spread over the tile, more of them than
    # the program's threads; one tier, narrower tiles or no vectors: the program's threads
    assert column_order.row_layout(tiling, 8192, 2, True) == {"THREADS": 1024, "VEC": 4}
    assert column_order.row_layout(tiling, 8192, 1, True) == {"THREADS": lanes * 8, "VEC": 4}
    assert column_order.row_layout(tiling, 8192, 2, False) == {"THREADS": lanes * 8, "VEC": 1}
    assert column_order.row_layout(tiling, 4096, 2, True) == {"THREADS": lanes * 8, "VEC": 4}


@pytest.mark.parametrize("width", [8192, 4096])
def test_column_order_store_forms(width: int, device):
    """The on-chip store in both forms: a row tile of 8192 columns stores its selection scattered from the tile,
    tiles of up to column_order._GATHERED_STORE_MAX_TILE gather the places into column order first (16-byte rows);
    rows one column off 16-byte alignment store scattered at either width. N(0, 1) rows (their terminal states take
    every key >= lo: the one-prefix store), ReLU-degenerate and tied rows (ties cut at the threshold: the two-rank
    store), full and shortened: the oracle's selection in column order."""
    k = 2048
    rng = np.random.default_rng(width)
    x = rng.standard_normal((4, width + 1)).astype(np.float32)
    x[1] = np.maximum(x[1] - 0.5, 0.0)
    x[2] = rng.choice(TIE_VALUES, size=width + 1)
    ends = np.array([width, width - 5, k + 1, width // 2 + 3], dtype=np.int32)
    for logits in (torch.from_numpy(x[:, :width].copy()).to(device), torch.from_numpy(x).to(device)[:, 1:]):
        tiling = dataclasses.replace(radix_fast.fast_tiling(width, k), cap=topk_fast.COLUMNS_ROW_CAP)
        out = torch.full((4, k), 12345, dtype=torch.int32, device=device)
        column_order.launch_columns(logits, torch.from_numpy(ends).to(device), None, out, tiling)
        values = logits.cpu().numpy()
        want = in_column_order(sim_top_k(values, k, starts=np.zeros(4, dtype=np.int64), ends=ends.astype(np.int64)))
        assert_exact(out.cpu().numpy(), want, f"column order, width {width}, vectors {column_order.vectors(logits)}")


@pytest.mark.parametrize("garbage", [7, -1], ids=["small", "all_ones"])
def test_column_order_scratch_is_never_trusted(garbage: int, device, monkeypatch):
    """The column-order launches' scratch (candidates, chunk table, group maxima, counts) filled with garbage (7,
    or all bits set: as a candidate's key the largest, as its column -1): the results do not change."""
    real_empty = torch.empty

    def poisoned_empty(*shape, dtype=None, device=None, **kw):
        t = real_empty(*shape, dtype=dtype, device=device, **kw)
        return t.fill_(garbage if not t.is_floating_point() else float("nan"))
    monkeypatch.setattr(torch, "empty", poisoned_empty)
    case = CASES[1]
    x = _logits(case, np.random.default_rng(11))
    starts, ends = _clamped_ranges(case)
    want = in_column_order(sim_top_k(x[:, :case.width], case.k, starts=starts, ends=ends))
    for name, tiling in COLUMN_TILINGS.items():
        if tiling is None:
            continue
        assert_exact(_columns(x, case, tiling, device), want, f"column-order top-k, poisoned scratch ({name})")


def _gpu_rows(width: int, rows: int, seed: int) -> np.ndarray:
    """N(0, 1) rows, ReLU-degenerate rows (about 70 % exact 0.0 among positive scores: the threshold tie holds
    tens of thousands at the widest, more than any candidate tile) and rows of seven values (massive ties)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    x[1::3] = np.maximum(x[1::3] - 0.5, 0.0)
    x[2::3] = rng.choice(TIE_VALUES, size=x[2::3].shape)
    return x


@pytest.mark.gpu
@pytest.mark.parametrize("width", [8192, 131072, 2 ** 20])
def test_column_order_wide_rows_gpu(width: int):
    """The launcher's own tiling on the GPU, rows up to 2^20 wide, full and shortened (k - 1, k, k + 1, ragged):
    sim's selection in column order, the same over 20 launches, and the same from a CUDA-graph replay."""
    k, rows = 2048, 6
    x = _gpu_rows(width, rows, width)
    ends = np.array([width, width - 7, k + 1, k, k - 1, width], dtype=np.int64)
    starts = np.array([0, 3, 0, 0, 0, width // 3], dtype=np.int64)
    want = in_column_order(sim_top_k(x, k, starts=starts, ends=ends))
    logits = torch.from_numpy(x).cuda()
    lengths = torch.from_numpy(ends.astype(np.int32)).cuda()
    starts_t = torch.from_numpy(starts.astype(np.int32)).cuda()
    first = hw.top_k_per_row(logits, lengths, k, starts=starts_t, sorted=False)
    assert_exact(first.cpu().numpy(), want, f"column-order top-k, width {width}")
    for _ in range(19):
        assert torch.equal(hw.top_k_per_row(logits, lengths, k, starts=starts_t, sorted=False), first)
    graph = torch.cuda.CUDAGraph()
    out = torch.full_like(first, 12345)
    with torch.cuda.graph(graph):
        hw.top_k_per_row(logits, lengths, k, starts=starts_t, out=out, sorted=False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, first)


@pytest.mark.gpu
def test_column_order_many_wide_rows_gpu():
    """Three rows of 8192 columns per SM (three programs an SM, each row tile spread over the threads in groups of
    4: column_order.row_layout; on NVIDIA the candidate tile finished by ranks), full, shortened and ragged: sim's
    selection in column order."""
    width, k = 8192, 2048
    rows = 3 * torch.cuda.get_device_properties(0).multi_processor_count
    assert topk_fast._tiling(Target.NVIDIA, width, k, rows, rows // 3, False).rank_finish
    x = _gpu_rows(width, rows, 11)
    rng = np.random.default_rng(11)
    ends = rng.choice(np.array([width, width - 5, 5000, k + 1, k, 17, 0]), rows)
    starts = np.minimum(rng.choice(np.array([0, 0, 4, 100, 3001]), rows), ends)
    want = in_column_order(sim_top_k(x, k, starts=starts, ends=ends))
    got = hw.top_k_per_row(torch.from_numpy(x).cuda(), torch.from_numpy(ends.astype(np.int32)).cuda(), k,
                           starts=torch.from_numpy(starts.astype(np.int32)).cuda(), sorted=False)
    assert_exact(got.cpu().numpy(), want, "column-order top-k, many rows of 8192")


@pytest.mark.gpu
def test_column_order_causal_rows_gpu():
    """The rows of a prompt's prefill (row i sees i + 1 keys), many rows per SM (the tiered, capped kernel):
    sim's selection in column order."""
    width, k = 4096, 2048
    x = _gpu_rows(width, width, 5)
    ends = np.arange(1, width + 1)
    want = in_column_order(sim_top_k(x, k, ends=ends))
    got = hw.top_k_per_row(torch.from_numpy(x).cuda(), torch.from_numpy(ends.astype(np.int32)).cuda(), k,
                           sorted=False)
    assert_exact(got.cpu().numpy(), want, "column-order top-k, causal rows")


#: (width, lengths, starts, k, launch settings) of test_hostile_rows_gpu: lengths 0, 1, k - 1, k, k + 1, past W,
#: negative and 2^31 - 1; ragged starts (negative, past the end); k = 1; a tiny candidate tile on chip, a candidate
#: tile the long path's ties overflow (its streaming rounds), the tiered many-rows kernel on few rows (also as
#: three programs an SM take it: the candidate tile finished by ranks)
HOSTILE_GPU = [
    (w, (w, w + 100, 2049, 2048, 2047, 1, 0, -5, w // 2, 2 ** 31 - 1), None, 2048, None) for w in (8192, 20000, 70000)
] + [
    (w, (w, w + 100, 2049, 2048, 2047, 1, 0, -5, w // 2, 2 ** 31 - 1), (0, 100, -7, w - 3000, 5, w, 2 ** 31 - 1, 1,
                                                                        3, 0), 2048, None) for w in (8192, 70000)
] + [
    (8192, (8192, 8191, 17, 0), None, 1, None),
    (8192, (8192, 8000, 2049, 3000, 5000, 1), None, 2048, {"cap": 64}),
    (20000, (20000, 19000, 2049, 9000, 15000, 1), None, 2048, {"cap": 1024}),
    (8192, (8192, 4100, 4096, 2100, 2049, 2048, 1, 0, 7000, 3000, 1500, 8191),
     (0, 3, 5, 17, 0, 0, 0, 0, 1000, 2000, 100, 1), 2048, {"tiers": 3, "maxnreg": 128}),
    (8192, (8192, 4100, 4096, 2100, 2049, 2048, 1, 0, 7000, 3000, 1500, 8191),
     (0, 3, 5, 17, 0, 0, 0, 0, 1000, 2000, 100, 1), 2048,
     {"tiers": 2, "maxnreg": 80, "cap": 64, "rank_finish": True}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("values", ["normal", "relu", "special", "ties"])
@pytest.mark.parametrize("width, lengths, starts, k, settings", HOSTILE_GPU)
def test_hostile_rows_gpu(width, lengths, starts, k, settings, values):
    """Both forms on hostile rows through every path (on chip, tiers, long path, its streaming fallback), checked
    against sim; small enough to run under compute-sanitizer (memcheck, racecheck)."""
    rng = np.random.default_rng(width + len(lengths) + k)
    shape = (len(lengths), width)
    if values == "normal":
        x = rng.standard_normal(shape).astype(np.float32)
    elif values == "relu":
        x = np.maximum(rng.standard_normal(shape) - 0.5, 0).astype(np.float32)
    elif values == "special":
        x = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1.0, 2.0], dtype=np.float32), shape)
    else:
        x = rng.choice(np.array([0.0, 1.0, 1.0, 2.0], dtype=np.float32), shape)
    ends = np.clip(np.array(lengths, dtype=np.int64), 0, width)
    begin = np.zeros_like(ends) if starts is None else np.clip(np.array(starts, dtype=np.int64), 0, ends)
    want = sim_top_k(x, k, starts=begin, ends=ends)
    logits = torch.from_numpy(x).cuda()
    lengths_t = torch.tensor(lengths, dtype=torch.int32).cuda()
    starts_t = None if starts is None else torch.tensor(starts, dtype=torch.int32).cuda()
    for by_value, expected in ((True, want), (False, in_column_order(want))):
        got = hw.top_k_per_row(logits, lengths_t, k, starts=starts_t, sorted=by_value, launch_settings=settings)
        assert_exact(got.cpu().numpy(), expected, f"top-k ({'sorted' if by_value else 'columns'}, W {width}, "
                                                  f"{values}, {settings})")


@pytest.mark.parametrize("target", [Target.NVIDIA, Target.AMD], ids=["nvidia", "amd"])
def test_isa_specs_are_the_launched_kernels(target: Target, monkeypatch):
    """Every kernel the variant launches on `target` for the cross-compiled shapes (radix_fast.ISA_SHAPES, both
    forms; an H200's 132 SMs, an MI355X's 256 CUs) has a cross-compile spec for that target with its constexprs,
    warps and register cap, and every spec is launched: `mxidx isa` reports what runs. The kernels are recorded, not
    run."""
    specs = [s for s in topk_fast.VARIANT.isa_specs() if target.isa_target in s.targets]
    launched = []

    class Recorder:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            return lambda *args, **kw: launched.append((self.fn, kw))

    for module in (radix_fast, column_order):
        for name, fn in vars(module).copy().items():
            if name.endswith("_kernel") and hasattr(fn, "__getitem__"):   # @triton.jit (or interpreted) kernels
                monkeypatch.setattr(module, name, Recorder(fn))
        # what a launch on that GPU gets (the CPU has no PDL)
        monkeypatch.setattr(module, "pdl_launch", lambda wanted, device: {"PDL": wanted})
    nvidia = target is Target.NVIDIA
    sms = 132 if nvidia else 256
    for width, k, has_starts, *many in radix_fast.ISA_SHAPES:
        rows = radix_fast.MANY_ROWS_PER_SM * sms if many else 2
        logits = torch.empty(16).as_strided((rows, width), (0, 0))   # never read: the shapes and strides matter
        lengths = torch.full((rows,), width, dtype=torch.int32)
        for sorted_ in (True, False):
            call = TopKCall(logits, lengths, lengths if has_starts else None,
                            torch.empty((rows, k), dtype=torch.int32), sorted_)
            topk_fast._launch(call, topk_fast._tiling(target, width, k, rows, sms, sorted_))

    def matches(spec, fn, kw):
        return (spec.fn is fn and spec.num_warps == kw["num_warps"] and spec.maxnreg == kw.get("maxnreg")
                and all(kw.get(name) == value for name, value in spec.constexprs.items()))

    unmatched = [(fn.__name__, kw) for fn, kw in launched if not any(matches(s, fn, kw) for s in specs)]
    assert not unmatched, f"launches without a {target.isa_target} spec: {unmatched[:3]}"
    unlaunched = [s.label for s in specs if not any(matches(s, fn, kw) for fn, kw in launched)]
    assert not unlaunched, f"{target.isa_target} specs no launch takes: {unlaunched}"
