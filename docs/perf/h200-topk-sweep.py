"""The radix_fast top-k's launch constants on the H200 (radix_fast.FastTiling fields, each replacing the default),
timed like `mxidx bench` times the top-k (median of CUDA-graph replays), with
torch.topk in the same run; every configuration's indices are compared with torch.topk's first (distinct values).
Command: PYTHONPATH=. python3 docs/perf/h200-topk-sweep.py OUT.json GRID, GRID one of GRIDS:

  ordering  warps of the selecting kernels x composites per ordering range x splitter samples per range
  launch    warps of the ordering kernel (both widths) x columns per chunk of the long path
  segments  composites per ordering range x splitter samples per range x warps of the ordering kernel, on 64 x
            8192 and on the 8192 causal rows (with `select_us`)
  candidates  warps of the long path's candidate programs x columns per candidate program (and per streaming
            chunk), on 64 rows of 16384, 32768 and 131072 columns; `until_us` times the launch cut after each of
            its kernels but the last (`time_us` is the whole launch)
  rows      the selecting kernels' register cap (none, or 128: two programs per SM) on 132 to 2112 full rows of
            8192 columns and on the 8192 causal rows of the hook's prefill (row i sees its first i + 1 columns,
            compared with the uncapped launch's indices); `select_us` times the selecting kernels alone
  many_segments  composites per ordering range x splitter samples per range x warps of the ordering kernel, at
            the launcher's many-rows settings (three tiles, the register cap), on 1056 full rows of 8192 columns
            and on the 8192 causal rows (with `select_us`)
  tiers     the on-chip kernel's tile widths per row (1: every row in the 8192-column tile; 2 / 3: also 4096 /
            2048 for the rows they hold, the last row first) with and without the register cap, on 1056 full rows
            of 8192 columns and on the 8192 causal rows (with `select_us`)
"""
import dataclasses
import json
import sys

import torch

from hw._topk_details import radix_fast
from tools.timing import graph_time_us
from tools.runtime import choose_device

ROWS, K = 64, 2048
GRIDS = {
    "ordering": {w: [dict(num_warps=n, segment=s, samples=m) for n in (8, 16) for s in (128, 256) for m in (8, 16, 32)]
                 for w in (8192, 131072)},
    "launch": {8192: [dict(order_warps=o) for o in (2, 4, 8)],
               131072: [dict(order_warps=o, block=b) for o in (2, 4, 8) for b in (4096, 8192, 16384)]},
}
GRIDS["segments"] = {w: [dict(segment=s, samples=m, order_warps=o) for s, m in ((128, 16), (64, 8), (64, 16))
                         for o in (2, 4)] for w in (8192, "causal")}
GRIDS["candidates"] = {w: [dict(cand_warps=c, block=b) for c in (4, 8) for b in (1024, 2048, 4096)]
                       for w in (16384, 32768, 131072)}
LONG_PATH = ("_group_max_kernel", "_tau_kernel", "_candidates_kernel", "_topk_long_kernel", "_order_kernel")
ROW_COUNTS = (132, 264, 528, 1056, 2112)
GRIDS["rows"] = {**{(r, 8192): [dict(maxnreg=None), dict(maxnreg=128)] for r in ROW_COUNTS},
                 "causal": [dict(maxnreg=None), dict(maxnreg=128)]}
GRIDS["tiers"] = {key: [dict(tiers=t, maxnreg=m) for m in (128, None) for t in (1, 2, 3)]
                  for key in ((1056, 8192), "causal")}
GRIDS["many_segments"] = {key: [dict(segment=s, samples=m, order_warps=o, tiers=3, maxnreg=128)
                                 for s, m in ((128, 16), (256, 16), (256, 32)) for o in (4, 8)]
                          for key in ((1056, 8192), "causal")}
GRID = GRIDS[sys.argv[2]]


class _Skipped:
    """Stands in for a kernel that a timing probe leaves out."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def _cases():
    """(label, logits, lengths, reference indices, torch.topk's time) per column set of GRID."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    for rows, width in [(ROWS, w) for w in (8192, 16384, 32768, 131072) if w in GRID] + [key for key in GRID if
                                                                              isinstance(key, tuple)]:
        logits = torch.randn(rows, width, device="cuda", generator=gen)
        lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
        ref = graph_time_us([lambda: torch.topk(logits, K, dim=1)], inner=20, replays=30)
        label = width if rows == ROWS else (rows, width)
        yield label, logits, lengths, torch.topk(logits, K, dim=1).indices.to(torch.int32), ref
    if "causal" in GRID:
        logits = torch.randn(8192, 8192, device="cuda", generator=gen)
        lengths = torch.arange(1, 8193, dtype=torch.int32, device="cuda")
        padded = logits.masked_fill(torch.arange(8192, device="cuda") >= lengths[:, None], float("-inf"))
        ref = graph_time_us([lambda: torch.topk(padded, K, dim=1)], inner=3, replays=30)
        yield "causal", logits, lengths, None, ref


choose_device("cuda")
results = []
for label, logits, lengths, want, ref in _cases():
    width = logits.shape[1]
    inner = 20 if logits.shape[0] <= ROWS else 3
    out = torch.empty((logits.shape[0], K), dtype=torch.int32, device="cuda")
    if want is None:   # the uncapped default launch's indices (exact in the tests)
        radix_fast._launch(logits, lengths, None, out, radix_fast.fast_tiling(width, K, pdl=True))
        want = out.clone()
    results.append({"width": label, "case": "torch.topk", "time_us": ref})
    for setting in GRID[label]:
        tiling = dataclasses.replace(radix_fast.fast_tiling(width, K, pdl=True), **setting)
        row = {"width": label, **setting}
        try:
            out.fill_(-7)
            radix_fast._launch(logits, lengths, None, out, tiling)
            row["exact"] = bool(torch.equal(out, want))
            us = graph_time_us([lambda: radix_fast._launch(logits, lengths, None, out, tiling)], inner=inner,
                                replays=30)
            row.update(time_us=us, vs_torch=us / ref)
            if sys.argv[2] == "candidates":
                row["until_us"] = {}
                for i, name in enumerate(LONG_PATH[:-1]):
                    kept = {n: getattr(radix_fast, n) for n in LONG_PATH[i + 1:]}
                    for n in kept:
                        setattr(radix_fast, n, _Skipped())
                    try:
                        row["until_us"][name] = graph_time_us(
                            [lambda: radix_fast._launch(logits, lengths, None, out, tiling)], inner=inner, replays=30)
                    finally:
                        for n, fn in kept.items():
                            setattr(radix_fast, n, fn)
            if sys.argv[2] in ("rows", "segments", "tiers", "many_segments"):
                order, radix_fast._order_kernel = radix_fast._order_kernel, _Skipped()
                try:
                    row["select_us"] = graph_time_us([lambda: radix_fast._launch(logits, lengths, None, out, tiling)],
                                                      inner=inner, replays=30)
                finally:
                    radix_fast._order_kernel = order
        except Exception as e:  # noqa: BLE001 -- a configuration that fails is recorded
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        results.append(row)
        print(json.dumps(row), flush=True)
json.dump({"grid": sys.argv[2], "rows": results}, open(sys.argv[1], "w"), indent=1)
