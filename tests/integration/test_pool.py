"""The shared page pool: byte map, zero-copy per-layer views that alias exactly the right bytes, accounting."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

import hw
from hw.layout import bytes_per_token, check_cache_view
from integration.pool import IndexerPool, PoolLayout
from sim import layout as sim_layout

from ._reference import sim_geometry, sim_k


@dataclass(frozen=True)
class PoolCase:
    kv_dtype: str
    layout: str | None
    head_dim: int
    page_size: int
    num_layers: int
    extra: int
    page_stride: int | None
    want_stride: int          # worked out by hand from the byte map

    def __str__(self):
        return f"{self.layout or self.kv_dtype}-D{self.head_dim}-P{self.page_size}-L{self.num_layers}-x{self.extra}"


CASES = [
    PoolCase("fp8", None, 64, 16, 3, 48, None, 48 + 3 * 16 * 68),
    PoolCase("mxfp4", None, 32, 16, 2, 0, None, 2 * 16 * 17),
    PoolCase("mxfp4", "mxfp4_tiled", 128, 32, 2, 16 * 656, 1_077_120, 1_077_120),   # a reported ~1 MB stride
]
NUM_PAGES = 5


@pytest.mark.parametrize("case", CASES, ids=str)
def test_byte_map_and_views(case: PoolCase, device):
    layout = PoolLayout(case.kv_dtype, case.layout, case.num_layers, NUM_PAGES, case.page_size, case.head_dim,
                        extra_bytes_per_page=case.extra, page_stride=case.page_stride)
    assert layout.page_stride == case.want_stride
    assert layout.pool_bytes == NUM_PAGES * case.want_stride
    pool = IndexerPool(layout, device)
    assert pool.pool.numel() == layout.pool_bytes and bool((pool.pool == 0xFF).all())
    bpt = bytes_per_token(case.kv_dtype, case.head_dim)
    for layer, view in enumerate(pool.views):
        offset = case.extra + layer * case.page_size * bpt
        assert layout.view_offset(layer) == offset
        assert view.shape == (NUM_PAGES, case.page_size, 1, bpt)
        assert view.stride() == (case.want_stride, bpt, bpt, 1)
        assert view.untyped_storage().data_ptr() == pool.pool.untyped_storage().data_ptr()   # zero-copy
        assert view.data_ptr() - pool.pool.data_ptr() == offset
        cache = check_cache_view("view", view, case.kv_dtype, case.head_dim, case.layout)
        assert (cache.page_stride, cache.num_pages, cache.layout) == (case.want_stride, NUM_PAGES, layout.layout)


@pytest.mark.interp
@pytest.mark.parametrize("case", CASES, ids=str)
def test_views_alias_exactly_their_layers_bytes(case: PoolCase, device):
    """K written through each layer's view lands where sim's byte map says, and nowhere else."""
    rng = np.random.default_rng(3)
    layout = PoolLayout(case.kv_dtype, case.layout, case.num_layers, NUM_PAGES, case.page_size, case.head_dim,
                        extra_bytes_per_page=case.extra, page_stride=case.page_stride)
    pool = IndexerPool(layout, device)
    expected = np.full(layout.pool_bytes, 0xFF, dtype=np.uint8)
    for layer in reversed(range(case.num_layers)):
        slots = rng.permutation(NUM_PAGES * case.page_size)[:case.page_size + 5]     # scattered over the pages
        k = torch.from_numpy(rng.standard_normal((slots.size, case.head_dim), dtype=np.float32)).to(torch.bfloat16)
        hw.indexer_k_quant_and_cache(k.to(device), pool.view(layer), torch.from_numpy(slots).to(device),
                                     kv_dtype=case.kv_dtype, layout=layout.layout)
        sim_layout.write_tokens(expected, sim_geometry(layout, layer), slots, *sim_k(k, case.kv_dtype))
        got = pool.pool.cpu().numpy()
        bad = np.flatnonzero(got != expected)
        assert bad.size == 0, (f"after writing layer {layer}: pool byte {bad[0]} is 0x{got[bad[0]]:02x}, expected "
                               f"0x{expected[bad[0]]:02x}")


@pytest.mark.parametrize("head_dim", range(32, 257, 32))
def test_bytes_per_token(head_dim):
    assert bytes_per_token("fp8", head_dim) == head_dim + 4
    assert bytes_per_token("mxfp4", head_dim) == head_dim // 2 + head_dim // 32
    for kv_dtype in ("fp8", "mxfp4"):
        geom = sim_layout.PageGeometry(kv_dtype, 16, head_dim, 1)
        assert bytes_per_token(kv_dtype, head_dim) == geom.bytes_per_token
    assert (bytes_per_token("fp8", 128), bytes_per_token("mxfp4", 128)) == (132, 68)


@pytest.mark.parametrize("kwargs, message", [
    (dict(extra_bytes_per_page=8), "extra_bytes_per_page must be a non-negative multiple of 16"),
    (dict(extra_bytes_per_page=-16), "extra_bytes_per_page must be a non-negative multiple of 16"),
    (dict(page_stride=2 * 16 * 68 - 16), r"page_stride must be a multiple of 16 and >= 2176"),
    (dict(page_stride=2 * 16 * 68 + 8), r"page_stride must be a multiple of 16 and >= 2176"),
    (dict(num_layers=0), "num_layers must be a positive int"),
    (dict(num_pages=0), "num_pages must be a positive int"),
    (dict(kv_dtype="int8"), "kv_dtype must be one of"),
    (dict(layout="mxfp4"), "layout 'mxfp4' is not valid for fp8"),
    # a page size outside DESIGN's set would also put layer 1's view at 8 * 68 = 544 bytes: not 16-byte aligned
    (dict(page_size=8), r"page_size must be one of \(16, 32, 64, 128, 256\), got 8"),
    (dict(head_dim=48), "head dim must be a multiple of 32 in 32..256, got 48"),
    (dict(kv_dtype="mxfp4", layout="mxfp4_tiled", head_dim=64), "mxfp4_tiled needs a head dim that is a multiple"),
])
def test_layout_rejections(kwargs, message):
    args = dict(kv_dtype="fp8", layout=None, num_layers=2, num_pages=4, page_size=16, head_dim=64)
    with pytest.raises(ValueError, match=message):
        PoolLayout(**{**args, **kwargs})


def test_layer_out_of_range():
    pool = IndexerPool(PoolLayout("mxfp4", None, 2, 2, 16, 64), "cpu")
    with pytest.raises(ValueError, match=r"layer must be in 0..1, got 2"):
        pool.view(2)
