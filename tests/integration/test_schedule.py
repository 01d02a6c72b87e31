"""The decode schedule: computed once per step and shared by every layer; fixed buffers; empty contexts."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hw
from integration.config import IndexerConfig
from integration.gates import GateDecision
from integration.indexer import DecodeMetadata, SparseIndexer
from integration.pool import IndexerPool, PoolLayout
from integration.schedule import DecodeSchedule
from sim import scorer as sim_scorer

PAGE, HEADS, DIM, LAYERS, TOP_K = 16, 2, 64, 3, 4


def _hooks(device, batch: int, num_pages: int, max_context: int):
    config = IndexerConfig("mxfp4")
    decision = GateDecision(config, config, None, "test")
    pool = IndexerPool(PoolLayout("mxfp4", None, LAYERS, num_pages, PAGE, DIM), device)
    return [SparseIndexer(decision, view, top_k=TOP_K, max_context_len=max_context) for view in pool.views]


def _step_inputs(device, batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, DIM, generator=gen).to(torch.bfloat16).to(device)
    k = torch.randn(batch, DIM, generator=gen).to(torch.bfloat16).to(device)
    w = torch.randn(batch, HEADS, generator=gen).to(device)
    return q, k, w


@pytest.mark.interp
def test_one_schedule_per_step_shared_by_every_layer(device, monkeypatch):
    batch, max_pages = 2, 3
    hooks = _hooks(device, batch, 8, max_pages * PAGE)
    schedule = DecodeSchedule(batch, max_pages, PAGE, max_pages * PAGE, device)
    metadata_calls, scorer_args = [], []
    real_metadata, real_scorer = hw.get_paged_mqa_logits_metadata, hw.fp8_fp4_paged_mqa_logits

    def counting_metadata(*args):
        metadata_calls.append(args)
        return real_metadata(*args)

    def recording_scorer(q, kv_cache, weights, context_lens, block_table, schedule_meta, *args, **kwargs):
        scorer_args.append((context_lens, schedule_meta))
        return real_scorer(q, kv_cache, weights, context_lens, block_table, schedule_meta, *args, **kwargs)

    monkeypatch.setattr(hw, "get_paged_mqa_logits_metadata", counting_metadata)
    monkeypatch.setattr(hw, "fp8_fp4_paged_mqa_logits", recording_scorer)
    block_table = torch.tensor([[4, 1, 6], [0, 7, 2]], dtype=torch.int32, device=device)
    slots = torch.tensor([4 * PAGE + 3, 0 * PAGE], device=device)
    schedule.update(torch.tensor([4, 1], dtype=torch.int32, device=device))
    for layer, hook in enumerate(hooks):
        out = hook(*_step_inputs(device, batch, layer), DecodeMetadata(slots, block_table, schedule))
        assert out.shape == (batch, TOP_K)
    assert len(metadata_calls) == 1 and schedule.num_updates == 1
    assert len(scorer_args) == LAYERS
    assert all(ctx is schedule.context_lens and meta is schedule.schedule_meta for ctx, meta in scorer_args)


@pytest.mark.parametrize("next_n", [1, 2])
def test_buffers_are_fixed_and_match_hw_and_sim(next_n, device):
    batch, max_pages, max_context = 3, 4, 50       # max_context < max_pages * PAGE: both clamps matter
    schedule = DecodeSchedule(batch, max_pages, PAGE, max_context, device, next_n=next_n, num_sms=5)
    pointers = (schedule.context_lens.data_ptr(), schedule.row_lengths.data_ptr(), schedule.schedule_meta.data_ptr())
    for context in ([0, 1, 17], [33, 64, 70], [1, 0, 0], [-2 ** 31, 2 ** 31 - 1, -1]):   # int32's extremes
        ctx = torch.tensor(context, dtype=torch.int32, device=device)
        schedule.update(ctx)
        assert (schedule.context_lens.data_ptr(), schedule.row_lengths.data_ptr(),
                schedule.schedule_meta.data_ptr()) == pointers
        assert torch.equal(schedule.schedule_meta, hw.get_paged_mqa_logits_metadata(ctx, PAGE, 5))
        want = sim_scorer.decode_visible(np.array(context), next_n, max_context, max_pages, PAGE)
        np.testing.assert_array_equal(schedule.row_lengths.cpu().numpy(), want)


@pytest.mark.parametrize("batch", [31, 32, 33, 64, 65])
def test_all_zero_contexts_give_empty_work(batch, device):
    schedule = DecodeSchedule(batch, 2, PAGE, 2 * PAGE, device, num_sms=4)
    schedule.update(torch.zeros(batch, dtype=torch.int32, device=device))
    # DESIGN §8: all-zero contexts give empty ranges: every program starts at the end item (B, 0)
    assert schedule.schedule_meta.cpu().tolist() == [[batch, 0]] * 5
    assert not bool(schedule.row_lengths.any())


@pytest.mark.interp
@pytest.mark.parametrize("batch", [31, 32, 33, 64, 65])
def test_decode_with_all_zero_contexts_selects_nothing(batch, device):
    hooks = _hooks(device, batch, 2, 2 * PAGE)
    schedule = DecodeSchedule(batch, 1, PAGE, 2 * PAGE, device, num_sms=4)
    schedule.update(torch.zeros(batch, dtype=torch.int32, device=device))
    block_table = torch.full((batch, 1), 1 << 30, dtype=torch.int32, device=device)   # never read
    slots = torch.full((batch,), -1, dtype=torch.int64, device=device)                # nothing written
    out = hooks[0](*_step_inputs(device, batch, 0), DecodeMetadata(slots, block_table, schedule))
    assert out.shape == (batch, TOP_K) and bool((out == -1).all())


def test_rejections(device):
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        DecodeSchedule(0, 2, PAGE, 32, device)
    with pytest.raises(ValueError, match="next_n must be a positive int"):
        DecodeSchedule(2, 2, PAGE, 32, device, next_n=0)
    schedule = DecodeSchedule(2, 2, PAGE, 32, device)
    with pytest.raises(ValueError, match=r"context_lens must have shape \[2\]"):
        schedule.update(torch.zeros(3, dtype=torch.int32, device=device))
    # an int64 copy would be converted silently, a host tensor copied by a capture-illegal transfer: both rejected
    with pytest.raises(ValueError, match="context_lens must have dtype torch.int32, got torch.int64"):
        schedule.update(torch.zeros(2, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match=f"context_lens is on meta, expected {device}"):
        schedule.update(torch.zeros(2, dtype=torch.int32, device="meta"))
