"""Numba twin of sim.scorer: the same float64 logits, bit for bit.

Same arguments, checks, K reads (sim.layout.read_tokens) and outputs as sim.scorer.prefill_logits /
decode_logits; only the row scoring runs compiled. It keeps the reference's summation order exactly (per head:
0.0 + q[0]k[0] + q[1]k[1] + ... in d order; per logit: 0.0 + w[0]relu(dot_0) + ... in h order; no fused
multiply-add, since Numba without fastmath neither contracts nor reassociates), so every value is identical,
NaN included.
"""
from __future__ import annotations

import numba
import numpy as np

from sim.scorer import _decode, _invisible_fill, _prefill


@numba.njit(cache=True)
def score_rows_numba(q, k, weights, starts, ends, out):
    """RowScorer (see sim.scorer.RowScorer): out[r, j] for starts[r] <= j < ends[r], other entries untouched.

    q float64[R, H, D], k float64[T, D], weights float64[R, H], starts / ends int64[R], out float64[R, W].
    Each logit still sums d (then h) in order; the innermost loop runs over the columns j, which are independent,
    so it vectorizes without reassociating any sum.
    """
    num_rows, num_heads, head_dim = q.shape
    k_t = np.ascontiguousarray(k.T)                      # [D, T]: column j of every d is contiguous
    for r in range(num_rows):
        lo, hi = starts[r], ends[r]
        logits = np.zeros(hi - lo)
        dots = np.empty(hi - lo)
        for h in range(num_heads):
            dots[:] = 0.0
            for d in range(head_dim):
                q_rhd = q[r, h, d]
                k_d = k_t[d, lo:hi]
                for j in range(hi - lo):
                    dots[j] += q_rhd * k_d[j]
            w_rh = weights[r, h]
            for j in range(hi - lo):
                dot = dots[j]
                if not (dot > 0.0 or dot != dot):        # relu that keeps NaN
                    dot = 0.0
                logits[j] += w_rh * dot
        out[r, lo:hi] = logits


def prefill_logits(q, k, weights, ks, ke, *, clean_logits: bool = True) -> np.ndarray:
    """sim.scorer.prefill_logits, compiled: float64[S, SK], identical values."""
    return _prefill(q, k, weights, ks, ke, _invisible_fill(clean_logits), score_rows_numba)


def decode_logits(q, pool, geom, weights, context_lens, block_table, max_context_len: int, *,
                  clean_logits: bool = True) -> np.ndarray:
    """sim.scorer.decode_logits, compiled: float64[B*N, max_context_len], identical values."""
    return _decode(q, pool, geom, weights, context_lens, block_table, max_context_len,
                   _invisible_fill(clean_logits), score_rows_numba)
