"""Hostile fixtures shared by the hw quantizer / writer / gather tests: paged pools and awkward inputs.

A pool is a flat uint8 buffer filled with a random byte pattern (so a stray write shows anywhere, including before
the view offset, between pages and past the last page); the cache is an `as_strided` view of it with the
geometry's page stride and view offset, exactly as serving engines carve layers out of one shared pool.
"""
from __future__ import annotations

import numpy as np
import torch

from sim.layout import PageGeometry

POOL_TAIL = 64  # random bytes after the last page: catch writes past the view

#: E2M1 rounding ties (in units of the block scale) and exactly representable values, for tie-heavy blocks.
E2M1_TIES = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
EXPONENT_RANGE = {torch.float32: (-140, 124), torch.bfloat16: (-140, 124), torch.float16: (-22, 13)}


def random_pool(geom: PageGeometry, rng: np.random.Generator) -> np.ndarray:
    """uint8[pool_bytes + POOL_TAIL] of random bytes (the reference copy; the device pool is made from it)."""
    return rng.integers(0, 256, size=geom.pool_bytes + POOL_TAIL, dtype=np.uint8)


def cache_view(pool: torch.Tensor, geom: PageGeometry) -> torch.Tensor:
    """The uint8 [num_pages, P, 1, bytes_per_token] view of `pool` that geom describes (DESIGN §2, §8)."""
    bpt = geom.bytes_per_token
    return pool.as_strided((geom.num_pages, geom.page_size, 1, bpt), (geom.page_stride, bpt, bpt, 1),
                           geom.view_offset)


def device_pool(pool: np.ndarray, device) -> torch.Tensor:
    """A torch copy of `pool` on `device` (torch's allocator aligns it to more than the 16 bytes views need)."""
    return torch.from_numpy(pool).clone().to(device)


def sim_input(x: torch.Tensor) -> np.ndarray:
    """The sim/ form of a bf16/fp16/fp32 tensor: float32, float16 or uint16 bf16 bit patterns (same values)."""
    x = x.detach().cpu()
    return x.view(torch.uint16).numpy() if x.dtype == torch.bfloat16 else x.numpy()


def hostile_rows(rng: np.random.Generator, rows: int, head_dim: int, dtype: torch.dtype) -> torch.Tensor:
    """[rows, head_dim] of `dtype`: per-row magnitudes across the dtype's exponent range plus special rows.

    Rows (cycling when rows is small): random normals at a random power of two; E2M1 ties around a block maximum
    of exactly 6 * 2^s (and 1.5 / 1.75 mantissas that split the scale rules); an all-zero first block with -0.0;
    NaN in one block; +Inf / -Inf; subnormal-only rows (fp32/bf16); the largest finite value.
    """
    lo, hi = EXPONENT_RANGE[dtype]
    exps = rng.integers(lo, hi, size=(rows, 1))
    x = rng.standard_normal((rows, head_dim)) * np.exp2(exps.astype(np.float64))
    finfo = torch.finfo(dtype)
    blocks = head_dim // 32
    for r in range(rows):
        kind = r % 8
        e = int(np.clip(exps[r, 0], lo + 4, hi - 4))
        if kind == 1:  # ties on the grid of a block whose max is exactly 6 * 2^(e-2)
            x[r] = rng.choice(E2M1_TIES + E2M1_GRID, size=head_dim) * rng.choice([-1, 1], size=head_dim) \
                * 2.0 ** (e - 2)
            x[r, ::32] = 6 * 2.0 ** (e - 2)
        elif kind == 2:  # block maxima with mantissa 1.5, 1.75, just above 1.5 (rule-dependent scales)
            x[r, ::32] = rng.choice([1.5, 1.75, 1.5 + 2.0 ** -7, 1.25], size=blocks) * 2.0 ** e
        elif kind == 3:
            x[r, :32] = 0.0
            x[r, 1:32:2] = -0.0
        elif kind == 4:
            x[r, rng.integers(head_dim)] = np.nan
        elif kind == 5:
            x[r, rng.integers(head_dim)] = np.inf
            x[r, rng.integers(head_dim)] = -np.inf
        elif kind == 6:
            x[r] = rng.standard_normal(head_dim) * float(finfo.tiny) * 0.5
        elif kind == 7:
            x[r, rng.integers(head_dim)] = float(finfo.max) * rng.choice([-1, 1])
    return torch.from_numpy(x).to(dtype)
