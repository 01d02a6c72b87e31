"""The MXFP4 decode scorer in Gluon (`mxfp4_keys_m_wgmma`, codes loaded into the wgmma A registers) against the `tl`
fold kernel (`mxfp4_keys_m`) and the FP8 default, timed as `mxidx bench` times them (median of CUDA-graph replays
of `inner` calls cycling through 4 input sets), the copy ceiling measured in the same run:

    python3 -m tools.probes.decode_mxfp4_gluon OUT.json

- the `mxidx bench` shape (B64 / next_n 1 / H32 / D128 / context 8192 / page 64): the three kernels, and whether the
  Gluon kernel's logits equal the `tl` fold kernel's bit for bit;
- a grid: batch 1 / 8 / 64 / 256 x context 8192 / 32768 x (next_n, H) (1, 32), (1, 64), (2, 32), the three kernels
  at their default settings (GB/s: the bytes `mxidx bench` counts).
"""
import sys

import torch

from tools.cmd_bench import INPUT_SETS, copy_GBps, decode_inputs
from tools.probes import json_recorder
from tools.timing import graph_time_us

SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
INNER, REPLAYS = 20, 30
KERNELS = (("fp8", "fp8", None), ("mxfp4_tl", "mxfp4", "mxfp4_keys_m"), ("mxfp4_wgmma", "mxfp4", "mxfp4_keys_m_wgmma"))


def timed(kv_dtype, variant, **shape):
    """({"time_us", "GBps"} of `variant` on `shape`, the call of its first input set)."""
    sets = [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, variant=variant, **shape) for i in range(INPUT_SETS)]
    us = graph_time_us([call for call, _ in sets], inner=INNER, replays=REPLAYS)
    return {"time_us": us, "GBps": sets[0][1] / us / 1e3}, sets[0][0]


def main(out_path: str) -> None:
    log = json_recorder(out_path)
    log("copy", copy_GBps(INNER, REPLAYS))
    outs = {}
    for name, kv_dtype, variant in KERNELS:
        result, call = timed(kv_dtype, variant, **SHAPE)
        log(f"bench/{name}", result)
        outs[name] = call().clone()
    tl_out, wg_out = outs["mxfp4_tl"], outs["mxfp4_wgmma"]
    log("bench/wgmma_vs_tl", {"bit_equal": bool(torch.equal(tl_out, wg_out)),
                              "max_abs_diff_over_max": float((tl_out - wg_out).abs().max() / tl_out.abs().max())})
    for batch in (1, 8, 64, 256):
        for context in (8192, 32768):
            for next_n, heads in ((1, 32), (1, 64), (2, 32)):
                shape = dict(SHAPE, batch=batch, context=context, next_n=next_n, heads=heads)
                for name, kv_dtype, variant in KERNELS:
                    log(f"grid/B{batch}/ctx{context}/N{next_n}/H{heads}/{name}", timed(kv_dtype, variant, **shape)[0])


if __name__ == "__main__":
    main(sys.argv[1])
