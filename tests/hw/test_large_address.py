"""Kernels on a pool larger than 4,608,000,000 bytes (DESIGN §3): the pages read sit past 2^31, 2^32 and 4.608e9.

Writer bytes, gather and decode logits equal sim/, and sim.addressing's int32_wrap / buffer_u32 models predict
other bytes than the kernels read: the 64-bit page rebase is what makes them right. On the CPU the pools are
lazily committed np.zeros (only the few touched pages cost memory, checked below); on the GPU real device memory.
"""
import resource

import pytest

from tools import difftest

# DESIGN §3: for P = 64, D = 128 mxfp4 with S = 1,077,120 the first pages past 2^31, 2^32 and 4.608e9.
DESIGN_BOUNDARY_PAGES = (1994, 3988, 4279)
# Peak host memory the whole module may add (two 4.6 GB pools must stay almost entirely uncommitted).
MAX_RSS_GROWTH_BYTES = 1 << 30


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


@pytest.fixture(scope="module")
def rss_before():
    return _max_rss_bytes()


@pytest.fixture(scope="module")
def env(device):
    return difftest.make_env(device.type)


@pytest.fixture(scope="module", params=[None, "mxfp4_tiled"], ids=["mxfp4", "mxfp4_tiled"])
def large(request, env, rss_before):
    return difftest.build_large_pool(env, layout=request.param, tokens=5, seed=f"test-large-{request.param}")


def test_boundary_pages_are_the_designs(large):
    assert large.geom.pool_bytes > 4_608_000_000
    assert large.geom.page_stride == 1_077_120
    assert tuple(page for _, page in large.crossings) == DESIGN_BOUNDARY_PAGES


def test_writer_bytes_equal_sim_and_nothing_else_changes(env, large):
    written = difftest.check_large_writer(env, large)
    # 5 tokens on each of 3 pages; a few of their bytes may legitimately be 0x00.
    assert written > 0.9 * 3 * 5 * large.geom.bytes_per_token


def test_gather_equals_sim_and_not_the_32_bit_models(env, large):
    results = difftest.check_large_gather(env, large)
    assert [r.page for r in results] == list(DESIGN_BOUNDARY_PAGES)
    assert all(r.differs_int32_wrap for r in results)
    # int32 wrap of an offset in [2^31, 2^32) is negative: the address falls before the pool (a fault).
    assert results[0].faulted_int32_wrap
    # Buffer loads with 32-bit offsets read the right bytes below 2^32 and another page's bytes past it.
    assert [r.differs_buffer_u32 for r in results] == [False, True, True]


def test_decode_logits_within_bound(env, large):
    ratio = difftest.check_large_decode(env, large, heads=3, seed="test-large")
    assert 0 <= ratio <= 1


def test_host_memory_stays_small(large, rss_before):
    assert _max_rss_bytes() - rss_before < MAX_RSS_GROWTH_BYTES
