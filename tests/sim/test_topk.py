"""sim.topk.top_k: order (value desc, index asc), +inf > finite > -inf > NaN, visibility, -1 padding."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from sim.topk import top_k

INF, NAN = np.inf, np.nan


def rows(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def brute_force_top_k(row, k, start, end) -> list[int]:
    """Pairwise comparison with DESIGN §4's rules, one visible column at a time."""
    def tier(v):
        return 3 if math.isnan(v) else 0 if v == math.inf else 2 if v == -math.inf else 1

    def compare(i, j):
        a, b = float(row[i]), float(row[j])
        if tier(a) != tier(b):
            return tier(a) - tier(b)
        if tier(a) == 1 and a != b:
            return -1 if a > b else 1
        return i - j

    best = sorted(range(start, end), key=functools.cmp_to_key(compare))[:k]
    return best + [-1] * (k - len(best))


def test_ties_go_to_the_lower_index():
    got = top_k(rows([1.0, 3.0, 2.0, 3.0, 3.0, 0.0]), 4, ends=[6])
    assert got.dtype == np.int32 and got.tolist() == [[1, 3, 4, 2]]


def test_signed_zeros_are_equal():
    assert top_k(rows([-0.0, 0.0, -0.0, -1.0]), 4, ends=[4]).tolist() == [[0, 1, 2, 3]]


def test_nonfinite_order():
    x = rows([NAN, -INF, 5.0, INF, NAN, -3.0, INF, -INF])
    assert top_k(x, 8, ends=[8]).tolist() == [[3, 6, 2, 5, 1, 7, 0, 4]]
    # NaN and -inf are still picked before padding: they are visible
    assert top_k(rows([NAN, -INF]), 4, ends=[2]).tolist() == [[1, 0, -1, -1]]


def test_invisible_never_selected_and_short_rows_padded():
    x = rows([9.0, 8.0, 7.0, 6.0, 5.0, INF], [INF, 1.0, 2.0, 3.0, 4.0, 5.0], [1.0] * 6)
    got = top_k(x, 3, starts=[1, 2, 3], ends=[3, 4, 3])
    assert got.tolist() == [[1, 2, -1], [3, 2, -1], [-1, -1, -1]]
    assert top_k(x[:1], 2, ends=[0]).tolist() == [[-1, -1]]


def test_k_larger_than_width_and_k_zero():
    x = rows([1.0, 2.0])
    assert top_k(x, 5, ends=[2]).tolist() == [[1, 0, -1, -1, -1]]
    assert top_k(x, 0, ends=[2]).shape == (1, 0)
    assert top_k(np.zeros((0, 4), np.float32), 2, ends=np.zeros(0, int)).shape == (0, 2)


def test_matches_brute_force_on_rows_with_many_ties():
    rng = np.random.default_rng(0)
    R, W, k = 40, 23, 7
    pool = np.array([INF, -INF, NAN, 0.0, -0.0, 1.5, -2.0, 3.0, 1e-40], dtype=np.float32)  # 1e-40: subnormal
    x = rng.choice(pool, size=(R, W))
    starts = rng.integers(0, W, R)
    ends = starts + rng.integers(0, W - starts + 1)
    got = top_k(x, k, starts=starts, ends=ends)
    for r in range(R):
        expected = brute_force_top_k(x[r], k, starts[r], ends[r])
        assert got[r].tolist() == expected, f"row {r}: got {got[r].tolist()}, expected {expected}"
        chosen = got[r][got[r] >= 0]
        assert ((chosen >= starts[r]) & (chosen < ends[r])).all()


@pytest.mark.parametrize("kwargs,match", [
    (dict(logits=np.zeros((2, 3), np.int32), k=1, ends=[3, 3]), "logits must be a 2-D float array"),
    (dict(logits=np.zeros(3, np.float32), k=1, ends=[3]), "logits must be a 2-D float array"),
    (dict(logits=np.zeros((2, 3), np.float32), k=-1, ends=[3, 3]), "k must be an int >= 0"),
    (dict(logits=np.zeros((2, 3), np.float32), k=1.0, ends=[3, 3]), "k must be an int >= 0"),
    (dict(logits=np.zeros((2, 3), np.float32), k=1, ends=[3]), "starts and ends must both have shape"),
    (dict(logits=np.zeros((2, 3), np.float32), k=1, ends=[3, 4]), r"<= W = 3; row 1"),
    (dict(logits=np.zeros((2, 3), np.float32), k=1, starts=[2, 0], ends=[1, 3]), "row 0 has starts = 2"),
    (dict(logits=np.zeros((2, 3), np.float32), k=1, starts=[0, -1], ends=[1, 3]), "row 1 has starts = -1"),
    (dict(logits=np.zeros((2, 3), np.float32), k=1, ends=[1.0, 3.0]), "ends must be an integer array"),
])
def test_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        top_k(**kwargs)
