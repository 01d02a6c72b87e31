"""A CPU model (NumPy) of the rounds on a whole row (radix_fast._narrow_on_row): how many rounds it takes until at
most CAP keys are inside the interval (or, for tau, at most k + SLACK group maxima reach lo), with the first probe
from the row's least and largest keys by a secant step, from a normal fit of the row's values (the kernels' form:
the quantile by Abramowitz and Stegun 26.2.23), or a first round of several probes a number of keys of that fit
from the quantile: two at -3/8 and 3/8 CAP (_bracket_round, the column-order kernel with one program a row), or
four at -5/4, -7/16, 5/16 and 17/16 CAP (fewer rounds on the decode step's logits, but slower on the H200: each
probe is counted over the whole row, docs/perf/h200-topk.md, "Four probes about the fit's quantile: lost").

Rows (k = 2048, ROWS of each, 24 unless given): N(0, 1) x 8192, ReLU-degenerate ((x - 0.5).clamp_min(0)), logits
like the decode step's (sum over 32 heads of w_h relu(q_h . k), bf16 q and k, signed weights; and with weights in
[0, 1)), causal rows of 2049-8192 columns of N(0, 1), and tau on the maxima of 16 columns of N(0, 1) x 131072 (8
rows; no bracket there). Prints, per kind and first round, the mean and the largest count of rounds and the share
of rows taking more than one: with one program a row the launch lasts as long as its slowest row; then the mean and
the largest count of the rounds of seven probes on the candidate tile that follow (column_order._finish_on_tile,
from the state the row's rounds end in; none for tau).

    python3 -m tools.probes.topk_rounds_model [ROWS]

`shape [ROWS]` models the first probes from a fit with the rows' skewness and kurtosis (radix_fast._normal_guess's
SHAPE) against the normal fit, on the row kernel and the sample kernel (shape_main).

`sample [ROWS]` instead models the long path's sample kernel (8192 sampled keys of rows of 131072 columns, k =
2048) with secant steps on the counts (the kernel's) and on their normal quantiles (built and timed in d6c2ab9:
lost, docs/perf/h200-topk.md), ROWS N(0, 1) rows (256 unless given) and a quarter as many decode-like ones.
"""
import math
import sys

import numpy as np
import torch

from tools.probes.topk_buckets_model import keys, val

K, CAP, SLACK, SECANT_ROUNDS = 2048, 128, 256, 8
FIT_SKEW_MAX, FIT_KURTOSIS_MAX = 3.0, 12.0   # radix_fast's _FIT_SKEW_MAX and _FIT_KURTOSIS_MAX
PROBE_BITS = 3   # radix_fast.probe_bits(CAP)
SIGN_BIT = 2 ** 31


def key_of(value: float) -> int:
    return int(keys(np.array([value], dtype=np.float32))[0])


def normal_quantile(tail: float) -> float:
    """The kernels' z with P(N(0, 1) > z) = tail (Abramowitz and Stegun 26.2.23)."""
    t = math.sqrt(-2.0 * math.log(min(tail, 1.0 - tail)))
    z = t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308)))
    return z if tail < 0.5 else -z


def tile_rounds(count, lo: int, hi: int, ge_lo: int) -> int:
    """The rounds of 2^PROBE_BITS - 1 probes (radix_fast._narrow) from the state (lo, hi, ge_lo) to a terminal
    one (ge_lo == K or lo == hi); count(probe): the keys >= probe."""
    done = 0
    while ge_lo != K and lo < hi:
        span = hi - lo + 1
        probes = [lo + ((span * j) >> PROBE_BITS) for j in range(1 << PROBE_BITS)]
        counts = [ge_lo] + [count(p) for p in probes[1:]]
        pick = max(j for j, c in enumerate(counts) if c >= K)
        if pick + 1 < len(probes):
            hi = probes[pick + 1] - 1
        lo, ge_lo = probes[pick], counts[pick]
        done += 1
    return done


def fit_quantile(v: np.ndarray, tail: float, shape: bool) -> tuple[float, float]:
    """(the value above which a share `tail` of the values `v` would lie, the fit's spread in value of one key at
    it over that of a normal fit's) by the kernels' _normal_guess: a normal fit, or with `shape` the Cornish-Fisher
    expansion to its second order with the skewness and excess kurtosis clamped as the kernels clamp them."""
    mean, std = float(v.mean()), float(v.std())
    z = normal_quantile(tail)
    if not shape or std == 0.0:
        return mean + z * std, 1.0
    s = (v.astype(np.float64) - mean) / std
    g1 = min(max(float((s ** 3).mean()), -FIT_SKEW_MAX), FIT_SKEW_MAX)
    g2 = min(max(float((s ** 4).mean()) - 3.0, -2.0), FIT_KURTOSIS_MAX)
    shaped = z + (z * z - 1) * g1 / 6 + z * (z * z - 3) * g2 / 24 - z * (2 * z * z - 5) * g1 * g1 / 36
    slope = 1 + z * g1 / 3 + (z * z - 1) * g2 / 8 - (6 * z * z - 5) * g1 * g1 / 36
    return (mean + shaped * std, max(slope, 0.25)) if slope > 0 else (mean + z * std, 1.0)


def rounds(x: np.ndarray, guess: bool, slack: int = 0, offsets: tuple[float, ...] = (), k: int = K,
           probit: bool = False, shape: bool = False) -> tuple[int, int]:
    """The rounds _narrow_on_row takes on the fp32 row `x` (all of it visible) toward k_eff = k, and then
    tile_rounds (0 with slack); with `guess` and `offsets` the first round probes those numbers of keys of the fit
    from the quantile (ascending); with `probit` the secant steps interpolate the counts' normal quantiles instead
    of the counts (not the kernels': see `sample` in the module docstring); with `shape` the fit is fit_quantile's
    with skewness and kurtosis, and a row of no negative value takes a probe from its positive values' fit after
    the round at 0.0 + 1 (the kernels' SHAPE)."""
    key = keys(np.ascontiguousarray(x, dtype=np.float32))
    ordered = np.sort(key)
    count = lambda probe: len(ordered) - int(np.searchsorted(ordered, probe, "left"))  # noqa: E731
    n = len(key)
    lo, hi, ge_lo, above = int(ordered[0]), int(ordered[-1]), n, 0
    check, w_lo, w_hi, side, done = int(lo == SIGN_BIT), 1.0, 1.0, 0, 0
    target = k + 0.5 * slack if slack else k - 0.5
    first = 0
    narrowing = lambda: ge_lo != k and lo < hi and (ge_lo > k + slack if slack else ge_lo - above > CAP)  # noqa: E731
    positive = guess and shape and bool(check)
    if guess and not check:
        value, slope = fit_quantile(x, target / n, shape)
        first = min(max(key_of(value), lo + 1), hi) if math.isfinite(value) else 0
        if first and offsets and narrowing():   # the bracket: keys of the fit's density from the quantile
            z = normal_quantile(target / n)
            step = math.sqrt(2 * math.pi) * float(x.std()) * slope * math.exp(0.5 * z * z) / n
            probes = [min(max(key_of(value + o * step), lo + 1), hi) for o in offsets]
            counts = [count(p) for p in probes]
            reached = [i for i, c in enumerate(counts) if c >= k]   # counts fall as the probes rise
            if reached:
                i = reached[-1]
                lo, ge_lo = probes[i], counts[i]
                if i + 1 < len(probes):
                    hi, above = probes[i + 1] - 1, counts[i + 1]
            else:
                hi, above = probes[0] - 1, counts[0]
            done, first = 1, 0
    while narrowing():
        secant = done < SECANT_ROUNDS and not check
        if check:
            mid = lo + 1
        elif done == 0 and first:   # the quantile alone
            mid = first
        elif positive and done == 1 and 0 < target < ge_lo:   # after the round at 0.0 + 1: the positive values' fit
            value, _ = fit_quantile(x[x > 0], target / ge_lo, True)
            mid = min(max(key_of(value), lo + 1), hi)
        else:
            a, b = float(val(np.int64(lo))), float(val(np.int64(hi)))
            if probit:   # the kernel's counts kept within [1/2, n - 1/2]
                z = lambda c: normal_quantile(min(max(c, 0.5), n - 0.5) / n)  # noqa: E731
                f_lo, f_hi = (z(target) - z(ge_lo)) * w_lo, (z(above) - z(target)) * w_hi
            else:
                f_lo, f_hi = (ge_lo - target) * w_lo, (target - above) * w_hi
            t = f_lo / (f_lo + f_hi) if f_lo + f_hi > 0 else math.nan
            finite = math.isfinite(a) and math.isfinite(b) and 0.0 <= t <= 1.0
            mid = min(max(key_of(a * (1 - t) + b * t), lo + 1), hi) if secant and finite else lo + ((hi - lo + 1) >> 1)
        c = count(mid)
        up = c >= k
        check = int(not check and lo == SIGN_BIT and not up and c == above)
        kept = -1 if up else 1
        if secant and kept != side:
            w_lo = w_hi = 1.0
        elif secant and kept == 1:
            w_lo *= 0.5
        elif secant:
            w_hi *= 0.5
        side = kept if secant else side
        lo, ge_lo, hi, above = (mid, c, hi, above) if up else (lo, ge_lo, mid - 1, c)
        done += 1
    return done, 0 if slack else tile_rounds(count, lo, hi, ge_lo)


def main(rows: int = 24) -> None:
    g = torch.Generator().manual_seed(0)
    k = torch.randn(rows, 8192, 128, generator=g).to(torch.bfloat16).float()
    q = torch.randn(rows, 32, 128, generator=g).to(torch.bfloat16).float()
    w = torch.randn(rows, 32, generator=g)
    normal = torch.randn(rows, 8192, generator=g).numpy()
    decode = lambda weights: [(r, 0) for r in torch.einsum(  # noqa: E731
        "bh,bhw->bw", weights, torch.relu(torch.einsum("bhd,bwd->bhw", q, k))).numpy()]
    kinds = {
        "N(0,1) x 8192": [(r, 0) for r in normal],
        "ReLU x 8192": [(r, 0) for r in (torch.randn(rows, 8192, generator=g) - 0.5).clamp_min(0.0).numpy()],
        "decode-like x 8192": decode(w),
        "causal N(0,1), 2049-8192": [(normal[i, :2049 + (8192 - 2049) * i // (rows - 1)], 0) for i in range(rows)],
        "tau, maxima of 16 of 131072": [(torch.randn(131072, generator=g).numpy().reshape(-1, 16).max(1), SLACK)
                                        for _ in range(8)],
    }
    kinds["decode-like, weights >= 0"] = decode(torch.rand(rows, 32, generator=g))
    firsts = {"secant": (False, ()), "normal fit": (True, ()), "two probes": (True, (-3 * CAP / 8, 3 * CAP / 8)),
              "four probes": (True, (-5 * CAP / 4, -7 * CAP / 16, 5 * CAP / 16, 17 * CAP / 16))}
    for name, kind in kinds.items():
        line = []
        for label, (guess, offsets) in firsts.items():
            counts, tile = np.array([rounds(x, guess, slack, () if slack else offsets) for x, slack in kind]).T
            line.append(f"{label}: {counts.mean():.2f}, {counts.max()}, {(counts > 1).mean():.0%}; "
                        f"tile {tile.mean():.2f}, {tile.max()}")
        print(f"{name:28s}", " | ".join(line))


def sample_main(rows: int = 256) -> None:
    """The sample kernel's rounds (column_order._sample_tau_kernel: 8192 keys in runs of 8 spread over rows of
    131072 columns, narrowed until r to r + 16 of them reach the threshold) with secant steps on the
    counts and on their normal quantiles: per kind of row the mean, the largest and the count of rows by rounds, and
    the largest of each 64 rows (one launch lasts as long as its slowest row)."""
    width, samples = 131072, 8192
    run, slack, sigmas, extra = 8, 16, 3.5, 8.0   # column_order's SAMPLE_RUN, SAMPLE_SLACK and margin
    expected = K * samples / width
    r = math.ceil(expected + sigmas * math.sqrt(expected) + extra)
    first = (np.arange(samples // run) * width // (samples // run)) // run * run
    cols = (first[:, None] + np.arange(run)[None, :]).ravel()
    g = torch.Generator().manual_seed(1)
    k = torch.randn(width, 128, generator=g).to(torch.bfloat16).float()
    decode = lambda: torch.einsum(  # noqa: E731
        "h,hw->w", torch.randn(32, generator=g),
        torch.relu(torch.randn(32, 128, generator=g).to(torch.bfloat16).float() @ k.T)).numpy()
    kinds = {"N(0,1)": lambda: torch.randn(width, generator=g).numpy(), "decode-like": decode}
    for name, make in kinds.items():
        xs = [make()[cols] for _ in range(rows if name == "N(0,1)" else max(rows // 4, 1))]
        for probit in (False, True):
            counts = np.array([rounds(x, True, slack, k=r, probit=probit)[0] for x in xs])
            launches = [int(counts[i:i + 64].max()) for i in range(0, len(counts), 64)]
            print(f"sample, {name} x {width} ({len(xs)} rows), secant on the {'quantiles' if probit else 'counts'}: "
                  f"mean {counts.mean():.2f}, largest {counts.max()}, rows by rounds {np.bincount(counts).tolist()}, "
                  f"largest of each 64 {launches}")


def shape_main(rows: int = 64) -> None:
    """The first probes from a normal fit against the fit with skewness and kurtosis (and the positive values' fit
    on rows of no negative value: radix_fast._normal_guess's SHAPE): the column order's row kernel (rows of 8192
    columns, a bracket of 3/8 CAP keys about the quantile for one program a row, the quantile alone for many rows)
    and the sample kernel (as `sample`). Per kind of row the mean and the largest count of rounds to the candidate
    tile (ROWS rows of each kind, 64 unless given: one launch lasts as long as its slowest row)."""
    g = torch.Generator().manual_seed(2)
    k8 = torch.randn(8192, 128, generator=g).to(torch.bfloat16).float()
    k_wide = torch.randn(131072, 128, generator=g).to(torch.bfloat16).float()

    def decode(keys_: torch.Tensor, positive: bool) -> np.ndarray:
        weights = torch.rand(32, generator=g) if positive else torch.randn(32, generator=g)
        q = torch.randn(32, 128, generator=g).to(torch.bfloat16).float()
        return torch.einsum("h,hw->w", weights, torch.relu(q @ keys_.T)).numpy()

    kinds = {"N(0,1)": lambda w: torch.randn(w, generator=g).numpy(),
             "decode-like": lambda w: decode(k8 if w == 8192 else k_wide, False),
             "decode-like, weights >= 0": lambda w: decode(k8 if w == 8192 else k_wide, True),
             "ReLU-degenerate": lambda w: (torch.randn(w, generator=g) - 0.5).clamp_min(0.0).numpy()}
    width, samples, run, slack, sigmas, extra = 131072, 8192, 8, 16, 3.5, 8.0   # as sample_main
    expected = K * samples / width
    r = math.ceil(expected + sigmas * math.sqrt(expected) + extra)
    first = (np.arange(samples // run) * width // (samples // run)) // run * run
    cols = (first[:, None] + np.arange(run)[None, :]).ravel()
    forms = {"row, bracket": lambda x, sh: rounds(x, True, 0, (-3 * CAP / 8, 3 * CAP / 8), shape=sh)[0],
             "row, quantile": lambda x, sh: rounds(x, True, 0, (), shape=sh)[0],
             "sample": lambda x, sh: rounds(x[cols], True, slack, k=r, shape=sh)[0]}
    for name, make in kinds.items():
        rows8 = [make(8192) for _ in range(rows)]
        wide = [make(width) for _ in range(rows)]
        line = []
        for form, count in forms.items():
            xs = wide if form == "sample" else rows8
            normal, shaped = (np.array([count(x, sh) for x in xs]) for sh in (False, True))
            line.append(f"{form}: {normal.mean():.2f}, {normal.max()} -> {shaped.mean():.2f}, {shaped.max()}")
        print(f"{name:26s}", " | ".join(line), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"]:
        sample_main(*(int(a) for a in sys.argv[2:3]))
    elif sys.argv[1:2] == ["shape"]:
        shape_main(*(int(a) for a in sys.argv[2:3]))
    else:
        main(*(int(a) for a in sys.argv[1:2]))
