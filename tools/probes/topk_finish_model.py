"""A CPU model (NumPy) of the column-order long path's finish after a sweep (column_order._columns_long_kernel): how
many one-probe rounds on [tau, the largest candidate] it takes to a terminal state, against how many until at most
RANK_CAP keys are inside the interval (column_order._finish_ranked, which then finishes by ranks in one step).

Two ways to probe: halvings of the key interval (the kernel's), and (SECANT_ROUNDS > 0; built in the kernel and
lost there: docs/perf/h200-topk.md) for the first SECANT_ROUNDS rounds a secant on the logarithm of the counts:
the probe's value where the count would reach k - 0.5 if its logarithm fell linearly in value between the ends
(ge_lo keys at lo, above keys, at least 0.5, past hi), an end kept twice in a row having its weight halved
(Illinois), as radix_fast._probe does on the counts themselves; halvings after them. A row's tail above tau falls
about exponentially, so the logarithm of its count is nearly linear there.

The threshold tau is the sample kernel's, modelled: runs of 8 adjacent columns evenly spaced over the row, 8192 keys
in all, r = ceil(e + 3.5 sqrt(e) + 8) of them expected at or above the k-th key (e = k x 8192 / W), tau the sample's
(r + 8)-th largest key (the kernel stops within SAMPLE_SLACK = 16 above r). The candidates are the row's keys >= tau.
With one program a row, a launch lasts as long as its slowest row: the largest count matters more than the mean.

With BIN_BITS > 0 (a lever built and timed, not shipped: docs/perf/h200-topk.md, "Key bins for the long finish's
rounds on its candidates") the rounds start with one pass counting the candidates into 2^BIN_BITS bins of equal key
width over [tau, the largest candidate] (the width the least power of two that covers it, as
radix_fast._narrow_stream's), keeping the bin that holds the k-th key with exact counts; halvings after it.

Rows (k = 2048, W = 131072, ROWS of each, 32 unless given): N(0, 1); ReLU-degenerate ((x - 0.5).clamp_min(0)); N(0,
1) rounded to fp8 e4m3 (ties at the threshold: both forms end on lo == hi with more keys inside than RANK_CAP); logits
like the decode step's (sum over 32 heads of w_h relu(q_h . k), bf16 q and k; at most 12 rows). Prints, per kind and
RANK_CAP (0: rounds to a terminal state), the mean and largest count of rounds and the most keys left inside.

    python3 -m tools.probes.topk_finish_model [ROWS] [SECANT_ROUNDS] [BIN_BITS]
"""
import math
import sys

import numpy as np
import torch

from tools.probes.topk_buckets_model import keys, val

K, W, SAMPLES, RUN = 2048, 131072, 8192, 8
RANK_CAPS = (0, 64, 128, 256)


def sample_tau(x: np.ndarray) -> int:
    """The modelled sample kernel's threshold key for the row `x` (all of it visible)."""
    runs = SAMPLES // RUN
    first = np.arange(runs) * len(x) // runs // RUN * RUN
    sampled = np.sort(keys(x[(first[:, None] + np.arange(RUN)[None]).ravel()]))[::-1]
    e = K * SAMPLES / len(x)
    return int(sampled[math.ceil(e + 3.5 * math.sqrt(e) + 8) + 8 - 1])


def _log_secant(lo: int, hi: int, ge_lo: int, above: int, w_lo: float, w_hi: float) -> int | None:
    """The secant probe on the log of the counts in [lo + 1, hi], or None where an end is not a finite number."""
    a, b = (float(v) for v in val(np.array([lo, hi], dtype=np.int64)))
    if not (math.isfinite(a) and math.isfinite(b)) or b <= a:
        return None
    f_lo = (math.log(ge_lo) - math.log(K - 0.5)) * w_lo
    f_hi = (math.log(K - 0.5) - math.log(max(above, 0.5))) * w_hi
    probe = int(keys(np.array([a + (b - a) * f_lo / (f_lo + f_hi)], dtype=np.float32))[0])
    return min(max(probe, lo + 1), hi)


def rounds(x: np.ndarray, rank_cap: int, secant_rounds: int = 0, bin_bits: int = 0) -> tuple[int, int]:
    """(one-probe rounds from [tau, the largest candidate] until the state is terminal or, with rank_cap > 0, at most
    rank_cap keys are inside; the keys inside then): with bin_bits > 0 after one pass of 2^bin_bits key bins, the
    log-count secant for the first secant_rounds, halvings after them."""
    key = keys(np.ascontiguousarray(x, dtype=np.float32))
    cand = np.sort(key[key >= sample_tau(x)])
    count = lambda probe: len(cand) - int(np.searchsorted(cand, probe, "left"))  # noqa: E731
    lo, hi, ge_lo, above, done = int(cand[0]), int(cand[-1]), len(cand), 0, 0
    if bin_bits and lo < hi:
        shift = max((hi - lo).bit_length() - bin_bits, 0)
        counts = np.bincount((cand.astype(np.int64) - lo) >> shift, minlength=1 << bin_bits)
        ge = np.cumsum(counts[::-1])[::-1]            # keys >= each bin's least key
        b = int(np.nonzero(ge >= K)[0].max())
        lo, hi = lo + (b << shift), min(hi, lo + ((b + 1) << shift) - 1)
        ge_lo, above = int(ge[b]), int(ge[b] - counts[b])
    w_lo, w_hi, side = 1.0, 1.0, 0
    while ge_lo != K and lo < hi and (rank_cap == 0 or ge_lo - above > rank_cap):
        mid = lo + ((hi - lo + 1) >> 1)
        if done < secant_rounds:
            mid = _log_secant(lo, hi, ge_lo, above, w_lo, w_hi) or mid
        c = count(mid)
        kept = -1 if c >= K else 1    # the end that stays: hi (-1) when lo moves up, else lo
        if kept == side:
            w_lo, w_hi = (w_lo * 0.5, w_hi) if kept == 1 else (w_lo, w_hi * 0.5)
        else:
            w_lo, w_hi = 1.0, 1.0
        side = kept
        lo, ge_lo, hi, above = (mid, c, hi, above) if c >= K else (lo, ge_lo, mid - 1, c)
        done += 1
    return done, ge_lo - above


def main(rows: int = 32, secant_rounds: int = 0, bin_bits: int = 0) -> None:
    g = torch.Generator().manual_seed(1)
    normal = torch.randn(rows, W, generator=g)
    decode = []
    for _ in range(min(rows, 12)):
        q = torch.randn(32, 128, generator=g).to(torch.bfloat16).float()
        k = torch.randn(W, 128, generator=g).to(torch.bfloat16).float()
        decode.append(torch.einsum("h,hw->w", torch.randn(32, generator=g), torch.relu(q @ k.T)).numpy())
    kinds = {"N(0,1)": normal.numpy(), "ReLU": (normal - 0.5).clamp_min(0.0).numpy(),
             "fp8 e4m3": normal.to(torch.float8_e4m3fn).float().numpy(), "decode-like": np.stack(decode)}
    for name, kind in kinds.items():
        line = []
        for rank_cap in RANK_CAPS:
            done, inside = np.array([rounds(x, rank_cap, secant_rounds, bin_bits) for x in kind]).T
            line.append(f"{rank_cap or 'to the end'}: {done.mean():.2f}, {done.max()} (inside <= {inside.max()})")
        print(f"{name:12s}", " | ".join(line), flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
