"""The radix_fast top-k's launch constants on the H200 (radix_fast.FastTiling fields, each replacing the default),
timed like `mxidx bench` times the top-k (median of CUDA-graph replays), with
torch.topk in the same run; every configuration's indices are compared with torch.topk's first (distinct values).
Command: PYTHONPATH=. python3 docs/perf/h200-topk-sweep.py OUT.json GRID, GRID one of GRIDS:

  ordering  warps of the selecting kernels x composites per ordering range x splitter samples per range
  launch    warps of the ordering kernel (both widths) x columns per chunk of the long path
"""
import dataclasses
import json
import sys

import torch

from hw._topk_details import radix_fast
from tools.cmd_bench import _graph_time_us
from tools.runtime import choose_device

ROWS, K = 64, 2048
GRIDS = {
    "ordering": {w: [dict(num_warps=n, segment=s, samples=m) for n in (8, 16) for s in (128, 256) for m in (8, 16, 32)]
                 for w in (8192, 131072)},
    "launch": {8192: [dict(order_warps=o) for o in (2, 4, 8)],
               131072: [dict(order_warps=o, block=b) for o in (2, 4, 8) for b in (4096, 8192, 16384)]},
}
GRID = GRIDS[sys.argv[2]]

choose_device("cuda")
results = []
for width in (8192, 131072):
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(ROWS, width, device="cuda", generator=gen)
    lengths = torch.full((ROWS,), width, dtype=torch.int32, device="cuda")
    out = torch.empty((ROWS, K), dtype=torch.int32, device="cuda")
    want = torch.topk(logits, K, dim=1).indices.to(torch.int32)
    ref = _graph_time_us([lambda: torch.topk(logits, K, dim=1)], inner=20, replays=30)
    results.append({"width": width, "case": "torch.topk", "time_us": ref})
    for setting in GRID[width]:
        tiling = dataclasses.replace(radix_fast.fast_tiling(width, K), **setting)
        row = {"width": width, **setting}
        try:
            out.fill_(-7)
            radix_fast._launch(logits, lengths, None, out, tiling)
            row["exact"] = bool(torch.equal(out, want))
            us = _graph_time_us([lambda: radix_fast._launch(logits, lengths, None, out, tiling)], inner=20, replays=30)
            row.update(time_us=us, vs_torch=us / ref)
        except Exception as e:  # noqa: BLE001 -- a configuration that fails is recorded
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        results.append(row)
        print(json.dumps(row), flush=True)
json.dump({"grid": sys.argv[2], "rows": results}, open(sys.argv[1], "w"), indent=1)
