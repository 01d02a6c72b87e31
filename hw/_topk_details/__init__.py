"""@triton.jit bodies of the top-k (launcher: hw/topk.py) and their cross-compile specs (tools/isa.py).

kernel.py   top_k_per_row_kernel: one program per row (compiled GPUs; the path verified on the H200)
            top_k_rows_kernel: a [ROWS, BLOCK] tile of rows per program, ranking instead of tl.sort (the CPU
            interpreter, where a Triton op costs about the same for one row as for hundreds)
"""
from __future__ import annotations

from dataclasses import dataclass

import triton

from ..checks import triton_version
from ..isa_spec import CompileSpec
from ..targets import LaunchSettings
from .kernel import top_k_per_row_kernel

MAX_K = 2048       # the reference models' k; the sort of the selected K_PAD slots lives in registers
MIN_K_PAD = 16     # smallest sort width (tiny k share one compiled variant)
# Columns per chunk of the streaming passes and warps per program: the best compromise of an H200 sweep over
# BLOCK 1024..8192 x 4/8/16 warps at k = 2048 and several row shapes (docs/perf/h200-first-numbers.md)
BLOCK = 4096
PER_ROW_WARPS = 8
#: NVIDIA under triton 3.8 only: top_k_per_row_kernel's register cap. Given that version's PTX, ptxas takes 80
#: registers and spills 8-48 bytes a thread at k = 64 and at ragged k = 2048; under 112 it takes 95-96 and none.
#: Under triton 3.6 and 3.7 it spills under a cap and not without; 3.9 needs none (docs/perf/isa-sm90-triton3.8.md)
PER_ROW_MAXNREG = 112 if triton_version()[:2] == (3, 8) else None

# top_k_rows_kernel under the interpreter, where every Triton op is a few NumPy calls on the whole tile: tiles of
# up to TILE_ELEMS logits (rows x columns) and ranking comparisons of up to RANK_ELEMS (rows x K_PAD x RANK_CHUNK,
# at most Triton's 2^20 elements per tensor): the interpreter's time per row falls as rows per program grow.
TILE_ELEMS = 2 ** 17
RANK_ELEMS = 2 ** 20


def k_pad(k: int) -> int:
    """Register-resident sort width for k: the next power of two, at least MIN_K_PAD."""
    return max(MIN_K_PAD, triton.next_power_of_2(k))


@dataclass(frozen=True)
class RowsTiling(LaunchSettings):
    """Constexprs of top_k_rows_kernel for one launch (all powers of two)."""
    rows: int         # ROWS: rows per program
    block: int        # BLOCK: columns per chunk
    rank_chunk: int   # RANK_CHUNK: slots ranked against at a time, <= K_PAD


def rows_tiling(rows: int, width: int, k: int) -> RowsTiling:
    """The interpreter's tiling for `rows` rows of `width` >= 1 columns at k: one chunk per row up to TILE_ELEMS
    columns, as many rows per program as the tile and the ranking budget allow (at least one)."""
    sort_width = k_pad(k)
    block = min(triton.next_power_of_2(width), TILE_ELEMS)
    per_program = min(triton.next_power_of_2(rows), TILE_ELEMS // block, max(1, RANK_ELEMS // sort_width ** 2))
    return RowsTiling(per_program, block, min(sort_width, RANK_ELEMS // (per_program * sort_width)))


def _spec(k: int, has_starts: bool) -> CompileSpec:
    return CompileSpec(
        label=f"topk/k{k}" + ("/ragged" if has_starts else ""),
        fn=top_k_per_row_kernel,
        types={"logits_ptr": "*fp32", "starts_ptr": "*i32", "ends_ptr": "*i32", "out_ptr": "*i32"},
        constexprs={"HAS_STARTS": has_starts, "K_PAD": k_pad(k), "BLOCK": BLOCK},
        num_warps=PER_ROW_WARPS,
        maxnreg=PER_ROW_MAXNREG,
    )




ISA_SPECS = ()   # the top-k variants' cross-compile specs come with their records in hw.variants
