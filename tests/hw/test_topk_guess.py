"""hw/_topk_details/radix_fast._normal_guess, the first probe of the rounds on a whole row: the value a count target
would reach under a normal fit of the row's values, as a key clamped into [lo + 1, hi], or 0 (no guess)
when the fit is not a finite number. The selection never depends on it (every top-k test covers that); these
check that it is the probe it claims to be."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from hw._topk_details.radix_fast import _normal_guess

pytestmark = pytest.mark.interp

FULL = (1, 2 ** 32 - 1)   # every key except that of nothing visible


@triton.jit
def _guess_kernel(stats_ptr, bounds_ptr, out_ptr):
    total = tl.load(stats_ptr)
    squares = tl.load(stats_ptr + 1)
    target = tl.load(stats_ptr + 2)
    n = tl.load(bounds_ptr + 2).to(tl.int32)
    tl.store(out_ptr, _normal_guess(tl.load(bounds_ptr), tl.load(bounds_ptr + 1), total, squares, n, target))


def _guess(total, squares, target, n, bounds, device) -> int:
    stats = torch.tensor([total, squares, target], dtype=torch.float32, device=device)
    ints = torch.tensor([*bounds, n], dtype=torch.int64, device=device)
    out = torch.full((1,), -1, dtype=torch.int64, device=device)
    _guess_kernel[(1,)](stats, ints, out)
    return int(out.item())


def _key(value: float) -> int:
    """The kernels' order key of a finite fp32 value: negative values' bits flipped, the sign bit set on the others."""
    bits = int(np.array([value + 0.0], dtype=np.float32).view(np.uint32)[0])   # + 0.0: -0.0 is +0.0
    return bits ^ 0xFFFFFFFF if bits >> 31 else bits | 0x80000000


@pytest.mark.parametrize("tail", [0.5, 0.25, 2048 / 131072, 1 / 8192, 0.9])
def test_guess_is_the_normal_quantile(tail, device):
    """A fit of mean 3 and deviation 2 over 8192 values: the guess for `tail` of them is 3 + 2 z with z the upper
    `tail` quantile of N(0, 1), within the approximation's 4.5e-4 (and fp32 rounding of the moments)."""
    n, mean, std = 8192, 3.0, 2.0
    total, squares = n * mean, n * (std ** 2 + mean ** 2)
    z = math.sqrt(2.0) * float(torch.erfinv(torch.tensor(1.0 - 2.0 * tail, dtype=torch.float64)))
    got = _guess(total, squares, tail * n, n, FULL, device)
    expected = mean + z * std
    assert _key(expected - 2e-3) <= got <= _key(expected + 2e-3), (tail, got, expected)


def test_guess_is_clamped_into_the_interval(device):
    """The guess for the median of N(0, 1) is 0.0; an interval above (below) it gets lo + 1 (hi)."""
    n = 1024
    lo, hi = _key(1.0), _key(2.0)
    assert _guess(0.0, float(n), n / 2, n, (lo, hi), device) == lo + 1
    lo, hi = _key(-2.0), _key(-1.0)
    assert _guess(0.0, float(n), n / 2, n, (lo, hi), device) == hi


@pytest.mark.parametrize("total,squares,target,n", [
    (float("nan"), 1.0, 10.0, 100),   # a NaN in the sums
    (1.0, float("inf"), 10.0, 100),   # squares overflowed
    (float("-inf"), float("inf"), 10.0, 100),   # an infinity among the values
    (0.0, 100.0, 0.0, 100),           # no key to reach
    (0.0, 100.0, 100.0, 100),         # every key
    (0.0, 100.0, 150.0, 100),         # more than there are
    (0.0, 0.0, 10.5, 0),              # no value
])
def test_no_guess_when_the_fit_is_not_a_number(total, squares, target, n, device):
    assert _guess(total, squares, target, n, FULL, device) == 0


def test_guess_near_the_kth_of_normal_rows(device):
    """On N(0, 1) rows of 8192 the guess for the 2048-th key lies within 0.05 of it (the rounds then start next to
    the threshold instead of at the row's ends)."""
    rng = np.random.default_rng(7)
    for _ in range(4):
        x = rng.standard_normal(8192).astype(np.float32)
        kth = float(np.sort(x)[-2048])
        got = _guess(float(x.sum(dtype=np.float64)), float((x.astype(np.float64) ** 2).sum()), 2047.5, x.size, FULL,
                     device)
        assert _key(kth - 0.05) <= got <= _key(kth + 0.05)
