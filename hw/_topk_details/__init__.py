"""@triton.jit body of the per-row top-k (launcher: hw/topk.py) and its cross-compile specs (hw/isa.py).

kernel.py   top_k_per_row_kernel: exact radix select on order-preserving uint32 keys + compaction + sort
"""
from __future__ import annotations

import triton

from .._isa_spec import CompileSpec
from .kernel import top_k_per_row_kernel

MAX_K = 2048       # the reference models' k; the sort of the selected K_PAD slots lives in registers
MIN_K_PAD = 16     # smallest sort width (tiny k share one compiled variant)
# Columns per chunk of the streaming passes and warps per program: a compromise from a sweep of BLOCK 1024..8192 x
# 4/8/16 warps on the H200 (triton 3.6, 2026-11-30), k = 2048. This setting / the sweep's best for that shape:
# 64 rows x 128K 603 / 518 us (8192, 16 warps), 64 x 8K 71 / 55 us (8192, 16), 4096 x 8K 1496 / 1439 us (2048, 8);
# 8192 x 16 warps is 1622 us on the last. (BLOCK 1024 x 4 warps: 1042, 96, 1685 us.)
BLOCK = 4096
NUM_WARPS = 8


def k_pad(k: int) -> int:
    """Register-resident sort width for k: the next power of two, at least MIN_K_PAD."""
    return max(MIN_K_PAD, triton.next_power_of_2(k))


def _spec(k: int, has_starts: bool) -> CompileSpec:
    return CompileSpec(
        label=f"topk/k{k}" + ("/ragged" if has_starts else ""),
        fn=top_k_per_row_kernel,
        signature={"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "out_ptr": "*i32",
                   "width": "i32", "stride_row": "i32", "k": "i32"},
        constexprs={"HAS_STARTS": has_starts, "K_PAD": k_pad(k), "BLOCK": BLOCK},
        num_warps=NUM_WARPS,
    )


# decode (lengths only) at the reference k and a small k; ragged prefill at the reference k
ISA_SPECS = (_spec(MAX_K, False), _spec(64, False), _spec(MAX_K, True))
