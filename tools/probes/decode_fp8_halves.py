"""FP8 decode at 128 query columns (next_n 2 x H64, next_n 4 x H32): the key tile's query columns as two MMAs of
whole tokens (the `fp8_halves` field of `fp8_keys_m`'s settings) against one MMA of all 128, each at the grid's
default tiles and at 4 / 8 / 16 tiles of 64 keys per program, and the default (halves, but on grids of at most one
program per SM); timed like `mxidx bench` times the decode scorer (median of CUDA-graph replays over 4 rotating input
sets) against the copy bandwidth of the same run. The logits of the two forms are compared on the first input set
over the columns every query row sees (the others are unspecified without clean_logits): the largest difference
over the entries finite in both, and the count of entries finite in only one.

    python3 -m tools.probes.decode_fp8_halves OUT.json
"""
import json
import sys

import torch

from tools.cmd_bench import INPUT_SETS, copy_GBps, decode_inputs
from tools.runtime import choose_device
from tools.timing import graph_time_us

SHAPES = [(64, 8192, 2, 64), (256, 8192, 2, 64), (64, 32768, 2, 64), (8, 32768, 2, 64), (16, 8192, 2, 64),
          (8, 8192, 2, 64), (8, 2048, 2, 64), (1, 32768, 2, 64), (64, 8192, 4, 32)]
COMMON = dict(head_dim=128, page_size=64, layout=None)
SETTINGS = [{}, {"fp8_halves": True}, {"fp8_halves": False}] + [
    {"fp8_halves": halves, "tiles": tiles} for halves in (True, False) for tiles in (4, 8, 16)]


def main(out_path: str) -> None:
    choose_device("cuda")
    copy = copy_GBps(inner=5, replays=20)["copy_GBps"]
    rows = []
    for batch, context, next_n, heads in SHAPES:
        shape = dict(batch=batch, context=context, next_n=next_n, heads=heads)
        logits = {}
        for setting in SETTINGS:
            row = {**shape, **setting}
            sets = [decode_inputs("fp8", "cuda", seed=i, variant="fp8_keys_m", launch_settings=setting or None,
                                  **shape, **COMMON) for i in range(INPUT_SETS)]
            us = graph_time_us([call for call, _ in sets], inner=20, replays=20)
            row.update(time_us=us, frac_copy=sets[0][1] / us / 1e3 / copy)
            if list(setting) == ["fp8_halves"]:
                logits[setting["fp8_halves"]] = sets[0][0]().clone()
            rows.append(row)
            print(json.dumps(row), flush=True)
        seen = context - (next_n - 1)
        on, off = logits[True][:, :seen], logits[False][:, :seen]
        both = torch.isfinite(on) & torch.isfinite(off)
        rows.append({**shape, "max_abs_diff": (on[both] - off[both]).abs().max().item(),
                     "finite_in_one": int((torch.isfinite(on) != torch.isfinite(off)).sum())})
        print(json.dumps(rows[-1]), flush=True)
    with open(out_path, "w") as f:
        json.dump({"copy_GBps": copy, "common": COMMON, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
