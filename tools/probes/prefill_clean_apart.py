"""Prefill with clean_logits: the -inf columns outside each program's key tiles stored by the scorer against
clean_outside_kernel after it (the `clean_apart` field of the keys-on-M prefill variants' settings; MXFP4's NVIDIA
default); FP8 and MXFP4, 8192 and 4096 queries = keys, H32 / D128, full and causal; timed as `mxidx bench` times
prefill (median of CUDA-graph replays), the forms alternating over two rounds in one process, their outputs compared
bit for bit (every entry, -inf included).

    python3 -m tools.probes.prefill_clean_apart OUT.json
"""
import json
import sys

import torch

from tools.cmd_bench import prefill_inputs
from tools.runtime import choose_device
from tools.timing import graph_time_us

SHAPES = [(kv_dtype, size, causal) for size in (8192, 4096) for kv_dtype in ("fp8", "mxfp4")
          for causal in (True, False)]
ROUNDS, INNER, REPLAYS = 2, 3, 10
FORMS = {"scorer": {"clean_apart": False}, "apart": {"clean_apart": True}}


def main(out_path: str) -> None:
    choose_device("cuda")
    rows = []
    for kv_dtype, size, causal in SHAPES:
        calls = {}
        for form, settings in FORMS.items():
            calls[form], flops = prefill_inputs(kv_dtype, "cuda", queries=size, keys=size, heads=32, head_dim=128,
                                                causal=causal, variant=f"{kv_dtype}_keys_m",
                                                launch_settings=settings)
        want = calls["scorer"]()
        same = {form: torch.equal(call(), want) for form, call in calls.items()}
        del want
        for r in range(ROUNDS):
            for form, call in calls.items():
                us = graph_time_us([call], inner=INNER, replays=REPLAYS)
                rows.append({"format": kv_dtype, "size": size, "causal": causal, "form": form, "round": r,
                             "time_us": us, "TFLOPs": flops / us / 1e6, "output_equal": same[form]})
                print(json.dumps(rows[-1]), flush=True)
        del calls
        torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
