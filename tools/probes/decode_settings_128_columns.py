"""The keys-on-M decode scorers at 128 query rows per sequence (next_n x heads = 2 x 64, the DeepSeek-V3.2
indexer's 64 heads with one draft token, or 1 x 128): launch settings (fields of the variants' settings: warps,
64-key tiles per program, pipeline stages) timed like `mxidx bench` times the decode scorer (median of CUDA-graph
replays over 4 rotating input sets), against the copy bandwidth of the same run. A setting that fails to compile or
launch is recorded with its error.

    python3 -m tools.probes.decode_settings_128_columns OUT.json
"""
import itertools
import json
import sys

from tools.cmd_bench import INPUT_SETS, copy_GBps, decode_inputs
from tools.runtime import choose_device
from tools.timing import graph_time_us

SHAPES = [dict(batch=64, next_n=2, heads=64), dict(batch=64, next_n=1, heads=128)]
COMMON = dict(head_dim=128, context=8192, page_size=64)
GRID = [dict(num_warps=w, tiles=t, num_stages=s) for w, t, s in itertools.product((4, 8), (4, 8), (2, 3))]


def main(out_path: str) -> None:
    choose_device("cuda")
    copy = copy_GBps(inner=5, replays=20)["copy_GBps"]
    rows = []
    for shape, variant in itertools.product(SHAPES, ("fp8_keys_m", "mxfp4_keys_m")):
        fmt = variant.split("_")[0]
        for setting in [{}] + GRID:
            row = {"variant": variant, **shape, **setting}
            try:
                sets = [decode_inputs(fmt, "cuda", layout=None, seed=i, variant=variant,
                                      launch_settings=setting or None, **shape, **COMMON) for i in range(INPUT_SETS)]
                us = graph_time_us([call for call, _ in sets], inner=20, replays=20)
                row.update(time_us=us, frac_copy=sets[0][1] / us / 1e3 / copy)
            except Exception as e:  # noqa: BLE001 -- a setting that fails to compile or launch is recorded
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(out_path, "w") as f:
        json.dump({"copy_GBps": copy, "common": COMMON, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
