"""@triton.jit bodies of the paged -> contiguous K gather (launcher: hw/gather.py) and their cross-compile specs
(tools/isa.py).

kernels.py   gather_fp8_kernel, gather_mxfp4_kernel (planar or tiled pages; offsets shared with the writer)
"""
from __future__ import annotations

import triton

from ..isa_spec import CompileSpec
from .kernels import gather_fp8_kernel, gather_mxfp4_kernel

BLOCK_T = 16    # output rows per program on a GPU
GATHER_INTERPRETER_BLOCK_T = 512   # in the CPU interpreter, which pays per Triton operation rather than per row
BLOCK_B = 64    # sequence ends compared per step of the row -> sequence search
GATHER_WARPS = 4


def _spec(layout: str, head_dim: int, page_size: int) -> CompileSpec:
    mx = layout != "fp8"
    constexprs = {"D": head_dim, "D_PAD": triton.next_power_of_2(head_dim), "P": page_size, "BLOCK_T": BLOCK_T,
                  "BLOCK_B": BLOCK_B, "HAS_FLAG": False}
    if mx:
        constexprs["TILED"] = layout == "mxfp4_tiled"
    return CompileSpec(
        label=f"gather/{layout}/D{head_dim}/P{page_size}", fn=gather_mxfp4_kernel if mx else gather_fp8_kernel,
        types={"cache_ptr": "*u8", "block_table_ptr": "*i32", "cu_ptr": "*i32",
               ("codes_ptr" if mx else "values_ptr"): "*u8", "scales_ptr": "*u8" if mx else "*i32", "flag_ptr": "*i32"},
        constexprs=constexprs, num_warps=GATHER_WARPS,
        aligned=("cache_ptr", "codes_ptr" if mx else "values_ptr", "scales_ptr", "page_stride"))


ISA_SPECS = (_spec("fp8", 128, 64), _spec("fp8", 32, 16), _spec("mxfp4", 128, 64), _spec("mxfp4", 64, 16),
             _spec("mxfp4", 32, 64), _spec("mxfp4_tiled", 128, 64), _spec("mxfp4_tiled", 256, 16))
