"""The column-order top-k (`hw.top_k_per_row(..., sorted=False)`) against the sorted one and torch.topk, and what
its levers are worth, on one GPU in one run. Times: medians of CUDA-graph replays, as `mxidx bench` times them.

    python3 -m tools.probes.topk_columns OUT.json

Rows: 64 x 8192 and 64 x 131072 (decode), 132 / 264 / 528 / 1056 x 8192 full rows, the 8192 causal rows of a
prompt's prefill (row i sees i + 1 keys), the same causal rows without the 2048 short ones (what the short rows
cost) and the 4096 causal rows of a 4096-token prompt; N(0, 1) and ReLU-degenerate rows (70 % exact zeros: a
threshold tie larger than any candidate tile). Levers, by launch settings of the radix_fast variant, on the on-chip
path: programs per SM for more rows than SMs (one uncapped program and one tile; a register cap of 128 / 80 / 64
for 2 / 3 / 4 programs of 8 warps, with 2 tiles, 80 also with 3; fast.COLUMNS_MAXNREG), and the candidate tile (cap
64 / 256 / 512; fast.COLUMNS_ROW_CAP). Every lever's output is checked equal to the default's. The decode step:
the default FP8 and MXFP4 scorers alone, with the column-order top-k, with the sorted one.
"""
import json
import sys
import time

import torch

import hw
from tools.cmd_bench import decode_case
from tools.timing import graph_time_us

K, INNER, REPLAYS = 2048, 20, 30


def rows(n, width, kind, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, width, device="cuda", generator=gen)
    return (x - 0.5).clamp_min(0.0) if kind == "relu" else x


def time_topk(x, lengths, sorted_, inner=INNER, **settings):
    fn = lambda: hw.top_k_per_row(x, lengths, K, sorted=sorted_, launch_settings=settings or None)  # noqa: E731
    return graph_time_us([fn], inner=inner, replays=REPLAYS), fn()


def main(out_path):
    results = {"device": torch.cuda.get_device_name(0),
               "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__}, "rows": []}

    def record(**row):
        results["rows"].append(row)
        print(json.dumps(row), flush=True)

    shapes = [("decode", 64, 8192, False), ("decode", 64, 131072, False), ("full", 132, 8192, False),
              ("full", 264, 8192, False), ("full", 528, 8192, False), ("full", 1056, 8192, False),
              ("causal", 8192, 8192, True), ("causal_long_rows", 6144, 8192, True), ("causal", 4096, 4096, True)]
    for name, n, width, causal in shapes:
        for kind in ("normal", "relu"):
            x = rows(n, width, kind)
            if causal:   # causal_long_rows: the last 6144 rows of the 8192 (each sees more than k keys)
                lengths = torch.arange(width - n + 1, width + 1, dtype=torch.int32, device="cuda")
            else:
                lengths = torch.full((n,), width, dtype=torch.int32, device="cuda")
            padded = x.masked_fill(torch.arange(width, device="cuda") >= lengths[:, None], float("-inf"))
            inner = 3 if n >= 4096 else INNER
            sorted_us, sorted_out = time_topk(x, lengths, True, inner)
            cols_us, cols_out = time_topk(x, lengths, False, inner)
            key = torch.where(sorted_out < 0, 2 ** 31 - 1, sorted_out).sort(dim=1).values
            same = torch.equal(torch.where(key == 2 ** 31 - 1, -1, key), cols_out)
            torch_us = graph_time_us([lambda: torch.topk(padded, K, dim=1)], inner=inner, replays=REPLAYS)
            torch_unsorted = graph_time_us([lambda: torch.topk(padded, K, dim=1, sorted=False)], inner=inner,
                                            replays=REPLAYS)
            record(shape=name, rows=n, width=width, values=kind, sorted_us=sorted_us, columns_us=cols_us,
                   torch_topk_us=torch_us, torch_unsorted_us=torch_unsorted, columns_vs_torch=cols_us / torch_us,
                   columns_equal_sorted_selection=same)
            levers = []
            if width <= 8192 and n > torch.cuda.get_device_properties(0).multi_processor_count:
                levers += [{"maxnreg": None, "tiers": 1}, {"maxnreg": 128, "tiers": 2}, {"maxnreg": 80, "tiers": 2},
                           {"maxnreg": 80, "tiers": 3}, {"maxnreg": 64, "tiers": 2}]
            if width <= 8192:
                levers += [{"cap": 64}, {"cap": 256}, {"cap": 512}]
            for lever in levers:
                us, out = time_topk(x, lengths, False, inner, **lever)
                record(shape=name, rows=n, width=width, values=kind, lever=lever, columns_us=us,
                       vs_default=us / cols_us, equal=torch.equal(out, cols_out))
    for kv_dtype in ("fp8", "mxfp4"):
        shape = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
        scorer = decode_case(kv_dtype, layout=None, variant=None, inner=INNER, replays=REPLAYS, **shape)["time_us"]
        step = {order: decode_case(kv_dtype, layout=None, variant=None, inner=INNER, replays=REPLAYS, topk_k=K,
                                   sorted_top_k=order == "sorted", **shape)["time_us"]
                for order in ("columns", "sorted")}
        record(shape="decode_step", format=kv_dtype, scorer_us=scorer, step_columns_us=step["columns"],
               step_sorted_us=step["sorted"], columns_vs_scorer=step["columns"] / scorer,
               sorted_vs_scorer=step["sorted"] / scorer)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    t0 = time.time()
    main(sys.argv[1])
    print(f"{time.time() - t0:.0f} s", file=sys.stderr)
