"""Offline (CPU, NumPy): which rows the bucket ordering of radix_fast at d347f68 would order from its buckets
(docs/perf/h200-topk.md, a lever that lost): the row narrowing to <= 1024 keys inside, then the guards (keys >= lo
within 6 binades of the largest, at most 4096 of them) and the integer key-width map into 32 buckets of 256.
Second model, a counting sort of the keys >= lo into 256 buckets (by key when of one sign within 8 binades, else
by the fp32 value), ranges of 128 keys for the ordering: a row holds when no bucket exceeds 384 keys.
Rows: logits like those of `mxidx bench`'s decode step (sum_h w_h relu(q_h . k), q, k, w ~ N(0, 1), bf16 q and
k, unquantized) and N(0, 1) rows, 4 x 64 rows of 8192 columns each, k = 2048.

    python3 docs/perf/topk-buckets-offline.py
"""
import numpy as np, torch
B, W, H, D, K, CAP, BUCKETS, BCAP = 64, 8192, 32, 128, 2048, 1024, 32, 256
def keys(x):
    b = x.view(np.uint32).astype(np.int64)
    return np.where(b >= 2**31, b ^ 0xFFFFFFFF, b | 2**31)
def narrow(key, k):
    lo, hi, ge, above = 1, 2**32 - 1, len(key), 0
    while ge != k and lo < hi and ge - above > CAP:
        mid = lo + ((hi - lo + 1) >> 1); c = int((key >= mid).sum())
        if c >= k: lo, ge = mid, c
        else: hi, above = mid - 1, c
    return lo, ge
def val(k):
    return np.where(k >= 2**31, k ^ 2**31, k ^ 0xFFFFFFFF).astype(np.uint32).view(np.float32)
def counting(key, k, fine=256, group=128, buckets=32):
    lo, ge = narrow(key, k); kmax = int(key.max())
    if not 0 < ge <= buckets * group: return "not tried", 0
    t = key[key >= lo]
    if (lo >= 2**31 or kmax < 2**31) and kmax - lo <= (8 << 23):
        span = kmax - lo; pre = sum(1 for i in range(32) if (span >> i) >= fine)
        b = (((kmax - t) >> pre) * ((fine << 16) // ((span >> pre) + 1))) >> 16
    else:
        vmax, vspan = np.float32(val(np.int64(kmax))), np.float32(val(np.int64(kmax))) - np.float32(val(np.int64(lo)))
        if not np.isfinite(vspan): return "not tried", 0
        b = np.minimum((vmax - val(t)) * np.float32(fine / vspan), fine - 1).astype(np.int64)
    widest = int(np.bincount(b, minlength=fine).max())
    return ("counted" if widest <= 3 * group else "overflow"), widest
def mode(key, k):
    lo, ge = narrow(key, k); kmax = int(key.max()); span = kmax - lo
    if not (0 < ge <= BUCKETS * BCAP // 2 and span <= 6 << 23): return "not tried"
    pre = sum(1 for i in range(32) if (span >> i) >= 1024); scale = (BUCKETS << 16) // ((span >> pre) + 1)
    t = key[key >= lo]; b = (((kmax - t) >> pre) * scale) >> 16
    return "bucketed" if np.bincount(b, minlength=BUCKETS).max() <= BCAP else "overflow"
g = torch.Generator().manual_seed(0)
for name in ("decode-step logits", "N(0,1)"):
    counts, counted, widest = {}, {}, 0
    for rep in range(4):
        if name == "N(0,1)":
            x = torch.randn(B, W, generator=g).numpy()
        else:
            k = torch.randn(B, W, D, generator=g).to(torch.bfloat16).float()
            q = torch.randn(B, H, D, generator=g).to(torch.bfloat16).float()
            w = torch.randn(B, H, generator=g)
            x = torch.einsum("bh,bhw->bw", w, torch.relu(torch.einsum("bhd,bwd->bhw", q, k))).numpy()
        for r in range(B):
            key = keys(np.ascontiguousarray(x[r]))
            m = mode(key, K); counts[m] = counts.get(m, 0) + 1
            c, w = counting(key, K); counted[c] = counted.get(c, 0) + 1; widest = max(widest, w)
    print(name, "buckets of d347f68:", counts, "counting sort:", counted, "widest bucket", widest)
