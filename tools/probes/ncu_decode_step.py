"""The kernels of a decode step, one launch each, for Nsight Compute: where the time of the decode scorers and of
the top-k goes, instruction by instruction.

    ncu --clock-control none --set full --import-source yes -k regex:KERNEL -c 1 -o REPORT \\
        python3 -m tools.probes.ncu_decode_step CASE

CASE: fp8 | mxfp4 (the default decode scorer, B64 / next_n 1 / H32 / D128 / context 8192 / page 64, the
`mxidx bench` shape), topk (64 rows x 8192, k = 2048, sorted), columns (the same rows in column order: one kernel,
one program a row), causal (the 8192 causal rows of a prompt's prefill in column order: one kernel, several
programs an SM) or long (64 rows x 131072 in column order: the sample, the sweep and the finish; `--launch-skip 3
-c 3`). Every kernel runs once to compile, then once more: profile the second launch (`--launch-skip 1 -c
1` for a scorer and the column-order cases; the sorted top-k's kernels: `--launch-skip 2 -c 2`, KERNEL the names of
its two kernels). The tables of docs/perf/ncu are the metric rows of `ncu -i REPORT --page details --csv`
(kernel, block, grid, section, metric, unit, value); the per-instruction samples come from `--page source --csv
--print-source sass`.
"""
import sys

import torch

import hw
from tools.cmd_bench import decode_inputs

SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)


def main(case: str) -> None:
    if case in ("fp8", "mxfp4"):
        call, _ = decode_inputs(case, "cuda", layout=None, **SHAPE)
        fns = [call]
    elif case in ("topk", "columns", "causal", "long"):
        rows, width = 8192 if case == "causal" else 64, 131072 if case == "long" else 8192
        logits = torch.randn(rows, width, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
        lengths = (torch.arange(1, rows + 1, dtype=torch.int32, device="cuda") if case == "causal"
                   else torch.full((rows,), width, dtype=torch.int32, device="cuda"))
        fns = [lambda: hw.top_k_per_row(logits, lengths, 2048, sorted=case == "topk")]
    else:
        raise SystemExit(f"unknown case {case!r}: use fp8, mxfp4, topk, columns, causal or long")
    for _ in range(2):
        for fn in fns:
            fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1])
