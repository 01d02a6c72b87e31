"""The MXFP4 keys-on-M decode scorer with the `tl` fold (`mxfp4_keys_m`) at other launch settings (pipeline stages,
64-key tiles per program, warps: fields of its settings), FP8's default in the same run, at the `mxidx bench` shape,
timed like `mxidx bench` times the decode scorer (median of CUDA-graph replays over 4 rotating input sets), against
the copy bandwidth of the same run. A setting that fails to compile is recorded with its error.

    python3 -m tools.probes.decode_mxfp4_fold_settings OUT.json

docs/perf/h200-keys-m-levers.json holds more rows: the fold-loop levers mx_split, mx_scales and mx_wide, settings
since deleted (the kernel takes their winners: the split K order, natural order only at D = 32; the per-column
scale select; the overwrite of wide keys).
"""
import json
import sys

from tools.cmd_bench import copy_GBps
from tools.probes import decode_settings_row
from tools.runtime import choose_device

SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
COMBOS = [("fp8_keys_m", {}), ("mxfp4_keys_m", {}), ("mxfp4_keys_m", {"num_stages": 2}),
          ("mxfp4_keys_m", {"num_stages": 4}), ("mxfp4_keys_m", {"tiles": 4}),
          ("mxfp4_keys_m", {"tiles": 16}), ("mxfp4_keys_m", {"num_warps": 8})]


def main(out_path: str) -> None:
    choose_device("cuda")
    rows = []
    copy = copy_GBps(inner=5, replays=20)["copy_GBps"]
    for variant, setting in COMBOS:
        rows.append({"variant": variant, **setting, **decode_settings_row(variant, setting, copy, replays=30, **SHAPE)})
        print(json.dumps(rows[-1]), flush=True)
    with open(out_path, "w") as f:
        json.dump({"copy_GBps": copy, "shape": SHAPE, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
