"""The compat modules carry the peers' public names with their parameters in order and their defaults, as DeepGEMM's
Python bindings (py::arg lists) and vllm._custom_ops declare them, so an engine's calls bind unchanged, positionally
or by keyword."""
from __future__ import annotations

import inspect

import pytest
import torch

from integration.compat import deep_gemm, vllm

REQUIRED = inspect.Parameter.empty

DEEP_GEMM = {
    "fp8_fp4_mqa_logits": [("q", REQUIRED), ("kv", REQUIRED), ("weights", REQUIRED), ("cu_seq_len_k_start", REQUIRED),
                           ("cu_seq_len_k_end", REQUIRED), ("clean_logits", True), ("max_seqlen_k", 0),
                           ("logits_dtype", torch.float32), ("schedule_meta", None)],
    "get_paged_mqa_logits_metadata": [("context_lens", REQUIRED), ("block_kv", REQUIRED), ("num_sms", REQUIRED),
                                      ("indices", None)],
    "fp8_fp4_paged_mqa_logits": [("q", REQUIRED), ("kv_cache", REQUIRED), ("weights", REQUIRED),
                                 ("context_lens", REQUIRED), ("block_table", REQUIRED), ("schedule_meta", REQUIRED),
                                 ("max_context_len", REQUIRED), ("clean_logits", False),
                                 ("logits_dtype", torch.float32), ("indices", None)],
    "fp8_mqa_logits": [("q", REQUIRED), ("kv", REQUIRED), ("weights", REQUIRED), ("cu_seq_len_k_start", REQUIRED),
                       ("cu_seq_len_k_end", REQUIRED), ("clean_logits", True), ("max_seqlen_k", 0)],
    "fp8_paged_mqa_logits": [("q", REQUIRED), ("kv_cache", REQUIRED), ("weights", REQUIRED),
                             ("context_lens", REQUIRED), ("block_table", REQUIRED), ("schedule_meta", REQUIRED),
                             ("max_context_len", REQUIRED), ("clean_logits", False), ("indices", None)],
}

VLLM = {
    "indexer_k_quant_and_cache": ["k", "kv_cache", "slot_mapping", "quant_block_size", "kv_cache_dtype"],
    "cp_gather_indexer_k_quant_cache": ["kv_cache", "dst_k", "dst_scale", "block_table", "cu_seq_lens"],
    "top_k_per_row_prefill": ["logits", "cu_seqlen_ks", "cu_seqlen_ke", "raw_topk_indices", "num_rows", "stride0",
                              "stride1", "topk_tokens"],
    "top_k_per_row_decode": ["logits", "next_n", "seq_lens", "raw_topk_indices", "num_rows", "stride0", "stride1",
                             "topk_tokens"],
}


@pytest.mark.parametrize("name", DEEP_GEMM)
def test_deep_gemm_signatures(name):
    params = inspect.signature(getattr(deep_gemm, name)).parameters.values()
    assert [(p.name, p.default) for p in params] == DEEP_GEMM[name]


@pytest.mark.parametrize("name", VLLM)
def test_vllm_signatures(name):
    params = list(inspect.signature(getattr(vllm, name)).parameters.values())
    assert [p.name for p in params] == VLLM[name] and all(p.default is REQUIRED for p in params)
