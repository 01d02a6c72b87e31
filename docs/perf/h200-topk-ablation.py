"""Where the radix_fast top-k spends its time on the H200: the kernel with phases cut out (a patched copy of
hw/_topk_details/radix_fast.py per row; the cut kernels give wrong results and only bound each phase's cost), timed
like `mxidx bench` times the top-k (median of CUDA-graph replays), torch.topk and a bare tl.sort in the same run.
Command: PYTHONPATH=. python3 docs/perf/h200-topk-ablation.py OUT.json
"""
import importlib.util
import json
import pathlib
import sys
import tempfile

import torch
import triton
import triton.language as tl

from tools.cmd_bench import _graph_time_us
from tools.runtime import choose_device

SOURCE = pathlib.Path("hw/_topk_details/radix_fast.py").read_text().replace("from ..", "from hw.").replace(
    "from .kernel", "from hw._topk_details.kernel")
ROW_TAIL = ("    if direct == 0:\n        _finish_candidates(cand_row, ge_lo - above, lo, hi, ge_lo, above, k_eff, "
            "out_row, CAP, PROBE_BITS)\n    _order_selected(row_ptr, out_row, k_eff, k, K_PAD)\n")
ROW_NARROW = "    while (ge_lo != k_eff) & (lo < hi) & (ge_lo - above > CAP):\n        lo, hi, ge_lo, above = _narrow(key, 0"
LONG_ORDER = "        _finish_candidates(cand_row, ge_lo - above, lo, hi, ge_lo, above, k_eff, out_row, CAP, PROBE_BITS)\n" \
             "    _order_selected(row_ptr, out_row, k_eff, k, K_PAD)\n"
PATCHES = {
    "full": [],
    "warps4": [("NUM_WARPS = 8", "NUM_WARPS = 4")],
    "warps16": [("NUM_WARPS = 8", "NUM_WARPS = 16")],
    "no_order": [(ROW_TAIL, ROW_TAIL.replace("    _order_selected(row_ptr, out_row, k_eff, k, K_PAD)\n", "")),
                 (LONG_ORDER, LONG_ORDER.replace("    _order_selected(row_ptr, out_row, k_eff, k, K_PAD)\n", ""))],
    "no_finish_no_order": [(ROW_TAIL, "")],
    "split_only": [(ROW_TAIL, ""), (ROW_NARROW, ROW_NARROW.replace("> CAP)", "> (1 << 30))"))],
}


def load(name, patches):
    src = SOURCE
    for old, new in patches:
        assert old in src, (name, old)
        src = src.replace(old, new)
    path = pathlib.Path(tempfile.mkdtemp()) / f"topk_{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"topk_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@triton.jit
def _sort_kernel(x_ptr, out_ptr, N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x = tl.load(x_ptr + row * N + tl.arange(0, N))
    tl.store(out_ptr + row * N + tl.arange(0, N), tl.sort(x, descending=True))


choose_device("cuda")
rows, k = 64, 2048
results = []
for width in (8192, 131072):
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(rows, width, device="cuda", generator=gen)
    lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
    out = torch.empty((rows, k), dtype=torch.int32, device="cuda")
    ref = _graph_time_us([lambda: torch.topk(logits, k, dim=1)], inner=20, replays=30)
    results.append({"width": width, "case": "torch.topk", "time_us": ref})
    for name, patches in PATCHES.items():
        if width > 8192 and name in ("no_finish_no_order", "split_only"):
            continue
        mod = load(name, patches)
        try:
            us = _graph_time_us([lambda: mod.top_k_radix_fast(logits, lengths, None, k, out)], inner=20, replays=30)
            row = {"width": width, "case": name, "time_us": us, "vs_torch": us / ref}
        except Exception as e:  # noqa: BLE001 -- a patched kernel that fails is recorded
            row = {"width": width, "case": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        results.append(row)
        print(json.dumps(row), flush=True)
for n, warps in ((2048, 4), (2048, 8), (2048, 16), (4096, 8)):
    x = torch.randint(-2 ** 62, 2 ** 62, (rows, n), device="cuda", dtype=torch.int64)
    y = torch.empty_like(x)
    us = _graph_time_us([lambda: _sort_kernel[(rows,)](x, y, N=n, num_warps=warps)], inner=20, replays=30)
    row = {"case": f"tl.sort int64 x{n}, {warps} warps, {rows} rows", "time_us": us}
    results.append(row)
    print(json.dumps(row), flush=True)
json.dump(results, open(sys.argv[1], "w"), indent=1)
