"""radix_fast against an earlier copy of itself on the H200, in one run, timed as `mxidx bench` times top-k (median
of CUDA-graph replays), with torch.topk in the same run; both copies' indices are checked against torch.topk's:

    git show COMMIT:hw/_topk_details/radix_fast.py | sed 's/from \\.\\./from hw./; s/from \\.kernel/from hw._topk_details.kernel/' \\
        > radix_before.py
    PYTHONPATH=. python3 docs/perf/h200-topk-ab.py OUT.json radix_before

Rows: 64 x 8192, 16384, 32768 and 131072 (N(0, 1) logits, k = 2048, decode), and the 8192 causal rows of an 8192-token
prompt (row i sees i + 1 columns; the hook's prefill).
"""
import importlib
import sys

import torch

from hw._topk_details import radix_fast
from tools.cmd_bench import json_recorder
from tools.timing import graph_time_us

K, INNER, REPLAYS = 2048, 20, 30


def reference(logits: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the rows with -inf past each row's length, torch.topk's indices of those, -1 past the length)."""
    width = logits.shape[1]
    padded = torch.where(torch.arange(width, device="cuda")[None, :] < lengths[:, None].long(), logits,
                         float("-inf"))
    want = torch.topk(padded, K, dim=1).indices.to(torch.int32)
    return padded, torch.where(torch.arange(K, device="cuda")[None, :] < lengths[:, None], want, -1)


def time_kernel(module, logits: torch.Tensor, lengths: torch.Tensor, want: torch.Tensor, tiling):
    """(graph-replay time in us, whether module._launch's indices equal `want`, its output)."""
    out = torch.empty((logits.shape[0], K), dtype=torch.int32, device="cuda")
    module._launch(logits, lengths, None, out, tiling)
    torch.cuda.synchronize()
    same = bool(torch.equal(out, want))
    us = graph_time_us([lambda: module._launch(logits, lengths, None, out, tiling)], inner=INNER, replays=REPLAYS)
    return us, same, out


def main(out_path: str, before: str) -> None:
    log = json_recorder(out_path)
    old = importlib.import_module(before)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, rows, width, causal in (("64x8192", 64, 8192, False), ("64x16384", 64, 16384, False),
                                      ("64x32768", 64, 32768, False), ("64x131072", 64, 131072, False),
                                      ("causal8192", 8192, 8192, True)):
        logits = torch.randn(rows, width, device="cuda", generator=gen)
        lengths = (torch.arange(1, rows + 1, dtype=torch.int32, device="cuda") if causal
                   else torch.full((rows,), width, dtype=torch.int32, device="cuda"))
        padded, want = reference(logits, lengths)
        us = graph_time_us([lambda: torch.topk(padded, K, dim=1)], inner=INNER, replays=REPLAYS)
        log(f"{name}/torch.topk", {"time_us": us})
        for label, module in (("before", old), ("after", radix_fast)):
            us, same, _ = time_kernel(module, logits, lengths, want, module.fast_tiling(width, K, pdl=True))
            log(f"{name}/{label}", {"time_us": us, "equals_torch": same})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
