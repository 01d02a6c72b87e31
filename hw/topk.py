"""Per-row top-k over fp32 logits (DESIGN §4, §8): `hw.top_k_per_row`."""
from __future__ import annotations

import torch
import triton

from ._checks import check_kernel_device, check_same_device, check_tensor, kernels_interpreted
from ._topk_details import (BLOCK, MAX_K, NUM_WARPS, RowsTiling, k_pad, rows_tiling, top_k_per_row_kernel,
                            top_k_rows_kernel)

MAX_WIDTH = 2 ** 31 - 1   # column indices are int32


def top_k_per_row(logits: torch.Tensor, lengths: torch.Tensor, k: int, *,
                  starts: torch.Tensor | None = None) -> torch.Tensor:
    """Indices of the k largest visible logits of every row.

    logits   float32 [rows, W]; any row stride (stride(0) >= 0), unit column stride (stride(1) == 1).
    lengths  int32 [rows], contiguous: row r sees the columns j < min(lengths[r], W) (negative -> none).
    k        Python int, 1 <= k <= MAX_K (2048); k > W is allowed (the tail is padding).
    starts   optional int32 [rows], contiguous (ragged prefill): row r then sees max(starts[r], 0) <= j <
             min(lengths[r], W), i.e. `lengths` are the absolute end columns.
    Returns  int32 [rows, k], contiguous: absolute column indices ordered by (value desc, index asc) with
             +inf > finite > -inf > NaN (-0.0 == +0.0; all NaNs equal); a row with fewer than k visible
             columns is padded with -1. Invisible columns are never read.

    Host-side checks only (no device sync): legal inside CUDA-graph capture. Compiled GPUs run one program per
    row; the CPU interpreter runs tiles of many rows per program (same results, bit for bit).
    """
    check_tensor("logits", logits, dtypes=torch.float32, ndim=2)
    rows, width = logits.shape
    check_tensor("lengths", lengths, dtypes=torch.int32, shape=(rows,), contiguous=True)
    if starts is not None:
        check_tensor("starts", starts, dtypes=torch.int32, shape=(rows,), contiguous=True)
    device = check_same_device(logits=logits, lengths=lengths, starts=starts)
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"k must be a Python int, got {type(k).__name__}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be in 1..{MAX_K}, got {k}")
    if width > MAX_WIDTH:
        raise ValueError(f"logits has {width} columns; column indices are int32, so at most {MAX_WIDTH}")
    if width > 1 and logits.stride(1) != 1:
        raise ValueError(f"logits must have unit column stride (stride(1) == 1), got strides {logits.stride()}; "
                         f"call .contiguous()")
    check_kernel_device("logits", device, top_k_per_row_kernel)

    out = torch.empty((rows, k), dtype=torch.int32, device=device)
    if rows == 0:
        return out
    if width == 0:
        return out.fill_(-1)
    if kernels_interpreted(top_k_rows_kernel):
        # the interpreter pays per Triton op, nearly independent of the tile: many rows per program
        _launch_rows(logits, lengths, starts, out, rows_tiling(rows, width, k))
    else:
        _launch_per_row(logits, lengths, starts, out)
    return out


# The two launches below take checked arguments (rows >= 1, W >= 1) and fill `out` int32 [rows, k]. The public
# launcher picks one per backend; the tests run both.

def _launch_per_row(logits: torch.Tensor, lengths: torch.Tensor, starts: torch.Tensor | None,
                    out: torch.Tensor) -> None:
    """top_k_per_row_kernel, one program per row (compiled GPUs)."""
    k = out.shape[1]
    top_k_per_row_kernel[(logits.shape[0],)](
        logits, lengths if starts is None else starts, lengths, out, logits.shape[1], logits.stride(0), k,
        HAS_STARTS=starts is not None, K_PAD=k_pad(k), BLOCK=BLOCK, num_warps=NUM_WARPS)


def _launch_rows(logits: torch.Tensor, lengths: torch.Tensor, starts: torch.Tensor | None, out: torch.Tensor,
                 tiling: RowsTiling) -> None:
    """top_k_rows_kernel, `tiling.rows` rows per program (the interpreter)."""
    (rows, width), k = logits.shape, out.shape[1]
    top_k_rows_kernel[(triton.cdiv(rows, tiling.rows),)](
        logits, lengths if starts is None else starts, lengths, out, rows, width, logits.stride(0), k,
        HAS_STARTS=starts is not None, K_PAD=k_pad(k), ROWS=tiling.rows, BLOCK=tiling.block,
        RANK_CHUNK=tiling.rank_chunk)
