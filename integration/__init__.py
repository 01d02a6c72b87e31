"""integration: the sparse-indexer hook that wires hw/ kernels into a model, with FP8 fallback (DESIGN §6).

    config     IndexerConfig: the --attention-config JSON (indexer_kv_dtype, indexer_layout, indexer_scale_rule)
    geometry   IndexerGeometry: one layer's heads, head dim and page size, checked against every format
    gates      decide(): architecture / triton / geometry / self-check gates -> GateDecision (FP8 on failure)
    selfcheck  run_self_check(): the one-time MXFP4 kernel check against sim/ (the only import of sim/ here)
    pool       PoolLayout, IndexerPool: one uint8 pool for every layer, zero-copy per-layer cache views
    schedule   DecodeSchedule: per-step decode metadata in fixed buffers, shared by all layers (graph-stable)
    indexer    SparseIndexer (the hook), PrefillMetadata, DecodeMetadata
    ops        the hook's launchers as torch custom ops (namespace mxidx), so torch.compile traces the hook
    compat     DeepGEMM's and vLLM's calling conventions over hw (compat.deep_gemm, compat.vllm)
    model      IndexerModel: a DeepSeek-style indexer and small multi-layer model; the bf16 reference
    demo       run_demo(): the job behind `mxidx demo`

Submodules are imported explicitly (`from integration.indexer import SparseIndexer`): most of them import hw/,
which must come after the device choice (tools.runtime.choose_device), so this package imports nothing itself.
"""
