"""Asking the L2 cache for a range of global memory ahead of its readers (NVIDIA sm_90 and later).

`cp.async.bulk.prefetch.L2.global [address], size` starts fetching `size` bytes (a multiple of 16, from a 16-byte
aligned address) into L2 and returns at once: no register receives data, nothing waits for it, and it is a hint
the memory system may drop. A kernel that is latency-bound while the memory system idles (the long top-k path's
sample kernel, whose narrowing rounds run before the sweep may read the rows: column_order._sample_tau_kernel) can
so have the bytes that a later kernel reads fetched meanwhile; that kernel's loads then hit L2. Worth it only while
everything asked for stays in L2 until it is read: the launcher asks only when the bytes fit a share of the L2
(prefetch_launch).

Without the prefetch (the interpreter, AMD, pre-sm_90 NVIDIA, or bytes that would not fit) the constexpr removes
the code: results never depend on it.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._constant import Constant
from .targets import nvidia_capability

PREFETCH_MIN_CAPABILITY = (9, 0)   # cp.async.bulk needs sm_90
#: a launch asks L2 for at most this share of its size (the rest keeps what other traffic brings meanwhile)
L2_SHARE = 0.75

# $0 a dummy result (inline assembly returns one); $1 the address, $2 the size: no prefetch when it is not positive
_PREFETCH_PTX = Constant("{ .reg .pred p; setp.gt.s32 p, $2, 0; "
                         "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }")


@triton.jit
def prefetch_l2(first_ptr, end_ptr, WARPS: tl.constexpr):
    """PTX `cp.async.bulk.prefetch.L2` of the bytes [first_ptr, end_ptr) (any pointers of one allocation, end_ptr
    >= first_ptr; the 16-byte aligned part between them): one prefetch a warp of the program's WARPS warps, each of
    a WARPS-th of the range. Only addresses inside the range are asked for."""
    first = (first_ptr.to(tl.int64, bitcast=True) + 15) // 16 * 16
    end = end_ptr.to(tl.int64, bitcast=True) // 16 * 16
    piece = ((end - first) // WARPS + 15) // 16 * 16
    lane = tl.arange(0, WARPS * 32)
    at = first + (lane // 32).to(tl.int64) * piece
    # the first lane of each warp asks; the others' size 0 skips the instruction (and the loop ptxas puts around it
    # for operands that differ between lanes)
    size = tl.where(lane % 32 == 0, tl.minimum(tl.maximum(end - at, 0), piece), 0).to(tl.int32)
    tl.inline_asm_elementwise(_PREFETCH_PTX, "=r,l,r", [at, size], dtype=tl.int32, is_pure=False, pack=1)


def prefetch_launch(wanted: bool, device: torch.device, nbytes: int) -> dict:
    """The launch keyword of a kernel with a PREFETCH constexpr: True when `wanted`, the device is an NVIDIA GPU of
    compute capability >= 9.0 and `nbytes` (what the launch asks L2 for) fit L2_SHARE of its L2."""
    capability = nvidia_capability(device) if wanted else None
    fits = capability is not None and capability >= PREFETCH_MIN_CAPABILITY and nbytes <= L2_SHARE * _l2_bytes(
        torch.device(device).index if torch.device(device).index is not None else torch.cuda.current_device())
    return {"PREFETCH": fits}


@functools.lru_cache(maxsize=None)
def _l2_bytes(index: int) -> int:
    return torch.cuda.get_device_properties(index).L2_cache_size
