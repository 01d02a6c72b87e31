"""Random-byte paged pools for the hw writer / gather tests (the other fixtures live in sim.testing and hw.testing).

A pool is a flat uint8 buffer filled with a random byte pattern (so a stray write shows anywhere, including before
the view offset, between pages and past the last page); the device copy is `hw.testing.host_to_device` of it
and the cache its `hw.testing.torch_cache_view`, with the geometry's page stride and view offset, exactly as
serving engines carve layers out of one shared pool.
"""
from __future__ import annotations

import numpy as np

from sim.layout import PageGeometry

POOL_TAIL = 64  # random bytes after the last page: catch writes past the view


def random_pool(geom: PageGeometry, rng: np.random.Generator) -> np.ndarray:
    """uint8[pool_bytes + POOL_TAIL] of random bytes (the reference copy; the device pool is made from it)."""
    return rng.integers(0, 256, size=geom.pool_bytes + POOL_TAIL, dtype=np.uint8)
