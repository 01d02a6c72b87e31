"""Drop-in calling conventions: switching an engine from DeepGEMM's or vLLM's indexer ops to mxidx is an import change.

    deep_gemm   DeepGEMM's attention API: fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits,
                get_paged_mqa_logits_metadata and the older fp8_mqa_logits / fp8_paged_mqa_logits
    vllm        vLLM's indexer cache and top-k ops: indexer_k_quant_and_cache, cp_gather_indexer_k_quant_cache,
                top_k_per_row_prefill, top_k_per_row_decode, top_k_per_row

Each function takes the peer's arguments as the peer documents them, converts them to hw's launcher arguments (views
wherever the bytes already match; the few copies a convention forces are listed in each module) and returns what
the peer returns. What mxidx cannot do is a ValueError that says what to do instead, never a different result.
docs/integration.md ("Switching from DeepGEMM / vLLM ops") lists what still differs. Like hw/, import these
modules after choosing the device.
"""
