"""What programmatic dependent launch is worth in decode: each kernel with PDL on (the NVIDIA default) and off (the
`pdl` field of its settings), in one run, timed as `mxidx bench` times them (median of CUDA-graph replays of
`inner` calls back to back), with the copy ceiling and torch.topk measured in the same run:

    python3 -m tools.probes.decode_pdl OUT.json

- the decode scorer, B64 / next_n 1 / H32 / D128 / context 8192 / page 64, FP8 and MXFP4 (4 input sets);
- the decode step as the hook runs it (scorer + top-k of every row, k = 2048), PDL on or off in both;
- top-k of 64 rows of 8192 and 131072 columns, k = 2048, its selection checked against torch.topk's values.
"""
import sys

import torch

import hw
from tools.cmd_bench import INPUT_SETS, copy_GBps, decode_inputs
from tools.probes import json_recorder
from tools.timing import graph_time_us

SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
TOP_K, INNER, REPLAYS = 2048, 20, 30
SETTINGS = {"on": None, "off": {"pdl": False}}


def decode_cases(log) -> None:
    lengths = torch.full((SHAPE["batch"],), SHAPE["context"], dtype=torch.int32, device="cuda")
    for kv_dtype in ("fp8", "mxfp4"):
        for mode, settings in SETTINGS.items():
            sets = [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, launch_settings=settings, **SHAPE)
                    for i in range(INPUT_SETS)]
            moved = sets[0][1]
            us = graph_time_us([call for call, _ in sets], inner=INNER, replays=REPLAYS)
            log(f"decode/{kv_dtype}/pdl_{mode}", {"time_us": us, "GBps": moved / us / 1e3})

            def step(call):
                return lambda: hw.top_k_per_row(call(), lengths, TOP_K, launch_settings=settings)
            us = graph_time_us([step(call) for call, _ in sets], inner=INNER, replays=REPLAYS)
            log(f"decode_step/{kv_dtype}/pdl_{mode}", {"time_us": us})


def topk_cases(log) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    for width in (8192, 131072):
        logits = torch.randn(64, width, device="cuda", generator=gen)
        lengths = torch.full((64,), width, dtype=torch.int32, device="cuda")
        want = torch.topk(logits, TOP_K, dim=1)
        for mode, settings in SETTINGS.items():
            out = hw.top_k_per_row(logits, lengths, TOP_K, launch_settings=settings)
            same = bool(torch.equal(torch.gather(logits, 1, out.long()), want.values))
            us = graph_time_us([lambda: hw.top_k_per_row(logits, lengths, TOP_K, launch_settings=settings)],
                               inner=INNER, replays=REPLAYS)
            log(f"topk/64x{width}/pdl_{mode}", {"time_us": us, "same_values_as_torch": same})
        log(f"topk/64x{width}/torch.topk", {"time_us": graph_time_us([lambda: torch.topk(logits, TOP_K, dim=1)],
                                                                     inner=INNER, replays=REPLAYS)})


def main(out_path: str) -> None:
    log = json_recorder(out_path)
    log("copy", copy_GBps(INNER, REPLAYS))
    decode_cases(log)
    topk_cases(log)


if __name__ == "__main__":
    main(sys.argv[1])
