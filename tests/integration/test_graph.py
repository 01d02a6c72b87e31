"""CUDA-graph regression: capture a decode step with short contexts, replay it with longer ones (longer than top-k
and than at capture time): the replay equals the eager step. A host-side shortcut (a width, a page count or a
schedule taken from capture-time values) would make the replay silently reuse the short contexts."""
from __future__ import annotations

import pytest
import torch

import hw
from integration.config import IndexerConfig
from integration.gates import GateDecision
from integration.indexer import DecodeMetadata, SparseIndexer
from integration.pool import IndexerPool, PoolLayout
from integration.schedule import DecodeSchedule

from ._reference import capture

pytestmark = pytest.mark.gpu

BATCH, HEADS, DIM, PAGE, LAYERS, TOP_K = 5, 32, 128, 64, 2, 64
MAX_PAGES = 40
MAX_CONTEXT = MAX_PAGES * PAGE
CAPTURE_CONTEXTS = (1, 5, 17, 40, 0)            # all below TOP_K (one empty)
REPLAY_CONTEXTS = (2500, 700, 65, 1999, 2560)   # longer than TOP_K and than at capture; the last fills every page


@pytest.mark.parametrize("config", [IndexerConfig("fp8"), IndexerConfig("mxfp4"),
                                    IndexerConfig("mxfp4", "mxfp4_tiled")], ids=lambda c: c.resolved_layout)
def test_replay_with_longer_contexts_equals_eager(config, device):
    gen = torch.Generator(device=device).manual_seed(0)
    decision = GateDecision(config, config, None, "test")
    num_pages = BATCH * MAX_PAGES + 3
    pool = IndexerPool(PoolLayout(config.kv_dtype, config.layout, LAYERS, num_pages, PAGE, DIM,
                                  extra_bytes_per_page=PAGE * 656), device)
    hooks = [SparseIndexer(decision, view, top_k=TOP_K, max_context_len=MAX_CONTEXT) for view in pool.views]
    block_table = torch.randperm(num_pages, generator=gen, device=device)[:BATCH * MAX_PAGES]
    block_table = block_table.view(BATCH, MAX_PAGES).to(torch.int32)
    # every layer's cache holds a full history for every request
    all_slots = (block_table.long()[:, :, None] * PAGE + torch.arange(PAGE, device=device)).reshape(-1)
    for view in pool.views:
        keys = torch.randn(all_slots.numel(), DIM, generator=gen, device=device).to(torch.bfloat16)
        hw.indexer_k_quant_and_cache(keys, view, all_slots, kv_dtype=config.kv_dtype, layout=decision.layout)

    schedule = DecodeSchedule(BATCH, MAX_PAGES, PAGE, MAX_CONTEXT, device)
    q = torch.empty(LAYERS, BATCH, HEADS, DIM, dtype=torch.bfloat16, device=device)
    k = torch.empty(LAYERS, BATCH, DIM, dtype=torch.bfloat16, device=device)
    w = torch.empty(LAYERS, BATCH, HEADS, dtype=torch.float32, device=device)
    slots = torch.empty(BATCH, dtype=torch.int64, device=device)
    meta = DecodeMetadata(slots, block_table, schedule)

    def set_step(contexts):
        ctx = torch.tensor(contexts, dtype=torch.int32, device=device)
        schedule.context_lens.copy_(ctx)
        last = (ctx.long() - 1).clamp(min=0)
        page_of = torch.gather(block_table.long(), 1, (last // PAGE)[:, None])[:, 0]
        slots.copy_(torch.where(ctx > 0, page_of * PAGE + last % PAGE, -1))
        q.copy_(torch.randn(q.shape, generator=gen, device=device))
        k.copy_(torch.randn(k.shape, generator=gen, device=device))
        w.copy_(torch.randn(w.shape, generator=gen, device=device))

    def step():
        schedule.update()
        return [hook(q[layer], k[layer], w[layer], meta) for layer, hook in enumerate(hooks)]

    set_step(CAPTURE_CONTEXTS)
    graph, captured = capture(step)

    graph.replay()
    short = [out.clone() for out in captured]
    for out, ctx in zip(short[0], CAPTURE_CONTEXTS):
        assert int((out >= 0).sum()) == min(ctx, TOP_K)

    set_step(REPLAY_CONTEXTS)
    graph.replay()
    replayed = [out.clone() for out in captured]
    eager = step()
    for layer in range(LAYERS):
        assert torch.equal(replayed[layer], eager[layer]), f"layer {layer}: replay differs from eager at rows " \
            f"{torch.nonzero((replayed[layer] != eager[layer]).any(1)).flatten().tolist()}"
        assert bool((replayed[layer] >= 0).all()), f"layer {layer}: every replay row sees more than top_k keys"
        assert int(replayed[layer].max()) >= max(CAPTURE_CONTEXTS)          # columns past every capture-time context
