"""Reference top-k over indexer logits (DESIGN §4).

Order: value descending, ties by column index ascending, with +inf > every finite value > -inf > NaN
(+0.0 and -0.0 are equal). Only visible columns starts[r] <= j < ends[r] are candidates; a row with fewer than k
visible columns is padded with -1 after its visible ones (so a NaN or -inf visible logit is still selected before
any padding). Indices are absolute columns of the logits row.
"""
from __future__ import annotations

import numpy as np

from sim.scorer import check_column_ranges

# Rank classes: the primary sort key. Within the finite class, value descending then index ascending.
_POS_INF, _FINITE, _NEG_INF, _NAN, _INVISIBLE = 0, 1, 2, 3, 4
PAD_INDEX = -1


def top_k(logits, k: int, *, starts=None, ends) -> np.ndarray:
    """Indices of the k best visible logits of every row, int32[R, k] (padded with -1).

    logits float[R, W] (float32 in the contract; any float dtype is ordered by its values), k int >= 0 (k > W is
    allowed: the tail is -1), ends int[R], starts int[R] or None (= 0), 0 <= starts[r] <= ends[r] <= W.
    """
    logits = np.asarray(logits)
    if not np.issubdtype(logits.dtype, np.floating) or logits.ndim != 2:
        raise ValueError(f"logits must be a 2-D float array [R, W], got {logits.dtype} {logits.shape}")
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    num_rows, width = logits.shape
    starts, ends = check_column_ranges(starts, ends, width, rows=num_rows, names=("starts", "ends", "W"))

    cols = np.arange(width)
    visible = (cols >= starts[:, None]) & (cols < ends[:, None])
    rank = np.select(
        [~visible, np.isnan(logits), logits == np.inf, logits == -np.inf],
        [_INVISIBLE, _NAN, _POS_INF, _NEG_INF],
        default=_FINITE,
    )
    # Descending value as an ascending key, only meaningful inside the finite class (0 elsewhere). Sorting compares
    # with <, so -0.0 and +0.0 are equal and fall back to the column key.
    neg_value = np.where(rank == _FINITE, -logits.astype(np.float64), 0.0)
    column = np.broadcast_to(cols, logits.shape)
    order = np.lexsort((column, neg_value, rank), axis=-1)   # last key is primary

    best = order[:, :k]
    picked = np.where(np.take_along_axis(rank, best, axis=-1) == _INVISIBLE, PAD_INDEX, best)
    out = np.full((num_rows, k), PAD_INDEX, dtype=np.int32)
    out[:, : best.shape[1]] = picked
    return out
