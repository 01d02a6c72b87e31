"""Per-row top-k over fp32 logits (DESIGN §4, §8): `hw.top_k_per_row`."""
from __future__ import annotations

import torch

from ._topk_details import MAX_K
from ._topk_details.kernel import top_k_per_row_kernel
from ._topk_details.variants import TopKCall
from .checks import check_flag, check_kernel_device, check_same_device, check_tensor
from .targets import Op, target_of
from .variants import select

MAX_WIDTH = 2 ** 31 - 1   # column indices are int32


def top_k_per_row(logits: torch.Tensor, lengths: torch.Tensor, k: int, *,
                  starts: torch.Tensor | None = None, out: torch.Tensor | None = None, sorted: bool = True,
                  variant: str | None = None, launch_settings: dict | None = None) -> torch.Tensor:
    """Indices of the k largest visible logits of every row.

    logits   float32 [rows, W]; any row stride (stride(0) >= 0), unit column stride (stride(1) == 1).
    lengths  int32 [rows], contiguous: row r sees the columns j < min(lengths[r], W) (negative -> none).
    k        Python int, 1 <= k <= MAX_K (2048); k > W is allowed (the tail is padding).
    starts   optional int32 [rows], contiguous (ragged prefill): row r then sees max(starts[r], 0) <= j <
             min(lengths[r], W), i.e. `lengths` are the absolute end columns.
    out      optional int32 [rows, k], contiguous, on logits' device: filled and returned instead of a new tensor.
    Returns  int32 [rows, k], contiguous: absolute column indices ordered by (value desc, index asc) with
             +inf > finite > -inf > NaN (-0.0 == +0.0; all NaNs equal); a row with fewer than k visible
             columns is padded with -1. Invisible columns never change the result: they are not read, but
             for those that share a 16-byte-aligned group of 4 with a visible one (the column-order kernel's
             vector loads, rows of 16-aligned logits), whose values are ignored.
    sorted   False: the same selection (bit for bit the same set) in ascending column order, then the -1 padding:
             for consumers that gather the selected keys and need no order; faster (no ordering pass, and rows
             with at most k visible columns are not read).

    variant  a hw.variants name of Op.TOPK (all give the same results, bit for bit), else the target's default;
             launch_settings: fields of its settings to replace (tuning, tests).

    Host-side checks only (no device sync): legal inside CUDA-graph capture.
    """
    check_tensor("logits", logits, dtypes=torch.float32, ndim=2)
    rows, width = logits.shape
    check_tensor("lengths", lengths, dtypes=torch.int32, shape=(rows,), contiguous=True)
    if starts is not None:
        check_tensor("starts", starts, dtypes=torch.int32, shape=(rows,), contiguous=True)
    device = check_same_device(logits=logits, lengths=lengths, starts=starts)
    check_flag("sorted", sorted)   # a Python bool: a tensor's truth value would sync
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"k must be a Python int, got {type(k).__name__}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be in 1..{MAX_K}, got {k}")
    if width > MAX_WIDTH:
        raise ValueError(f"logits has {width} columns; column indices are int32, so at most {MAX_WIDTH}")
    if width > 1 and logits.stride(1) != 1:
        raise ValueError(f"logits must have unit column stride (stride(1) == 1), got strides {logits.stride()}; "
                         f"call .contiguous()")
    if out is not None:
        check_tensor("out", out, dtypes=torch.int32, shape=(rows, k), contiguous=True)
        check_same_device(logits=logits, out=out)
    check_kernel_device("logits", device, top_k_per_row_kernel)

    target = target_of(device, top_k_per_row_kernel)
    named = None if variant is None else select(Op.TOPK, target, name=variant)   # a bad name fails early
    if out is None:
        out = torch.empty((rows, k), dtype=torch.int32, device=device)
    if rows == 0:
        return out
    if width == 0:
        return out.fill_(-1)
    call = TopKCall(logits, lengths, starts, out, sorted)
    chosen = named or select(Op.TOPK, target, call=call)   # the default for this call (hw.variants.DEFAULTS)
    chosen.run(call, target, launch_settings)
    return out
