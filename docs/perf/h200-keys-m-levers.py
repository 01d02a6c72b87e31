"""The MXFP4 keys-on-M decode levers on the H200 (each a field of paged_keys_m.KeysMSettings), timed like
`mxidx bench` times the decode scorer (median of CUDA-graph replays over 4 rotating input sets), FP8 in the same
run. Command: PYTHONPATH=. python3 docs/perf/h200-keys-m-levers.py OUT.json

The fold-loop levers mx_split, mx_scales and mx_wide were deleted after this timing (h200-keys-m-levers.json
keeps their rows): the kernel now always takes their winners, the split K order (natural order only at D = 32),
the per-column scale select (mx_scales=1) and the overwrite of wide keys (mx_wide=2). COMBOS keeps the settings
that still exist; the deleted rows were {"mx_wide": 1}, {"mx_wide": 0}, {"mx_scales": 1}, {"mx_scales": 2},
{"mx_split": 0} and {"mx_split": 0, "mx_wide": 0} (the default then had mx_scales=0).
"""
import json
import sys

from tools.cmd_bench import INPUT_SETS, _copy_GBps, decode_inputs
from tools.timing import graph_time_us
from tools.runtime import choose_device

SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
COMBOS = [("fp8_keys_m", {}), ("mxfp4_keys_m", {}), ("mxfp4_keys_m", {"num_stages": 2}),
          ("mxfp4_keys_m", {"num_stages": 4}), ("mxfp4_keys_m", {"tiles": 4}),
          ("mxfp4_keys_m", {"tiles": 16}), ("mxfp4_keys_m", {"num_warps": 8})]

choose_device("cuda")
rows = []
copy = _copy_GBps(inner=5, replays=20)["copy_GBps"]
for variant, setting in COMBOS:
    fmt = variant.split("_")[0]
    sets = [decode_inputs(fmt, "cuda", layout=None, seed=i, variant=variant, launch_settings=setting, **SHAPE)
            for i in range(INPUT_SETS)]
    try:
        us = graph_time_us([call for call, _ in sets], inner=20, replays=30)
        row = {"variant": variant, **setting, "time_us": us, "frac_copy": sets[0][1] / us / 1e3 / copy}
    except Exception as e:  # noqa: BLE001 -- a lever that fails to compile is recorded
        row = {"variant": variant, **setting, "error": f"{type(e).__name__}: {str(e)[:200]}"}
    rows.append(row)
    print(json.dumps(row), flush=True)
json.dump({"copy_GBps": copy, "shape": SHAPE, "rows": rows}, open(sys.argv[1], "w"), indent=1)
