"""integration.compat.vllm called as vLLM's sparse indexer calls its ops, checked against sim (bytes exact, top-k
exact): 3-D caches, quant_block_size / scale_fmt, caller-given gather and top-k buffers, vLLM's index conventions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import sim.layout
from hw.testing import host_to_device, sim_input, to_numpy
from hw.topk import MAX_K
from integration.compat import vllm
from sim.testing import case_rng, random_values, sim_quantize
from sim.topk import top_k

PAGE, NUM_PAGES = 16, 5
SENTINEL = 0xAB


def vllm_cache(kv_dtype: str, head_dim: int, device):
    """vLLM's contiguous uint8 [num_blocks, block_size, cache_stride] cache (0xFF) and its sim geometry."""
    geom = sim.layout.PageGeometry(kv_dtype, PAGE, head_dim, NUM_PAGES)
    pool = sim.layout.new_pool(geom)
    return pool, geom, host_to_device(pool, device).view(NUM_PAGES, PAGE, geom.bytes_per_token)


@pytest.mark.parametrize("kv_dtype,head_dim,quant_block_size", [("fp8", 128, 128), ("mxfp4", 64, 32)])
def test_writer_3d_cache_quant_block_size_ue8m0(kv_dtype, head_dim, quant_block_size, device):
    """vLLM's (k, 3-D cache, slots, quant_block_size, scale_fmt) writes sim's bytes; -1 skips."""
    rng = case_rng(f"vllm-writer-{kv_dtype}")
    pool, geom, cache = vllm_cache(kv_dtype, head_dim, device)
    k = torch.from_numpy(random_values(rng, (7, head_dim))).to(torch.bfloat16)
    slots = np.array([3, 40, -1, 17, 79, 0, 64], np.int64)
    vllm.indexer_k_quant_and_cache(k.to(device), cache, torch.from_numpy(slots).to(device), quant_block_size, "ue8m0")
    values, scales = sim_quantize(kv_dtype, sim_input(k))
    keep = slots >= 0
    sim.layout.write_tokens(pool, geom, slots[keep], values[keep], scales[keep])
    assert np.array_equal(to_numpy(cache).reshape(-1), pool)


def test_writer_and_gather_refusals(device):
    _, _, cache = vllm_cache("fp8", 64, device)
    k = torch.zeros(1, 64, dtype=torch.bfloat16, device=device)
    slots = torch.zeros(1, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="pass 'ue8m0'"):
        vllm.indexer_k_quant_and_cache(k, cache, slots, 64, None)
    with pytest.raises(ValueError, match="quant_block_size=64"):
        vllm.indexer_k_quant_and_cache(k, cache, slots, 128, "ue8m0")
    # an mxfp4 D = 128 gather (68 bytes per token) over pages of another token size: refused, not misread
    dst_k, dst_scale = (torch.empty(4, n, dtype=torch.uint8, device=device) for n in (64, 4))
    table, cu = torch.zeros(1, 2, dtype=torch.int32, device=device), torch.tensor([0, 4], dtype=torch.int32,
                                                                                   device=device)
    with pytest.raises(ValueError, match="kv_cache_as_quant_view"):
        vllm.cp_gather_indexer_k_quant_cache(vllm_cache("fp8", 128, device)[2], dst_k, dst_scale, table, cu)


@pytest.mark.parametrize("kv_dtype,head_dim", [("fp8", 64), ("mxfp4", 128)])    # both 68 bytes per token
def test_gather_into_caller_buffers_leaves_the_tail(kv_dtype, head_dim, device):
    """dst_k / dst_scale receive each sequence's tokens, rows past cu_seq_lens[-1] keep their bytes;
    the format follows dst_k, so the 68-byte cache needs no layout argument."""
    rng = case_rng(f"vllm-gather-{kv_dtype}")
    pool, geom, _ = vllm_cache(kv_dtype, head_dim, device)
    lengths, rows = (19, 5), 30
    block_table = np.array([[4, 1], [2, 0]], np.int32)
    want_v, want_s = [], []
    for b, n in enumerate(lengths):
        values, scales = sim_quantize(kv_dtype, random_values(rng, (n, head_dim)))
        t = np.arange(n)
        sim.layout.write_tokens(pool, geom, block_table[b, t // PAGE].astype(np.int64) * PAGE + t % PAGE, values,
                                scales)
        want_v.append(values)
        want_s.append(scales.view(np.uint8).reshape(n, -1))
    fp8 = kv_dtype == "fp8"
    dst_k = torch.full((rows, head_dim if fp8 else head_dim // 2), SENTINEL, dtype=torch.uint8, device=device)
    dst_scale = torch.full((rows, 4), SENTINEL, dtype=torch.uint8, device=device)
    cu = torch.tensor([0, lengths[0], sum(lengths)], dtype=torch.int32, device=device)
    cache = host_to_device(pool, device).view(NUM_PAGES, PAGE, geom.bytes_per_token)
    vllm.cp_gather_indexer_k_quant_cache(cache, dst_k.view(torch.float8_e4m3fn) if fp8 else dst_k, dst_scale,
                                         torch.from_numpy(block_table).to(device), cu)
    total = sum(lengths)
    assert np.array_equal(to_numpy(dst_k)[:total], np.concatenate(want_v))
    assert np.array_equal(to_numpy(dst_scale)[:total], np.concatenate(want_s))
    assert (to_numpy(dst_k)[total:] == SENTINEL).all() and (to_numpy(dst_scale)[total:] == SENTINEL).all()


def _logits(rng, rows: int, width: int, stride: int, device) -> torch.Tensor:
    """fp32 [rows, width] with a row stride of `stride` (a view of a wider buffer), many ties."""
    wide = rng.integers(-8, 8, (rows, stride)).astype(np.float32)
    return torch.from_numpy(wide).to(device)[:, :width]


def test_topk_prefill_relative_indices_caller_buffer(device):
    """Prefill top-k: indices relative to cu_seqlen_ks, -1 padded, only num_rows rows written, k > row length."""
    rng = case_rng("vllm-topk-prefill")
    rows, width, k, num_rows = 6, 24, 10, 5
    logits = _logits(rng, rows, width, 32, device)
    ks = np.array([0, 3, 7, 20, 0, 5], np.int32)
    ke = np.array([24, 9, 7, 24, 4, 23], np.int32)
    out = torch.full((rows, k), -7, dtype=torch.int32, device=device)
    vllm.top_k_per_row_prefill(logits, torch.from_numpy(ks).to(device), torch.from_numpy(ke).to(device), out,
                               num_rows, logits.stride(0), logits.stride(1), k)
    absolute = top_k(to_numpy(logits)[:num_rows], k, starts=ks[:num_rows], ends=ke[:num_rows])
    want = np.where(absolute >= 0, absolute - ks[:num_rows, None], -1)
    got = to_numpy(out)
    assert np.array_equal(got[:num_rows], want) and (got[num_rows:] == -7).all()


@pytest.mark.parametrize("two_d", [False, True], ids=["seq_lens_1d", "seq_lens_2d"])
def test_topk_decode_next_n(two_d, device):
    """Decode top-k: (next_n, seq_lens) rows, absolute indices into the caller's buffer; a sequence length of
    int32's minimum sees nothing (its 1-D rows' lengths must not wrap)."""
    rng = case_rng(f"vllm-topk-decode-{two_d}")
    batch, next_n, width, k = 4, 2, 20, 6
    logits = _logits(rng, batch * next_n, width, width + 4, device)
    low = -2 ** 31
    seq_lens = np.array([[3, 4], [19, 20], [1, 2], [low, low]] if two_d else [4, 20, 2, low], np.int32)
    wide = seq_lens.astype(np.int64)
    lengths = np.clip(wide.reshape(-1) if two_d else (wide[:, None] - next_n + 1 + np.arange(next_n)).reshape(-1),
                      0, width)
    out = torch.empty((batch * next_n, k), dtype=torch.int32, device=device)
    vllm.top_k_per_row_decode(logits, next_n, torch.from_numpy(seq_lens).to(device), out, batch * next_n,
                              logits.stride(0), 1, k)
    assert np.array_equal(to_numpy(out), top_k(to_numpy(logits), k, ends=lengths))


def test_topk_refusals(device):
    """k above hw's limit and strides that are not logits' own: ValueErrors saying what to do."""
    logits = torch.zeros(2, 8, device=device)
    lens = torch.full((2,), 8, dtype=torch.int32, device=device)
    big = torch.empty((2, MAX_K + 1), dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=f"select at most {MAX_K}"):
        vllm.top_k_per_row_decode(logits, 1, lens, big, 2, 8, 1, MAX_K + 1)
    out = torch.empty((2, 4), dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"logits.stride\(0\)"):
        vllm.top_k_per_row_prefill(logits, lens * 0, lens, out, 2, 16, 1, 4)
