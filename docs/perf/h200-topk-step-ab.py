"""The decode step as `mxidx bench` times it (B64/N1/H32/D128, context 8192, page 64: the default scorer, then the
hook's top-k 2048 of every row; median of CUDA-graph replays over 4 input sets) with radix_fast's launch swapped for
other forms of the kernel given as modules, and the tree's; FP8 and MXFP4, two rounds, in one process:

    PYTHONPATH=.:DIR python3 docs/perf/h200-topk-step-ab.py OUT.json radix_before [MODULE ...]

(a commit's kernel as a module: see h200-topk-counting.py).
"""
import importlib
import json
import sys

import torch

from hw._topk_details import radix_fast
from hw.targets import sm_count
from tools.cmd_bench import _decode_case

SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)


def _launch_of(module):
    """The module's launch with its own launch constants for the call (its FastTiling may have other fields than
    the tree's, whose settings the variant passes)."""
    sms = sm_count(torch.device("cuda"))

    def launch(logits, lengths, starts, out, tiling):
        own = module.fast_tiling(logits.shape[1], out.shape[1], pdl=tiling.pdl, rows=logits.shape[0], sms=sms)
        module._launch(logits, lengths, starts, out, own)
    return launch


def main(out_path: str, *others: str) -> None:
    kernels = [(name, _launch_of(importlib.import_module(name))) for name in others] + [("tree", radix_fast._launch)]
    results = {}
    for round_ in range(2):
        for label, launch in kernels:
            radix_fast._launch = launch     # what the variant's launch calls
            for kv_dtype in ("fp8", "mxfp4"):
                us = _decode_case(kv_dtype, layout=None, variant=None, inner=20, replays=30, topk_k=2048,
                                  **SHAPE)["time_us"]
                results.setdefault(f"{kv_dtype}/{label}", []).append(us)
                print(round_, kv_dtype, label, round(us, 2), flush=True)
                with open(out_path, "w") as f:
                    json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
