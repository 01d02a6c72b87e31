"""The bucket ordering of radix_fast (docs/perf/h200-topk.md, a lever that lost) against the kernel before it, on
the H200. Needs the kernel with the buckets (hw/_topk_details/radix_fast.py of commit d347f68) and the one before
it (commit 1a2526b, with its relative imports made absolute, as a module radix_before on PYTHONPATH):

    PYTHONPATH=.:DIR python3 docs/perf/h200-topk-buckets.py OUT.json radix_before

N(0, 1) rows, k = 2048, launched with the launcher's tiling for the rows and SMs; 2 and 4 buckets per range of the
ordering; `bucketed_rows` counts the rows ordered from buckets (the others fell back to the partition).
"""
import importlib, json, sys
import torch
from hw._topk_details import radix_fast
from hw.targets import sm_count
from tools.timing import graph_time_us

K, INNER, REPLAYS = 2048, 20, 30
res = {}
def log(k, v):
    res[k] = v; print(k, v, flush=True)
old = importlib.import_module(sys.argv[2])
gen = torch.Generator(device="cuda").manual_seed(0)
sms = sm_count(torch.device("cuda"))
for rnd in range(2):
  for name, rows, width, causal in (("64x8192", 64, 8192, False), ("64x8192b", 64, 8192, False), ("132x8192", 132, 8192, False),
                                    ("causal8192", 8192, 8192, True), ("1056x8192", 1056, 8192, False)):
    if rnd and rows > 1000: continue
    logits = torch.randn(rows, width, device="cuda", generator=gen)
    lengths = (torch.arange(1, rows + 1, dtype=torch.int32, device="cuda") if causal
               else torch.full((rows,), width, dtype=torch.int32, device="cuda"))
    padded = torch.where(torch.arange(width, device="cuda")[None, :] < lengths[:, None].long(), logits, float("-inf"))
    want = torch.topk(padded, K, dim=1).indices.to(torch.int32)
    want = torch.where(torch.arange(K, device="cuda")[None, :] < lengths[:, None], want, -1)
    us = graph_time_us([lambda: torch.topk(padded, K, dim=1)], inner=INNER, replays=REPLAYS)
    log(f"{rnd}/{name}/torch.topk", us)
    for label, module, bps in (("before", old, None), ("bps2", radix_fast, 2), ("bps4", radix_fast, 4)):
        if bps: radix_fast.BUCKETS_PER_SEGMENT = bps
        tiling = module.fast_tiling(width, K, pdl=True, rows=rows, sms=sms)
        out = torch.empty((rows, K), dtype=torch.int32, device="cuda")
        module._launch(logits, lengths, None, out, tiling)
        torch.cuda.synchronize()
        same = bool(torch.equal(out, want))
        us = graph_time_us([lambda: module._launch(logits, lengths, None, out, tiling)], inner=INNER, replays=REPLAYS)
        modes = None
        if bps:
            real, made = torch.empty, []
            def rec(*a, **kw):
                t = real(*a, **kw); made.append(t); return t
            torch.empty = rec
            try:
                module._launch(logits, lengths, None, out, tiling)
            finally:
                torch.empty = real
            nb = module.order_buckets(module.ordering(K, tiling), width <= tiling.tile_w and tiling.tiers == 1) + 1
            cnt = [t for t in made if t.dtype == torch.int32 and t.dim() == 2 and t.shape == (rows, nb)]
            if cnt:
                modes = int(cnt[0][:, -1].sum())
        log(f"{rnd}/{name}/{label}", {"us": us, "same": same, "bucketed_rows": modes})
    radix_fast.BUCKETS_PER_SEGMENT = 2
json.dump(res, open(sys.argv[1], "w"), indent=1)
