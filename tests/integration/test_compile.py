"""torch.compile(fullgraph=True) over one layer of the hook: no graph breaks (fullgraph raises on one), the same
cache bytes and top-k as eager; on a GPU, CUDA-graph capture of the compiled decode step replays at new contexts."""
from __future__ import annotations

import pytest
import torch

import hw
import integration.indexer
from integration.config import IndexerConfig
from integration.gates import GateDecision
from integration.indexer import DecodeMetadata, PrefillMetadata, SparseIndexer
from integration.pool import IndexerPool, PoolLayout
from integration.schedule import DecodeSchedule

from ._reference import capture

CONFIGS = [IndexerConfig("fp8"), IndexerConfig("mxfp4")]


class Layer:
    """One hook over a fresh pool whose pages hold a full random history; block table, schedule and step buffers."""

    def __init__(self, config: IndexerConfig, device, *, batch, heads, head_dim, page, max_pages, top_k, seed):
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.device, self.page = device, page
        num_pages = batch * max_pages + 1
        self.pool = IndexerPool(PoolLayout(config.kv_dtype, config.layout, 1, num_pages, page, head_dim,
                                           extra_bytes_per_page=64), device)
        self.hook = SparseIndexer(GateDecision(config, config, None, "test"), self.pool.view(0), top_k=top_k,
                                  max_context_len=max_pages * page)
        perm = torch.randperm(num_pages, generator=self.gen, device=device)[:batch * max_pages]
        self.block_table = perm.view(batch, max_pages).to(torch.int32)
        slots = (self.block_table.long()[:, :, None] * page + torch.arange(page, device=device)).reshape(-1)
        history = torch.randn(slots.numel(), head_dim, generator=self.gen, device=device).to(torch.bfloat16)
        hw.indexer_k_quant_and_cache(history, self.pool.view(0), slots, kv_dtype=config.kv_dtype,
                                     layout=config.layout)
        self.schedule = DecodeSchedule(batch, max_pages, page, max_pages * page, device)
        self.q = torch.empty(batch, heads, head_dim, dtype=torch.bfloat16, device=device)
        self.k = torch.empty(batch, head_dim, dtype=torch.bfloat16, device=device)
        self.w = torch.empty(batch, heads, dtype=torch.float32, device=device)
        self.meta = DecodeMetadata(torch.empty(batch, dtype=torch.int64, device=device), self.block_table,
                                   self.schedule)

    def set_step(self, contexts) -> None:
        """Fill the step's buffers in place: contexts, the new tokens' slots, q, k, weights."""
        ctx = torch.tensor(contexts, dtype=torch.int32, device=self.device)
        self.schedule.context_lens.copy_(ctx)
        last = (ctx.long() - 1).clamp(min=0)
        page_of = torch.gather(self.block_table.long(), 1, (last // self.page)[:, None])[:, 0]
        self.meta.slot_mapping.copy_(torch.where(ctx > 0, page_of * self.page + last % self.page, -1))
        for t in (self.q, self.k, self.w):
            t.copy_(torch.randn(t.shape, generator=self.gen, device=self.device))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.kv_dtype)
def test_compiled_decode_layer_matches_eager(config, device):
    sizes = dict(batch=2, heads=2, head_dim=64, page=16, max_pages=3, top_k=4)
    eager, compiled = Layer(config, device, seed=0, **sizes), Layer(config, device, seed=0, **sizes)
    for layer in (eager, compiled):
        layer.set_step((20, 33))
        layer.schedule.update()
    step = torch.compile(compiled.hook, fullgraph=True)
    got = step(compiled.q, compiled.k, compiled.w, compiled.meta)
    want = eager.hook(eager.q, eager.k, eager.w, eager.meta)
    assert torch.equal(got, want), (got, want)
    assert torch.equal(compiled.pool.pool, eager.pool.pool), "the compiled step must write the cache in place"


def test_layers_of_other_shapes_compile_in_one_process(device):
    """A second hook with other head counts and head dims makes torch.compile retrace the same code with symbolic
    sizes (automatic dynamic shapes): the hook's shape checks must trace that too, and each layer still equals
    its eager step."""
    for heads, head_dim in ((2, 64), (4, 128)):
        sizes = dict(batch=2, heads=heads, head_dim=head_dim, page=16, max_pages=3, top_k=4)
        eager, compiled = (Layer(IndexerConfig("fp8"), device, seed=1, **sizes) for _ in range(2))
        for layer in (eager, compiled):
            layer.set_step((20, 33))
            layer.schedule.update()
        got = torch.compile(compiled.hook, fullgraph=True)(compiled.q, compiled.k, compiled.w, compiled.meta)
        assert torch.equal(got, eager.hook(eager.q, eager.k, eager.w, eager.meta)), (heads, head_dim)


@pytest.mark.parametrize("untraceable_capture_query", [False, True], ids=["as_is", "untraceable_capture_query"])
def test_compiled_prefill_layer_matches_eager(untraceable_capture_query, device, monkeypatch):
    """With untraceable_capture_query the hook's check for CUDA-graph capture is a function torch.compile cannot
    trace, as torch.cuda's query is on a CUDA machine (fullgraph raises on it): the compiled prefill must not call
    it, on any device."""
    if untraceable_capture_query:
        monkeypatch.setattr(integration.indexer, "stream_capturing", torch.compiler.disable(lambda: False))
    sizes = dict(batch=1, heads=2, head_dim=64, page=16, max_pages=3, top_k=4)
    eager, compiled = (Layer(IndexerConfig("mxfp4"), device, seed=1, **sizes) for _ in range(2))
    q, k = torch.randn(2, 5, 2, 64, generator=eager.gen, device=device).to(torch.bfloat16).unbind(0)
    w = torch.rand(5, 2, generator=eager.gen, device=device)
    slots = eager.block_table[0, 0].long() * 16 + torch.arange(20, 25, device=device) % 16
    meta = PrefillMetadata(slots, eager.block_table, seq_lens=(25,), query_lens=(5,))
    got = torch.compile(compiled.hook, fullgraph=True)(q, k[:, 0], w, meta)
    assert torch.equal(got, eager.hook(q, k[:, 0], w, meta))
    assert torch.equal(compiled.pool.pool, eager.pool.pool)


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS + [IndexerConfig("mxfp4", "mxfp4_tiled")], ids=lambda c: c.resolved_layout)
def test_graph_of_compiled_decode_step_replays_at_new_contexts(config, device):
    """Capture schedule.update() and the compiled hook with short contexts, replay with longer ones: the replay
    equals the eager step on the same buffers."""
    layer = Layer(config, device, seed=2, batch=4, heads=32, head_dim=128, page=64, max_pages=40, top_k=64)
    step = torch.compile(layer.hook, fullgraph=True)

    def captured_step():
        layer.schedule.update()
        return step(layer.q, layer.k, layer.w, layer.meta)

    layer.set_step((1, 17, 40, 0))
    graph, out = capture(captured_step)

    replay_contexts = (2500, 65, 1999, 2560)
    layer.set_step(replay_contexts)
    graph.replay()
    replayed = out.clone()
    layer.schedule.update()
    eager = layer.hook(layer.q, layer.k, layer.w, layer.meta)
    assert torch.equal(replayed, eager), torch.nonzero((replayed != eager).any(1)).flatten().tolist()
    assert bool((replayed >= 0).all()) and int(replayed.max()) >= 40   # columns past every capture-time context
