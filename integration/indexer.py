"""The sparse-indexer hook: one call per layer and step, the same for FP8 and MXFP4 (DESIGN §6, §8).

Its inputs mirror what a serving engine's sparse-indexer op receives:

    q        bfloat16[T, H, D]   rotated, RoPE'd indexer queries of the T new tokens
    k        bfloat16[T, D]      their indexer keys
    weights  float32[T, H]       per-head weights (already scaled by softmax_scale * H^-0.5)
    metadata PrefillMetadata | DecodeMetadata

and it returns int32[T, top_k]: for each new token the positions (token index within its request, 0-based) of the
top_k keys it should attend to, ascending (the set is what sparse attention reads; `sorted_top_k=True` orders it by
logit, desc, as hw.top_k_per_row does), padded with -1 when fewer than top_k are visible.

Per call: K is quantized and written into this layer's cache view (hw.indexer_k_quant_and_cache); q is quantized
(FP8: hw.quantize_q_fp8 folds its per-(token, head) scale into the weights; MXFP4: hw.quantize_q_mxfp4); then

    prefill: the request's K is gathered from the pages (hw.cp_gather_indexer_k_quant_cache) and scored by
             hw.fp8_fp4_mqa_logits with causal ranges [0, position + 1); top-k by those lengths.
    decode:  hw.fp8_fp4_paged_mqa_logits reads the pages directly with the step's shared DecodeSchedule,
             clean_logits=False and the output width fixed at the model's max_context_len; top-k masks by the
             schedule's row lengths. Every tensor has a fixed shape, so the call can be captured in a CUDA graph.

The launchers are called through their torch custom ops (integration.ops), so torch.compile(fullgraph=True) traces a
call without graph breaks.

Every kernel call reports out-of-range integers (page ids, slots, contexts past the table) to the hook's error flag
without a sync (hw.checks.ErrorKind); check_errors() raises on them where the caller syncs anyway.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from hw.checks import (
    check_error_flag,
    check_flag,
    check_tensor,
    new_error_flag,
    raise_if_flagged,
    stream_capturing,
    validate_requested,
)
from hw.layout import check_cache_view, check_scorer_head_dim
from hw.topk import MAX_K

from . import ops
from .gates import GateDecision
from .pool import PoolLayout
from .schedule import DecodeSchedule


@dataclass(frozen=True)
class PrefillMetadata:
    """A batch of prefill chunks, one per request b (eager: lengths are host ints).

    Request b's new tokens are rows sum(query_lens[:b]) ..+query_lens[b] of q/k/weights; they sit at positions
    seq_lens[b] - query_lens[b] .. seq_lens[b] - 1, so earlier chunks of the request are already in the cache.
    slot_mapping int64[T]: cache slot (page * P + token) of each new token, < 0 skips the write.
    block_table int32[B, max_pages]: physical pages of each request (entries past its seq_len unused).
    """

    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    seq_lens: tuple[int, ...]
    query_lens: tuple[int, ...]

    def __post_init__(self):
        check_tensor("block_table", self.block_table, dtypes=torch.int32, ndim=2)
        if len(self.seq_lens) != len(self.query_lens) or len(self.seq_lens) != self.block_table.shape[0]:
            raise ValueError(f"seq_lens ({len(self.seq_lens)}), query_lens ({len(self.query_lens)}) and "
                             f"block_table rows ({self.block_table.shape[0]}) must all count the requests")
        for b, (s, n) in enumerate(zip(self.seq_lens, self.query_lens)):
            if not 0 <= n <= s:
                raise ValueError(f"request {b}: need 0 <= query_lens <= seq_lens, got {n} and {s}")

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)


@dataclass(frozen=True)
class DecodeMetadata:
    """One decode step of B requests with N = schedule.next_n new tokens each (T = B * N rows, request-major).

    slot_mapping int64[B * N]; block_table int32[B, max_pages]; schedule: this step's DecodeSchedule, already
    updated (once for all layers). For CUDA graphs all three are fixed buffers updated in place.
    """

    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    schedule: DecodeSchedule


class SparseIndexer:
    """The hook of one indexer layer.

    decision:        the gate decision (what format and layout run)
    kv_cache:        this layer's view, uint8[num_pages, P, 1, bytes_per_token] (integration.pool)
    top_k:           indices returned per token, 1..2048 (hw.top_k_per_row's limit)
    max_context_len: width of the decode logits (the model's maximum context)
    validate:        True (or MXIDX_VALIDATE=1) also checks what the hot path bounds, with device syncs (not
                     during CUDA-graph capture): every slot_mapping entry is negative or a slot of kv_cache, and
                     the block-table pages the gather and the scorer read are pages of kv_cache.
    pool_layout:     the PoolLayout kv_cache was carved from (IndexerPool.layout). A cache's bytes do not say its
                     format (68 bytes a token is both FP8 D = 64 and MXFP4 D = 128); given, the hook refuses a
                     decision of another format or layout, and calls whose head dim is not the pool's.
    error_flag:      the int32 [4] error flag the kernels report to (hw.checks.new_error_flag; IndexerPool.error_flag
                     shares one among the layers); None: the hook makes its own. check_errors() reads it.
    sorted_top_k:    False (default): each token's selection in ascending position order (hw.top_k_per_row's
                     sorted=False: the same set, faster); True: ordered by (logit desc, position asc).

    Every call checks dtypes, shapes and devices on the host (no sync) and raises ValueError naming the argument
    before it writes the cache.
    """

    def __init__(self, decision: GateDecision, kv_cache: torch.Tensor, *, top_k: int, max_context_len: int,
                 validate: bool = False, pool_layout: PoolLayout | None = None,
                 error_flag: torch.Tensor | None = None, sorted_top_k: bool = False):
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_K:
            raise ValueError(f"top_k must be an int in 1..{MAX_K}, got {top_k!r}")
        if isinstance(max_context_len, bool) or not isinstance(max_context_len, int) or max_context_len < 1:
            raise ValueError(f"max_context_len must be a positive int, got {max_context_len!r}")
        check_tensor("kv_cache", kv_cache, dtypes=torch.uint8, ndim=4)
        self.kv_dtype = decision.kv_dtype
        self.layout = decision.layout
        self.scale_rule = decision.config.scale_rule
        self.kv_cache = kv_cache
        self.top_k = top_k
        self.max_context_len = max_context_len
        self.validate = check_flag("validate", validate)
        self.sorted_top_k = check_flag("sorted_top_k", sorted_top_k)
        if pool_layout is not None:
            if not isinstance(pool_layout, PoolLayout):
                raise ValueError(f"pool_layout must be an integration.pool.PoolLayout, got "
                                 f"{type(pool_layout).__name__}")
            if (pool_layout.kv_dtype, pool_layout.layout) != (self.kv_dtype, self.layout):
                raise ValueError(f"the pool holds {pool_layout.kv_dtype} pages ({pool_layout.layout}) but the decision "
                                 f"runs {self.kv_dtype} ({self.layout}): build the pool from the decision")
        self.pool_layout = pool_layout
        self.error_flag = (new_error_flag(kv_cache.device) if error_flag is None
                           else check_error_flag(error_flag, kv_cache.device))

    def check_errors(self) -> None:
        """Raise ValueError naming the first out-of-range input a kernel of this hook (or of the layers sharing its
        flag) met since the flag was last cleared; a device sync (hw.checks.raise_if_flagged)."""
        raise_if_flagged(self.error_flag)

    @property
    def page_size(self) -> int:
        return self.kv_cache.shape[1]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor,
                 metadata: PrefillMetadata | DecodeMetadata) -> torch.Tensor:
        """q bfloat16 [T, H, D], k bfloat16 [T, D], weights float32 [T, H], all on kv_cache's device, and the
        metadata of this step -> int32 [T, top_k] (positions within each request, -1 padded)."""
        if not isinstance(metadata, (PrefillMetadata, DecodeMetadata)):
            raise ValueError(f"metadata must be PrefillMetadata or DecodeMetadata, got {type(metadata).__name__}")
        device = self.kv_cache.device
        check_tensor("q", q, dtypes=torch.bfloat16, ndim=3, device=device)
        num_tokens, num_heads, head_dim = q.shape
        check_tensor("k", k, dtypes=torch.bfloat16, shape=(num_tokens, head_dim), device=device)
        check_tensor("weights", weights, dtypes=torch.float32, shape=(num_tokens, num_heads), device=device)
        # the scorers' geometry rules too, so that a call they would refuse never writes the cache first
        check_scorer_head_dim("q", head_dim, self.layout)
        if self.pool_layout is not None and head_dim != self.pool_layout.head_dim:
            raise ValueError(f"q has head dim {head_dim}, but the pool holds {self.kv_dtype} pages of head dim "
                             f"{self.pool_layout.head_dim}")
        if not torch.compiler.is_compiling():   # compiled, the writer op runs this check before it writes
            check_cache_view("kv_cache", self.kv_cache, self.kv_dtype, head_dim, self.layout)
        check_tensor("slot_mapping", metadata.slot_mapping, dtypes=torch.int64, shape=(num_tokens,), device=device)
        # the messages are formatted only when raised: torch.compile (2.11) cannot format a symbolic batch size
        if isinstance(metadata, PrefillMetadata):
            # compiling first: torch.compile cannot trace the capture query (a graph break, an error in fullgraph)
            if not torch.compiler.is_compiling() and stream_capturing():
                # a replay would reuse this call's host lengths (and read a pinned buffer reused since)
                raise ValueError("the hook's prefill takes its lengths from the host: call it eagerly, not while "
                                 "capturing a CUDA graph (decode steps can be captured)")
            self._check_prefill(metadata)
            if num_tokens != metadata.num_tokens:
                raise ValueError(f"q has {num_tokens} tokens, but the prefill metadata counts {metadata.num_tokens}")
        else:
            sched = metadata.schedule
            self._check_schedule(sched, metadata.block_table)
            if num_tokens != sched.batch_size * sched.next_n:
                raise ValueError(f"q has {num_tokens} tokens, but a decode step of {sched.batch_size} requests x "
                                 f"next_n {sched.next_n} needs {sched.batch_size * sched.next_n}")
        validate = validate_requested(self.validate)
        # everything is checked before the cache is touched (the writer's validate mode checks the slots first)
        ops.indexer_k_quant_and_cache(k, self.kv_cache, metadata.slot_mapping, self.kv_dtype, self.layout,
                                      self.scale_rule, validate, self.error_flag)
        q_pair, weights = self._quantize_q(q, weights)
        if isinstance(metadata, PrefillMetadata):
            return self._prefill(q_pair, weights, metadata, validate)
        return self._decode(q_pair, weights, metadata, validate)

    def _check_prefill(self, meta: PrefillMetadata) -> None:
        """block_table on the cache's device (its dtype and rank are the metadata's checks), wide enough for every
        request (the gather would read a longer request's extra tokens as zero bytes)."""
        check_tensor("block_table", meta.block_table, device=self.kv_cache.device)
        covered = meta.block_table.shape[1] * self.page_size
        for b, seq_len in enumerate(meta.seq_lens):
            if (held := self._keys_held(seq_len)) > covered:
                what = f"has {seq_len} tokens" if held == seq_len else f"has {held} of its {seq_len} tokens here"
                raise ValueError(f"request {b} {what} but block_table's {meta.block_table.shape[1]} pages of "
                                 f"{self.page_size} tokens cover only {covered}; widen block_table")

    def _check_schedule(self, sched: DecodeSchedule, block_table: torch.Tensor) -> None:
        """The schedule's row lengths must describe exactly the logits this hook computes: same page size, width
        and block-table width (else top-k could read columns the scorer never wrote, clean_logits being False)."""
        if (sched.page_size, sched.max_context_len) != (self.page_size, self.max_context_len):
            raise ValueError(f"the DecodeSchedule was built for page size {sched.page_size} and max_context_len "
                             f"{sched.max_context_len}; this layer has {self.page_size} and {self.max_context_len}")
        check_tensor("block_table", block_table, dtypes=torch.int32, shape=(sched.batch_size, sched.max_pages),
                     device=self.kv_cache.device)

    def _quantize_q(self, q: torch.Tensor, weights: torch.Tensor):
        """-> ((values, scales|None), weights): FP8 folds q's scale into the weights, MXFP4 keeps them."""
        if self.kv_dtype == "fp8":
            values, folded = ops.quantize_q_fp8(q, weights)
            return (values, None), folded
        return ops.quantize_q_mxfp4(q, self.scale_rule), weights

    def _keys_held(self, seq_len: int) -> int:
        """Keys of a request of seq_len tokens in this hook's cache: all of them (a context-parallel rank: its
        share)."""
        return seq_len

    def _keys_before(self, ends: torch.Tensor) -> torch.Tensor:
        """int32: the keys of this hook's cache at request positions < ends (all of them: ends itself)."""
        return ends

    def _prefill_logits(self, q_pair, weights: torch.Tensor, meta: PrefillMetadata, validate: bool):
        """For each request with new tokens and keys here: (rows of its tokens, their fp32 [rows, keys held]
        causal logits over the keys held, int32 [rows] visible keys per row), from one gather of every request's
        keys."""
        device = weights.device
        held = [self._keys_held(seq_len) for seq_len in meta.seq_lens]
        first_key = (0, *itertools.accumulate(held))   # request b's keys: first_key[b] .. first_key[b+1]
        if device.type == "cuda" and not torch.compiler.is_compiling():
            # through pinned memory, without a sync: a copy from pageable memory waits for the queued kernels
            cu_seq_lens = torch.tensor(first_key, dtype=torch.int32, pin_memory=True).to(device, non_blocking=True)
        else:
            cu_seq_lens = torch.tensor(first_key, dtype=torch.int32, device=device)
        kv_values, kv_scales = ops.cp_gather_indexer_k_quant_cache(self.kv_cache, meta.block_table, cu_seq_lens,
                                                                   self.layout, first_key[-1], validate,
                                                                   self.error_flag)
        q_values, q_scales = q_pair
        row = 0
        for b, (seq_len, query_len) in enumerate(zip(meta.seq_lens, meta.query_lens)):
            rows = slice(row, row + query_len)
            row += query_len
            if query_len == 0 or held[b] == 0:
                continue
            keys = slice(first_key[b], first_key[b + 1])
            # query i of the chunk sits at position seq_len - query_len + i and sees the keys up to it
            ends = self._keys_before(torch.arange(seq_len - query_len + 1, seq_len + 1, dtype=torch.int32,
                                                  device=device))
            logits = ops.fp8_fp4_mqa_logits(q_values[rows], None if q_scales is None else q_scales[rows],
                                            kv_values[keys], kv_scales[keys], weights[rows], torch.zeros_like(ends),
                                            ends, False, False, self.error_flag)
            yield rows, logits, ends

    def _prefill(self, q_pair, weights: torch.Tensor, meta: PrefillMetadata, validate: bool) -> torch.Tensor:
        out = None
        for rows, logits, ends in self._prefill_logits(q_pair, weights, meta, validate):
            top = ops.top_k_per_row(logits, ends, self.top_k, None, self.sorted_top_k)
            if rows == slice(0, meta.num_tokens):
                return top                      # one request holds every row: its top-k is the output, no copy
            out = self._no_top_k(meta, weights.device) if out is None else out
            out[rows] = top
        return self._no_top_k(meta, weights.device) if out is None else out

    def _no_top_k(self, meta: PrefillMetadata, device: torch.device) -> torch.Tensor:
        """A prefill's output before any request's top-k is written into it: int32 [T, top_k] of -1."""
        return torch.full((meta.num_tokens, self.top_k), -1, dtype=torch.int32, device=device)

    def _decode(self, q_pair, weights: torch.Tensor, meta: DecodeMetadata, validate: bool) -> torch.Tensor:
        sched = meta.schedule
        batch, next_n = sched.batch_size, sched.next_n
        q_values, q_scales = q_pair
        q_4d = (q_values.view(batch, next_n, *q_values.shape[1:]),
                None if q_scales is None else q_scales.view(batch, next_n, *q_scales.shape[1:]))
        logits = ops.fp8_fp4_paged_mqa_logits(*q_4d, self.kv_cache, weights, sched.context_lens, meta.block_table,
                                              sched.schedule_meta, self.max_context_len, False, self.layout,
                                              validate, self.error_flag)
        return ops.top_k_per_row(logits, sched.row_lengths, self.top_k, None, self.sorted_top_k)
