"""hw.top_k_per_row against sim.topk.top_k: exact equality on identical fp32 logits (DESIGN §4).

Every case poisons the invisible columns (past the row's length, before its start, and the gap between rows of a
strided view) with +inf / NaN / 3e38, which would win if they were ever read as candidates.

The launcher runs one of two kernels (hw/_topk_details): one program per row on compiled GPUs, a tile of rows per
program under the interpreter. Both run every case: the row kernel on any backend, the tile kernel under the
interpreter (the only place it is launched) with the launcher's tiling and with a small one that splits the rows
over several programs (the last one partial in the "mixed" cases), wide rows over several column chunks and the
ranking over several slices.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest
import torch
import triton

import hw
from hw._topk_details import (
    BLOCK,
    MAX_K,
    PER_ROW_MAXNREG,
    RANK_ELEMS,
    TILE_ELEMS,
    RowsTiling,
    _spec,
    k_pad,
    rows_tiling,
)
from hw._topk_details.radix_fast import FAST_MAX_WIDTH
from hw.targets import Op, Target
from hw.variants import select, variants
from sim.topk import top_k as sim_top_k
from tests.sim._assert import assert_exact

pytestmark = pytest.mark.interp

TIE_VALUES = np.array([-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0], dtype=np.float32)
SPECIAL_VALUES = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.5, -1.5,
                           3.4028235e38, -3.4028235e38, 1.1754944e-38], dtype=np.float32)
POISON = np.array([np.inf, np.nan, 3e38], dtype=np.float32)
FIRST_CHUNK_TIES = 8   # "two_chunks": fewer than the case's k, so the tie at the threshold spans both chunks
MIXED_ROWS = 19        # rows of the "mixed" cases: not a multiple of any power-of-two rows-per-program
SMALL_TILE_ROWS = 4    # the small tiling: rows per program ...
SMALL_TILE_BLOCK = 256   # ... columns per chunk ...
SMALL_TILE_RANK_SLICES = 4   # ... and K_PAD / RANK_CHUNK


@dataclass(frozen=True)
class Case:
    name: str
    width: int
    k: int
    lengths: tuple[int, ...]              # one per row; may be < 0 or > width (the kernel clamps)
    values: str = "normal"                # "normal" | "ties" | "special" | "two_chunks"
    starts: tuple[int, ...] | None = None
    row_gap: int = 0                      # extra (poisoned) elements between rows: row stride = width + row_gap


CASES = [
    # many ties, width not a multiple of BLOCK, rows ending exactly at / just past a chunk boundary
    Case("ties", BLOCK + 476, 100, (BLOCK + 476, BLOCK, BLOCK + 1, 99, 100, 101), values="ties"),
    # NaN (both signs), +-inf, +-0, denormals, +-FLT_MAX; short rows (0, 1, < k, == k, > k)
    Case("special", 200, 64, (200, 0, 1, 5, 63, 64, 65, 130), values="special"),
    # k > W: the tail is -1; lengths past W and negative lengths are clamped
    Case("k_gt_width", 10, 37, (10, 3, 0, 25, -4), values="special"),
    Case("k1", 2100, 1, (2100, 1, 0, 1337), values="ties"),
    Case("k_eq_width", 48, 48, (48, 47, 48), values="ties"),
    # the k-th value is tied across two chunks (FIRST_CHUNK_TIES copies in the first, many in the second): the
    # lowest indices win, none dropped or repeated
    Case("ties_across_chunks", BLOCK + 400, 40, (BLOCK + 400, BLOCK + 3), values="two_chunks"),
    Case("row_stride", 333, 20, (333, 100, 333), values="normal", row_gap=13),
    # ragged prefill: starts (including start == end, start > end, negative start) with absolute indices; the
    # int32 extremes (end - start would wrap in int32)
    Case("ragged", 1100, 50, (1100, 800, 40, 600, 1100, 30, -2 ** 31, 2 ** 31 - 1), values="ties",
         starts=(0, 300, 40, 700, -5, 10, 5, -2 ** 31)),
    Case("k_max", BLOCK + 500, MAX_K, (BLOCK + 100,), values="ties"),   # one row: the interpreter's sort is slow
    # many rows of mixed lengths (0, 1, < k, > k, > W, negative), plain and ragged
    Case("mixed", 300, 24, tuple(np.random.default_rng(1).integers(-5, 340, MIXED_ROWS).tolist()),
         values="ties"),
    Case("mixed_ragged", 300, 24, tuple(np.random.default_rng(2).integers(-5, 340, MIXED_ROWS).tolist()),
         values="special", starts=tuple(np.random.default_rng(3).integers(-5, 200, MIXED_ROWS).tolist())),
]


def _logits(case: Case, rng: np.random.Generator) -> np.ndarray:
    """fp32 [rows, width + row_gap]; invisible entries (of the clamped ranges) poisoned."""
    rows, stride = len(case.lengths), case.width + case.row_gap
    if case.values == "normal":
        x = rng.standard_normal((rows, stride)).astype(np.float32)
    elif case.values == "ties":
        x = rng.choice(TIE_VALUES, size=(rows, stride))
    elif case.values == "special":
        x = rng.choice(SPECIAL_VALUES, size=(rows, stride))
    else:   # -1, except 0.25 at FIRST_CHUNK_TIES columns of the first chunk and at about half of the others
        x = np.where(rng.random((rows, stride)) < 0.5, 0.25, -1.0).astype(np.float32)
        x[:, :BLOCK] = -1.0
        for row in x:
            row[rng.choice(BLOCK, FIRST_CHUNK_TIES, replace=False)] = 0.25
    starts, ends = _clamped_ranges(case)
    cols = np.arange(stride)
    invisible = (cols < starts[:, None]) | (cols >= ends[:, None])
    x[invisible] = rng.choice(POISON, size=int(invisible.sum()))
    return x


def _clamped_ranges(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """The visible [start, end) per row as the kernel defines it, in sim's form 0 <= start <= end <= W."""
    ends = np.clip(np.array(case.lengths, dtype=np.int64), 0, case.width)
    starts = np.zeros_like(ends) if case.starts is None else np.array(case.starts, dtype=np.int64)
    return np.clip(starts, 0, ends), ends


def _small_tiling(case: Case) -> RowsTiling:
    sort_width = k_pad(case.k)
    rank_chunk = min(sort_width // SMALL_TILE_RANK_SLICES, RANK_ELEMS // (SMALL_TILE_ROWS * sort_width))
    return RowsTiling(SMALL_TILE_ROWS, SMALL_TILE_BLOCK, rank_chunk)


def _launch(path: str, case: Case, logits, lengths, starts) -> torch.Tensor:
    """Run one variant (None: the default) on checked inputs; "rows_tile_small" is rows_tile with a small tiling."""
    if path == "rows_tile_small":
        tiling = dataclasses.asdict(_small_tiling(case))
        assert tiling["rank_chunk"] < k_pad(case.k)
        return hw.top_k_per_row(logits, lengths, case.k, starts=starts, variant="rows_tile", launch_settings=tiling)
    return hw.top_k_per_row(logits, lengths, case.k, starts=starts, variant=path)


# None: the target's default (rows_tile with its tiling under the interpreter, radix_fast on GPUs); every variant
# by name (each runs on every target); rows_tile_small: rows_tile with several rank chunks per row
PATHS = (None, *(v.name for v in variants(Op.TOPK)), "rows_tile_small")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_sim(case: Case, path: str, device):
    if path is not None and device.type != "cpu" and select(Op.TOPK, Target.NVIDIA).name != path:
        pytest.skip("on a GPU only the default variant is timed in the suite; the others run under the interpreter")
    rng = np.random.default_rng(sum(map(ord, case.name)))
    x = _logits(case, rng)
    starts, ends = _clamped_ranges(case)
    want = sim_top_k(x[:, :case.width], case.k, starts=starts, ends=ends)

    logits = torch.from_numpy(x).to(device)[:, :case.width]
    assert logits.stride() == (case.width + case.row_gap, 1)
    lengths = torch.tensor(case.lengths, dtype=torch.int32, device=device)
    starts_t = None if case.starts is None else torch.tensor(case.starts, dtype=torch.int32, device=device)
    got = _launch(path, case, logits, lengths, starts_t)

    assert got.shape == (len(case.lengths), case.k) and got.dtype == torch.int32 and got.is_contiguous()
    assert_exact(got.cpu().numpy(), want, f"top-k indices ({case.name}, {path})",
                 context=lambda i: f"row {i[0]} visible [{starts[i[0]]}, {ends[i[0]]})")


def test_default_variant_per_target():
    """Interpreter: rows_tile, with rows_tiling (hundreds of rows per program for short rows); NVIDIA and AMD:
    radix_fast in both orders, per_row for rows wider than FAST_MAX_WIDTH."""
    assert select(Op.TOPK, Target.INTERPRETER).name == "rows_tile"
    for target in (Target.NVIDIA, Target.AMD):
        assert select(Op.TOPK, target).name == "radix_fast"
        for sorted_, width, name in ((True, 8192, "radix_fast"), (False, 8192, "radix_fast"),
                                     (True, FAST_MAX_WIDTH + 1, "per_row"), (False, FAST_MAX_WIDTH + 1, "per_row")):
            call = SimpleNamespace(logits=SimpleNamespace(shape=(4, width)), sorted=sorted_)
            assert select(Op.TOPK, target, call=call).name == name, (target, sorted_, width)
    call = SimpleNamespace(logits=torch.zeros((300, 256)), k=20)
    # rows min(512, 2^17 / 256, 2^20 / 32^2); rank chunk min(32, 2^20 / (512 * 32))
    assert select(Op.TOPK, Target.INTERPRETER).settings(Target.INTERPRETER, call) == \
        RowsTiling(rows=512, block=256, rank_chunk=32)


def test_rows_tiling_respects_the_budgets():
    """Powers of two; tile and ranking tensors within their budgets (Triton's 2^20-element tensor limit)."""
    for rows, width, k in [(1, 1, 1), (3, 17, 5), (1000, 1024, 64), (4096, 8192, 2048), (7, 2 ** 20, 2048),
                           (100_000, 100, 16)]:
        t = rows_tiling(rows, width, k)
        assert all(v & (v - 1) == 0 for v in dataclasses.astuple(t)), (rows, width, k, t)
        assert t.rows * t.block <= TILE_ELEMS and t.rows * k_pad(k) * t.rank_chunk <= RANK_ELEMS, (rows, width, k, t)
        assert t.rows <= max(1, triton.next_power_of_2(rows)) and 1 <= t.rank_chunk <= k_pad(k), (rows, width, k, t)
    # rows min(1024, 2^17 / 1024, 2^20 / 64^2) = 128; rank chunk min(64, 2^20 / (128 * 64)) = 64
    assert rows_tiling(1000, 1024, 64) == RowsTiling(rows=128, block=1024, rank_chunk=64)


def test_empty_inputs(device):
    """rows == 0 gives an empty result; W == 0 gives all -1 (no launch needed for either)."""
    lengths = torch.zeros(3, dtype=torch.int32, device=device)
    none = hw.top_k_per_row(torch.zeros((0, 8), device=device), lengths[:0], 4)
    assert none.shape == (0, 4)
    pad = hw.top_k_per_row(torch.zeros((3, 0), device=device), lengths, 4)
    assert pad.cpu().tolist() == [[-1] * 4] * 3


def test_out_buffer_is_filled_and_returned(device):
    """out=: the caller's buffer receives the same indices as a fresh result, and is the returned tensor."""
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((3, 40)).astype(np.float32)).to(device)
    lengths = torch.tensor([40, 7, 0], dtype=torch.int32, device=device)
    out = torch.full((3, 9), 12345, dtype=torch.int32, device=device)
    got = hw.top_k_per_row(x, lengths, 9, out=out)
    assert got.data_ptr() == out.data_ptr()
    want = sim_top_k(x.cpu().numpy(), 9, ends=np.array([40, 7, 0]))
    assert_exact(out.cpu().numpy(), want, "top-k indices (out=)")


@dataclass(frozen=True)
class Bad:
    name: str
    change: Callable[[torch.device], dict]   # device -> overrides of the good arguments
    message: str                             # must appear in the ValueError


def _good(device):
    return dict(logits=torch.zeros((4, 16), device=device), lengths=torch.full((4,), 16, dtype=torch.int32,
                device=device), k=8, starts=None)


def _index_tensor(*shape, device, dtype=torch.int32):
    return torch.zeros(shape, dtype=dtype, device=device)


BAD = [
    Bad("logits_dtype", lambda d: dict(logits=torch.zeros((4, 16), dtype=torch.float64, device=d)),
        "logits must have dtype"),
    Bad("logits_bf16", lambda d: dict(logits=torch.zeros((4, 16), dtype=torch.bfloat16, device=d)),
        "logits must have dtype"),
    Bad("logits_1d", lambda d: dict(logits=torch.zeros(16, device=d)), "logits must be 2-D"),
    Bad("logits_numpy", lambda d: dict(logits=np.zeros((4, 16), np.float32)), "logits must be a torch.Tensor"),
    Bad("logits_column_stride", lambda d: dict(logits=torch.zeros((16, 4), device=d).t()), "unit column stride"),
    Bad("lengths_dtype", lambda d: dict(lengths=_index_tensor(4, device=d, dtype=torch.int64)),
        "lengths must have dtype"),
    Bad("lengths_shape", lambda d: dict(lengths=_index_tensor(5, device=d)), "lengths must have shape"),
    Bad("lengths_strided", lambda d: dict(lengths=_index_tensor(8, device=d)[::2]), "lengths must be contiguous"),
    Bad("starts_dtype", lambda d: dict(starts=_index_tensor(4, device=d, dtype=torch.int64)), "starts must have dtype"),
    Bad("starts_shape", lambda d: dict(starts=_index_tensor(4, 1, device=d)), "starts must have shape"),
    Bad("k_zero", lambda d: dict(k=0), "k must be in 1..2048"),
    Bad("k_negative", lambda d: dict(k=-3), "k must be in 1..2048"),
    Bad("k_too_big", lambda d: dict(k=MAX_K + 1), "k must be in 1..2048"),
    Bad("k_float", lambda d: dict(k=8.0), "k must be a Python int"),
    Bad("k_bool", lambda d: dict(k=True), "k must be a Python int"),
    Bad("device_mismatch", lambda d: dict(lengths=_index_tensor(4, device="meta")), "share a device"),
    Bad("out_dtype", lambda d: dict(out=_index_tensor(4, 8, device=d, dtype=torch.int64)), "out must have dtype"),
    Bad("out_shape", lambda d: dict(out=_index_tensor(4, 9, device=d)), "out must have shape"),
    Bad("out_strided", lambda d: dict(out=_index_tensor(4, 16, device=d)[:, ::2]), "out must be contiguous"),
    Bad("out_device", lambda d: dict(out=_index_tensor(4, 8, device="meta")), "share a device"),
]


@pytest.mark.parametrize("bad", BAD, ids=lambda b: b.name)
def test_rejects_bad_input(bad: Bad, device):
    args = _good(device)
    args.update(bad.change(device))
    with pytest.raises(ValueError, match=bad.message):
        hw.top_k_per_row(args.pop("logits"), args.pop("lengths"), args.pop("k"), **args)


def test_per_row_register_cap():
    """per_row's register cap (triton 3.8's PTX needs one, 3.6 and 3.7 spill under one): its launch settings
    carry it on NVIDIA only, and its cross-compile specs name the same cap, so that `mxidx isa` checks what runs."""
    per_row = select(Op.TOPK, Target.NVIDIA, name="per_row")
    assert per_row.settings(Target.NVIDIA, None).maxnreg == PER_ROW_MAXNREG
    assert per_row.settings(Target.AMD, None).maxnreg is None
    assert {spec.maxnreg for spec in per_row.isa_specs()} == {_spec(64, False).maxnreg} == {PER_ROW_MAXNREG}
    assert PER_ROW_MAXNREG == (112 if triton.__version__.startswith("3.8.") else None)
