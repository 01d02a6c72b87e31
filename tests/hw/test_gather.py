"""hw.cp_gather_indexer_k_quant_cache: paged -> contiguous K, byte for byte against sim.layout.read_tokens.

Hostile fixtures: shuffled physical pages, page strides larger than a page, view offsets, random bytes everywhere
in the pool, out-of-range sentinels in unused block-table entries, sequences of length 0 and 1, partial last pages.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

import hw
import sim.layout
from hw.testing import host_to_device, sim_input, torch_cache_view
from sim.layout import PageGeometry
from sim.testing import make_geometry, sim_quantize
from tests.hw._inputs import hostile_input
from tests.hw._kv_pool import random_pool
from tests.sim._assert import assert_exact

pytestmark = pytest.mark.interp

SENTINELS = (2**31 - 1, -1)  # what unused block-table entries hold in the fixtures: never read


@dataclass(frozen=True)
class GatherCase:
    kv_dtype: str
    layout: str | None
    head_dim: int
    page_size: int
    seq_lens: tuple
    stride_pad: int = 0
    view_offset: int = 0
    spare_pages: int = 2   # physical pages no sequence uses
    extra_table_cols: int = 1  # block-table entries past the longest sequence (sentinels)

    @property
    def pages_needed(self) -> list[int]:
        return [-(-n // self.page_size) for n in self.seq_lens]

    @property
    def geom(self) -> PageGeometry:
        return make_geometry(self.kv_dtype, self.layout, self.page_size, self.head_dim,
                             sum(self.pages_needed) + self.spare_pages, self.stride_pad, self.view_offset)


CASES = [
    GatherCase("fp8", None, 32, 16, (0, 1, 17, 32), stride_pad=48, view_offset=32),
    GatherCase("fp8", "fp8", 128, 64, (70, 3), stride_pad=16, view_offset=16),
    GatherCase("mxfp4", None, 64, 16, (5, 0, 33), stride_pad=112, view_offset=48),
    GatherCase("mxfp4", "mxfp4", 96, 32, (40, 1), view_offset=16),
    GatherCase("mxfp4", "mxfp4", 128, 16, (16, 9), stride_pad=16),  # 68 bytes/token: layout must be given
    GatherCase("mxfp4", "mxfp4_tiled", 128, 16, (1, 31, 18), stride_pad=64, view_offset=16),
    GatherCase("mxfp4", "mxfp4_tiled", 256, 64, (65,), view_offset=32),
]


def _block_table(case: GatherCase, rng) -> np.ndarray:
    """int32 [B, max_pages]: each sequence's pages, shuffled over the pool; sentinels after a sequence's last page."""
    geom = case.geom
    physical = rng.permutation(geom.num_pages)
    width = max(case.pages_needed) + case.extra_table_cols
    table = np.empty((len(case.seq_lens), width), dtype=np.int32)
    used = 0
    for b, n in enumerate(case.pages_needed):
        table[b, :n] = physical[used:used + n]
        table[b, n:] = SENTINELS[b % 2]
        used += n
    return table


def _cu(seq_lens) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int32)


def _expected(pool: np.ndarray, geom: PageGeometry, table: np.ndarray, seq_lens) -> tuple[np.ndarray, np.ndarray]:
    parts = [sim.layout.read_tokens(pool, geom, table[b], n) for b, n in enumerate(seq_lens)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _as_bytes(values: torch.Tensor, scales: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Gather outputs as raw bytes/bits (fp8 scales compared as uint32: random pool bytes include NaN payloads)."""
    values = values.cpu()
    scales = scales.cpu()
    if values.dtype == hw.checks.FP8_DTYPE:
        return values.view(torch.uint8).numpy(), scales.view(torch.int32).numpy().view(np.uint32)
    return values.numpy(), scales.numpy()


def _assert_nan_tokens(case: GatherCase, values: np.ndarray, scales: np.ndarray, what: str) -> None:
    """Every row is the gather's NaN token: fp8 values 0x7F and scale bits 0x7FC00000; mxfp4 codes 0, scales 255."""
    assert values.shape[0] > 0, what
    if case.kv_dtype == "fp8":
        assert (values == 0x7F).all() and (scales == 0x7FC00000).all(), what
    else:
        assert (values == 0).all() and (scales == 255).all(), what


def _flag(flag: torch.Tensor) -> tuple[int, int, int, int]:
    count, kind, row, value = flag.tolist()
    return count, hw.checks.ErrorKind(kind), row, value


def _gather(case: GatherCase, pool: torch.Tensor, table: np.ndarray, device, **kw):
    return hw.cp_gather_indexer_k_quant_cache(torch_cache_view(pool, case.geom),
                                              torch.from_numpy(table).to(device),
                                              torch.from_numpy(_cu(case.seq_lens)).to(device), layout=case.layout,
                                              **kw)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.layout or c.kv_dtype}-D{c.head_dim}-P{c.page_size}-"
                         + "_".join(map(str, c.seq_lens)))
def test_gather_matches_sim(case, device):
    rng = np.random.default_rng(case.head_dim + case.page_size)
    pool_np = random_pool(case.geom, rng)
    table = _block_table(case, rng)
    values, scales = _as_bytes(*_gather(case, host_to_device(pool_np, device), table, device))
    want_values, want_scales = _expected(pool_np, case.geom, table, case.seq_lens)
    if case.kv_dtype == "fp8":
        want_scales = want_scales.view(np.uint32)
    assert_exact(values, want_values, "values")
    assert_exact(scales, want_scales, "scales")


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[5]], ids=["fp8", "mxfp4", "mxfp4_tiled"])
def test_writer_then_gather_round_trip(case, device):
    """hw writer -> hw gather gives sim's quantization of k, in sequence order (no sim.layout involved)."""
    rng = np.random.default_rng(1)
    geom = case.geom
    table = _block_table(case, rng)
    total = sum(case.seq_lens)
    k = hostile_input(rng, total, case.head_dim, "bf16")
    cu = _cu(case.seq_lens)
    seq = np.searchsorted(cu, np.arange(total), side="right") - 1
    pos = np.arange(total) - cu[seq]
    slots = table[seq, pos // geom.page_size].astype(np.int64) * geom.page_size + pos % geom.page_size
    pool = host_to_device(random_pool(geom, rng), device)
    perm = rng.permutation(total)  # write in shuffled token order
    hw.indexer_k_quant_and_cache(k[perm].to(device), torch_cache_view(pool, geom),
                                 torch.from_numpy(slots[perm]).to(device), kv_dtype=case.kv_dtype, layout=case.layout)
    values, scales = _as_bytes(*_gather(case, pool, table, device))
    want_values, want_scales = sim_quantize(case.kv_dtype, sim_input(k))
    if case.kv_dtype == "fp8":
        want_scales = want_scales.view(np.uint32)
    assert_exact(values, want_values, "values")
    assert_exact(scales, want_scales, "scales")


def test_bytes_per_token_collide_only_at_68():
    """fp8 (D + 4) and mxfp4 (D/2 + D/32) over D = 32..256 step 32 share one value: fp8 D=64 / mxfp4 D=128."""
    dims = range(32, 257, 32)
    assert {d + 4 for d in dims} & {d // 2 + d // 32 for d in dims} == {68}


@pytest.mark.parametrize("layout,want_shapes", [("fp8", ((3, 64), (3,))), ("mxfp4", ((3, 64), (3, 4))),
                                                ("mxfp4_tiled", ((3, 64), (3, 4)))])
def test_gather_68_bytes_per_token_follows_layout(layout, want_shapes, device):
    kv_dtype = "fp8" if layout == "fp8" else "mxfp4"
    case = GatherCase(kv_dtype, layout, 64 if layout == "fp8" else 128, 16, (3,))
    pool_np = random_pool(case.geom, np.random.default_rng(2))
    table = _block_table(case, np.random.default_rng(3))
    values, scales = _gather(case, host_to_device(pool_np, device), table, device)
    assert (tuple(values.shape), tuple(scales.shape)) == want_shapes
    want_values, _ = _expected(pool_np, case.geom, table, case.seq_lens)
    assert_exact(_as_bytes(values, scales)[0], want_values, "values")
    with pytest.raises(ValueError, match="fit both fp8"):
        hw.cp_gather_indexer_k_quant_cache(torch_cache_view(host_to_device(pool_np, device), case.geom),
                                           torch.from_numpy(table).to(device),
                                           torch.from_numpy(_cu(case.seq_lens)).to(device))


@pytest.mark.parametrize("extra", [-5, 4], ids=["fewer rows", "more rows"])
def test_gather_num_tokens(extra, device):
    """num_tokens (no host sync) smaller than the total truncates; larger gives zero rows past the total."""
    case = CASES[2]
    pool_np = random_pool(case.geom, np.random.default_rng(4))
    table = _block_table(case, np.random.default_rng(5))
    total = sum(case.seq_lens)
    values, scales = _as_bytes(*_gather(case, host_to_device(pool_np, device), table, device,
                                        num_tokens=total + extra))
    want_values, want_scales = _expected(pool_np, case.geom, table, case.seq_lens)
    n = min(total, total + extra)
    assert_exact(values[:n], want_values[:n], "values")
    assert_exact(scales[:n], want_scales[:n], "scales")
    assert not values[n:].any() and not scales[n:].any()


@pytest.mark.parametrize("bad_id", [7, -1, 1 << 30], ids=["num_pages", "-1", "2^30"])
def test_gather_page_id_out_of_range_is_nan_and_flagged(bad_id, device):
    """A corrupt page id inside a sequence's span is never dereferenced: that page's rows come out as NaN tokens,
    and the error flag names the sequence and the id."""
    case = CASES[0]
    assert case.geom.num_pages == 7
    pool_np = random_pool(case.geom, np.random.default_rng(6))
    table = _block_table(case, np.random.default_rng(7))
    table[2, 1] = bad_id  # sequence 2 (17 tokens): its second page
    flag = hw.checks.new_error_flag(device)
    values, scales = _as_bytes(*_gather(case, host_to_device(pool_np, device), table, device, error_flag=flag))
    start = _cu(case.seq_lens)[2]
    bad = slice(start + 16, start + 17)
    _assert_nan_tokens(case, values[bad], scales[bad], "the corrupt page's token")
    count, kind, row, value = _flag(flag)
    assert count >= 1 and (kind, row, value) == (hw.checks.ErrorKind.PAGE_ID, 2, bad_id)
    good_table = table.copy()
    good_table[2, 1] = 0
    want_values, _ = _expected(pool_np, case.geom, good_table, case.seq_lens)
    assert_exact(values[:bad.start], want_values[:bad.start], "values before the corrupt page")
    assert_exact(values[bad.stop:], want_values[bad.stop:], "values after the corrupt page")


def test_gather_rows_before_cu_seq_lens_start_are_nan(device):
    """cu_seq_lens not starting at 0 (invalid; validate=True rejects it, the flag reports it): the rows before
    cu_seq_lens[0] have no position in sequence 0 and come out as NaN tokens. The block table is a view one entry
    into a buffer whose entry before it is a valid page id, so reading block_table[0, -1] (the logical page of a
    negative position) would copy that page."""
    case = CASES[2]
    pool_np = random_pool(case.geom, np.random.default_rng(8))
    table = _block_table(case, np.random.default_rng(9))
    flat = np.concatenate([[1], table.reshape(-1)]).astype(np.int32)  # entry -1 of the view: page 1, a real page
    buffer = torch.from_numpy(flat).to(device)
    table_t = buffer[1:].view(table.shape)
    cu = _cu(case.seq_lens)
    shifted = torch.from_numpy((cu + 2).astype(np.int32)).to(device)  # rows 0 and 1 precede sequence 0
    pool = host_to_device(pool_np, device)
    flag = hw.checks.new_error_flag(device)
    values, scales = _as_bytes(*hw.cp_gather_indexer_k_quant_cache(
        torch_cache_view(pool, case.geom), table_t, shifted, layout=case.layout, num_tokens=int(cu[-1]) + 2,
        error_flag=flag))
    _assert_nan_tokens(case, values[:2], scales[:2], "rows before cu_seq_lens[0]")
    assert _flag(flag)[1:] == (hw.checks.ErrorKind.CU_SEQ_LENS, 0, 2)
    want_values, want_scales = _expected(pool_np, case.geom, table, case.seq_lens)
    assert_exact(values[2:], want_values, "values after the offset start")
    assert_exact(scales[2:], want_scales, "scales after the offset start")


def test_gather_without_num_tokens_is_refused_under_capture(device, monkeypatch):
    """Reading cu_seq_lens[-1] is a sync: under CUDA-graph capture the launcher asks for num_tokens instead."""
    import hw.gather

    case = CASES[2]
    pool = host_to_device(random_pool(case.geom, np.random.default_rng(0)), device)
    table = torch.from_numpy(_block_table(case, np.random.default_rng(1))).to(device)
    cu = torch.from_numpy(_cu(case.seq_lens).astype(np.int32)).to(device)
    monkeypatch.setattr(hw.gather, "stream_capturing", lambda: True)
    with pytest.raises(ValueError, match="num_tokens: pass it"):
        hw.cp_gather_indexer_k_quant_cache(torch_cache_view(pool, case.geom), table, cu, layout=case.layout)
    values, _ = hw.cp_gather_indexer_k_quant_cache(torch_cache_view(pool, case.geom), table, cu, layout=case.layout,
                                                   num_tokens=int(_cu(case.seq_lens)[-1]))
    assert values.shape[0] == sum(case.seq_lens)


def test_gather_empty(device):
    case = CASES[2]
    pool = host_to_device(random_pool(case.geom, np.random.default_rng(0)), device)
    values, scales = hw.cp_gather_indexer_k_quant_cache(
        torch_cache_view(pool, case.geom), torch.zeros(2, 3, dtype=torch.int32, device=device),
        torch.zeros(3, dtype=torch.int32, device=device))
    assert values.shape == (0, 32) and scales.shape == (0, 2)


# ---------------------------------------------------------------------------------------------- rejections
def _good_args(device):
    case = CASES[2]
    pool = torch.zeros(case.geom.pool_bytes, dtype=torch.uint8, device=device)
    return dict(kv_cache=torch_cache_view(pool, case.geom),
                block_table=torch.zeros(3, 4, dtype=torch.int32, device=device),
                cu_seq_lens=torch.tensor([0, 5, 5, 38], dtype=torch.int32, device=device), layout=None)


BAD_ARGS = {
    "cache dtype": (lambda a: {**a, "kv_cache": a["kv_cache"].view(torch.int8)}, "kv_cache must have dtype"),
    "cache 3-D": (lambda a: {**a, "kv_cache": a["kv_cache"][:, :, 0]}, "kv_cache must be 4-D"),
    "bytes per token of no format": (lambda a: {**a, "kv_cache": a["kv_cache"][..., :33]}, "matches neither"),
    "layout of another format": (lambda a: {**a, "layout": "fp8"}, "no fp8 head dim"),
    "unknown layout": (lambda a: {**a, "layout": "nvfp4"}, "layout must be one of"),
    "tiled with D = 64": (lambda a: {**a, "layout": "mxfp4_tiled"}, "multiple of 128"),
    "page stride": (lambda a: {**a, "kv_cache": a["kv_cache"].as_strided(a["kv_cache"].shape,
                                                                          (552, 34, 34, 1))}, "multiple of 16"),
    "block_table dtype": (lambda a: {**a, "block_table": a["block_table"].long()}, "block_table must have dtype"),
    "block_table 1-D": (lambda a: {**a, "block_table": a["block_table"][0]}, "block_table must be 2-D"),
    "cu_seq_lens length": (lambda a: {**a, "cu_seq_lens": a["cu_seq_lens"][:3]}, "cu_seq_lens must have shape"),
    "cu_seq_lens dtype": (lambda a: {**a, "cu_seq_lens": a["cu_seq_lens"].long()}, "cu_seq_lens must have dtype"),
    "cu_seq_lens strided": (lambda a: {**a, "cu_seq_lens": torch.zeros(8, dtype=torch.int32)[::2]},
                            "cu_seq_lens must be contiguous"),
    "device": (lambda a: {**a, "block_table": a["block_table"].to("meta")}, "share a device"),
    "num_tokens negative": (lambda a: {**a, "num_tokens": -1}, "num_tokens must be"),
    "num_tokens float": (lambda a: {**a, "num_tokens": 3.0}, "num_tokens must be"),
}


@pytest.mark.parametrize("name", list(BAD_ARGS))
def test_gather_rejects(name, device):
    make, match = BAD_ARGS[name]
    with pytest.raises(ValueError, match=match):
        hw.cp_gather_indexer_k_quant_cache(**make(_good_args(device)))


# ---------------------------------------------------------------------------------------------- 64-bit page rebase
#: DESIGN §3's production geometry: P = 64, D = 128, page stride 1,077,120 B; pages 1994 / 3988 / 4279 are the
#: first with bytes past 2^31, 2^32 and 4,608,000,000 B.
FAR_STRIDE, FAR_PAGES = 1_077_120, (0, 1993, 1994, 3987, 3988, 4278, 4279, 4300)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_dtype,layout", [("fp8", "fp8"), ("mxfp4", "mxfp4"), ("mxfp4", "mxfp4_tiled")])
def test_round_trip_across_32_bit_offsets(kv_dtype, layout, device):
    """Writer + gather on pages past 2^31, 2^32 and 4.608e9 bytes of a 4.6 GB view: an int32 or buffer-u32 offset
    would land on the wrong page or read zeros; exact 64-bit rebasing gives back sim's quantization."""
    geom = PageGeometry(kv_dtype, 64, 128, max(FAR_PAGES) + 1, page_stride=FAR_STRIDE, layout=layout,
                        view_offset=16)
    pool = torch.full((geom.pool_bytes,), 0xFF, dtype=torch.uint8, device=device)
    table = np.array([FAR_PAGES[::-1]], dtype=np.int32)  # one sequence, pages in reverse order
    total = table.size * geom.page_size - 5
    rng = np.random.default_rng(8)
    k = hostile_input(rng, total, geom.head_dim, "bf16")
    pos = np.arange(total)
    slots = table[0, pos // geom.page_size].astype(np.int64) * geom.page_size + pos % geom.page_size
    view = torch_cache_view(pool, geom)
    hw.indexer_k_quant_and_cache(k.to(device), view, torch.from_numpy(slots).to(device), kv_dtype=kv_dtype,
                                 layout=layout)
    values, scales = _as_bytes(*hw.cp_gather_indexer_k_quant_cache(
        view, torch.from_numpy(table).to(device), torch.tensor([0, total], dtype=torch.int32, device=device),
        layout=layout))
    want_values, want_scales = sim_quantize(kv_dtype, sim_input(k))
    assert_exact(values, want_values, "values")
    assert_exact(scales, want_scales.view(np.uint32) if kv_dtype == "fp8" else want_scales, "scales")
    gap = pool[geom.view_offset + geom.page_bytes: geom.view_offset + geom.page_stride]  # after page 0's bytes
    assert bool((pool[:geom.view_offset] == 0xFF).all()) and bool((gap == 0xFF).all()), "a byte outside the pages"
