"""sim.testing: the shared fixtures keep their contracts (hostile inputs reach DESIGN §1's edges, pools are poisoned
outside the written tokens) and the comparisons report the first difference."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import sim.addressing
import sim.fp8
import sim.layout
import sim.mxfp4
from sim.testing import (
    INPUT_LIMITS,
    POISON,
    Mismatch,
    assert_equal_bits,
    build_large_pool,
    build_paged_kv,
    case_rng,
    check_large_gather,
    check_large_writer,
    check_scorer,
    hostile_rows,
    hostile_values,
    pool_locator,
    sim_quantize,
    sim_quantize_q,
)

NUMPY_INPUT_DTYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def test_hostile_values_reach_the_edges():
    """The corner fixtures must keep exercising DESIGN §1's edges, or the corner cases silently turn benign."""
    x = hostile_values(np.random.default_rng(7), 24, 64)
    scales = {rule: sim.mxfp4.quantize(x, scale_rule=rule)[1] for rule in ("floor", "rceil", "even", "ceil")}
    rceil = scales["rceil"]
    assert (rceil == 255).any()                            # non-finite blocks
    assert (rceil == 1).any()                              # subnormal amax clamped to min_scale_byte
    assert (rceil[rceil < 255] >= 253).any()               # amax near the fp32 maximum
    for rule in ("floor", "even", "ceil"):
        assert (scales[rule] != rceil).any(), rule         # blocks on each rule's boundary
    values, row_scales = sim.fp8.quantize(x)
    assert np.isnan(row_scales).any() and row_scales[3] == 1.0
    assert np.isfinite(row_scales[1]) and (values[1] == 0).all()   # zero row: finite scale, zero values


@pytest.mark.parametrize("dtype", sorted(INPUT_LIMITS))
def test_hostile_rows_span_the_input_dtype(dtype):
    tiny, largest = INPUT_LIMITS[dtype]
    np_dtype = NUMPY_INPUT_DTYPES[dtype]
    assert (float(ml_dtypes.finfo(np_dtype).tiny), float(ml_dtypes.finfo(np_dtype).max)) == (tiny, largest)
    x = hostile_rows(np.random.default_rng(1), 16, 64, dtype)
    assert x.shape == (16, 64) and x.dtype == np.float64
    rounded = x.astype(np_dtype).astype(np.float64)
    finite = np.isfinite(x)
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    assert np.isfinite(rounded[finite]).all()               # no finite value overflows the dtype
    assert (np.abs(x[finite]) == largest).any()             # the dtype's largest finite value
    assert ((rounded[6] != 0) & (np.abs(rounded[6]) < tiny)).any()   # subnormal-only row


def test_build_paged_kv_poisons_everything_but_the_tokens():
    tokens = (0, 1, 17, 40)
    kv = build_paged_kv(case_rng("paged-kv"), "mxfp4", None, 16, 64, tokens, stride_pad=48, view_offset=32)
    geom, table = kv.geom, kv.block_table
    assert kv.pool.shape == (geom.pool_bytes,) and kv.pool.dtype == np.uint8 and table.dtype == np.int32
    pages = [table[b, : -(-n // 16)] for b, n in enumerate(tokens)]
    used = np.concatenate(pages)
    assert np.unique(used).size == used.size
    for b, p in enumerate(pages):   # entries past a sequence's pages are out of range
        rest = table[b, p.size:]
        assert ((rest < 0) | (rest >= geom.num_pages)).all()
    written = np.zeros_like(kv.pool, dtype=bool)
    for b, n in enumerate(tokens):
        t = np.arange(n)
        offsets = sim.layout.token_byte_offsets(geom)
        for page, tok in zip(table[b, t // 16], t % 16):
            written[geom.view_offset + page * geom.page_stride + offsets[tok]] = True
    assert (kv.pool[~written] == POISON).all()


def test_sim_quantize_q_folds_the_fp8_scale_into_the_weights():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 64)).astype(np.float32) * 100
    w = rng.standard_normal((2, 3)).astype(np.float32)
    values, scales, q64, folded = sim_quantize_q("fp8", q, w)
    _, row_scales = sim.fp8.quantize(q)
    assert scales is None and q64.dtype == np.float64
    assert_equal_bits("folded", folded, (w * row_scales).astype(np.float32))


def test_assert_equal_bits_names_the_first_difference():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    assert_equal_bits("same", a, a.copy())
    b = a.copy()
    b.view(np.uint32)[1] ^= 1                                # another NaN payload counts as a difference
    with pytest.raises(Mismatch, match=r"1 of 3 differ; first at index \(1,\)"):
        assert_equal_bits("payload", b, a)
    with pytest.raises(Mismatch, match="shape"):
        assert_equal_bits("shape", a[:2], a)


def test_pool_locator_names_page_and_region():
    geom = sim.layout.PageGeometry("fp8", 16, 32, 3, page_stride=16 * 36 + 32, view_offset=16)
    locate = pool_locator(geom)
    assert "before the view" in locate((3,))
    assert "page 1, page-local byte 0, value region" in locate((16 + geom.page_stride,))
    assert "scale region" in locate((16 + geom.scale_base,))
    assert "stride gap" in locate((16 + geom.page_bytes,))


def test_check_scorer_returns_the_worst_ratio_or_raises():
    ref = np.array([[1.0, -np.inf]])
    bound = np.array([[0.5, 0.0]])
    assert check_scorer("ok", np.array([[1.25, -np.inf]], np.float32), ref, bound, None) == pytest.approx(0.5)
    with pytest.raises(Mismatch, match="too far"):
        check_scorer("too far", np.array([[2.0, -np.inf]], np.float32), ref, bound, None)


def _sim_writer(geom, slots, x):
    """build_large_pool's `write` done by sim itself (a writer that is right by construction)."""
    pool = sim.layout.new_pool(geom, fill=0)
    sim.layout.write_tokens(pool, geom, slots, *sim_quantize(geom.kv_dtype, x))
    return pool, x


def test_large_pool_checks_accept_the_64_bit_read_and_flag_the_wrapped_one():
    lp = build_large_pool(_sim_writer, tokens=2, seed="sim-large")
    assert [b for b, _ in lp.crossings] == list(sim.addressing.BOUNDARIES)
    windows = check_large_writer(lp, lambda window: lp.kernel_pool[window], int(np.count_nonzero(lp.kernel_pool)))
    assert windows > 0
    with pytest.raises(Mismatch, match="outside the written pages"):
        check_large_writer(lp, lambda window: lp.kernel_pool[window], windows + 1)

    def gathered(model=None):
        reads = [sim.layout.read_tokens(lp.sim_pool, lp.geom, row, lp.tokens) if model is None else
                 sim.addressing.read_tokens_as(lp.sim_pool, lp.geom, row, lp.tokens, model)[:2]
                 for row in lp.block_table]
        return np.concatenate([v for v, _ in reads]), np.concatenate([s for _, s in reads])

    results = check_large_gather(lp, *gathered())
    assert [r.differs_int32_wrap for r in results] == [True] * len(lp.crossings)
    with pytest.raises(Mismatch, match="gathered"):
        check_large_gather(lp, *gathered(sim.addressing.AddressModel.INT32_WRAP))
