"""sim.addressing: the boundary report and the 64-bit / int32-wrap / buffer-u32 read models.

Boundary pages are found here by brute force (every page's last byte, in Python ints); the failure models are
checked against numpy's own integer casts (int64 -> int32 and -> uint32 wrap in two's complement) on a pool larger
than 4.608e9 bytes allocated with np.zeros (committed lazily: only the few written pages use memory).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from sim import addressing, layout
from sim.addressing import AddressModel, boundary_report, read_tokens_as
from sim.layout import PageGeometry
from tests.sim._assert import assert_exact

DESIGN_EXAMPLE = dict(kv_dtype="mxfp4", page_size=64, head_dim=128, page_stride=1_077_120)


def brute_force_first_pages(geom: PageGeometry, boundaries) -> list[int | None]:
    """For each boundary, the first page whose last byte (b*S + page_bytes - 1, Python ints) is at or past it."""
    out = []
    for boundary in boundaries:
        out.append(next((b for b in range(geom.num_pages)
                         if b * geom.page_stride + geom.page_bytes - 1 >= boundary), None))
    return out


def test_boundaries_are_the_design_values():
    assert addressing.BOUNDARIES == (2**31, 2**32, 4_608_000_000)


def test_design_example_pages_1994_3988_4279():
    geom = PageGeometry(num_pages=5000, **DESIGN_EXAMPLE)
    report = boundary_report(geom)
    got = [c.first_page for c in report.crossings]
    assert got == brute_force_first_pages(geom, addressing.BOUNDARIES) == [1994, 3988, 4279]
    assert all(c.in_view and not c.straddles for c in report.crossings)
    assert [c.pages_past for c in report.crossings] == [5000 - 1994, 5000 - 3988, 5000 - 4279]
    assert report.last_byte == 4999 * 1_077_120 + 4352 - 1 and not report.has_block_table


@dataclass(frozen=True)
class StrideCase:
    kv_dtype: str
    page_size: int
    head_dim: int
    page_stride: int
    view_offset: int = 0


STRIDE_CASES = [
    StrideCase("mxfp4", 64, 128, 4352),            # dense pages: 2^31 falls inside a page (straddle)
    StrideCase("fp8", 64, 128, 1_002_240),
    StrideCase("fp8", 64, 128, 1_039_680, view_offset=4096),  # the report is relative to the view base
    StrideCase("mxfp4", 256, 256, 1_435_968),
    StrideCase("mxfp4", 64, 128, 2**20),           # page 2048's base is exactly 2^31 (touches, does not straddle)
    StrideCase("fp8", 16, 32, 576),                # small pages, many of them
]


@pytest.mark.parametrize("case", STRIDE_CASES, ids=lambda c: f"{c.kv_dtype}-P{c.page_size}-S{c.page_stride}")
def test_first_page_matches_brute_force(case):
    probe = PageGeometry(case.kv_dtype, case.page_size, case.head_dim, 1, page_stride=case.page_stride)
    num_pages = 4_608_000_000 // case.page_stride + 2
    geom = PageGeometry(case.kv_dtype, case.page_size, case.head_dim, num_pages, page_stride=case.page_stride,
                        view_offset=case.view_offset)
    # Many small pages: start the scan two pages below boundary // S (every page there ends before the boundary).
    brute = brute_force_first_pages(geom, addressing.BOUNDARIES) if num_pages < 50_000 else [
        next(b for b in range(boundary // case.page_stride - 2, num_pages)
             if b * case.page_stride + probe.page_bytes - 1 >= boundary) for boundary in addressing.BOUNDARIES]
    for c, want in zip(boundary_report(geom).crossings, brute):
        assert c.first_page == want, f"boundary {c.boundary}: first page {c.first_page}, brute force {want}"
        base = want * case.page_stride
        assert c.first_page_base == base and c.straddles == (base < c.boundary)
        assert (want - 1) * case.page_stride + probe.page_bytes - 1 < c.boundary <= base + probe.page_bytes - 1


def test_straddling_and_touching_pages():
    dense = boundary_report(PageGeometry("mxfp4", 64, 128, 500_000, page_stride=4352)).crossings[0]
    assert dense.straddles and dense.first_page_base < 2**31 <= dense.first_page_base + 4351
    exact = boundary_report(PageGeometry("mxfp4", 64, 128, 5000, page_stride=2**20)).crossings[0]
    assert exact.first_page == 2048 and exact.first_page_base == 2**31 and not exact.straddles


def test_view_smaller_than_the_boundaries():
    report = boundary_report(PageGeometry("mxfp4", 64, 128, 100, page_stride=1_077_120))
    for c in report.crossings:
        assert not c.in_view and c.pages_past == 0 and c.first_page >= 100


def test_block_table_pages_past_each_boundary():
    geom = PageGeometry(num_pages=5000, **DESIGN_EXAMPLE)
    table = np.array([[0, 1993, 1994, -1], [3987, 3988, 4999, 5000], [4278, 4279, 7, 2**31 - 1]], np.int32)
    report = boundary_report(geom, table)
    assert report.has_block_table and report.block_table_out_of_range == 3
    valid = sorted({int(p) for p in table.ravel() if 0 <= p < 5000})
    assert report.block_table_pages == len(valid)
    for c, first in zip(report.crossings, (1994, 3988, 4279)):
        assert c.touched_pages == tuple(p for p in valid if p >= first)
    with pytest.raises(ValueError, match="block_table must be an integer array"):
        boundary_report(geom, np.zeros(3))


# ============================================================================================ read models
def write_sequence(pool, geom, pages, rng):
    """Fill `pages` (a block-table row) with random tokens through sim.layout; returns (values, scales)."""
    P = geom.page_size
    n = len(pages) * P
    values = rng.integers(0, 256, (n, geom.value_bytes_per_token), dtype=np.uint8)
    scales = rng.integers(0, 256, (n, geom.scale_bytes_per_token), dtype=np.uint8)
    slots = np.repeat(np.asarray(pages, np.int64), P) * P + np.tile(np.arange(P), len(pages))
    layout.write_tokens(pool, geom, slots, values, scales)
    return values, scales


def expected_model_read(pool, geom, row, num_tokens, model, num_records=None):
    """Byte by byte: the true view-relative offset, then numpy's int32 / uint32 casts as the 32-bit arithmetic."""
    P = geom.page_size
    offsets = layout.token_byte_offsets(geom)
    tb = np.zeros((num_tokens, geom.bytes_per_token), np.uint8)
    faulted = np.zeros(num_tokens, bool)
    records = min(geom.view_bytes, 2**32) if num_records is None else num_records
    for i in range(num_tokens):
        rel = np.int64(row[i // P]) * geom.page_stride + offsets[i % P]
        if model is AddressModel.INT32_WRAP:
            index = geom.view_offset + rel.astype(np.int32).astype(np.int64)
            ok = (index >= 0) & (index < pool.size)
            faulted[i] = not ok.all()
        else:
            off = rel.astype(np.uint32).astype(np.int64)
            ok = off < records
            index = geom.view_offset + off
        tb[i, ok] = pool[index[ok]]
    return tb[:, :geom.value_bytes_per_token], tb[:, geom.value_bytes_per_token:], faulted


@pytest.fixture(scope="module")
def big():
    """A pool of > 4.608e9 bytes (lazily committed zeros); the view starts 2.5 GiB into it, so an int32-wrapped
    page past 2^31 lands *inside* the pool (other data: a silent wrong read) while one of a view at offset 0 faults.
    Pages 1993, 1994, 3988, 4279 hold tokens; the bytes where the wrapped reads land hold other random bytes."""
    rng = np.random.default_rng(11)
    view_offset = 5 * 2**29
    geom = PageGeometry(num_pages=4281, view_offset=view_offset, **DESIGN_EXAMPLE)
    pool = layout.new_pool(geom, fill=0)
    assert pool.size > 4_608_000_000 + view_offset
    pages = {p: write_sequence(pool, geom, [p], rng) for p in (1993, 1994, 3988, 4279)}
    for p in (1994, 3988, 4279):   # plant decoys where the 32-bit models read
        base = p * geom.page_stride
        for wrapped in ((base + 2**31) % 2**32 - 2**31, base % 2**32):
            start = view_offset + wrapped
            if 0 <= start and start + geom.page_bytes <= pool.size and not pool[start:start + geom.page_bytes].any():
                pool[start:start + geom.page_bytes] = rng.integers(1, 256, geom.page_bytes, dtype=np.uint8)
    return geom, pool, pages


@pytest.mark.parametrize("page", [1993, 1994, 3988, 4279])
def test_rebase64_reads_the_page(big, page):
    geom, pool, pages = big
    n = geom.page_size - 3
    row = np.array([page, -1, 2**31 - 1], np.int32)
    values, scales, faulted = read_tokens_as(pool, geom, row, n, AddressModel.REBASE64)
    assert_exact(values, pages[page][0][:n], f"page {page} values")
    assert_exact(scales, pages[page][1][:n], f"page {page} scales")
    assert not faulted.any()
    want = layout.read_tokens(pool, geom, row, n)
    assert_exact(values, want[0], "rebase64 vs read_tokens values")


@pytest.mark.parametrize("model", [AddressModel.INT32_WRAP, AddressModel.BUFFER_U32])
@pytest.mark.parametrize("page", [1993, 1994, 3988, 4279])
def test_32_bit_models_read_what_a_non_rebased_kernel_reads(big, page, model):
    geom, pool, pages = big
    n = geom.page_size
    row = np.array([page, 7], np.int32)
    got = read_tokens_as(pool, geom, row, n, model)
    want = expected_model_read(pool, geom, row, n, model)
    for name, g, w in zip(("values", "scales", "faulted"), got, want):
        assert_exact(g, w, f"{model.value} page {page} {name}")
    wrong = not (np.array_equal(got[0], pages[page][0]) and np.array_equal(got[1], pages[page][1]))
    # int32 wraps from 2^31 on; a 32-bit buffer offset stays right until 2^32.
    past = 2**31 if model is AddressModel.INT32_WRAP else 2**32
    assert wrong == (page * geom.page_stride >= past), f"{model.value}: page {page} read wrong: {wrong}"


def test_int32_wrap_faults_below_the_pool():
    rng = np.random.default_rng(5)
    geom = PageGeometry(num_pages=1996, **DESIGN_EXAMPLE)
    pool = layout.new_pool(geom, fill=0)
    write_sequence(pool, geom, [1994], rng)
    values, scales, faulted = read_tokens_as(pool, geom, np.array([1994]), 5, "int32_wrap")
    assert faulted.all() and not values.any() and not scales.any()
    assert not read_tokens_as(pool, geom, np.array([1993]), 5, "int32_wrap")[2].any()


def test_buffer_u32_reads_zero_past_num_records(big):
    """A descriptor whose range ends at 2^31 - 1 (offsets kept in int32): every page past it reads 0 (the
    zero-logit failure); pages below read right, and past 2^32 the wrapped offsets are back in range."""
    geom, pool, pages = big
    for page in (1993, 1994, 3988):
        row = np.array([page])
        got = read_tokens_as(pool, geom, row, 4, AddressModel.BUFFER_U32, buffer_num_records=2**31 - 1)
        want = expected_model_read(pool, geom, row, 4, AddressModel.BUFFER_U32, num_records=2**31 - 1)
        for name, g, w in zip(("values", "scales", "faulted"), got, want):
            assert_exact(g, w, f"page {page} {name}")
        if page == 1993:
            assert_exact(got[0], pages[page][0][:4], "page 1993 values (below 2^31)")
        if page == 1994:
            assert not got[0].any() and not got[1].any(), "page 1994 (past 2^31) should read zeros"


@pytest.mark.parametrize("num_pages", [1996, 4281, 8000])   # past 2^31, past 2^32, wrapping past 2^31 again
def test_buffer_u32_default_range_never_reads_zero(num_pages):
    """The module docstring's argument, checked: with DESIGN §3's default num_records = min(view_bytes, 2^32) no
    byte of the view reads 0 (views below 2^32 never wrap; longer ones wrap into range), so the silent failure of
    the default is a wrong read, and only a smaller buffer_num_records produces zeros."""
    geom = PageGeometry(num_pages=num_pages, **DESIGN_EXAMPLE)
    pages = np.arange(num_pages, dtype=np.int64)[:, None] * geom.page_stride
    relative = pages + np.array([0, geom.page_bytes - 1])               # first and last byte of every page
    _, reads, faulted = addressing.resolve_addresses(geom, geom.pool_bytes, relative, AddressModel.BUFFER_U32)
    assert reads.all() and not faulted.any()
    _, reads, _ = addressing.resolve_addresses(geom, geom.pool_bytes, relative, AddressModel.BUFFER_U32,
                                               buffer_num_records=2**31 - 1)
    want = np.array([[int(r) % 2**32 < 2**31 - 1 for r in row] for row in relative.tolist()])   # Python ints
    assert_exact(reads, want, "reads with num_records = 2^31 - 1")
    assert not want.all() and want[:1994].all()      # pages reaching 2^31 (page 1994 on) read zeros


def test_read_tokens_as_rejects():
    geom = PageGeometry("mxfp4", 16, 64, 4)
    pool = layout.new_pool(geom)
    with pytest.raises(ValueError, match="model must be one of"):
        read_tokens_as(pool, geom, np.array([0]), 1, "int16")
    with pytest.raises(ValueError, match=r"block_table_row\[0\] = 4"):
        read_tokens_as(pool, geom, np.array([4]), 1, AddressModel.REBASE64)
    with pytest.raises(ValueError, match="buffer_num_records must be an integer"):
        read_tokens_as(pool, geom, np.array([0]), 1, AddressModel.BUFFER_U32, buffer_num_records=2**33)
    with pytest.raises(ValueError, match="buffer_num_records applies to the buffer_u32 model only"):
        read_tokens_as(pool, geom, np.array([0]), 1, AddressModel.INT32_WRAP, buffer_num_records=2**31)
