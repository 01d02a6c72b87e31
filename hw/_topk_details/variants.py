"""The top-k variants (DESIGN §4): both exact, bit-identical results, differing only in how work is laid out.

"per_row"    top_k_per_row_kernel, one program per row (compiled GPUs)
"rows_tile"  top_k_rows_kernel, a tile of many rows per program with rank placement instead of tl.sort (the CPU
             interpreter, where a Triton op costs about as much for one row as for hundreds)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from ..targets import LaunchSettings, Op, Target, Variant, register_cap
from . import BLOCK, MAX_K, PER_ROW_MAXNREG, PER_ROW_WARPS, RowsTiling, _spec, k_pad, rows_tiling
from .kernel import top_k_per_row_kernel, top_k_rows_kernel

ALL_TARGETS = frozenset(Target)


@dataclass(frozen=True)
class TopKCall:
    """hw.top_k_per_row after its checks: logits fp32 [rows, W] (rows, W >= 1, stride(1) == 1), lengths int32
    [rows], starts int32 [rows] or None, out int32 [rows, k] to fill."""

    logits: torch.Tensor
    lengths: torch.Tensor
    starts: torch.Tensor | None
    out: torch.Tensor
    sorted: bool = True   # False: the same selection in ascending column order (hw.top_k_per_row's `sorted`)

    @property
    def k(self) -> int:
        return self.out.shape[1]


@dataclass(frozen=True)
class PerRowSettings(LaunchSettings):
    block: int          # columns per chunk of the streaming passes
    num_warps: int
    maxnreg: int | None = None   # NVIDIA's register cap (None: ptxas chooses)


def in_column_order(out: torch.Tensor) -> None:
    """Rewrite a sorted top-k (int32 [rows, k], -1 padded) in place as the same selection in ascending column
    order, -1 last: the column-order form of the variants whose kernels only sort (one device sort, no sync)."""
    key = torch.where(out < 0, torch.iinfo(torch.int32).max, out).sort(dim=1).values
    out.copy_(key.masked_fill_(key == torch.iinfo(torch.int32).max, -1))


def _launch_per_row(call: TopKCall, s: PerRowSettings) -> None:
    logits, starts = call.logits, call.starts
    top_k_per_row_kernel[(logits.shape[0],)](
        logits, call.lengths if starts is None else starts, call.lengths, call.out, logits.shape[1],
        logits.stride(0), call.k, HAS_STARTS=starts is not None, K_PAD=k_pad(call.k), BLOCK=s.block,
        num_warps=s.num_warps, **register_cap(s.maxnreg))
    if not call.sorted:
        in_column_order(call.out)


def _launch_rows_tile(call: TopKCall, s: RowsTiling) -> None:
    (rows, width), logits, starts = call.logits.shape, call.logits, call.starts
    top_k_rows_kernel[(triton.cdiv(rows, s.rows),)](
        logits, call.lengths if starts is None else starts, call.lengths, call.out, rows, width, logits.stride(0),
        call.k, HAS_STARTS=starts is not None, K_PAD=k_pad(call.k), ROWS=s.rows, BLOCK=s.block,
        RANK_CHUNK=s.rank_chunk)
    if not call.sorted:
        in_column_order(call.out)


PER_ROW = Variant(
    name="per_row", op=Op.TOPK, kv_dtype=None, targets=ALL_TARGETS,
    settings=lambda target, call: PerRowSettings(BLOCK, PER_ROW_WARPS,
                                                 PER_ROW_MAXNREG if target is Target.NVIDIA else None),
    launch=_launch_per_row, precision=None,
    # decode (lengths only) at the reference k and a small k; ragged prefill at the reference k
    isa_specs=lambda: (_spec(MAX_K, False), _spec(64, False), _spec(MAX_K, True)),
    summary="one program per row: radix select, compaction, tl.sort of the selected (sorted=False: then a device "
            "sort by column)")
#: the interpreter only: its tiles are sized for NumPy, not for a GPU's registers
ROWS_TILE = Variant(
    name="rows_tile", op=Op.TOPK, kv_dtype=None, targets=frozenset({Target.INTERPRETER}),
    settings=lambda target, call: rows_tiling(*call.logits.shape, call.k), launch=_launch_rows_tile, precision=None,
    isa_specs=lambda: (),
    summary="many rows per program, rank placement instead of tl.sort (the interpreter; sorted=False: then a "
            "device sort by column)")
