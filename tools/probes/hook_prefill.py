"""The hook's prefill of one 8192-token prompt (H32, D128, page 64, k = 2048; tools.cmd_bench.prefill_step_inputs,
as `mxidx bench` builds it): eager mean of 30 back-to-back calls (three times), the device time of 30 calls queued
behind a GPU-side wait (tools.timing.queued_time_us, three times) and the host's time per call without a sync, per
format; with `profile`, torch.profiler's tables of five calls (the kernels' device time, the host's calls).

    python3 -m tools.probes.hook_prefill LABEL [profile]

prints one JSON line `LABEL {format: {"eager_us": [...], "queued_us": [...], "host_us_per_call": ...}}`. An A/B
of two forms of integration/indexer.py runs it once per form, alternating, each in a process of its own.
"""
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from tools.cmd_bench import prefill_step_inputs
from tools.timing import eager_time_us, queued_time_us


def main(label: str, *options: str) -> None:
    results = {}
    for kv_dtype in ("fp8", "mxfp4"):
        call = prefill_step_inputs(kv_dtype, "cuda", prompt=8192, heads=32, head_dim=128, page_size=64, topk_k=2048)
        call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            call()
        host = (time.perf_counter() - start) / 10 * 1e6
        torch.cuda.synchronize()
        results[kv_dtype] = {"eager_us": [eager_time_us(call, iters=30) for _ in range(3)],
                             "queued_us": [queued_time_us(call, iters=30)[0] for _ in range(3)],
                             "host_us_per_call": host}
        if options == ("profile",):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    call()
                torch.cuda.synchronize()
            for key in ("cuda_time_total", "cpu_time_total"):
                print(prof.key_averages().table(sort_by=key, row_limit=20, max_name_column_width=70), flush=True)
    print(label, json.dumps(results), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
