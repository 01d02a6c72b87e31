"""The hook's kernel entry points as torch custom ops (namespace `mxidx`), so torch.compile traces the hook.

Triton launchers are opaque Python to TorchDynamo: their host-side checks read data pointers and strides, which
breaks a graph. Registered with torch.library, each launcher becomes one node of the graph with a schema, a fake
(meta) implementation that gives the output shapes from the input shapes, and a mutation annotation where it writes
its input in place, so `torch.compile(fullgraph=True)` over a SparseIndexer call has no graph breaks and CUDA-graph
capture of the compiled function captures the kernels themselves.

The ops live here, not in hw/: they are the hook's calling forms (q pairs flattened to two tensors, the layout always
named), and registering them is a process-wide side effect that plain users of the launchers should not pay for.
Each op's real implementation is the hw launcher with the same arguments (same checks, same errors, same results);
the fake implementations check nothing (the real call does, when it runs). The functions exported here take the
op while torch.compile traces them and call the launcher directly otherwise: an eager call does not pay the
dispatcher (about 20 us a call), and both paths run the same function.

    indexer_k_quant_and_cache(k, kv_cache!, slot_mapping, kv_dtype, layout, scale_rule, validate, error_flag!)
        -> None
    quantize_q_fp8(q, weights) -> (values e4m3 [..., H, D], weights fp32 [..., H])
    quantize_q_mxfp4(q, scale_rule) -> (codes uint8 [..., H, D/2], scales uint8 [..., H, D/32])
    cp_gather_indexer_k_quant_cache(kv_cache, block_table, cu_seq_lens, layout, num_tokens, validate, error_flag!)
        -> (values, scales)                             fp8: e4m3 [T, D], fp32 [T]; mxfp4: uint8 [T, D/2], [T, D/32]
    fp8_fp4_mqa_logits(q_values, q_scales, kv_values, kv_scales, weights, ks, ke, clean_logits, validate,
        error_flag!) -> fp32 [S, SK]
    fp8_fp4_paged_mqa_logits(q_values, q_scales, kv_cache, weights, context_lens, block_table, schedule_meta,
        max_context_len, clean_logits, layout, validate, error_flag!) -> fp32 [B*N, max_context_len]
    top_k_per_row(logits, lengths, k, starts, sorted) -> int32 [rows, k]

(`!`: written in place; error_flag is the hook's hw.checks error flag, which the kernels report to.) The argument
contracts are the launchers' (hw.quant, hw.gather, hw.logits, hw.topk).
Importing this module registers the ops once per process; like hw/, import it after choosing the device.
"""
from __future__ import annotations

import functools
import re

import torch

import hw
from hw.checks import FP8_DTYPE, MX_BLOCK
from hw.layout import HEAD_DIMS, LAYOUTS_OF, bytes_per_token

NAMESPACE = "mxidx"


def _traced(name: str, mutates_args: tuple[str, ...], fake, static_ints: tuple[str, ...] = ()):
    """Register the decorated function as op mxidx::<name> with its fake; return a callable that is the op under
    torch.compile and the function itself in eager mode. static_ints: int arguments the schema declares `int`, not
    `SymInt`, so that torch.compile passes their value as a constant (a symbolic output width from automatic
    dynamic shapes went unbound in torch 2.11's generated CUDA wrapper)."""
    def register(fn):
        schema = torch.library.infer_schema(fn, mutates_args=mutates_args)
        for arg in static_ints:
            schema, found = re.subn(rf"\bSymInt {arg}\b", f"int {arg}", schema)
            if found != 1:
                raise AssertionError(f"{name}: no single SymInt argument {arg!r} in {schema}")
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", fn, mutates_args=mutates_args, schema=schema)
        op.register_fake(fake)

        @functools.wraps(fn)
        def call(*args):
            return op(*args) if torch.compiler.is_compiling() else fn(*args)
        call.op = op
        return call
    return register


def _kv_format(layout: str) -> str:
    """The format ("fp8" | "mxfp4") of a named page layout."""
    return next(fmt for fmt, layouts in LAYOUTS_OF.items() if layout in layouts)


def _no_output(*args) -> None:
    return None


@_traced("indexer_k_quant_and_cache", ("kv_cache", "error_flag"), _no_output)
def indexer_k_quant_and_cache(k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, kv_dtype: str,
                              layout: str | None, scale_rule: str, validate: bool, error_flag: torch.Tensor) -> None:
    """hw.indexer_k_quant_and_cache: quantize K [T, D] and write it into kv_cache's slots, in place."""
    hw.indexer_k_quant_and_cache(k, kv_cache, slot_mapping, kv_dtype=kv_dtype, layout=layout,
                                 scale_rule=scale_rule, validate=validate, error_flag=error_flag)


def _quantize_q_fp8_fake(q, weights):
    return q.new_empty(q.shape, dtype=FP8_DTYPE), q.new_empty(q.shape[:-1], dtype=torch.float32)


@_traced("quantize_q_fp8", (), _quantize_q_fp8_fake)
def quantize_q_fp8(q: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """hw.quantize_q_fp8: (values e4m3 [..., H, D], weights fp32 [..., H] with q's scale folded in)."""
    return hw.quantize_q_fp8(q, weights)


def _quantize_q_mxfp4_fake(q, scale_rule):
    head_dim = q.shape[-1]
    return (q.new_empty((*q.shape[:-1], head_dim // 2), dtype=torch.uint8),
            q.new_empty((*q.shape[:-1], head_dim // MX_BLOCK), dtype=torch.uint8))


@_traced("quantize_q_mxfp4", (), _quantize_q_mxfp4_fake)
def quantize_q_mxfp4(q: torch.Tensor, scale_rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """hw.quantize_q_mxfp4: (codes uint8 [..., H, D/2], E8M0 scales uint8 [..., H, D/32])."""
    return hw.quantize_q_mxfp4(q, scale_rule=scale_rule)


def _gather_fake(kv_cache, block_table, cu_seq_lens, layout, num_tokens, validate, error_flag):
    fmt = _kv_format(layout)
    head_dim = next(d for d in HEAD_DIMS if bytes_per_token(fmt, d) == kv_cache.shape[-1])
    if fmt == "fp8":
        return (kv_cache.new_empty((num_tokens, head_dim), dtype=FP8_DTYPE),
                kv_cache.new_empty((num_tokens,), dtype=torch.float32))
    return (kv_cache.new_empty((num_tokens, head_dim // 2), dtype=torch.uint8),
            kv_cache.new_empty((num_tokens, head_dim // MX_BLOCK), dtype=torch.uint8))


@_traced("cp_gather_indexer_k_quant_cache", ("error_flag",), _gather_fake)
def cp_gather_indexer_k_quant_cache(kv_cache: torch.Tensor, block_table: torch.Tensor, cu_seq_lens: torch.Tensor,
                                    layout: str, num_tokens: int, validate: bool,
                                    error_flag: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """hw.cp_gather_indexer_k_quant_cache with the layout named and num_tokens given (no sync)."""
    return hw.cp_gather_indexer_k_quant_cache(kv_cache, block_table, cu_seq_lens, layout=layout,
                                              num_tokens=num_tokens, validate=validate, error_flag=error_flag)


def _prefill_fake(q_values, q_scales, kv_values, kv_scales, weights, ks, ke, clean_logits, validate, error_flag):
    return q_values.new_empty((q_values.shape[0], kv_values.shape[0]), dtype=torch.float32)


@_traced("fp8_fp4_mqa_logits", ("error_flag",), _prefill_fake)
def fp8_fp4_mqa_logits(q_values: torch.Tensor, q_scales: torch.Tensor | None, kv_values: torch.Tensor,
                       kv_scales: torch.Tensor, weights: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor,
                       clean_logits: bool, validate: bool, error_flag: torch.Tensor) -> torch.Tensor:
    """hw.fp8_fp4_mqa_logits((q_values, q_scales), (kv_values, kv_scales), ...) -> fp32 [S, SK]."""
    return hw.fp8_fp4_mqa_logits((q_values, q_scales), (kv_values, kv_scales), weights, ks, ke,
                                 clean_logits=clean_logits, validate=validate, error_flag=error_flag)


def _decode_fake(q_values, q_scales, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                 clean_logits, layout, validate, error_flag):
    return q_values.new_empty((q_values.shape[0] * q_values.shape[1], max_context_len), dtype=torch.float32)


@_traced("fp8_fp4_paged_mqa_logits", ("error_flag",), _decode_fake, static_ints=("max_context_len",))
def fp8_fp4_paged_mqa_logits(q_values: torch.Tensor, q_scales: torch.Tensor | None, kv_cache: torch.Tensor,
                             weights: torch.Tensor, context_lens: torch.Tensor, block_table: torch.Tensor,
                             schedule_meta: torch.Tensor, max_context_len: int, clean_logits: bool,
                             layout: str | None, validate: bool, error_flag: torch.Tensor) -> torch.Tensor:
    """hw.fp8_fp4_paged_mqa_logits((q_values, q_scales), ...) -> fp32 [B*N, max_context_len]."""
    return hw.fp8_fp4_paged_mqa_logits((q_values, q_scales), kv_cache, weights, context_lens, block_table,
                                       schedule_meta, max_context_len, clean_logits=clean_logits, layout=layout,
                                       validate=validate, error_flag=error_flag)


def _top_k_fake(logits, lengths, k, starts, sorted):
    return logits.new_empty((logits.shape[0], k), dtype=torch.int32)


@_traced("top_k_per_row", (), _top_k_fake, static_ints=("k",))
def top_k_per_row(logits: torch.Tensor, lengths: torch.Tensor, k: int, starts: torch.Tensor | None,
                  sorted: bool) -> torch.Tensor:
    """hw.top_k_per_row(logits, lengths, k, starts=starts, sorted=sorted) -> int32 [rows, k]."""
    return hw.top_k_per_row(logits, lengths, k, starts=starts, sorted=sorted)
