"""A CPU model (NumPy) of the column-order long path's finish after a sweep (column_order._columns_long_kernel): how
many one-probe halvings of [tau, the largest candidate] it takes to a terminal state, against how many until at most
RANK_CAP keys are inside the interval (column_order._finish_ranked, which then finishes by ranks in one step).

The threshold tau is the sample kernel's, modelled: runs of 8 adjacent columns evenly spaced over the row, 8192 keys
in all, r = ceil(e + 3.5 sqrt(e) + 8) of them expected at or above the k-th key (e = k x 8192 / W), tau the sample's
(r + 8)-th largest key (the kernel stops within SAMPLE_SLACK = 16 above r). The candidates are the row's keys >= tau.
With one program a row, a launch lasts as long as its slowest row: the largest count matters more than the mean.

Rows (k = 2048, W = 131072, ROWS of each, 32 unless given): N(0, 1); ReLU-degenerate ((x - 0.5).clamp_min(0)); N(0,
1) rounded to fp8 e4m3 (ties at the threshold: both forms end on lo == hi with more keys inside than RANK_CAP); logits
like the decode step's (sum over 32 heads of w_h relu(q_h . k), bf16 q and k; at most 12 rows). Prints, per kind and
RANK_CAP (0: halvings to a terminal state), the mean and largest count of halvings and the most keys left inside.

    python3 -m tools.probes.topk_finish_model [ROWS]
"""
import math
import sys

import numpy as np
import torch

from tools.probes.topk_buckets_model import keys

K, W, SAMPLES, RUN = 2048, 131072, 8192, 8
RANK_CAPS = (0, 64, 128, 256)


def sample_tau(x: np.ndarray) -> int:
    """The modelled sample kernel's threshold key for the row `x` (all of it visible)."""
    runs = SAMPLES // RUN
    first = np.arange(runs) * len(x) // runs // RUN * RUN
    sampled = np.sort(keys(x[(first[:, None] + np.arange(RUN)[None]).ravel()]))[::-1]
    e = K * SAMPLES / len(x)
    return int(sampled[math.ceil(e + 3.5 * math.sqrt(e) + 8) + 8 - 1])


def halvings(x: np.ndarray, rank_cap: int) -> tuple[int, int]:
    """(one-probe halvings from [tau, the largest candidate] until the state is terminal or, with rank_cap > 0, at
    most rank_cap keys are inside; the keys inside then)."""
    key = keys(np.ascontiguousarray(x, dtype=np.float32))
    cand = np.sort(key[key >= sample_tau(x)])
    count = lambda probe: len(cand) - int(np.searchsorted(cand, probe, "left"))  # noqa: E731
    lo, hi, ge_lo, above, done = int(cand[0]), int(cand[-1]), len(cand), 0, 0
    while ge_lo != K and lo < hi and (rank_cap == 0 or ge_lo - above > rank_cap):
        mid = lo + ((hi - lo + 1) >> 1)
        c = count(mid)
        lo, ge_lo, hi, above = (mid, c, hi, above) if c >= K else (lo, ge_lo, mid - 1, c)
        done += 1
    return done, ge_lo - above


def main(rows: int = 32) -> None:
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
            done, inside = np.array([halvings(x, rank_cap) for x in kind]).T
            line.append(f"{rank_cap or 'to the end'}: {done.mean():.2f}, {done.max()} (inside <= {inside.max()})")
        print(f"{name:12s}", " | ".join(line), flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
