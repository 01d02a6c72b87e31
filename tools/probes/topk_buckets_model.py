"""A CPU model (NumPy) of two top-k orderings by buckets, on rows like the decode step's: which rows each would
order from its buckets. Neither is in the tree; the first is the bucket ordering of radix_fast at commit d347f68 (a
lever that lost, docs/perf/h200-topk.md), the second a counting sort.

- Buckets of d347f68: the row narrowing to <= CAP keys inside, then the guards (keys >= lo within 6 binades of the
  largest, at most BUCKETS * BCAP / 2 of them) and the integer key-width map into BUCKETS buckets of BCAP; a row is
  "bucketed" when no bucket overflows.
- Counting sort: the keys >= lo into 256 buckets (by key when of one sign within 8 binades, else by the fp32 value),
  ranges of 128 keys for the ordering: a row is "counted" when no bucket exceeds 384 keys.

Rows: logits like those of `mxidx bench`'s decode step (sum_h w_h relu(q_h . k), q, k, w ~ N(0, 1), bf16 q and k,
unquantized) and N(0, 1) rows, 4 x 64 rows of 8192 columns each, k = 2048. Prints one line per kind of row.

    python3 -m tools.probes.topk_buckets_model
"""
import numpy as np
import torch

B, W, H, D, K, CAP, BUCKETS, BCAP = 64, 8192, 32, 128, 2048, 1024, 32, 256


def keys(x):
    """The order-preserving uint32 keys of float32 `x` (as int64)."""
    b = x.view(np.uint32).astype(np.int64)
    return np.where(b >= 2**31, b ^ 0xFFFFFFFF, b | 2**31)


def val(k):
    """The float32 values of keys `k` (keys' inverse)."""
    return np.where(k >= 2**31, k ^ 2**31, k ^ 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def narrow(key, k):
    """(lo, the count of keys >= lo): the bisection of the key range until k keys are >= lo or at most CAP keys
    lie between lo and the keys above the range."""
    lo, hi, ge, above = 1, 2**32 - 1, len(key), 0
    while ge != k and lo < hi and ge - above > CAP:
        mid = lo + ((hi - lo + 1) >> 1)
        c = int((key >= mid).sum())
        if c >= k:
            lo, ge = mid, c
        else:
            hi, above = mid - 1, c
    return lo, ge


def counting(key, k, fine=256, group=128, buckets=32):
    """("not tried" | "counted" | "overflow", the widest bucket's keys) of the counting-sort model on one row."""
    lo, ge = narrow(key, k)
    kmax = int(key.max())
    if not 0 < ge <= buckets * group:
        return "not tried", 0
    t = key[key >= lo]
    if (lo >= 2**31 or kmax < 2**31) and kmax - lo <= (8 << 23):
        span = kmax - lo
        pre = sum(1 for i in range(32) if (span >> i) >= fine)
        b = (((kmax - t) >> pre) * ((fine << 16) // ((span >> pre) + 1))) >> 16
    else:
        vmax = np.float32(val(np.int64(kmax)))
        vspan = vmax - np.float32(val(np.int64(lo)))
        if not np.isfinite(vspan):
            return "not tried", 0
        b = np.minimum((vmax - val(t)) * np.float32(fine / vspan), fine - 1).astype(np.int64)
    widest = int(np.bincount(b, minlength=fine).max())
    return ("counted" if widest <= 3 * group else "overflow"), widest


def bucketed(key, k):
    """"not tried" | "bucketed" | "overflow": the bucket ordering of d347f68 on one row."""
    lo, ge = narrow(key, k)
    kmax = int(key.max())
    span = kmax - lo
    if not (0 < ge <= BUCKETS * BCAP // 2 and span <= 6 << 23):
        return "not tried"
    pre = sum(1 for i in range(32) if (span >> i) >= 1024)
    scale = (BUCKETS << 16) // ((span >> pre) + 1)
    b = (((kmax - key[key >= lo]) >> pre) * scale) >> 16
    return "bucketed" if np.bincount(b, minlength=BUCKETS).max() <= BCAP else "overflow"


def main() -> None:
    g = torch.Generator().manual_seed(0)
    for name in ("decode-step logits", "N(0,1)"):
        modes, counted, widest = {}, {}, 0
        for _ in range(4):
            if name == "N(0,1)":
                x = torch.randn(B, W, generator=g).numpy()
            else:
                k = torch.randn(B, W, D, generator=g).to(torch.bfloat16).float()
                q = torch.randn(B, H, D, generator=g).to(torch.bfloat16).float()
                w = torch.randn(B, H, generator=g)
                x = torch.einsum("bh,bhw->bw", w, torch.relu(torch.einsum("bhd,bwd->bhw", q, k))).numpy()
            for r in range(B):
                key = keys(np.ascontiguousarray(x[r]))
                m = bucketed(key, K)
                modes[m] = modes.get(m, 0) + 1
                c, wide = counting(key, K)
                counted[c] = counted.get(c, 0) + 1
                widest = max(widest, wide)
        print(name, "buckets of d347f68:", modes, "counting sort:", counted, "widest bucket", widest)


if __name__ == "__main__":
    main()
