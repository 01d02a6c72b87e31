"""radix_fast with the counting-sorted ordering against the kernel before it (commit 1a2526b) and other forms of
radix_fast given as modules, on the H200, in one run, timed as `mxidx bench` times top-k (median of CUDA-graph
replays), with torch.topk in the same run; every kernel's indices checked against torch.topk's. A commit's kernel as
a module:

    git show 1a2526b:hw/_topk_details/radix_fast.py | sed 's/from \\.\\./from hw./; s/from \\.kernel/from hw._topk_details.kernel/; s/from \\.variants/from hw._topk_details.variants/' > DIR/radix_before.py
    PYTHONPATH=.:DIR python3 docs/perf/h200-topk-counting.py OUT.json radix_before [MODULE ...]

Rows (k = 2048, the launcher's tiling for the rows and SMs): N(0, 1) logits, and logits like those of the decode
step, sum_h w_h relu(q_h . k) with q, k (bf16) and w ~ N(0, 1), H = 32, D = 128; `counted_rows` counts the rows
ordered from _count_sort's buckets (the mode word).
"""
import importlib
import json
import sys

import torch

from hw._topk_details import radix_fast
from hw.targets import sm_count
from tools.timing import graph_time_us

sys.path.insert(0, "docs/perf")
_ab = importlib.import_module("h200-topk-ab")     # the same K and replays
reference, time_kernel = _ab.reference, _ab.time_kernel

K, INNER, REPLAYS, H, D = 2048, 20, 30, 32, 128


def _logits(kind: str, rows: int, width: int, gen: torch.Generator) -> torch.Tensor:
    if kind == "normal":
        return torch.randn(rows, width, device="cuda", generator=gen)
    out = torch.empty(rows, width, device="cuda")
    for r in range(0, rows, 16):   # in slices: [16, H, width] scores at a time
        n = min(16, rows - r)
        k = torch.randn(n, width, D, device="cuda", generator=gen).to(torch.bfloat16).float()
        q = torch.randn(n, H, D, device="cuda", generator=gen).to(torch.bfloat16).float()
        w = torch.randn(n, H, device="cuda", generator=gen)
        out[r:r + n] = torch.einsum("bh,bhw->bw", w, torch.relu(torch.einsum("bhd,bwd->bhw", q, k)))
    return out


def _counted_rows(module, logits, lengths, out, tiling, rows) -> int | None:
    """Rows ordered from _count_sort's buckets: the mode word of the count scratch, caught from torch.empty."""
    if not hasattr(module, "count_width"):
        return None
    real, made = torch.empty, []

    def recording(*shape, **kw):
        made.append(real(*shape, **kw))
        return made[-1]
    torch.empty = recording
    try:
        module._launch(logits, lengths, None, out, tiling)
    finally:
        torch.empty = real
    order = module.ordering(K, tiling)
    group = module.count_group(order, logits.shape[1] <= tiling.tile_w and tiling.tiers == 1
                               and getattr(tiling, "count_sort", True))
    if not group:
        return 0
    (counts,) = [t for t in made if t.dtype == torch.int32 and tuple(t.shape) == (rows, module.count_width(
        order.segments, group))]
    return int(counts[:, module.FINE_BUCKETS].sum())


def main(out_path: str, *others: str) -> None:
    results = {}
    kernels = [(name, importlib.import_module(name)) for name in others] + [("tree", radix_fast)]
    gen = torch.Generator(device="cuda").manual_seed(0)
    sms = sm_count(torch.device("cuda"))
    for name, kind, rows, width, causal in (
            ("64x8192", "normal", 64, 8192, False), ("64x8192 decode-like", "decode", 64, 8192, False),
            ("64x8192 decode-like b", "decode", 64, 8192, False), ("132x8192 decode-like", "decode", 132, 8192, False),
            ("64x4096 decode-like", "decode", 64, 4096, False), ("64x131072", "normal", 64, 131072, False),
            ("causal8192", "normal", 8192, 8192, True), ("1056x8192", "normal", 1056, 8192, False)):
        logits = _logits(kind, rows, width, gen)
        lengths = (torch.arange(1, rows + 1, dtype=torch.int32, device="cuda") if causal
                   else torch.full((rows,), width, dtype=torch.int32, device="cuda"))
        padded, want = reference(logits, lengths)
        results[f"{name}/torch.topk"] = {"time_us": graph_time_us([lambda: torch.topk(padded, K, dim=1)],
                                                                   inner=INNER, replays=REPLAYS)}
        for label, module in kernels:
            tiling = module.fast_tiling(width, K, pdl=True, rows=rows, sms=sms)
            us, same, out = time_kernel(module, logits, lengths, want, tiling)
            results[f"{name}/{label}"] = {"time_us": us, "equals_torch": same,
                                          "counted_rows": _counted_rows(module, logits, lengths, out, tiling, rows)}
            print(name, label, results[f"{name}/{label}"], flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
