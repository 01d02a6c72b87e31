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

from tools.cmd_bench import copy_GBps
from tools.probes import decode_settings_row
from tools.runtime import choose_device

SHAPES = [dict(batch=64, next_n=2, heads=64), dict(batch=64, next_n=1, heads=128)]
COMMON = dict(head_dim=128, context=8192, page_size=64)
GRID = [dict(num_warps=w, tiles=t, num_stages=s) for w, t, s in itertools.product((4, 8), (4, 8), (2, 3))]


def main(out_path: str) -> None:
    choose_device("cuda")
    copy = copy_GBps(inner=5, replays=20)["copy_GBps"]
    rows = []
    for shape, variant in itertools.product(SHAPES, ("fp8_keys_m", "mxfp4_keys_m")):
        for setting in [{}] + GRID:
            rows.append({"variant": variant, **shape, **setting,
                         **decode_settings_row(variant, setting, copy, replays=20, **shape, **COMMON)})
            print(json.dumps(rows[-1]), flush=True)
    with open(out_path, "w") as f:
        json.dump({"copy_GBps": copy, "common": COMMON, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
