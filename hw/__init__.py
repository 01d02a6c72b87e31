"""hw: Triton kernels and their launchers (DESIGN §5, §8).

Imports torch and triton, never sim/. Set TRITON_INTERPRET=1 *before* importing this package to run the kernels on
the CPU interpreter; without it, the launchers take CUDA/ROCm tensors only (ValueError otherwise).
Every launcher checks its arguments on the host without a device sync (legal in CUDA-graph capture) and raises a
ValueError naming the bad argument; the launchers with a validate mode (validate=True, or MXIDX_VALIDATE=1 for all of
them) also check the values they otherwise trust, with device syncs.

Public modules besides the launchers: hw.variants (the registry of kernel variants) with hw.targets (Target, Op,
Variant), hw.layout (formats, page layouts, head-dim rules, the cache-view check), hw.checks (the launchers'
host-side argument checks), hw.isa_spec (what the ISA report compiles) and hw.testing (torch adapters for tests).
Modules and packages whose names start with "_" are private to hw.
"""
import os

# Triton 3.9 warns that its default for FP fusion (fma contraction, on since before 3.6) turns off in 3.10. Pin
# the default the kernels are verified and timed with, so compiled code does not change with the triton version;
# an explicit setting by the user wins.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

from .gather import cp_gather_indexer_k_quant_cache
from .logits import fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits, get_paged_mqa_logits_metadata
from .quant import indexer_k_quant_and_cache, quantize_q_fp8, quantize_q_mxfp4
from .topk import top_k_per_row

__all__ = [
    "cp_gather_indexer_k_quant_cache",
    "fp8_fp4_mqa_logits",
    "fp8_fp4_paged_mqa_logits",
    "get_paged_mqa_logits_metadata",
    "indexer_k_quant_and_cache",
    "quantize_q_fp8",
    "quantize_q_mxfp4",
    "top_k_per_row",
]
