"""vLLM's indexer K-cache and top-k ops over hw's launchers: `from integration.compat import vllm as ops` for
`from vllm import _custom_ops as ops` (same names, same argument order, results written into the caller's buffers).

    indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, kv_cache_dtype) -> None
    cp_gather_indexer_k_quant_cache(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens) -> None
    top_k_per_row_prefill(logits, cu_seqlen_ks, cu_seqlen_ke, raw_topk_indices, num_rows, stride0, stride1,
                          topk_tokens) -> None
    top_k_per_row_decode(logits, next_n, seq_lens, raw_topk_indices, num_rows, stride0, stride1, topk_tokens) -> None
    top_k_per_row(logits, row_starts, row_ends, raw_topk_indices, num_rows, stride0, stride1) -> None
                                                                   (the older name: k = raw_topk_indices.shape[1])

kv_cache is vLLM's uint8 [num_blocks, block_size, cache_stride] allocation (or its 4-D [.., 1, ..] view; the 3-D one
gets a 1-wide head axis, a view): its pages are hw's block-planar pages, FP8 with cache_stride = D + 4 (the page's
values, then one fp32 scale per token), MXFP4 with D/2 + D/32 (codes, then E8M0 bytes).

The writer: quant_block_size is the elements per scale: D for FP8 (one scale per token, the only FP8 page hw has) and
32 for MXFP4; the format follows cache_stride. The fifth argument (named kv_cache_dtype in vllm._custom_ops) is the
scale format vLLM's indexer passes, its scale_fmt: "ue8m0" is hw's FP8 scale (the smallest power of two with
448 * scale >= max(amax, 1e-4)); vLLM's other FP8 scale, amax / 448 unrounded, is refused with a ValueError (hw's
writer stores power-of-two scales only).

The gather: the format follows dst_k (float8_e4m3fn [T, D]: fp8; uint8 [T, D/2]: mxfp4 planar, which also settles the
68-byte ambiguity of fp8 D = 64 and mxfp4 D = 128); dst_scale is uint8 [T, 4] or fp32 [T] (fp8), uint8 [T, D/32]
(mxfp4). Sync-free, as vLLM's: T = dst_k.shape[0] rows are gathered and rows at or past cu_seq_lens[-1] keep their
contents. Cost beyond hw's gather: hw returns new tensors, so the rows are then merged into dst_k / dst_scale in
place (one more read of both and a write of the destination).

Top-k: hw.top_k_per_row's selection, ordered by (value desc, index asc), padded with -1; vLLM promises the set of the
k largest (its rows shorter than k come in position order), so any order is vLLM-correct. Prefill indices are
relative to each row's start cu_seqlen_ks[r] (vLLM's convention), decode indices absolute columns; row r of decode
sees seq_lens[r // next_n] - next_n + r % next_n + 1 columns for 1-D seq_lens, seq_lens[r // next_n, r % next_n] for
2-D. stride0 / stride1 must be logits' own strides (stride1 == 1), raw_topk_indices int32 [>= num_rows, k]; rows past
num_rows are left alone. k above hw.top_k_per_row's limit is a ValueError.
"""
from __future__ import annotations

import math

import torch

import hw
from hw.checks import FP8_DTYPE, MX_BLOCK, check_int, check_tensor
from hw.layout import bytes_per_token
from hw.topk import MAX_K

UE8M0 = "ue8m0"
FP8_SCALE_BYTES = 4


# ============================================================================================ K cache
def _cache_view(kv_cache, kv_dtype: str, head_dim: int) -> torch.Tensor:
    """vLLM's uint8 [num_blocks, block_size, cache_stride] -> hw's [num_blocks, block_size, 1, cache_stride] view,
    cache_stride checked against the format's bytes per token."""
    check_tensor("kv_cache", kv_cache, dtypes=torch.uint8)
    if kv_cache.dim() not in (3, 4):
        raise ValueError(f"kv_cache must be uint8 [num_blocks, block_size, cache_stride] (or its 4-D view "
                         f"[num_blocks, block_size, 1, cache_stride]), got shape {list(kv_cache.shape)}")
    want = bytes_per_token(kv_dtype, head_dim)
    if kv_cache.shape[-1] != want:
        raise ValueError(f"kv_cache has {kv_cache.shape[-1]} bytes per token (last dim); {kv_dtype} with D = "
                         f"{head_dim} has {want}: pass the [num_blocks, block_size, 1, {want}] view of the pages "
                         f"(what vLLM's kv_cache_as_quant_view gives)")
    return kv_cache.unsqueeze(2) if kv_cache.dim() == 3 else kv_cache


def _writer_format(cache_stride: int, head_dim: int, quant_block_size) -> str:
    """The cache format from cache_stride, with quant_block_size checked against it."""
    check_int("quant_block_size", quant_block_size, 1)
    for kv_dtype, block in (("fp8", head_dim), ("mxfp4", MX_BLOCK)):
        if cache_stride == bytes_per_token(kv_dtype, head_dim):
            if quant_block_size != block:
                raise ValueError(f"quant_block_size = {quant_block_size}: a {kv_dtype} cache holds one scale per "
                                 f"{block} elements (D = {head_dim}); pass quant_block_size={block}")
            return kv_dtype
    raise ValueError(f"kv_cache has {cache_stride} bytes per token, which for k's head dim D = {head_dim} is neither "
                     f"fp8 ({bytes_per_token('fp8', head_dim)}) nor mxfp4 ({bytes_per_token('mxfp4', head_dim)})")


def indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, kv_cache_dtype) -> None:
    """vLLM's ops.indexer_k_quant_and_cache: quantize k [T, D] and write token i into slot slot_mapping[i] (int64,
    < 0 skips), in place (hw.indexer_k_quant_and_cache with scale rule rceil for MXFP4). kv_cache_dtype is the scale
    format (vLLM's scale_fmt): "ue8m0"."""
    check_tensor("k", k, ndim=2)
    check_tensor("kv_cache", kv_cache, dtypes=torch.uint8)
    kv_dtype = _writer_format(kv_cache.shape[-1], k.shape[1], quant_block_size)
    if kv_cache_dtype != UE8M0:
        raise ValueError(f"scale format (kv_cache_dtype, vLLM's scale_fmt) = {kv_cache_dtype!r} is not supported: hw's "
                         f"writer stores power-of-two (ue8m0) scales only; pass {UE8M0!r} (what DeepSeek-V3.2's "
                         f"indexer uses)")
    hw.indexer_k_quant_and_cache(k, _cache_view(kv_cache, kv_dtype, k.shape[1]), slot_mapping, kv_dtype=kv_dtype)


def _row_bytes(name: str, t: torch.Tensor, rows: int, row_bytes: int) -> torch.Tensor:
    """A [rows, ...] buffer as a uint8 [rows, row_bytes] view of the same memory (ValueError if it is not one)."""
    check_tensor(name, t)
    if t.dim() not in (1, 2) or t.shape[0] != rows or math.prod(t.shape[1:]) * t.element_size() != row_bytes:
        raise ValueError(f"{name} must hold {row_bytes} bytes for each of dst_k's {rows} rows, got {t.dtype} "
                         f"{list(t.shape)}")
    try:
        return t.view(rows, -1).view(torch.uint8)
    except RuntimeError:
        raise ValueError(f"{name} must have contiguous rows, got strides {t.stride()}") from None


def cp_gather_indexer_k_quant_cache(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens) -> None:
    """vLLM's ops.cp_gather_indexer_k_quant_cache: rows cu_seq_lens[b] .. cu_seq_lens[b + 1] - 1 of dst_k /
    dst_scale receive sequence b's cached tokens (block_table int32 [B, max_blocks], cu_seq_lens int32 [B + 1]);
    rows at or past cu_seq_lens[-1] are left as they are. No device sync."""
    check_tensor("dst_k", dst_k, dtypes=(FP8_DTYPE, torch.uint8), ndim=2)
    rows = dst_k.shape[0]
    if dst_k.dtype == FP8_DTYPE:
        layout, head_dim, scale_bytes = "fp8", dst_k.shape[1], FP8_SCALE_BYTES
    else:
        layout, head_dim = "mxfp4", 2 * dst_k.shape[1]
        scale_bytes = head_dim // MX_BLOCK
    scale_out = _row_bytes("dst_scale", dst_scale, rows, scale_bytes)
    values, scales = hw.cp_gather_indexer_k_quant_cache(_cache_view(kv_cache, layout, head_dim), block_table,
                                                        cu_seq_lens, layout=layout, num_tokens=rows)
    kept = torch.arange(rows, device=dst_k.device) < cu_seq_lens[-1]
    for dst, src in ((dst_k.view(torch.uint8), values.view(torch.uint8)), (scale_out, scales.view(torch.uint8))):
        torch.where(kept[:, None], src.view(rows, -1), dst, out=dst)


# ============================================================================================ top-k
def _rows(logits, raw_topk_indices, num_rows, stride0, stride1, k):
    """(logits[:num_rows], raw_topk_indices[:num_rows]) after vLLM's row / stride / buffer arguments are checked."""
    check_tensor("logits", logits, dtypes=torch.float32, ndim=2)
    if check_int("num_rows", num_rows, 0) > logits.shape[0]:
        raise ValueError(f"num_rows = {num_rows} but logits has {logits.shape[0]} rows")
    if (stride0, stride1) != logits.stride():
        raise ValueError(f"stride0, stride1 = {stride0}, {stride1} must be logits' strides {logits.stride()} (pass "
                         f"logits.stride(0), logits.stride(1))")
    check_int("topk_tokens", k, 1)
    if k > MAX_K:
        raise ValueError(f"topk_tokens = {k} is above hw.top_k_per_row's limit of {MAX_K} here; select at most {MAX_K} "
                         f"per row (DeepSeek-V3.2's index_topk is 2048)")
    check_tensor("raw_topk_indices", raw_topk_indices, dtypes=torch.int32, ndim=2)
    if raw_topk_indices.shape[0] < num_rows or raw_topk_indices.shape[1] != k:
        raise ValueError(f"raw_topk_indices must be int32 [>= num_rows = {num_rows}, topk_tokens = {k}], got "
                         f"{list(raw_topk_indices.shape)}")
    return logits[:num_rows], raw_topk_indices[:num_rows]


def top_k_per_row_prefill(logits, cu_seqlen_ks, cu_seqlen_ke, raw_topk_indices, num_rows, stride0, stride1,
                          topk_tokens) -> None:
    """vLLM's top_k_per_row_prefill: row r's topk_tokens best columns cu_seqlen_ks[r] <= j < cu_seqlen_ke[r], written
    to raw_topk_indices[r] as j - cu_seqlen_ks[r] (-1 padded)."""
    logits, out = _rows(logits, raw_topk_indices, num_rows, stride0, stride1, topk_tokens)
    starts, ends = cu_seqlen_ks[:num_rows], cu_seqlen_ke[:num_rows]
    hw.top_k_per_row(logits, ends, topk_tokens, starts=starts, out=out)
    out.sub_(starts[:, None] * (out >= 0))


def top_k_per_row(logits, row_starts, row_ends, raw_topk_indices, num_rows, stride0, stride1) -> None:
    """vLLM's older top_k_per_row: top_k_per_row_prefill with k = raw_topk_indices.shape[1]."""
    check_tensor("raw_topk_indices", raw_topk_indices, ndim=2)
    top_k_per_row_prefill(logits, row_starts, row_ends, raw_topk_indices, num_rows, stride0, stride1,
                          raw_topk_indices.shape[1])


def _decode_lengths(seq_lens, next_n: int) -> torch.Tensor:
    """int32 [B * next_n] visible columns per row from vLLM's seq_lens int32 [B] or [B, next_n]."""
    check_tensor("seq_lens", seq_lens, dtypes=torch.int32, contiguous=True)
    if seq_lens.dim() == 2 and seq_lens.shape[1] == next_n:
        return seq_lens.view(-1)
    if seq_lens.dim() != 1:
        raise ValueError(f"seq_lens must be int32 [B] or [B, next_n = {next_n}], got {list(seq_lens.shape)}")
    offsets = torch.arange(1 - next_n, 1, dtype=torch.int32, device=seq_lens.device)
    return (seq_lens[:, None].long() + offsets).clamp_(min=0).to(torch.int32).view(-1)   # int64: no int32 wrap


def top_k_per_row_decode(logits, next_n, seq_lens, raw_topk_indices, num_rows, stride0, stride1,
                         topk_tokens) -> None:
    """vLLM's top_k_per_row_decode: row r's topk_tokens best columns before its length (module docstring), absolute
    column indices written to raw_topk_indices[r] (-1 padded)."""
    logits, out = _rows(logits, raw_topk_indices, num_rows, stride0, stride1, topk_tokens)
    lengths = _decode_lengths(seq_lens, check_int("next_n", next_n, 1))[:num_rows]
    hw.top_k_per_row(logits, lengths, topk_tokens, out=out)
