"""Probes per narrowing round of the exact top-k (radix_fast, both forms), on one GPU in one run.

    PYTHONPATH=. python3 docs/perf/h200-topk-packed-probes.py OUT.json [LABEL]   (LABEL "old": defaults only)

A narrowing round counts the keys >= 2^b - 1 probe values (b: `row_bits` on a whole row or its group maxima,
`tile_bits` on the candidate tile) in one multi-operand reduction of packed 16-bit counts, so b bits per round cost
one block-wide exchange and 2^b - 1 compares per key. Rows: 64 x 8192 and 64 x 131072 (decode), the 8192 causal
rows of a prompt's prefill (row i sees i + 1 keys); N(0, 1) and ReLU-degenerate (70 % exact zeros). Levers: b on
the row x b on the tile, the selecting kernels' warps. Every lever's output is checked equal to the default's.
Times: medians of CUDA-graph replays (tools.cmd_bench's method).
"""
import json
import sys

import torch

import hw
from tools.cmd_bench import _graph_time_us

K, INNER, REPLAYS = 2048, 20, 30


def rows(n, width, kind, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, width, device="cuda", generator=gen)
    return (x - 0.5).clamp_min(0.0) if kind == "relu" else x


def main(out_path, label):
    results = {"device": torch.cuda.get_device_name(0), "label": label,
               "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__}, "rows": []}

    def record(**row):
        results["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)

    levers_only = label == "levers"
    shapes = [("decode", 64, 8192, "normal"), ("decode", 64, 8192, "relu"), ("decode", 64, 131072, "normal"),
              ("decode", 64, 131072, "relu"), ("causal", 8192, 8192, "normal"), ("causal", 8192, 8192, "relu")]
    for name, n, width, kind in shapes:
        x = rows(n, width, kind)
        if name == "causal":
            lengths = torch.arange(1, width + 1, dtype=torch.int32, device="cuda")
        else:
            lengths = torch.full((n,), width, dtype=torch.int32, device="cuda")
        inner = 3 if n >= 4096 else INNER

        def run(sorted_, settings=None):
            fn = lambda: hw.top_k_per_row(x, lengths, K, sorted=sorted_, launch_settings=settings)  # noqa: E731
            return _graph_time_us([fn], inner=inner, replays=REPLAYS), fn()

        base = {}
        for sorted_ in (False, True):
            us, out = run(sorted_)
            base[sorted_] = (us, out)
            record(shape=name, rows=n, width=width, values=kind, sorted=sorted_, lever="default", us=us)
        if not levers_only:
            continue
        grid = [{"row_bits": r, "tile_bits": t} for r in (1, 2, 3, 4) for t in (3, 4)]
        grid += [{"row_bits": r, "tile_bits": 2} for r in (2, 3)]
        warps = (8, 16) if n < 4096 else (4, 8)
        grid += [{"row_bits": r, "num_warps": w} for r in (1, 3) for w in warps if w != 8]
        grid += [{"row_bits": r, "cap": 1024} for r in (2, 3)]
        if n >= 4096:
            grid += [{"row_bits": r, "num_warps": 4, "maxnreg": 168} for r in (1, 3)]
        sorted_levers = [{"row_bits": r} for r in (2, 3, 4)]
        grid += sorted_levers
        for lever in grid:
            for sorted_ in (False, True):
                if sorted_ and lever not in sorted_levers:
                    continue
                try:
                    us, out = run(sorted_, lever)
                except Exception as e:   # a lever that does not compile or launch is a result too
                    record(shape=name, rows=n, width=width, values=kind, sorted=sorted_, lever=lever,
                           error=f"{type(e).__name__}: {str(e)[:200]}")
                    continue
                record(shape=name, rows=n, width=width, values=kind, sorted=sorted_, lever=lever, us=us,
                       vs_default=us / base[sorted_][0], equal=torch.equal(out, base[sorted_][1]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "levers")
