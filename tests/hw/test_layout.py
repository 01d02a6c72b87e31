"""hw.layout, the public format and layout rules: sim/ declares the same names (it may not import hw/), and the
head-dim and bytes-per-token rules say what they promise."""
from __future__ import annotations

import pytest

import sim.layout
from hw import layout


def test_names_and_sizes_are_sims():
    assert layout.KV_DTYPES == sim.layout.KV_DTYPES
    assert layout.PAGE_LAYOUTS == sim.layout.LAYOUTS
    assert layout.LAYOUTS_OF == sim.layout.LAYOUTS_OF
    assert layout.PAGE_SIZES == sim.layout.PAGE_SIZES
    assert (layout.HEAD_DIMS[0], layout.HEAD_DIMS[-1]) == (sim.layout.HEAD_DIM_MIN, sim.layout.HEAD_DIM_MAX)
    assert layout.TILE_HEAD_DIM == sim.layout.TILE_D and layout.TILE_TOKENS == sim.layout.TILE_TOKEN_LANES


@pytest.mark.parametrize("kv_dtype", layout.KV_DTYPES)
@pytest.mark.parametrize("head_dim", layout.HEAD_DIMS)
def test_bytes_per_token_is_sims(kv_dtype, head_dim):
    geom = sim.layout.PageGeometry(kv_dtype, 16, head_dim, 1)
    assert layout.bytes_per_token(kv_dtype, head_dim) == geom.bytes_per_token


def test_bytes_per_token_rejects_unknown_formats():
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        layout.bytes_per_token("fp4", 128)


@pytest.mark.parametrize("head_dim, message", [
    (96, "power-of-two head dim"),          # a layout head dim the scorer tiles do not take
    (288, "multiple of 32 in 32..256"),
    (64, "multiple of 128"),                # mxfp4_tiled
])
def test_scorer_head_dims(head_dim, message):
    with pytest.raises(ValueError, match=message):
        layout.check_scorer_head_dim("q", head_dim, "mxfp4_tiled" if head_dim == 64 else "mxfp4")
    assert layout.SCORER_HEAD_DIMS == (32, 64, 128, 256)
