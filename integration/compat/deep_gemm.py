"""DeepGEMM's indexer-scorer API over hw's launchers: `from integration.compat import deep_gemm` for `import deep_gemm`.

    fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                       logits_dtype=torch.float32, schedule_meta=None) -> [S, SK] (or [S, max_seqlen_k])
    get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None) -> int32 [num_sms + 1, 2]
    fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=torch.float32, indices=None) -> [B*N, max_context_len]
    fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0)
    fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None)                   (the older names: q a bare FP8 tensor)

What DeepGEMM's callers pass, and what it becomes (views unless marked "copy"):

    q                  (values, scales) or a bare float8_e4m3fn tensor (= (q, None)); FP8 [..., H, D] e4m3, or
                       packed FP4 [..., H, D/2] int8 (DeepGEMM's packed-FP4 dtype; uint8 too), two E2M1 codes a
                       byte, even element in the low nibble -> the same bytes as uint8.
    FP4 scales         int32, one word per query row or key ([S, H], [B, N, H], [SK]): byte g of the word
                       (little-endian) is the E8M0 scale of elements 32g .. 32g + 31. D = 128: the four bytes, a view.
                       D = 64: bytes 0 and 1; bytes 2 and 3 are padding, so the two scale bytes are copied out (a copy
                       of 2 bytes per row: the scorers take contiguous scales). hw's own forms (uint8 [..., D/32],
                       int32 [..., 1] at D = 128) pass through.
    kv                 FP8 (e4m3 [SK, D], fp32 [SK]) as hw; FP4 (packed [SK, D/2], int32 [SK]) as above.
    kv_cache           uint8 [num_blocks, block_kv, 1, bytes_per_token], DeepGEMM's fused pages: FP8 D + 4 bytes (the
                       values of the page, then one fp32 scale per token) and FP4 at D = 128, 68 bytes (the codes,
                       then one int32 of scales per token) are hw's fp8 / mxfp4 pages byte for byte.
    weights            fp32 as hw; bf16 / fp16 -> fp32 (a copy of [rows, H], exact).
    logits_dtype       torch.float32 or torch.bfloat16. The scorers accumulate and write fp32; bf16 logits are the
                       fp32 logits rounded to nearest even afterwards (one more pass over the logits: read 4 and write
                       2 bytes per entry).
    max_seqlen_k > 0   DeepGEMM's compressed prefill logits [S, max_seqlen_k]: entry (i, j) is the logit of key
                       cu_seq_len_k_start[i] + j for j < end - start, other entries unspecified (clean_logits must
                       be False). Computed from the full [S, SK] fp32 logits with one gather: the same values, but the
                       full matrix is allocated meanwhile (no memory saving).
    schedule_meta      from this module's get_paged_mqa_logits_metadata (hw's schedule: work items are pages, not
                       DeepGEMM's 4-page splits; same shape [num_sms + 1, 2]). num_sms is the number of persistent
                       programs; DeepGEMM's callers pass the SM count, integration.schedule.default_num_sms gives
                       mxidx's faster default (several programs per SM).

Refused with a ValueError saying what to do instead: `indices` (DeepGEMM's variable-length decode), DeepGEMM's
D = 64 FP4 paged cache (36 bytes per token: two scale bytes padded to a word; hw's pages hold 34), FP8 q or keys with
MX block scales (DeepGEMM's SM100 MXFP8), a prefill `schedule_meta`, logits dtypes other than fp32 and bf16.
"""
from __future__ import annotations

import torch

import hw
from hw.checks import FP8_DTYPE, MX_BLOCK, check_int, check_tensor
from hw.layout import bytes_per_token

PACKED_FP4_DTYPES = (torch.int8, torch.uint8)      # DeepGEMM's packed FP4 travels as int8 (uint8 in older releases)
WORD_SCALE_HEAD_DIMS = (64, 128)                    # FP4 head dims whose D/32 scale bytes fit one int32 word per row
LOGITS_DTYPES = (torch.float32, torch.bfloat16)
WEIGHT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
WORD_BYTES = 4


def _check_logits_dtype(logits_dtype) -> None:
    if logits_dtype not in LOGITS_DTYPES:
        raise ValueError(f"logits_dtype must be torch.float32 or torch.bfloat16, got {logits_dtype!r}")


def _refuse_indices(indices) -> None:
    if indices is not None:
        raise ValueError("indices (DeepGEMM's variable-length decode) is not supported: pass indices=None and lay the "
                         "query rows out as a batch with next_n = 1 (q [R, 1, H, ...], context_lens [R] or [R, 1], "
                         "one block_table row per query row)")


def _fp4_scales(name: str, scales, lead_shape: tuple, head_dim: int):
    """DeepGEMM's int32 scale word per row -> uint8 [*lead, D/32] (a view at D = 128, a copy at D = 64); hw's own
    forms are returned unchanged for hw to check."""
    if scales is None:
        raise ValueError(f"{name}: packed FP4 values need their E8M0 scales (int32, one word per row)")
    check_tensor(name, scales, dtypes=(torch.int32, torch.uint8))
    if scales.dtype != torch.int32 or tuple(scales.shape) != tuple(lead_shape):
        return scales
    if head_dim not in WORD_SCALE_HEAD_DIMS:
        raise ValueError(f"{name}: one int32 scale word per row holds the scales of D = 64 or 128, got D = {head_dim}; "
                         f"pass uint8 [..., D/32] scales")
    check_tensor(name, scales, contiguous=True)
    return scales.unsqueeze(-1).view(torch.uint8)[..., : head_dim // MX_BLOCK].contiguous()


def _pair(name: str, pair, ndim: int):
    """A DeepGEMM (values, scales) pair -> hw's pair: FP8 (e4m3, scales as given), FP4 (uint8 codes, uint8 scales)."""
    if isinstance(pair, torch.Tensor) and name == "q":
        pair = (pair, None)
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        what = "a (values, scales) pair or a bare FP8 tensor" if name == "q" else "a (values, scales) pair"
        raise ValueError(f"{name} must be {what}, got {type(pair).__name__}")
    values, scales = pair
    check_tensor(f"{name}[0]", values, dtypes=(FP8_DTYPE, *PACKED_FP4_DTYPES), ndim=ndim)
    if values.dtype == FP8_DTYPE:
        if isinstance(scales, torch.Tensor) and scales.dtype == torch.int32:
            raise ValueError(f"{name}: FP8 values with int32 MX block scales (MXFP8) are not supported; FP8 takes one "
                             f"fp32 scale per key and, for q, per-(token, head) scales folded into weights "
                             f"(pass (q, None))")
        return values, scales
    values = values.view(torch.uint8)
    return values, _fp4_scales(f"{name}[1]", scales, tuple(values.shape[:-1]), 2 * values.shape[-1])


def _weights(weights) -> torch.Tensor:
    check_tensor("weights", weights, dtypes=WEIGHT_DTYPES, ndim=2)
    return weights.to(torch.float32).contiguous()


def _compressed(logits: torch.Tensor, starts: torch.Tensor, width: int) -> torch.Tensor:
    """[S, width]: entry (i, j) = logits[i, starts[i] + j] (columns past SK read the last one: unspecified)."""
    num_q, num_k = logits.shape
    if num_k == 0:
        return logits.new_empty((num_q, width))
    cols = starts.to(torch.int64)[:, None] + torch.arange(width, device=logits.device)
    return torch.gather(logits, 1, cols.clamp_(0, num_k - 1))


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                       logits_dtype=torch.float32, schedule_meta=None) -> torch.Tensor:
    """DeepGEMM's ragged prefill logits: q [S, H, ...], kv [SK, ...] (module docstring), weights [S, H], int32 [S]
    key ranges [cu_seq_len_k_start[i], cu_seq_len_k_end[i]). Returns logits_dtype [S, SK], entries outside a row's
    range -inf when clean_logits; with max_seqlen_k > 0 (clean_logits False) the compressed [S, max_seqlen_k]."""
    _check_logits_dtype(logits_dtype)
    if schedule_meta is not None:
        raise ValueError("schedule_meta (DeepGEMM's SM100 prefill schedule) is not needed by mxidx's prefill scorer: "
                         "pass None")
    width = check_int("max_seqlen_k", max_seqlen_k, 0)
    if width and clean_logits:
        raise ValueError("max_seqlen_k > 0 (compressed logits) needs clean_logits=False, as in DeepGEMM")
    logits = hw.fp8_fp4_mqa_logits(_pair("q", q, 3), _pair("kv", kv, 2), _weights(weights), cu_seq_len_k_start,
                                   cu_seq_len_k_end, clean_logits=clean_logits)
    if width:
        logits = _compressed(logits, cu_seq_len_k_start, width)
    return logits.to(logits_dtype)


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None) -> torch.Tensor:
    """The decode schedule for fp8_fp4_paged_mqa_logits (hw.get_paged_mqa_logits_metadata): int32 [num_sms + 1, 2]
    for context_lens int32 [B] or [B, next_n]; block_kv is the cache's page size."""
    _refuse_indices(indices)
    return hw.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)


def _check_fused_cache(q_pair, kv_cache) -> None:
    """Refuse DeepGEMM's FP4 pages whose tokens differ from hw's (D = 64: 36 bytes instead of 34)."""
    values, scales = q_pair
    if scales is None or not isinstance(kv_cache, torch.Tensor) or kv_cache.dim() != 4:
        return
    head_dim = 2 * values.shape[-1]
    ours, theirs = bytes_per_token("mxfp4", head_dim), head_dim // 2 + WORD_BYTES
    if ours != theirs and kv_cache.shape[-1] == theirs:
        raise ValueError(f"kv_cache has DeepGEMM's {theirs}-byte FP4 tokens for D = {head_dim} (the {head_dim // 32} "
                         f"scale bytes padded to an int32); hw's pages hold them unpadded, {ours} bytes per token: "
                         f"allocate the cache with hw.layout.bytes_per_token('mxfp4', {head_dim}) bytes per token "
                         f"and write it with hw.indexer_k_quant_and_cache")


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=torch.float32, indices=None) -> torch.Tensor:
    """DeepGEMM's paged decode logits: q [B, N, H, ...] (module docstring), kv_cache uint8 [num_blocks, block_kv, 1,
    bytes_per_token], weights [B*N, H], context_lens int32 [B] or [B, N], block_table int32 [B, max_blocks],
    schedule_meta from get_paged_mqa_logits_metadata. Returns logits_dtype [B*N, max_context_len] (hw's semantics:
    row b*N + n sees the columns before its context length)."""
    _check_logits_dtype(logits_dtype)
    _refuse_indices(indices)
    q_pair = _pair("q", q, 4)
    _check_fused_cache(q_pair, kv_cache)
    logits = hw.fp8_fp4_paged_mqa_logits(q_pair, kv_cache, _weights(weights), context_lens, block_table,
                                         schedule_meta, max_context_len, clean_logits=clean_logits)
    return logits.to(logits_dtype)


def _bare_fp8(q) -> tuple[torch.Tensor, None]:
    check_tensor("q", q, dtypes=FP8_DTYPE)
    return q, None


def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True,
                   max_seqlen_k=0) -> torch.Tensor:
    """The older name of fp8_fp4_mqa_logits with a bare float8_e4m3fn q [S, H, D]; fp32 logits."""
    return fp8_fp4_mqa_logits(_bare_fp8(q), kv, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                              clean_logits=clean_logits, max_seqlen_k=max_seqlen_k)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None) -> torch.Tensor:
    """The older name of fp8_fp4_paged_mqa_logits with a bare float8_e4m3fn q [B, N, H, D]; fp32 logits."""
    return fp8_fp4_paged_mqa_logits(_bare_fp8(q), kv_cache, weights, context_lens, block_table, schedule_meta,
                                    max_context_len, clean_logits=clean_logits, indices=indices)
