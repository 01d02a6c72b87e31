"""Paged -> contiguous gather of quantized K (vLLM's cp_gather_indexer_k_quant_cache), feeding the prefill scorer.

Launcher only; the kernels are in hw/_gather_details. The cache format follows `layout` or, when layout is None,
the cache's bytes_per_token (D + 4 for fp8, D/2 + D/32 for mxfp4). Over the allowed head dims (32..256, multiples
of 32) the two formulas give {36, 68, ..., 260} and {17, 34, ..., 136}: they collide only at 68 bytes (fp8 D = 64
and mxfp4 D = 128), where layout must be given. Inference picks the planar "mxfp4" layout, the writer's default
too; a tiled cache must be read with layout="mxfp4_tiled" (bytes cannot tell planar from tiled).
"""
from __future__ import annotations

import torch
import triton

from ._gather_details import BLOCK_B, BLOCK_T, GATHER_INTERPRETER_BLOCK_T, GATHER_WARPS
from ._gather_details.kernels import gather_fp8_kernel, gather_mxfp4_kernel
from .checks import (
    FP8_DTYPE,
    MX_BLOCK,
    check_error_flag,
    check_int,
    check_kernel_device,
    check_same_device,
    check_tensor,
    kernels_interpreted,
    stream_capturing,
    validate_requested,
)
from .layout import HEAD_DIMS, LAYOUTS_OF, PAGE_LAYOUTS, bytes_per_token, check_cache_view, check_pages_in_span


def _format_and_head_dim(kv_cache: torch.Tensor, layout: str | None) -> tuple[str, int]:
    """(kv_dtype, D) from `layout` or, if None, from kv_cache's bytes_per_token (ValueError if ambiguous/none)."""
    check_tensor("kv_cache", kv_cache, dtypes=torch.uint8, ndim=4)
    bpt = kv_cache.shape[3]
    fits = {fmt: d for fmt in LAYOUTS_OF for d in HEAD_DIMS if bytes_per_token(fmt, d) == bpt}
    if layout is not None:
        fmt = next((f for f, layouts in LAYOUTS_OF.items() if layout in layouts), None)
        if fmt is None:
            raise ValueError(f"layout must be one of {PAGE_LAYOUTS} or None, got {layout!r}")
        if fmt not in fits:
            raise ValueError(f"kv_cache has {bpt} bytes per token (dim 3), which is no {fmt} head dim "
                             f"(D + 4 for fp8, D/2 + D/32 for mxfp4, D in 32..256 step 32); check layout={layout!r}")
        return fmt, fits[fmt]
    if len(fits) == 1:
        return next(iter(fits.items()))
    if not fits:
        raise ValueError(f"kv_cache has {bpt} bytes per token (dim 3), which matches neither fp8 (D + 4) nor "
                         f"mxfp4 (D/2 + D/32) for a head dim in 32..256 (multiple of 32)")
    raise ValueError(f"layout is None but kv_cache's {bpt} bytes per token fit both fp8 (D={fits['fp8']}) and "
                     f"mxfp4 (D={fits['mxfp4']}); pass layout='fp8', 'mxfp4' or 'mxfp4_tiled'")


def _validate_gather(view, block_table: torch.Tensor, cu_seq_lens: torch.Tensor, num_tokens: int) -> None:
    """Validate mode: the values the kernel bounds and reports (device syncs). ValueError on the first bad entry."""
    if int(cu_seq_lens[0]) != 0:
        raise ValueError(f"cu_seq_lens[0] must be 0, got {int(cu_seq_lens[0])}")
    lengths = torch.diff(cu_seq_lens.to(torch.int64))
    if bool((lengths < 0).any()):
        b = int(torch.nonzero(lengths < 0)[0, 0])
        raise ValueError(f"cu_seq_lens must be non-decreasing; cu_seq_lens[{b + 1}] = {int(cu_seq_lens[b + 1])} < "
                         f"cu_seq_lens[{b}] = {int(cu_seq_lens[b])}")
    if num_tokens < int(cu_seq_lens[-1]):
        raise ValueError(f"num_tokens = {num_tokens} leaves out tokens: cu_seq_lens[-1] = {int(cu_seq_lens[-1])}")
    covered = block_table.shape[1] * view.page_size
    if bool((lengths > covered).any()):
        b = int(torch.nonzero(lengths > covered)[0, 0])
        raise ValueError(f"sequence {b} has {int(lengths[b])} tokens but block_table's {block_table.shape[1]} "
                         f"pages of {view.page_size} tokens cover only {covered}; widen block_table")
    check_pages_in_span(block_table, lengths, view)


def cp_gather_indexer_k_quant_cache(kv_cache: torch.Tensor, block_table: torch.Tensor, cu_seq_lens: torch.Tensor,
                                    layout: str | None = None, *, num_tokens: int | None = None,
                                    validate: bool = False, error_flag: torch.Tensor | None = None):
    """Copy each sequence's first cu_seq_lens[b+1] - cu_seq_lens[b] tokens out of the paged cache into rows
    cu_seq_lens[b] .. cu_seq_lens[b+1] - 1 of contiguous K.

    kv_cache:    uint8 [num_pages, P, 1, bytes_per_token] cache view (hw/layout.py), any page stride.
    block_table: int32 [B, max_pages], any strides: sequence b's logical page i is physical page block_table[b, i].
                 Entries past a sequence's last page are never read.
    cu_seq_lens: int32 [B + 1], contiguous, non-decreasing from 0 (checking needs a sync: see validate, error_flag).
    layout:      "fp8", "mxfp4", "mxfp4_tiled" or None (inferred from bytes_per_token; see the module docstring).
                 bytes_per_token cannot tell fp8 D = 64 from mxfp4 D = 128 (68 bytes): a caller that knows the
                 cache's format should always pass it.
    num_tokens:  SK, the number of output rows. None reads cu_seq_lens[-1] (one device -> host sync); pass it to
                 stay sync-free (CUDA-graph capture). Rows at or past cu_seq_lens[-1] come out as zero bytes.
    validate:    True (or MXIDX_VALIDATE=1) checks, with device syncs, what the hot path bounds: cu_seq_lens starts
                 at 0 and never decreases, num_tokens >= cu_seq_lens[-1], every sequence fits in its block-table
                 row (length <= max_pages * P) and the page ids it spans are pages of kv_cache; ValueError otherwise.
    error_flag:  keyword-only; None or an int32 [4] flag (hw.checks.new_error_flag): the same cases are reported there
                 without a sync (ErrorKind PAGE_ID, CONTEXT_PAST_TABLE, CU_SEQ_LENS).

    Returns fp8:   (values float8_e4m3fn [SK, D] (row-major, D bytes a row), scales float32 [SK]);
            mxfp4: (codes uint8 [SK, D/2] (element 2j in the low nibble of byte j, 2j + 1 in the high one),
                    scales uint8 [SK, D/32] (E8M0, byte g for elements 32g .. 32g + 31)); all contiguous.
    Without validation nothing is read outside kv_cache whatever the integers hold: a token whose page id lies
    outside [0, num_pages), whose logical page is >= max_pages (a sequence longer than its block-table row), or
    whose row has no well-formed position (a decreasing cu_seq_lens) is returned as the NaN token (fp8: values
    0x7F, scale NaN; mxfp4: codes 0, scale byte 255 -- what the writer stores for a non-finite row), so the scores
    against it are NaN. Rows at or past cu_seq_lens[-1] are zero bytes (padding); num_tokens < cu_seq_lens[-1]
    drops the tokens past num_tokens (reported as CU_SEQ_LENS).
    """
    kv_dtype, head_dim = _format_and_head_dim(kv_cache, layout)
    view = check_cache_view("kv_cache", kv_cache, kv_dtype, head_dim, layout)
    check_tensor("block_table", block_table, dtypes=torch.int32, ndim=2)
    batch = block_table.shape[0]
    check_tensor("cu_seq_lens", cu_seq_lens, dtypes=torch.int32, shape=(batch + 1,), contiguous=True)
    device = check_same_device(kv_cache=kv_cache, block_table=block_table, cu_seq_lens=cu_seq_lens)
    validate = validate_requested(validate)
    kernel = gather_fp8_kernel if kv_dtype == "fp8" else gather_mxfp4_kernel
    check_kernel_device("kv_cache", device, kernel)
    error_flag = check_error_flag(error_flag, device)
    if num_tokens is None:
        if stream_capturing():
            raise ValueError("num_tokens: pass it (the total of cu_seq_lens) when capturing a CUDA graph; without it "
                             "the launcher reads cu_seq_lens[-1], a device-to-host sync that capture forbids")
        num_tokens = int(cu_seq_lens[-1].item())
    check_int("num_tokens", num_tokens, 0)
    if validate:
        _validate_gather(view, block_table, cu_seq_lens, num_tokens)
    if kv_dtype == "fp8":
        values = torch.empty(num_tokens, head_dim, dtype=torch.uint8, device=device)
        scales = torch.empty(num_tokens, dtype=torch.float32, device=device)
        out = (values, scales.view(torch.int32))
        extra = {}
    else:
        values = torch.empty(num_tokens, head_dim // 2, dtype=torch.uint8, device=device)
        scales = torch.empty(num_tokens, head_dim // MX_BLOCK, dtype=torch.uint8, device=device)
        out = (values, scales)
        extra = {"TILED": view.layout == "mxfp4_tiled"}
    if num_tokens or error_flag is not None:     # (with a flag, one program checks cu_seq_lens even for no rows)
        # the CPU interpreter pays per operation, not per row: many more rows per program there
        block_t = GATHER_INTERPRETER_BLOCK_T if kernels_interpreted(kernel) else BLOCK_T
        kernel[(max(1, triton.cdiv(num_tokens, block_t)),)](
            kv_cache, block_table, cu_seq_lens, *out, cu_seq_lens if error_flag is None else error_flag, num_tokens,
            batch, block_table.shape[1], view.num_pages, view.page_stride, *block_table.stride(), D=head_dim,
            D_PAD=triton.next_power_of_2(head_dim), P=view.page_size, BLOCK_T=block_t, BLOCK_B=BLOCK_B,
            HAS_FLAG=error_flag is not None, num_warps=GATHER_WARPS, **extra)
    return (values.view(FP8_DTYPE), scales) if kv_dtype == "fp8" else (values, scales)
