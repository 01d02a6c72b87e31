"""Kernels on a pool larger than 4,608,000,000 bytes (DESIGN §3): the pages read sit past 2^31, 2^32 and 4.608e9.

Writer bytes, gather and decode logits equal sim/, and sim.addressing's int32_wrap / buffer_u32 models predict
other bytes than the kernels read: the 64-bit page rebase is what makes them right. On the CPU the pools are
lazily committed np.zeros (only the few touched pages cost memory, checked below); on the GPU real device memory.
"""
import functools
import resource

import numpy as np
import pytest
import torch

import hw
from hw.logits import declared_precision
from hw.targets import Op
from hw.testing import count_nonzero_bytes, host_to_device, to_numpy, torch_cache_view, write_zeros_pool
from sim import scorer
from sim.testing import build_large_pool, case_rng, check_large_gather, check_large_writer
from tests.hw._logits_fixtures import case_variants, quantize_queries

# DESIGN §3: for P = 64, D = 128 mxfp4 with S = 1,077,120 the first pages past 2^31, 2^32 and 4.608e9.
DESIGN_BOUNDARY_PAGES = (1994, 3988, 4279)
# Peak host memory the whole module may add (two 4.6 GB pools must stay almost entirely uncommitted).
MAX_RSS_GROWTH_BYTES = 1 << 30


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


@pytest.fixture(scope="module")
def rss_before():
    return _max_rss_bytes()


@pytest.fixture(scope="module", params=[None, "mxfp4_tiled"], ids=["mxfp4", "mxfp4_tiled"])
def large(request, device, rss_before):
    return build_large_pool(functools.partial(write_zeros_pool, device=device), layout=request.param, tokens=5,
                            seed=f"test-large-{request.param}")


def test_boundary_pages_are_the_designs(large):
    assert large.geom.pool_bytes > 4_608_000_000
    assert large.geom.page_stride == 1_077_120
    assert tuple(page for _, page in large.crossings) == DESIGN_BOUNDARY_PAGES


def test_writer_bytes_equal_sim_and_nothing_else_changes(large):
    pool_t = large.kernel_pool
    written = check_large_writer(large, lambda window: to_numpy(pool_t[window]), count_nonzero_bytes(pool_t))
    # 5 tokens on each of 3 pages; a few of their bytes may legitimately be 0x00.
    assert written > 0.9 * 3 * 5 * large.geom.bytes_per_token


def test_gather_equals_sim_and_not_the_32_bit_models(device, large):
    values, scales = hw.cp_gather_indexer_k_quant_cache(torch_cache_view(large.kernel_pool, large.geom),
                                                        host_to_device(large.block_table, device),
                                                        host_to_device(large.cu_seq_lens, device),
                                                        layout=large.geom.layout)
    results = check_large_gather(large, to_numpy(values), to_numpy(scales))
    assert [r.page for r in results] == list(DESIGN_BOUNDARY_PAGES)
    assert all(r.differs_int32_wrap for r in results)
    # int32 wrap of an offset in [2^31, 2^32) is negative: the address falls before the pool (a fault).
    assert results[0].faulted_int32_wrap
    # Buffer loads with 32-bit offsets read the right bytes below 2^32 and another page's bytes past it.
    assert [r.differs_buffer_u32 for r in results] == [False, True, True]


@pytest.mark.parametrize("variant", case_variants(Op.DECODE, "mxfp4"))
def test_decode_logits_within_bound(variant, device, large):
    """Every decode variant that runs here, over the boundary pages, within the bound of its declared (n, u)."""
    geom, batch, heads, width = large.geom, len(large.crossings), 3, large.tokens + 3
    rng = case_rng("test-large/decode")
    q = rng.standard_normal((batch, 1, heads, geom.head_dim)).astype(np.float32)
    q_pair, w_t, q64, w = quantize_queries(geom.kv_dtype, q, rng.standard_normal((batch, heads)).astype(np.float32),
                                           device)
    ctx = np.full(batch, large.tokens, np.int32)
    ctx_t = torch.from_numpy(ctx).to(device)
    out = hw.fp8_fp4_paged_mqa_logits(q_pair, torch_cache_view(large.kernel_pool, geom), w_t, ctx_t,
                                      host_to_device(large.block_table, device),
                                      hw.get_paged_mqa_logits_metadata(ctx_t, geom.page_size, 3), width,
                                      clean_logits=True, layout=geom.layout, variant=variant)
    args = (q64, large.sim_pool, geom, w, ctx, large.block_table, width)
    n, u = declared_precision(Op.DECODE, geom.kv_dtype, geom.head_dim, device, variant)
    result = scorer.assert_logits_within_bound(to_numpy(out), scorer.decode_logits(*args, clean_logits=True),
                                               scorer.decode_error_bound(*args, n_roundings=n, u=u))
    assert result.compared == batch * width        # clean_logits: the columns past each context are -inf


def test_host_memory_stays_small(large, rss_before):
    assert _max_rss_bytes() - rss_before < MAX_RSS_GROWTH_BYTES
