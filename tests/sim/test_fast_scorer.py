"""sim.fast_scorer: the Numba row scorer gives the NumPy reference's float64 logits bit for bit.

(The decode path through paged pools is checked against sim.scorer on every hostile decode case in
test_scorer.py; here the compiled row scorer itself is compared on inputs whose sums do round.)
"""
from __future__ import annotations

import numpy as np
import pytest

from sim import fast_scorer, scorer
from tests.sim._assert import assert_exact


def random_rows(rng, R, T, H, D, poison: bool):
    """Full-precision float64 q/k and float32 weights (sums round), optionally with NaN, inf and zero heads."""
    q = rng.standard_normal((R, H, D)) * np.exp(rng.uniform(-5, 5, (R, H, 1)))
    k = rng.standard_normal((T, D)) * np.exp(rng.uniform(-5, 5, (T, 1)))
    w = rng.standard_normal((R, H)).astype(np.float32)
    if poison:
        q[1, 0, 3] = np.nan
        k[2, 5] = np.nan
        w[3, H - 1] = np.inf
        q[4] = 0.0                                   # every dot 0 -> relu 0 -> logit 0
    return q, k, w


@pytest.mark.parametrize("R,T,H,D", [(9, 31, 1, 32), (6, 17, 5, 64), (5, 40, 7, 128)])
@pytest.mark.parametrize("poison", [False, True])
def test_row_scorer_bit_identical(R, T, H, D, poison):
    rng = np.random.default_rng(R * T + H + D + poison)
    q, k, w = random_rows(rng, R, T, H, D, poison)
    starts = rng.integers(0, T, R)
    ends = starts + rng.integers(0, T - starts + 1)
    starts[0], ends[0] = 0, T
    w64 = w.astype(np.float64)
    expected = np.full((R, T + 3), 123.0)            # entries outside the ranges must stay untouched
    actual = expected.copy()
    scorer.score_rows_numpy(q, k, w64, starts, ends, expected)
    fast_scorer.score_rows_numba(q, k, w64, starts, ends, actual)
    assert_exact(actual, expected, "score_rows_numba vs score_rows_numpy")  # float64 both: the buffers above
    outside = ~scorer.visible_mask(ends, T + 3, starts=starts)
    assert (actual[outside] == 123.0).all()
    if poison:
        assert np.isnan(actual[1, starts[1]:ends[1]]).all() and (actual[4, starts[4]:ends[4]] == 0).all()


@pytest.mark.parametrize("clean_logits", [True, False])
def test_prefill_identical_with_strided_inputs(clean_logits):
    rng = np.random.default_rng(4)
    q, k, w = random_rows(rng, 12, 50, 6, 64, poison=True)
    q_strided = np.repeat(q, 2, axis=1)[:, ::2]      # a non-contiguous view of the same values
    ks = rng.integers(0, 50, 12).astype(np.int32)
    ke = np.minimum(50, ks + 20).astype(np.int32)
    expected = scorer.prefill_logits(q, k, w, ks, ke, clean_logits=clean_logits)
    assert expected.dtype == np.float64
    assert_exact(fast_scorer.prefill_logits(q_strided, k, w, ks, ke, clean_logits=clean_logits), expected,
                 "fast prefill logits (strided q) vs reference")


def test_fast_scorer_rejects_like_the_reference():
    with pytest.raises(ValueError, match=r"row 0 has ks = 2, ke = 1"):
        fast_scorer.prefill_logits(np.zeros((1, 1, 32)), np.zeros((3, 32)), np.zeros((1, 1)), [2], [1])
