"""hw/_topk_details/radix_fast._normal_guess and _bracket_round, the first round on a whole row: the value a count
target would reach under a normal fit of the row's values (and a bracket of keys of the fit about it), as keys
clamped into [lo + 1, hi], or 0 (no guess) when the fit is not a finite number; the two probes counted in one
reduction; the row's least and largest keys and its moments (_narrow_on_row's start, _moments) in either form.
The selection never depends on the probes (every top-k test covers that); these check that they are
the probes they claim to be."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from hw._topk_details.kernel import _order_key
from hw._topk_details.radix_fast import _bracket_round, _moments, _narrow_on_row, _normal_guess

pytestmark = pytest.mark.interp

FULL = (1, 2 ** 32 - 1)   # every key except that of nothing visible


@triton.jit
def _guess_kernel(stats_ptr, bounds_ptr, out_ptr, SPREAD: tl.constexpr):
    total = tl.load(stats_ptr)
    squares = tl.load(stats_ptr + 1)
    target = tl.load(stats_ptr + 2)
    n = tl.load(bounds_ptr + 2).to(tl.int32)
    a, b = _normal_guess(tl.load(bounds_ptr), tl.load(bounds_ptr + 1), total, squares, 0.0, 0.0, n, target, SPREAD,
                         False)
    tl.store(out_ptr, a)
    tl.store(out_ptr + 1, b)


def _probes(total, squares, target, n, bounds, device, spread: int = 0) -> tuple[int, int]:
    stats = torch.tensor([total, squares, target], dtype=torch.float32, device=device)
    ints = torch.tensor([*bounds, n], dtype=torch.int64, device=device)
    out = torch.full((2,), -1, dtype=torch.int64, device=device)
    _guess_kernel[(1,)](stats, ints, out, SPREAD=spread)
    a, b = out.tolist()
    return a, b


def _guess(total, squares, target, n, bounds, device) -> int:
    """The quantile's probe (SPREAD 0: both probes equal)."""
    a, b = _probes(total, squares, target, n, bounds, device)
    assert a == b, (a, b)
    return a


def _key(value: float) -> int:
    """The kernels' order key of an fp32 value: NaN 1, else negative values' bits flipped, the sign bit set on the
    others."""
    if math.isnan(value):
        return 1
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


@triton.jit(do_not_specialize=["lo", "hi"])   # 1 would be specialized to a constexpr
def _row_guess_kernel(x_ptr, out_ptr, target, lo, hi, N: tl.constexpr, SHAPE: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    total, squares, cubes, fourths = _moments(x, False, SHAPE)
    a, _ = _normal_guess(lo.to(tl.int64), hi.to(tl.int64), total, squares, cubes, fourths, tl.full((), N, tl.int32),
                         target, 0, SHAPE)
    tl.store(out_ptr, a)


def test_shape_guess_nearer_on_skewed_rows(device):
    """With SHAPE (the sample kernel's fit) the guess for the 2048-th of 8192 keys of skewed, heavy-tailed rows
    (sums of ReLU'd terms with weights in [0, 1), as the indexer's logits) has fewer keys between it and the 2048-th
    than the normal fit's, and a row of equal values (no shape to see) gets the normal fit's guess."""
    rng = np.random.default_rng(13)
    keys_ = rng.standard_normal((8192, 32)).astype(np.float32)

    def guess(x: np.ndarray, shape: bool) -> int:
        out = torch.zeros(1, dtype=torch.int64, device=device)
        _row_guess_kernel[(1,)](torch.from_numpy(x).to(device), out, 2047.5, *FULL, N=8192, SHAPE=shape)
        return int(out.item())

    for _ in range(4):
        x = (rng.random(16) @ np.maximum(rng.standard_normal((16, 32)) @ keys_.T, 0.0)).astype(np.float32)
        ordered = np.sort(np.array([_key(float(v)) for v in x]))
        miss = {shape: abs(int(ordered.size - np.searchsorted(ordered, guess(x, shape))) - 2048)
                for shape in (False, True)}
        assert miss[True] < miss[False], miss
    equal = np.full(8192, 1.5, dtype=np.float32)
    assert guess(equal, True) == guess(equal, False)


@pytest.mark.parametrize("spread", [48, 384])
def test_bracket_holds_about_twice_spread_keys(spread, device):
    """On N(0, 1) rows of 8192 the probes SPREAD keys of the fit below and above the 2048-th key's quantile hold
    about 2 SPREAD of the row's keys between them (within a factor 1.5: the row is not its fit), and the quantile's
    own probe lies between them."""
    rng = np.random.default_rng(11)
    for _ in range(4):
        x = rng.standard_normal(8192).astype(np.float32)
        stats = (float(x.sum(dtype=np.float64)), float((x.astype(np.float64) ** 2).sum()), 2047.5, x.size, FULL)
        a, b = _probes(*stats, device, spread)
        keys = np.array([_key(float(v)) for v in x])
        inside = int(((keys >= a) & (keys < b)).sum())
        assert 2 * spread / 1.5 <= inside <= 2 * spread * 1.5, (spread, inside)
        assert a < _guess(*stats, device) < b


def test_bracket_is_clamped_and_empty_fit_gives_none(device):
    """Both probes are clamped into [lo + 1, hi]; a NaN in the sums gives (0, 0)."""
    lo, hi = _key(1.0), _key(2.0)
    assert _probes(0.0, 1024.0, 512.0, 1024, (lo, hi), device, 48) == (lo + 1, lo + 1)
    lo, hi = _key(-2.0), _key(-1.0)
    assert _probes(0.0, 1024.0, 512.0, 1024, (lo, hi), device, 48) == (hi, hi)
    assert _probes(float("nan"), 1.0, 10.0, 100, FULL, device, 48) == (0, 0)


@triton.jit
def _bracket_kernel(key_ptr, state_ptr, out_ptr, N: tl.constexpr):
    key = tl.load(key_ptr + tl.arange(0, N)).to(tl.uint32, bitcast=True)
    lo, hi, ge_lo, above = _bracket_round(key, tl.load(state_ptr), tl.load(state_ptr + 1), tl.load(state_ptr + 2),
                                          tl.load(state_ptr + 3), tl.load(state_ptr + 4).to(tl.int32),
                                          tl.load(state_ptr + 5).to(tl.int32), tl.load(state_ptr + 6).to(tl.int32))
    tl.store(out_ptr, lo)
    tl.store(out_ptr + 1, hi)
    tl.store(out_ptr + 2, ge_lo.to(tl.int64))
    tl.store(out_ptr + 3, above.to(tl.int64))


@pytest.mark.parametrize("k_eff", [1, 257, 1024])
@pytest.mark.parametrize("case", ["both reach", "the lower reaches", "neither reaches", "equal probes"])
def test_bracket_round_keeps_the_kth_key(k_eff, case, device):
    """One round of two probes on 1024 keys with ties: the new interval is the one of the three (both probes reach
    the k_eff-th largest key, the lower one only, neither) that holds it, ge_lo / above count the keys >= lo / > hi,
    against NumPy."""
    rng = np.random.default_rng(k_eff)
    keys = rng.integers(2, 4000, 1024).astype(np.int64)
    kth = int(np.sort(keys)[-k_eff])
    lo, hi = 1, 4000
    a, b = {"both reach": (max(kth - 300, 2), kth), "the lower reaches": (kth, kth + 1),
            "neither reaches": (kth + 1, kth + 200), "equal probes": (kth, kth)}[case]
    a, b = min(a, hi), min(b, hi)
    state = torch.tensor([a, b, lo, hi, 1024, 0, k_eff], dtype=torch.int64, device=device)
    out = torch.zeros(4, dtype=torch.int64, device=device)
    _bracket_kernel[(1,)](torch.tensor(keys.astype(np.int32), device=device), state, out, N=1024)
    new_lo, new_hi, ge_lo, above = out.tolist()
    expected = {"both reach": (b, hi), "the lower reaches": (a, b - 1), "neither reaches": (lo, a - 1),
                "equal probes": (b, hi)}[case]
    assert (new_lo, new_hi) == expected
    assert new_lo <= kth <= new_hi
    assert ge_lo == int((keys >= new_lo).sum()) >= k_eff
    assert above == int((keys > new_hi).sum()) < k_eff


@triton.jit
def _start_kernel(x_ptr, visible_ptr, out_ptr, moments_ptr, N: tl.constexpr, JOINED: tl.constexpr,
                  NEGATED: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    visible = tl.load(visible_ptr + tl.arange(0, N)) != 0
    key = _order_key(x, visible)
    n = tl.sum(visible.to(tl.int32), 0)
    total, squares, _, _ = _moments(tl.where(visible, x, 0.0), JOINED)
    # CAP = N: no round runs, the state is the least and largest visible keys, n and 0
    # NEGATED: `visible` None, the least key from the keys' negations (the many-rows column kernel's form)
    lo, hi, ge_lo, above = _narrow_on_row(key, None if NEGATED else visible, n, n * 0 + 1, total, squares, N, 8, 0,
                                          0, JOINED)
    tl.store(out_ptr, lo)
    tl.store(out_ptr + 1, hi)
    tl.store(out_ptr + 2, ge_lo.to(tl.int64))
    tl.store(out_ptr + 3, above.to(tl.int64))
    tl.store(moments_ptr, total)
    tl.store(moments_ptr + 1, squares)


@pytest.mark.parametrize("joined", [False, True, "negated"])
@pytest.mark.parametrize("case", ["normal", "extremes", "one visible", "none visible", "nan and infinities",
                                  "negative zero"])
def test_row_ends_and_moments(case, joined, device):
    """The least and largest visible keys (invisible entries hold values beyond both) and the visible values' sum and
    sum of squares, in the three forms (JOINED: two-column reductions; "negated": those without `visible`, the least
    key from the keys' negations), against NumPy."""
    rng = np.random.default_rng(len(case))
    x = rng.standard_normal(256).astype(np.float32)
    visible = rng.random(256) < 0.7
    if case == "extremes":
        x[:4] = [np.finfo(np.float32).max, -np.finfo(np.float32).max, np.finfo(np.float32).tiny, -1e-45]
        visible[:4] = True
    elif case == "one visible":
        visible[:] = False
        visible[77] = True
    elif case == "none visible":
        visible[:] = False
    elif case == "nan and infinities":
        x[:3] = [np.nan, np.inf, -np.inf]
        visible[:3] = True
    elif case == "negative zero":
        x[:] = -0.0
        x[5] = 0.0
    x[~visible] = np.where(rng.random(int((~visible).sum())) < 0.5, np.inf, np.nan)   # must not count
    out = torch.zeros(4, dtype=torch.int64, device=device)
    moments = torch.zeros(2, dtype=torch.float32, device=device)
    _start_kernel[(1,)](torch.tensor(x, device=device), torch.tensor(visible.astype(np.int32), device=device), out,
                        moments, N=256, JOINED=bool(joined), NEGATED=joined == "negated")
    lo, hi, ge_lo, above = out.tolist()
    keys = [_key(v) for v in x[visible]]
    # nothing visible: the least key stays at the largest key there is, the largest at that of nothing visible
    assert (lo, hi, ge_lo, above) == (min(keys, default=2 ** 32 - 1), max(keys, default=0), int(visible.sum()), 0)
    v = x[visible].astype(np.float64)
    total, squares = moments.tolist()
    if case == "extremes":   # FLT_MAX absorbs the small values in any fp32 order; its square overflows
        assert math.isfinite(total) and squares == math.inf
    elif np.isfinite(v).all():
        assert math.isclose(total, v.sum(), rel_tol=1e-5, abs_tol=1e-4 * np.abs(v).sum())
        assert math.isclose(squares, (v * v).sum(), rel_tol=1e-5)
    else:
        assert math.isnan(total) and math.isnan(squares)

