"""The checked arguments of one scorer launch, as the public launchers (hw/logits.py) hand them to a variant.

Every tensor is on one device, with the dtypes, shapes and strides the launcher checked; strides are in elements.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PrefillCall:
    """hw.fp8_fp4_mqa_logits after its checks.

    q_v  uint8 [S, H, D] (FP8 bytes) or [S, H, D/2] (MXFP4 codes);  q_s  uint8 [S, H, D/32] (MXFP4) or q_v (FP8)
    k_v  uint8 [SK, D] or [SK, D/2];  k_s  fp32 [SK] (FP8) or uint8 [SK, D/32] (MXFP4)
    weights fp32 [S, H];  ks, ke int32 [S];  out fp32 [S, SK] (every entry is written when clean, else only the
    visible ones);  error_flag: None or hw.checks' int32 [4] error flag the kernels report to.
    """

    q_v: torch.Tensor
    q_s: torch.Tensor
    k_v: torch.Tensor
    k_s: torch.Tensor
    weights: torch.Tensor
    ks: torch.Tensor
    ke: torch.Tensor
    out: torch.Tensor
    num_heads: int
    head_dim: int
    clean: bool
    error_flag: torch.Tensor | None = None

    @property
    def num_q(self) -> int:
        return self.out.shape[0]

    @property
    def num_k(self) -> int:
        return self.out.shape[1]


@dataclass(frozen=True)
class DecodeCall:
    """hw.fp8_fp4_paged_mqa_logits after its checks.

    q_v  uint8 [B, N, H, D] or [B, N, H, D/2];  q_s  uint8 [B, N, H, D/32] (MXFP4) or q_v (FP8)
    kv_cache  uint8 [num_pages, P, 1, bytes_per_token] view (page stride `page_stride` bytes; `tiled`: the
    mxfp4_tiled layout);  weights fp32 [B*N, H];  context_lens int32 [B] or [B, N];  block_table int32
    [B, max_pages] (stride(1) == 1);  out fp32 [B*N, W], W = max_context_len (invisible entries already -inf when
    clean, else left alone);
    cap = W: the column limit of every row (visible columns past max_pages * P have no page and come out NaN);
    num_cache_pages: the cache view's pages (page ids outside [0, num_cache_pages) are not read: NaN logits);
    error_flag: None or hw.checks' int32 [4] error flag the kernels report to.
    """

    q_v: torch.Tensor
    q_s: torch.Tensor
    kv_cache: torch.Tensor
    weights: torch.Tensor
    context_lens: torch.Tensor
    block_table: torch.Tensor
    out: torch.Tensor
    page_size: int
    page_stride: int
    tiled: bool
    next_n: int
    num_heads: int
    head_dim: int
    cap: int
    num_cache_pages: int
    error_flag: torch.Tensor | None = None
