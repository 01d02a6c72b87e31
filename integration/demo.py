"""The demo job behind `mxidx demo`: the reference model through prefill + decode with the hook (DESIGN §6, §7).

run_demo decides the format through the gates, builds one shared pool (interleaved with a stand-in for the
attention KV page, so the page stride exceeds the indexer page as in serving engines), gives each layer a
zero-copy view and a SparseIndexer, runs a prefill and decode steps (one DecodeSchedule update per step, reused by
every layer), and measures recall@k of the hook's top-k against the bf16 reference, once with and once without the
Hadamard rotation of q and k. The caller must have chosen the device (tools.runtime.choose_device) before hw/ was
imported.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from hw.layout import KV_DTYPES, bytes_per_token
from hw.topk import MAX_K

from .config import IndexerConfig
from .gates import GateDecision, decide
from .geometry import IndexerGeometry
from .indexer import DecodeMetadata, PrefillMetadata, SparseIndexer
from .model import IndexerModel, ModelConfig, recall_at_k, reference_logits
from .pool import IndexerPool, PoolLayout
from .schedule import DecodeSchedule

# DeepSeek-V3.2's MLA cache entry (512 fp8 latent values + 4 fp32 scales + 64 bf16 RoPE values): the per-token
# data that shares each page slot with the indexer pages in the demo's pool.
MLA_BYTES_PER_TOKEN = 656
LONG_CONTEXT = 8192
LONG_CONTEXT_TOP_K = 2048        # the reference models' index_topk
SHORT_CONTEXT_TOP_K_DIVISOR = 16  # k = prompt/16 below LONG_CONTEXT: 64 for the CPU's 1024, well below the context
REFERENCE_ROWS = 512             # rows of the [rows, H, SK] float32 reference computed at once

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DemoSettings:
    """One demo run: the model (its layers, heads, head dim and seed are the run's) and the sizes of the run around
    it; `for_device` gives the defaults (small on the CPU interpreter). ValueError on a size the run could not use
    (checked before anything runs: the model's by ModelConfig, head_dim and page_size by IndexerGeometry)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    prompt_len: int = 1024
    decode_steps: int = 8
    page_size: int = 64
    batch: int = 1
    top_k: int | None = None      # None: default_top_k(prompt_len)

    def __post_init__(self):
        for name in ("prompt_len", "page_size", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.decode_steps < 0:
            raise ValueError(f"decode_steps must be >= 0, got {self.decode_steps}")
        if self.top_k is not None and not 1 <= self.top_k <= MAX_K:
            raise ValueError(f"top_k must be in 1..{MAX_K}, got {self.top_k}")
        _ = self.geometry   # heads, head dim and page size: ValueError before anything runs

    @property
    def geometry(self) -> IndexerGeometry:
        """The indexer layer's geometry (IndexerGeometry checks it)."""
        return IndexerGeometry(self.model.num_heads, self.model.head_dim, self.page_size)

    @classmethod
    def for_device(cls, device: str, *, num_layers: int | None = None, num_heads: int | None = None,
                   **overrides) -> "DemoSettings":
        """CPU: 2 layers, H=8, a 1024-token prompt, k = 64 (the Triton interpreter); GPU: 4 layers, H=32, an 8K
        prompt, k = 2048. num_layers and num_heads override the model's, `overrides` other fields of DemoSettings;
        None keeps the default."""
        if device == "cpu":
            base = cls()
        else:
            base = cls(ModelConfig(num_layers=4, num_heads=32), prompt_len=LONG_CONTEXT, decode_steps=16)
        model = dataclasses.replace(base.model, **_given(num_layers=num_layers, num_heads=num_heads))
        return dataclasses.replace(base, model=model, **_given(**overrides))

    @property
    def resolved_top_k(self) -> int:
        return self.top_k if self.top_k is not None else default_top_k(self.prompt_len)

    @property
    def max_context_len(self) -> int:
        return self.prompt_len + self.decode_steps


def _given(**values) -> dict:
    """The keyword arguments that are not None."""
    return {k: v for k, v in values.items() if v is not None}


def default_top_k(prompt_len: int) -> int:
    if prompt_len >= LONG_CONTEXT:
        return LONG_CONTEXT_TOP_K
    return max(1, prompt_len // SHORT_CONTEXT_TOP_K_DIVISOR)


@dataclass
class VariantResult:
    """One pass of the model (rotation on or off): seconds per phase and recall@k sums over scored rows."""

    rotate: bool
    seconds: dict[str, float] = field(default_factory=dict)
    recall_sum: dict[str, float] = field(default_factory=lambda: {"prefill": 0.0, "decode": 0.0})
    rows: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})

    def recall(self, phase: str | None = None) -> float:
        """Mean recall@k over the scored rows of `phase` (or all); nan if no row sees more than k keys."""
        phases = [phase] if phase else list(self.rows)
        rows = sum(self.rows[p] for p in phases)
        return sum(self.recall_sum[p] for p in phases) / rows if rows else math.nan


@dataclass
class DemoResult:
    device: str
    settings: DemoSettings
    decision: GateDecision
    gate_seconds: float
    bytes_per_token: dict[str, int]     # per layer: "fp8", "mxfp4"
    pool: PoolLayout
    variants: list[VariantResult]


def run_demo(config: IndexerConfig, settings: DemoSettings, device: str, *,
             progress: Progress | None = None) -> DemoResult:
    """Run the demo; `progress` gets one line per phase, layer and decode step."""
    progress = progress or (lambda message: None)
    dev = torch.device(device)
    geometry = settings.geometry
    progress("gates: deciding the indexer format" + (" (the MXFP4 self-check runs the kernels once)"
                                                      if config.kv_dtype == "mxfp4" else ""))
    start = time.perf_counter()
    decision = decide(config, geometry, dev)
    gate_seconds = time.perf_counter() - start
    progress(f"gates: {decision.describe()}")
    model = IndexerModel(settings.model, dev)
    pool_layout = _pool_layout(decision, settings)
    if dev.type == "cuda":
        # compiled kernels are JIT-compiled on first use: one untimed layer and step first, same shapes
        progress("warm-up: compiling the kernels (one layer, untimed)")
        warm = dataclasses.replace(settings, model=dataclasses.replace(settings.model, num_layers=1),
                                   decode_steps=min(settings.decode_steps, 1))
        _run_variant(model, decision, _pool_layout(decision, warm), warm, dev, lambda message: None)
    variants = [_run_variant(model.with_rotation(rotate), decision, pool_layout, settings, dev, progress)
                for rotate in (True, False)]
    return DemoResult(device, settings, decision, gate_seconds,
                      {fmt: bytes_per_token(fmt, settings.model.head_dim) for fmt in KV_DTYPES},
                      pool_layout, variants)


def check_fits(settings: DemoSettings, device: str) -> None:
    """ValueError, before anything runs, when the run's largest buffers cannot fit the device's memory: one
    layer's prefill logits (fp32 [B * prompt, prompt]), every layer's bf16 keys, and the shared pool (at its FP8
    size, the larger format)."""
    s = settings
    need = (4 * s.batch * s.prompt_len ** 2 + s.model.num_layers * s.batch * 2 * s.max_context_len * s.model.head_dim
            + s.batch * -(-s.max_context_len // s.page_size) * s.page_size * s.model.num_layers
            * (bytes_per_token("fp8", s.model.head_dim) + MLA_BYTES_PER_TOKEN))
    if device == "cuda":
        have = torch.cuda.mem_get_info()[0]
    else:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    if need > have:
        raise ValueError(f"this demo needs about {need / 2**30:.1f} GiB ({s.model.num_layers} layers, batch "
                         f"{s.batch}, prompt {s.prompt_len}: the prefill logits grow with prompt^2), the {device} has "
                         f"{have / 2**30:.1f} GiB free; use a smaller --prompt-len or --layers")


def _pool_layout(decision: GateDecision, settings: DemoSettings) -> PoolLayout:
    pages_per_request = -(-settings.max_context_len // settings.page_size)
    # one spare page no request uses: it stays 0xFF-poisoned, so a kernel reading it would show NaN
    return PoolLayout(decision.kv_dtype, decision.layout, settings.model.num_layers,
                      settings.batch * pages_per_request + 1, settings.page_size, settings.model.head_dim,
                      extra_bytes_per_page=settings.page_size * MLA_BYTES_PER_TOKEN)


def _run_variant(model: IndexerModel, decision: GateDecision, pool_layout: PoolLayout, settings: DemoSettings,
                 device: torch.device, progress: Progress) -> VariantResult:
    """One pass: a timed prefill, timed decode steps, then recall@k against the bf16 reference (timed apart)."""
    run = _VariantRun(model, decision, pool_layout, settings, device)
    name = "hadamard" if model.cfg.rotate else "no hadamard"
    result = VariantResult(model.cfg.rotate)
    for phase, step in (("prefill", run.prefill), ("decode", run.decode), ("reference", run.score)):
        start = time.perf_counter()
        step(result, lambda message: progress(f"[{name}] {message}"))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        result.seconds[phase] = time.perf_counter() - start
    run.pool.check_errors()       # an out-of-range index any kernel met (none: the demo's tables are valid)
    return result


class _VariantRun:
    """The state of one pass: a fresh pool and hooks, shuffled pages, the tokens, and what the reference needs."""

    def __init__(self, model: IndexerModel, decision: GateDecision, pool_layout: PoolLayout,
                 settings: DemoSettings, device: torch.device):
        self.model, self.settings, self.device = model, settings, device
        self.top_k = settings.resolved_top_k
        self.pool = pool = IndexerPool(pool_layout, device)
        self.hooks = [SparseIndexer(decision, pool.view(layer), top_k=self.top_k,
                                    max_context_len=settings.max_context_len, pool_layout=pool.layout,
                                    error_flag=pool.error_flag)
                      for layer in range(settings.model.num_layers)]
        self.pages_per_request = -(-settings.max_context_len // settings.page_size)
        gen = torch.Generator().manual_seed(settings.model.seed)
        # shuffled physical pages, as a serving engine's allocator hands them out
        order = torch.randperm(pool_layout.num_pages, generator=gen)[:settings.batch * self.pages_per_request]
        self.block_table = order.view(settings.batch, self.pages_per_request).to(torch.int32).to(device)
        steps = settings.prompt_len + settings.decode_steps
        tokens = model.sample_tokens(settings.batch * steps, seed=settings.model.seed + 1)
        self.tokens = tokens.view(settings.batch, steps)
        self.positions = torch.arange(settings.prompt_len, device=device).expand(settings.batch, -1)
        # per layer: every key written (bf16), the prefill's (q, weights, top-k); per decode row: its inputs
        self.keys = [torch.empty(settings.batch, settings.max_context_len, settings.model.head_dim,
                                 dtype=torch.bfloat16, device=device) for _ in range(settings.model.num_layers)]
        self.prefill_rows = []
        self.decode_rows = []

    def slots(self, positions: torch.Tensor) -> torch.Tensor:
        """positions int64 [B, n] -> cache slots int64 [B * n] through the block table."""
        page = self.settings.page_size
        pages = torch.gather(self.block_table.long(), 1, positions // page)
        return (pages * page + positions % page).reshape(-1)

    def prefill(self, result: VariantResult, progress: Progress) -> None:
        s = self.settings
        meta = PrefillMetadata(self.slots(self.positions), self.block_table, (s.prompt_len,) * s.batch,
                               (s.prompt_len,) * s.batch)
        x = self.model.embed(self.tokens[:, :s.prompt_len].reshape(-1))
        for layer, hook in enumerate(self.hooks):
            progress(f"prefill: layer {layer + 1}/{s.model.num_layers}, {s.batch} x {s.prompt_len} tokens")
            q, k, w = self.model.indexer_inputs(layer, x, self.positions.reshape(-1))
            self.prefill_rows.append((q, w, hook(q, k, w, meta)))
            self.keys[layer][:, :s.prompt_len] = k.view(s.batch, s.prompt_len, -1)
            x = self.model.next_hidden(layer, x)

    def decode(self, result: VariantResult, progress: Progress) -> None:
        s = self.settings
        schedule = DecodeSchedule(s.batch, self.pages_per_request, s.page_size, s.max_context_len, self.device)
        for step in range(s.decode_steps):
            pos = s.prompt_len + step
            progress(f"decode: step {step + 1}/{s.decode_steps}, context {pos + 1}")
            step_positions = torch.full((s.batch, 1), pos, dtype=torch.int64, device=self.device)
            schedule.update(torch.full((s.batch,), pos + 1, dtype=torch.int32, device=self.device))  # once a step
            meta = DecodeMetadata(self.slots(step_positions), self.block_table, schedule)
            x = self.model.embed(self.tokens[:, pos])
            for layer, hook in enumerate(self.hooks):
                q, k, w = self.model.indexer_inputs(layer, x, step_positions.reshape(-1))
                self.decode_rows.append((layer, pos, q, w, hook(q, k, w, meta)))
                self.keys[layer][:, pos] = k
                x = self.model.next_hidden(layer, x)

    def score(self, result: VariantResult, progress: Progress) -> None:
        s, top_k = self.settings, self.top_k
        progress(f"bf16 reference and recall@{top_k}")
        for layer, (q, w, got) in enumerate(self.prefill_rows):
            for b in range(s.batch):
                for first in range(0, s.prompt_len, REFERENCE_ROWS):
                    at = self.positions[b, first:first + REFERENCE_ROWS]
                    rows = slice(b * s.prompt_len + first, b * s.prompt_len + first + at.numel())
                    ref = reference_logits(q[rows], self.keys[layer][b, :s.prompt_len], w[rows], at)
                    _add_recall(result, "prefill", recall_at_k(got[rows], ref, at, top_k))
        for layer, pos, q, w, got in self.decode_rows:
            at = torch.tensor([pos], device=self.device)
            for b in range(s.batch):
                ref = reference_logits(q[b:b + 1], self.keys[layer][b, :pos + 1], w[b:b + 1], at)
                _add_recall(result, "decode", recall_at_k(got[b:b + 1], ref, at, top_k))


def _add_recall(result: VariantResult, phase: str, recall: tuple[float, int]) -> None:
    result.recall_sum[phase] += recall[0]
    result.rows[phase] += recall[1]


def format_report(result: DemoResult) -> str:
    """The human-readable summary `mxidx demo` prints."""
    s, m, d, pool = result.settings, result.settings.model, result.decision, result.pool
    chosen = result.bytes_per_token[d.kv_dtype]
    lines = [
        f"device            {result.device}",
        f"model             {m.num_layers} layers, H={m.num_heads}, D={m.head_dim}, page {s.page_size} tokens, "
        f"batch {s.batch}, prompt {s.prompt_len}, {s.decode_steps} decode steps",
        f"requested         {d.requested.to_json()}",
        f"gate decision     {d.describe()}  [{result.gate_seconds:.2f} s]",
        f"cache bytes/token fp8 {result.bytes_per_token['fp8']}, mxfp4 {result.bytes_per_token['mxfp4']} per layer; "
        f"chosen {d.kv_dtype}: {chosen} x {m.num_layers} layers = {chosen * m.num_layers}",
        f"shared pool       {pool.pool_bytes} bytes: {pool.num_pages} page slots of stride {pool.page_stride} "
        f"(indexer pages {pool.page_bytes} B per layer + {pool.extra_bytes_per_page} B other per-page data)",
        f"recall@{s.resolved_top_k} of {d.kv_dtype} vs the bf16 reference (rows that see more than k keys):",
    ]
    for v in result.variants:
        label = "with Hadamard   " if v.rotate else "without Hadamard"
        lines.append(f"  {label}  prefill {v.recall('prefill'):.4f} ({v.rows['prefill']} rows), "
                     f"decode {v.recall('decode'):.4f} ({v.rows['decode']} rows)   "
                     + ", ".join(f"{phase} {sec:.2f} s" for phase, sec in v.seconds.items()))
    return "\n".join(lines)
