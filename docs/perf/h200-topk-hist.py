"""The histogram first step of the top-k's narrowing (FastTiling.hist_bits: 0 off, 8 or 11 bits of the key) on one
GPU: the column-order row kernel (decode rows, many rows, the causal prefill rows) and tau on the long path (both
orders), each against hist_bits = 0 in the same run, outputs checked equal. Medians of CUDA-graph replays.

    PYTHONPATH=. python3 docs/perf/h200-topk-hist.py OUT.json
"""
import json
import sys

import torch

import hw
from tools.cmd_bench import _graph_time_us

K = 2048


def main(out_path):
    rows_out = []
    shapes = [(64, 8192, False), (132, 8192, False), (1056, 8192, False), (8192, 8192, True), (64, 131072, False)]
    for n, width, causal in shapes:
        for kind in ("normal", "relu"):
            gen = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(n, width, device="cuda", generator=gen)
            x = (x - 0.5).clamp_min(0.0) if kind == "relu" else x
            lengths = (torch.arange(1, n + 1, dtype=torch.int32, device="cuda") if causal
                       else torch.full((n,), width, dtype=torch.int32, device="cuda"))
            inner = 3 if n >= 4096 else 20
            for sorted_ in ((False, True) if width > 8192 else (False,)):
                base = None
                for bits in (0, 8, 11):
                    fn = lambda: hw.top_k_per_row(x, lengths, K, sorted=sorted_,  # noqa: E731
                                                  launch_settings={"hist_bits": bits})
                    us = _graph_time_us([fn], inner=inner, replays=20)
                    out = fn()
                    base = base or (us, out)
                    row = dict(rows=n, width=width, causal=causal, values=kind, sorted=sorted_, hist_bits=bits,
                               time_us=us, vs_off=us / base[0], equal=torch.equal(out, base[1]))
                    rows_out.append(row)
                    print(json.dumps(row), flush=True)
    with open(out_path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "triton": __import__("triton").__version__,
                   "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
