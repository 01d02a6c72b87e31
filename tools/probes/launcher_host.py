"""Host time per call of the launchers and of the hook's prefill (docs/perf/h200-prefill-ablation.md, "The hook's
prefill is host-bound"): time.perf_counter over calls without a sync, in chunks with a sync between them, so that the
GPU's queue never fills. The launchers at small shapes (their device time is far below their host time): the
column-order top-k of 64 x 8192, the q quantizer of 64 tokens, the causal prefill scorers at 256 x 256; the hook's
prefill of an 8192- and a 512-token prompt (H32, D128, k = 2048; also its eager mean, tools.timing.eager_time_us).

    python3 -m tools.probes.launcher_host LABEL OUT.jsonl

appends one JSON line {"label": LABEL, NAME: us, ...} to OUT.jsonl. An A/B of two trees runs it once per tree,
alternating, each in a process of its own (PYTHONPATH selects the tree).
"""
import json
import sys
import time

import torch

import hw
from tools.cmd_bench import prefill_inputs, prefill_step_inputs
from tools.timing import eager_time_us


def host_us(fn, calls: int, chunk: int) -> float:
    """Host microseconds per call of fn() over `calls` calls after 3 warm-up calls, a sync every `chunk` calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    total = 0.0
    for _ in range(calls // chunk):
        start = time.perf_counter()
        for _ in range(chunk):
            fn()
        total += time.perf_counter() - start
        torch.cuda.synchronize()
    return total / (calls // chunk * chunk) * 1e6


def main(label: str, out_path: str) -> None:
    device = "cuda"
    logits = torch.randn(64, 8192, device=device)
    lengths = torch.full((64,), 8192, dtype=torch.int32, device=device)
    out = torch.empty(64, 2048, dtype=torch.int32, device=device)
    q = torch.randn(64, 32, 128, device=device).bfloat16()
    weights = torch.randn(64, 32, device=device)
    result = {"label": label}
    result["topk_64x8192_columns"] = host_us(
        lambda: hw.top_k_per_row(logits, lengths, 2048, sorted=False, out=out), 600, 100)
    result["quantize_q_fp8_64"] = host_us(lambda: hw.quantize_q_fp8(q, weights), 600, 100)
    for kv_dtype in ("fp8", "mxfp4"):
        scorer, _ = prefill_inputs(kv_dtype, device, queries=256, keys=256, heads=32, head_dim=128, causal=True)
        result[f"scorer_{kv_dtype}_256_causal"] = host_us(scorer, 600, 100)
    for kv_dtype in ("fp8", "mxfp4"):
        for prompt, calls, chunk in ((8192, 40, 20), (512, 200, 50)):
            call = prefill_step_inputs(kv_dtype, device, prompt=prompt, heads=32, head_dim=128, page_size=64,
                                       topk_k=2048)
            result[f"hook_prefill_{prompt}_{kv_dtype}_host"] = host_us(call, calls, chunk)
            result[f"hook_prefill_{prompt}_{kv_dtype}_eager"] = [eager_time_us(call, iters=30) for _ in range(2)]
    print(json.dumps(result), flush=True)
    with open(out_path, "a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
