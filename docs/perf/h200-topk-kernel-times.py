"""Device time per kernel of radix_fast (the selecting and the ordering kernel) at 64 x 8192, k = 2048, N(0, 1) and
decode-like rows (h200-topk-counting.py's), for other forms of the kernel given as modules and the tree's: the mean
over 50 eager launches (no PDL) under torch.profiler:

    PYTHONPATH=.:DIR python3 docs/perf/h200-topk-kernel-times.py OUT.json radix_before [MODULE ...]
"""
import importlib
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from hw._topk_details import radix_fast
from hw.targets import sm_count

sys.path.insert(0, "docs/perf")
rows_of = importlib.import_module("h200-topk-counting")._logits


def main(out_path: str, *others: str) -> None:
    kernels = [(name, importlib.import_module(name)) for name in others] + [("tree", radix_fast)]
    gen = torch.Generator(device="cuda").manual_seed(1)
    sms = sm_count(torch.device("cuda"))
    results = {}
    for kind in ("normal", "decode"):
        logits = rows_of(kind, 64, 8192, gen)
        lengths = torch.full((64,), 8192, dtype=torch.int32, device="cuda")
        for label, module in kernels:
            tiling = module.fast_tiling(8192, 2048, pdl=False, rows=64, sms=sms)
            out = torch.empty((64, 2048), dtype=torch.int32, device="cuda")
            for _ in range(5):
                module._launch(logits, lengths, None, out, tiling)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(50):
                    module._launch(logits, lengths, None, out, tiling)
                torch.cuda.synchronize()
            results[f"{kind}/{label}"] = {e.key: e.device_time_total / e.count for e in prof.key_averages()
                                          if e.device_time_total > 0}
            print(kind, label, results[f"{kind}/{label}"], flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
