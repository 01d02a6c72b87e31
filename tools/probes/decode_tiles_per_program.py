"""How many programs each decode grid should have: the default decode scorers at 4, 8 or 16 tiles of 64 keys per
program (the `tiles` field of their settings; default stages) over batches 1 / 8 / 64 / 256 and contexts 8192 /
32768 (D128, page 64), FP8 and MXFP4, timed as `mxidx bench` times them (median of CUDA-graph replays over 4
rotating input sets), with the copy ceiling measured in the same run:

    python3 -m tools.probes.decode_tiles_per_program OUT.json [narrow|wide]

narrow (the default): next_n 1 x H32. wide: 64 and 128 query columns (next_n 2 / H32, next_n 1 / H64, next_n 2 /
H64), rows named with their next_n and H.
"""
import sys

from tools.cmd_bench import INPUT_SETS, copy_GBps, decode_inputs
from tools.probes import json_recorder
from tools.timing import graph_time_us

SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
INNER, REPLAYS = 20, 30
QUERIES = {"narrow": ((1, 32),), "wide": ((2, 32), (1, 64), (2, 64))}   # (next_n, heads)


def main(out_path: str, grid: str = "narrow") -> None:
    log = json_recorder(out_path)
    log("copy", copy_GBps(INNER, REPLAYS))
    for (next_n, heads), kv_dtype in ((q, f) for q in QUERIES[grid] for f in ("fp8", "mxfp4")):
        for context in (8192, 32768):
            for batch in (1, 8, 64, 256):
                for tiles in (4, 8, 16):
                    shape = dict(SHAPE, batch=batch, context=context, next_n=next_n, heads=heads)
                    sets = [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, launch_settings={"tiles": tiles},
                                          **shape) for i in range(INPUT_SETS)]
                    us = graph_time_us([call for call, _ in sets], inner=INNER, replays=REPLAYS)
                    programs = batch * -(-context // (64 * tiles))
                    query = "" if (next_n, heads) == (1, 32) else f"N{next_n}H{heads}/"
                    log(f"decode/{kv_dtype}/{query}ctx{context}/B{batch}/tiles{tiles}",
                        {"time_us": us, "GBps": sets[0][1] / us / 1e3, "programs": programs})
                    del sets


if __name__ == "__main__":
    main(*sys.argv[1:3])
