"""One side of an A/B of two checkouts, run in each from its repository root, alternately, in processes of their
own (both checkouts must hold this module): the prefill scorers (8192 and 4096 queries = keys, H32 / D128, full and
causal, FP8 and MXFP4; `mxidx bench`'s inputs and CUDA-graph timing), the q quantizers on 8192 tokens x 32 heads x
128 (bf16, two input sets), the hook's prefill of an 8192-token prompt (eager mean of 30 calls, twice), and checksums
of the bits of one MXFP4 prefill's logits and of one FP8 q quantization, so that the two trees' outputs can be
compared.

    python3 -m tools.probes.prefill_quant_ab LABEL [256]

prints one JSON line `LABEL {...}` (times in us). With 256: only the prefill scorers at D = 256, 4096 queries.
"""
import json
import sys

import torch

import hw
from tools.cmd_bench import prefill_inputs, prefill_step_inputs
from tools.timing import eager_time_us, graph_time_us


def _words_sum(t: torch.Tensor) -> int:
    """The sum of t's elements read as integers of its own width (the checksum of its bits)."""
    return int(t.view({4: torch.int32, 1: torch.uint8}[t.element_size()]).to(torch.int64).sum())


def main(label: str, head_dim: str = "128") -> None:
    head_dim = int(head_dim)
    res = {}
    for fmt in ("mxfp4", "fp8"):
        for n in (8192, 4096) if head_dim == 128 else (4096,):
            for causal in (False, True):
                call, _ = prefill_inputs(fmt, "cuda", queries=n, keys=n, heads=32, head_dim=head_dim, causal=causal)
                us = graph_time_us([call], inner=5 if n == 8192 else 10, replays=10)
                name = f"prefill{'' if head_dim == 128 else f'_D{head_dim}'}/{fmt}/{n}/{'causal' if causal else 'full'}"
                res[name] = round(us, 1)
    if head_dim != 128:
        print(label, json.dumps(res), flush=True)
        return
    gen = torch.Generator(device="cuda").manual_seed(0)
    qs = [torch.randn(8192, 32, 128, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2)]
    ws = [torch.randn(8192, 32, device="cuda", generator=gen) for _ in range(2)]
    res["q_quant/fp8"] = round(graph_time_us([lambda i=i: hw.quantize_q_fp8(qs[i], ws[i]) for i in range(2)],
                                             inner=20, replays=20), 1)
    res["q_quant/mxfp4"] = round(graph_time_us([lambda i=i: hw.quantize_q_mxfp4(qs[i]) for i in range(2)],
                                               inner=20, replays=20), 1)
    for fmt in ("fp8", "mxfp4"):
        call = prefill_step_inputs(fmt, "cuda", prompt=8192, heads=32, head_dim=128, page_size=64, topk_k=2048)
        res[f"hook_prefill/{fmt}"] = [round(eager_time_us(call, iters=30), 1) for _ in range(2)]
    call, _ = prefill_inputs("mxfp4", "cuda", queries=4096, keys=4096, heads=32, head_dim=128, causal=True)
    res["mxfp4_4096_causal_logit_int32_sum"] = _words_sum(call())
    values, folded = hw.quantize_q_fp8(qs[0], ws[0])
    res["q_fp8_int_sum"] = _words_sum(values) + _words_sum(folded)
    print(label, json.dumps(res), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
