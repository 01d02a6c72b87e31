"""sim.layout and its Numba twin sim.fast_layout: geometry checks, byte offsets, page pack/unpack, pool write/read.

Expected byte positions come from `design_token_offsets` below, a transcription of DESIGN §2's table written
independently of sim.layout (plain Python loops over every token byte), and from marker pages whose bytes say
which (token, byte) they came from.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from sim import fast_layout, layout
from sim.layout import PageGeometry
from tests.sim._assert import assert_exact

IMPLS = {"numpy": layout, "numba": fast_layout}


@dataclass(frozen=True)
class Case:
    kv_dtype: str
    layout: str
    page_size: int
    head_dim: int

    def geometry(self, num_pages=1, **kw) -> PageGeometry:
        return PageGeometry(self.kv_dtype, self.page_size, self.head_dim, num_pages, layout=self.layout, **kw)

    def __str__(self):
        return f"{self.layout}-P{self.page_size}-D{self.head_dim}"


CASES = [
    Case("fp8", "fp8", 16, 32), Case("fp8", "fp8", 64, 128), Case("fp8", "fp8", 32, 256),
    Case("mxfp4", "mxfp4", 16, 32), Case("mxfp4", "mxfp4", 64, 64), Case("mxfp4", "mxfp4", 64, 128),
    Case("mxfp4", "mxfp4", 256, 256),
    Case("mxfp4", "mxfp4_tiled", 16, 128), Case("mxfp4", "mxfp4_tiled", 64, 128),
    Case("mxfp4", "mxfp4_tiled", 32, 256), Case("mxfp4", "mxfp4_tiled", 256, 256),
]


def design_token_offsets(kv_dtype: str, lay: str, P: int, D: int) -> np.ndarray:
    """DESIGN §2, byte by byte: [P, bytes_per_token] page-local offset of each token byte (values, then scales)."""
    rows = []
    for t in range(P):
        row = []
        if lay == "fp8":
            row += [t * D + d for d in range(D)]
            row += [P * D + 4 * t + i for i in range(4)]
        else:
            for j in range(D // 2):              # code byte j = elements 2j (low), 2j + 1 (high)
                d = 2 * j
                if lay == "mxfp4":
                    row.append(t * D // 2 + d // 2)
                else:
                    row.append((d // 128) * 4 * P * 16 + ((d % 128) // 32) * P * 16 + t * 16 + (d % 32) // 2)
            for g in range(D // 32):
                if lay == "mxfp4":
                    row.append(P * D // 2 + t * D // 32 + g)
                else:
                    q = P // 4
                    row.append(P * D // 2 + (g // 4) * 4 * P + (g % 4) * P + (t % q) * 4 + t // q)
        rows.append(row)
    return np.array(rows, dtype=np.int64)


def random_tokens(rng, geom: PageGeometry, T: int):
    """(values, scales) of T tokens with arbitrary bytes (fp8 scales: arbitrary fp32 bit patterns, NaNs included)."""
    values = rng.integers(0, 256, (T, geom.value_bytes_per_token), dtype=np.uint8)
    if geom.kv_dtype == "fp8":
        return values, rng.integers(0, 2**32, T, dtype=np.uint32).view(np.float32)
    return values, rng.integers(0, 256, (T, geom.scale_bytes_per_token), dtype=np.uint8)


def token_bytes_of(geom: PageGeometry, values, scales) -> np.ndarray:
    """[T, bytes_per_token] as DESIGN §2 orders them, built here (not through sim.layout)."""
    if geom.kv_dtype == "fp8":
        scale_bytes = np.asarray(scales, "<f4").view(np.uint8).reshape(-1, 4)
    else:
        scale_bytes = scales
    return np.concatenate([values, scale_bytes], axis=1)


def assert_same_tokens(got, want, what):
    """(values, scales) pairs equal bit for bit (fp8 scales compared as their fp32 bit patterns)."""
    assert_exact(got[0], want[0], f"{what} values")
    gs, ws = np.asarray(got[1]), np.asarray(want[1])
    if gs.dtype == np.float32:
        gs, ws = gs.view(np.uint32), ws.view(np.uint32)
    assert_exact(gs, ws, f"{what} scales")


# ============================================================================================ geometry
@pytest.mark.parametrize("kw, message", [
    (dict(kv_dtype="fp16"), "kv_dtype"),
    (dict(layout="mxfp4"), "layout 'mxfp4' is not valid for kv_dtype 'fp8'"),
    (dict(kv_dtype="mxfp4", layout="fp8"), "layout 'fp8' is not valid"),
    (dict(page_size=48), "page_size"),
    (dict(page_size=64.0), "page_size must be an integer"),
    (dict(head_dim=48), "head_dim"),
    (dict(head_dim=288), "head_dim"),
    (dict(head_dim=0), "head_dim"),
    (dict(kv_dtype="mxfp4", layout="mxfp4_tiled", head_dim=64), "mxfp4_tiled needs head_dim % 128"),
    (dict(num_pages=0), "num_pages"),
    (dict(num_pages=True), "num_pages must be an integer"),
    (dict(page_stride=64 * 132 - 16), "page_stride"),
    (dict(page_stride=64 * 132 + 8), "page_stride"),
    (dict(view_offset=8), "view_offset"),
    (dict(view_offset=-16), "view_offset"),
])
def test_geometry_rejects(kw, message):
    args = dict(kv_dtype="fp8", page_size=64, head_dim=128, num_pages=4) | kw
    with pytest.raises(ValueError, match=message):
        PageGeometry(**args)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_geometry_sizes(case):
    P, D = case.page_size, case.head_dim
    bpt = D + 4 if case.kv_dtype == "fp8" else D // 2 + D // 32
    g = case.geometry(num_pages=5)
    assert g.layout == case.layout and g.bytes_per_token == bpt and g.page_bytes == P * bpt
    assert g.page_stride == -(-P * bpt // 16) * 16 and g.view_offset == 0
    assert g.scale_base == P * (D if case.kv_dtype == "fp8" else D // 2)
    s = case.geometry(num_pages=5, page_stride=g.page_stride + 48, view_offset=32)
    assert s.view_bytes == 4 * (g.page_stride + 48) + P * bpt and s.pool_bytes == 32 + s.view_bytes


def test_geometry_default_layout_and_numpy_ints():
    g = PageGeometry("mxfp4", np.int32(64), np.int64(128), np.int64(3))
    assert g.layout == "mxfp4" and type(g.page_size) is int and type(g.num_pages) is int
    assert PageGeometry("fp8", 16, 32, 1).layout == "fp8"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_page_regions_partition_the_stride(case):
    g = case.geometry(page_stride=case.geometry().page_bytes + 32)
    regions = layout.page_regions(g)
    assert [r.name for r in regions] == ["values", "scales", "gap"]
    assert regions[0].start == 0 and regions[-1].end == g.page_stride
    assert all(a.end == b.start for a, b in zip(regions, regions[1:]))


# ============================================================================================ offsets
@pytest.mark.parametrize("case", CASES, ids=str)
def test_token_byte_offsets_match_design_and_are_a_bijection(case):
    g = case.geometry()
    got = layout.token_byte_offsets(g)
    assert_exact(got, design_token_offsets(case.kv_dtype, case.layout, case.page_size, case.head_dim),
                 f"{case} token byte offsets")
    assert_exact(np.sort(got.ravel()), np.arange(g.page_bytes, dtype=np.int64), f"{case} sorted offsets")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_value_and_scale_offsets_per_element(case):
    """value_offset(t, d) of every element and scale_offset(t, g) of every scale, against the byte-level table."""
    g = case.geometry()
    P, D = case.page_size, case.head_dim
    design = design_token_offsets(case.kv_dtype, case.layout, P, D)
    t, d = np.meshgrid(np.arange(P), np.arange(D), indexing="ij")
    per_byte = 1 if case.kv_dtype == "fp8" else 2
    assert_exact(layout.value_offset(g, t, d), design[t, d // per_byte], f"{case} value_offset[t, d]")
    vb = g.value_bytes_per_token
    if case.kv_dtype == "fp8":
        assert_exact(layout.scale_offset(g, np.arange(P)), design[:, vb], f"{case} scale_offset[t]")
    else:
        t, gg = np.meshgrid(np.arange(P), np.arange(D // 32), indexing="ij")
        assert_exact(layout.scale_offset(g, t, gg), design[t, vb + gg], f"{case} scale_offset[t, g]")


@pytest.mark.parametrize("fn, args, message", [
    (layout.value_offset, (64, 0), "t must lie in"), (layout.value_offset, (0, 128), "d must lie in"),
    (layout.value_offset, (-1, 0), "t must lie in"), (layout.scale_offset, (0, 4), "g must lie in"),
    (layout.value_offset, (0.5, 0), "t must be integers"),
    (layout.value_offset, (np.uint64(2**64 - 1), 0), r"t must lie in \[0, 64\), got values in \[18446744073709551615"),
])
def test_offsets_reject_out_of_range(fn, args, message):
    with pytest.raises(ValueError, match=message):
        fn(PageGeometry("mxfp4", 64, 128, 1), *args)
    with pytest.raises(ValueError, match="g must lie in"):
        layout.scale_offset(PageGeometry("fp8", 64, 128, 1), 0, 1)


# ============================================================================================ pack / unpack
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_pack_places_every_byte_where_design_says(case, impl):
    """Marker pages: token byte (t, k) carries the three base-256 digits of t * bpt + k, so every page byte says
    which token byte landed there."""
    g = case.geometry()
    P, bpt, vb = case.page_size, g.bytes_per_token, g.value_bytes_per_token
    marker = np.arange(P * bpt, dtype=np.int64).reshape(P, bpt)
    landed = np.zeros(g.page_bytes, np.int64)
    for digit in range(3):
        tb = ((marker >> (8 * digit)) & 0xFF).astype(np.uint8)
        scales = tb[:, vb:].copy().view("<f4").reshape(-1) if case.kv_dtype == "fp8" else tb[:, vb:]
        landed |= IMPLS[impl].pack_page(g, tb[:, :vb], scales).astype(np.int64) << (8 * digit)
    want = np.empty(g.page_bytes, np.int64)
    want[design_token_offsets(case.kv_dtype, case.layout, P, case.head_dim)] = marker
    assert_exact(landed, want, f"{case} marker at page byte",
                 context=lambda i: f"token {landed[i] // bpt} byte {landed[i] % bpt} landed where DESIGN puts token "
                                   f"{want[i] // bpt} byte {want[i] % bpt}")


@pytest.mark.parametrize("case", [c for c in CASES if c.kv_dtype == "mxfp4"], ids=str)
def test_nibbles_low_is_even_element(case):
    g = case.geometry()
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 16, (case.page_size, case.head_dim), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    page = layout.pack_page(g, packed, rng.integers(0, 256, (case.page_size, case.head_dim // 32), dtype=np.uint8))
    t, d = np.meshgrid(np.arange(case.page_size), np.arange(case.head_dim), indexing="ij")
    got = (page[layout.value_offset(g, t, d)] >> (4 * (d % 2))) & 0xF
    assert_exact(got.astype(np.uint8), codes, f"{case} nibble of (t, d)")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_round_trip_every_byte_value(case):
    """Every token byte position takes every byte value 0..255 over the pages; pack -> unpack is the identity in
    both implementations and both give the same page."""
    g = case.geometry()
    P, bpt, vb = case.page_size, g.bytes_per_token, g.value_bytes_per_token
    base = np.arange(P * bpt).reshape(P, bpt)
    for shift in range(0, 256, P):
        tb = ((base + shift) % 256).astype(np.uint8)
        tokens = (tb[:, :vb], tb[:, vb:].copy().view("<f4").reshape(-1) if case.kv_dtype == "fp8" else tb[:, vb:])
        page = layout.pack_page(g, *tokens)
        assert_exact(fast_layout.pack_page(g, *tokens), page, f"{case} shift {shift}: numba page vs numpy")
        for name, impl in IMPLS.items():
            assert_same_tokens(impl.unpack_page(g, page), tokens, f"{case} shift {shift} {name} unpack")


def test_pack_rejects_bad_arguments():
    g = PageGeometry("mxfp4", 16, 64, 1)
    codes, scales = np.zeros((16, 32), np.uint8), np.zeros((16, 2), np.uint8)
    for impl in IMPLS.values():
        with pytest.raises(ValueError, match=r"values must have shape \[16, 32\]"):
            impl.pack_page(g, codes[:15], scales)
        with pytest.raises(ValueError, match="values must have dtype uint8"):
            impl.pack_page(g, codes.astype(np.int16), scales)
        with pytest.raises(ValueError, match="scales must have dtype uint8"):
            impl.pack_page(g, codes, scales.astype(np.float32))
        with pytest.raises(ValueError, match=r"page must have shape \[544\]"):
            impl.unpack_page(g, np.zeros(545, np.uint8))
    with pytest.raises(ValueError, match=r"scales must have dtype float32"):
        layout.pack_page(PageGeometry("fp8", 16, 32, 1), np.zeros((16, 32), np.uint8), np.zeros(16))


# ============================================================================================ pool write / read
def expected_pool_after_write(pool, geom, slots, values, scales):
    """Token by token, in order, through DESIGN §2's offsets (a repeated slot ends with its last token)."""
    want = pool.copy()
    offsets = design_token_offsets(geom.kv_dtype, geom.layout, geom.page_size, geom.head_dim)
    tb = token_bytes_of(geom, values, scales)
    for i, s in enumerate(slots):
        if s >= 0:
            base = geom.view_offset + (s // geom.page_size) * geom.page_stride
            want[base + offsets[s % geom.page_size]] = tb[i]
    return want


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_write_tokens_through_slot_mapping(case, impl):
    """Poisoned pool, stride > page, view offset > 0, shuffled slots, skipped (negative) slots, a repeated slot:
    exactly the written tokens' bytes change, every other byte of the pool (other pages, gaps, the bytes before the
    view) keeps its 0xFF."""
    rng = np.random.default_rng(7)
    probe = case.geometry()
    g = case.geometry(num_pages=5, page_stride=probe.page_stride + 48, view_offset=64)
    pool = np.full(g.pool_bytes + 32, 0xFF, np.uint8)
    slots = rng.permutation(5 * case.page_size)[:2 * case.page_size + 3].astype(np.int64)
    slots[::5] = -1
    slots[-1] = slots[1]              # a repeat: the last token wins
    values, scales = random_tokens(rng, g, slots.size)
    want = expected_pool_after_write(pool, g, slots, values, scales)
    IMPLS[impl].write_tokens(pool, g, slots, values, scales)
    assert_exact(pool, want, f"{case} pool byte after write_tokens ({impl})")


@pytest.mark.parametrize("impl", IMPLS)
def test_write_tokens_rejects(impl):
    g = PageGeometry("mxfp4", 16, 64, 4)
    pool = layout.new_pool(g)
    values, scales = np.zeros((2, 32), np.uint8), np.zeros((2, 2), np.uint8)
    write = IMPLS[impl].write_tokens
    with pytest.raises(ValueError, match="slot_mapping has slot 64 >= num_pages"):
        write(pool, g, np.array([0, 64]), values, scales)
    with pytest.raises(ValueError, match="slot_mapping must be a 1-D integer array"):
        write(pool, g, np.array([0.0, 1.0]), values, scales)
    with pytest.raises(ValueError, match="slot_mapping has slot 9223372036854775813 >= num_pages"):
        write(pool, g, np.array([0, 2**63 + 5], np.uint64), values, scales)   # must not wrap to a negative skip
    with pytest.raises(ValueError, match=r"values must have shape \[3, 32\]"):
        write(pool, g, np.array([0, 1, 2]), values, scales)
    with pytest.raises(ValueError, match="pool has 100 bytes"):
        write(np.zeros(100, np.uint8), g, np.array([0, 1]), values, scales)
    with pytest.raises(ValueError, match="pool must be a 1-D uint8 numpy array"):
        write(pool.view(np.int8), g, np.array([0, 1]), values, scales)
    assert (pool == 0xFF).all(), "a rejected write changed the pool"


@dataclass(frozen=True)
class ReadCase:
    full_pages: int
    extra_tokens: int  # num_tokens = full_pages * P + extra_tokens (a partial last page when > 0)
    sentinel: int      # fills the block-table entries past the used pages

    def __str__(self):
        return f"{self.full_pages}pages+{self.extra_tokens}"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("rc", [ReadCase(0, 0, -1), ReadCase(0, 1, 2**31 - 1), ReadCase(2, 5, 6), ReadCase(4, 0, -7),
                                ReadCase(5, 11, 2**31 - 1)], ids=str)
@pytest.mark.parametrize("case", [c for c in CASES if c.page_size <= 64], ids=str)
def test_read_tokens_through_shuffled_block_table(case, rc, impl):
    rng = np.random.default_rng(rc.full_pages)
    probe = case.geometry()
    g = case.geometry(num_pages=6, page_stride=probe.page_stride + 16, view_offset=16)
    pool = layout.new_pool(g)
    P = case.page_size
    num_tokens = rc.full_pages * P + rc.extra_tokens
    table = np.full(8, rc.sentinel, np.int32)
    used = -(-num_tokens // P)
    table[:used] = rng.permutation(6)[:used]
    values, scales = random_tokens(rng, g, num_tokens)
    slots = table[np.arange(num_tokens) // P].astype(np.int64) * P + np.arange(num_tokens) % P
    layout.write_tokens(pool, g, slots, values, scales)
    assert_same_tokens(IMPLS[impl].read_tokens(pool, g, table, num_tokens), (values, scales),
                       f"{case} n={num_tokens} {impl} read_tokens")


@pytest.mark.parametrize("impl", IMPLS)
def test_read_tokens_rejects(impl):
    g = PageGeometry("fp8", 16, 32, 4)
    pool = layout.new_pool(g)
    read = IMPLS[impl].read_tokens
    with pytest.raises(ValueError, match=r"num_tokens must be in \[0, len\(block_table_row\) \* page_size = 32\]"):
        read(pool, g, np.array([0, 1]), 33)
    with pytest.raises(ValueError, match=r"block_table_row\[1\] = 4 is not a page id in \[0, 4\)"):
        read(pool, g, np.array([0, 4]), 17)
    with pytest.raises(ValueError, match=r"block_table_row\[0\] = -1"):
        read(pool, g, np.array([-1, 0]), 1)
    with pytest.raises(ValueError, match=r"block_table_row\[0\] = 18446744073709551615 is not a page id"):
        read(pool, g, np.array([2**64 - 1, 0], np.uint64), 1)
    with pytest.raises(ValueError, match="block_table_row must be a 1-D integer array"):
        read(pool, g, np.array([[0, 1]]), 1)


def test_numba_matches_numpy_on_random_traffic():
    """Same slots, same tokens, same block tables: identical pools and identical reads (tiled D=256 with gaps)."""
    rng = np.random.default_rng(3)
    g = PageGeometry("mxfp4", 32, 256, 9, page_stride=32 * 136 + 80, layout="mxfp4_tiled", view_offset=48)
    pools = {name: layout.new_pool(g) for name in IMPLS}
    slots = rng.integers(-3, 9 * 32, 400)
    values, scales = random_tokens(rng, g, slots.size)
    for name, impl in IMPLS.items():
        impl.write_tokens(pools[name], g, slots, values, scales)
    assert_exact(pools["numba"], pools["numpy"], "numba pool vs numpy pool")
    row = rng.permutation(9)
    assert_same_tokens(fast_layout.read_tokens(pools["numpy"], g, row, 9 * 32 - 5),
                       layout.read_tokens(pools["numpy"], g, row, 9 * 32 - 5), "numba read vs numpy read")


def test_new_pool():
    g = PageGeometry("mxfp4", 16, 64, 3, page_stride=1024, view_offset=32)
    pool = layout.new_pool(g)
    assert pool.dtype == np.uint8 and pool.shape == (32 + 2 * 1024 + 16 * 34,) and (pool == 0xFF).all()
    assert (layout.new_pool(g, fill=0) == 0).all() and (layout.new_pool(g, fill=7) == 7).all()
    with pytest.raises(ValueError, match="fill must be a byte value"):
        layout.new_pool(g, fill=256)
