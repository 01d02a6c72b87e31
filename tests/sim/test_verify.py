"""sim.verify: the cache scan (Numba, its own offset formulas) against a plain NumPy classifier over
sim.layout.unpack_page, and planted hazards found at the right (page, token, group)."""
from __future__ import annotations

import numpy as np
import pytest

from sim import fp8, layout, mxfp4
from sim.verify import Hazard, verify_cache
from tests.sim.test_layout import Case

CASES = [Case("fp8", "fp8", 16, 64), Case("mxfp4", "mxfp4", 16, 32), Case("mxfp4", "mxfp4", 32, 128),
         Case("mxfp4", "mxfp4_tiled", 16, 256)]
MX_CASES = [c for c in CASES if c.kv_dtype == "mxfp4"]


def reference_counts(pool, geom, pages):
    """Counts and first hazard from unpack_page + NumPy, in the scan's order (page, token, then fp8 values before
    the scale / mxfp4 groups ascending)."""
    c = dict(tokens=0, unwritten_tokens=0, blocks=0, nan_scale_blocks=0, zero_scale_nonzero_blocks=0,
             zero_scale_empty_blocks=0, fp8_nan_values=0, fp8_nan_scales=0, fp8_bad_scales=0)
    first = None
    for p in pages:
        base = geom.view_offset + p * geom.page_stride
        values, scales = layout.unpack_page(geom, pool[base:base + geom.page_bytes])
        for t in range(geom.page_size):
            c["tokens"] += 1
            scale_bytes = scales[t:t + 1].view(np.uint8) if geom.kv_dtype == "fp8" else scales[t]
            if (values[t] == 0xFF).all() and (scale_bytes == 0xFF).all():
                c["unwritten_tokens"] += 1
                continue
            found = []
            if geom.kv_dtype == "fp8":
                nan_d = np.flatnonzero((values[t] & 0x7F) == 0x7F)
                c["fp8_nan_values"] += nan_d.size
                found += [Hazard("fp8_nan_value", p, t, int(d)) for d in nan_d]
                s = float(scales[t])
                m, _ = np.frexp(s) if np.isfinite(s) else (0.0, 0)
                kind = ("fp8_nan_scale" if np.isnan(s) else None if np.isfinite(s) and s > 0 and m == 0.5
                        and s >= np.finfo(np.float32).tiny else "fp8_bad_scale")
                if kind:
                    c[kind + "s"] += 1
                    found.append(Hazard(kind, p, t, 0))
            else:
                codes = np.stack([values[t] & 0xF, values[t] >> 4], axis=1).reshape(-1, 32)
                for g, sb in enumerate(scales[t]):
                    c["blocks"] += 1
                    if sb == 255:
                        c["nan_scale_blocks"] += 1
                        found.append(Hazard("nan_scale_block", p, t, g))
                    elif sb == 0 and (codes[g] & 7).any():
                        c["zero_scale_nonzero_blocks"] += 1
                        found.append(Hazard("zero_scale_nonzero_block", p, t, g))
                    elif sb == 0:
                        c["zero_scale_empty_blocks"] += 1
            if found and first is None:
                first = found[0]
    return c, first


def assert_report(report, pool, geom, pages):
    want, first = reference_counts(pool, geom, pages)
    got = {k: getattr(report, k) for k in want}
    assert got == want, f"counts: got {got}, expected {want}"
    assert report.first_hazard == first, f"first hazard {report.first_hazard}, expected {first}"
    assert report.pages == len(pages)


def clean_pool(case, rng, num_pages=5, **kw):
    """Canonical writer output (sim.mxfp4 / sim.fp8 quantize) on a shuffled half of the slots; the rest is 0xFF."""
    geom = case.geometry(num_pages, **kw)
    pool = layout.new_pool(geom)
    slots = rng.permutation(num_pages * case.page_size)[: num_pages * case.page_size // 2]
    x = rng.standard_normal((slots.size, case.head_dim)).astype(np.float32)
    x[:3] = 0.0                       # all-zero rows: canonical min_scale_byte = 1, never byte 0
    quantize = fp8.quantize if case.kv_dtype == "fp8" else mxfp4.quantize
    layout.write_tokens(pool, geom, slots, *quantize(x))
    return geom, pool, slots


@pytest.mark.parametrize("case", CASES, ids=str)
def test_canonical_writer_output_is_clean(case):
    geom, pool, slots = clean_pool(case, np.random.default_rng(0), page_stride=None, view_offset=32)
    report = verify_cache(pool, geom)
    assert report.clean and report.hazards == 0 and report.first_hazard is None
    assert report.tokens == geom.num_pages * case.page_size
    assert report.unwritten_tokens == report.tokens - slots.size
    assert_report(report, pool, geom, range(geom.num_pages))


def scale_pool_index(geom, page, t, g):
    return geom.view_offset + page * geom.page_stride + int(layout.scale_offset(geom, t, g))


@pytest.mark.parametrize("case", MX_CASES, ids=str)
def test_mxfp4_planted_hazards(case):
    rng = np.random.default_rng(1)
    probe = case.geometry(1)
    geom, pool, slots = clean_pool(case, rng, page_stride=probe.page_bytes + 64, view_offset=16)
    P, G = case.page_size, case.head_dim // 32
    (p1, t1), (p2, t2), (p3, t3) = [divmod(int(s), P) for s in slots[3:6]]   # random (nonzero) rows
    pool[scale_pool_index(geom, p1, t1, G - 1)] = 255                    # NaN block
    pool[scale_pool_index(geom, p2, t2, 0)] = 0                          # byte 0 over (random, nonzero) codes
    # byte 0 over +-0 codes only: an empty block (a min_scale_byte = 0 producer), not a hazard
    for d in range(0, 32, 2):
        pool[geom.view_offset + p3 * geom.page_stride + int(layout.value_offset(geom, t3, 32 * (G - 1) + d))] = \
            0x80 if d % 4 else 0x08
    pool[scale_pool_index(geom, p3, t3, G - 1)] = 0
    report = verify_cache(pool, geom)
    assert (report.nan_scale_blocks, report.zero_scale_nonzero_blocks, report.zero_scale_empty_blocks) == (1, 1, 1)
    assert report.hazards == 2 and not report.clean
    assert report.first_hazard == min(Hazard("nan_scale_block", p1, t1, G - 1),
                                      Hazard("zero_scale_nonzero_block", p2, t2, 0),
                                      key=lambda h: (h.page, h.token, h.index))
    assert_report(report, pool, geom, range(geom.num_pages))


def test_fp8_planted_hazards():
    case = CASES[0]
    rng = np.random.default_rng(2)
    geom, pool, slots = clean_pool(case, rng, num_pages=3)
    written = sorted(int(s) for s in slots)
    bad_scales = [np.nan, np.inf, 0.0, -2.0, 1.5, 2.0 ** -140]
    for s, scale in zip(written[2:], bad_scales):
        page, t = divmod(s, case.page_size)
        i = geom.view_offset + page * geom.page_stride + int(layout.scale_offset(geom, t))
        pool[i:i + 4] = np.array([scale], "<f4").view(np.uint8)
    page, t = divmod(written[-1], case.page_size)
    for d, byte in ((3, 0x7F), (9, 0xFF)):
        pool[page * geom.page_stride + int(layout.value_offset(geom, t, d))] = byte
    report = verify_cache(pool, geom)
    assert (report.fp8_nan_scales, report.fp8_bad_scales, report.fp8_nan_values) == (1, 5, 2)
    assert report.first_hazard == Hazard("fp8_nan_scale", *divmod(written[2], case.page_size), 0)
    assert_report(report, pool, geom, range(geom.num_pages))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_random_bytes_match_the_reference(case):
    """Arbitrary bytes (a third of the scale bytes 0 or 255, some tokens all 0xFF): every count agrees."""
    rng = np.random.default_rng(3)
    geom = case.geometry(4, page_stride=case.geometry(1).page_bytes + 16)
    pool = rng.integers(0, 256, geom.pool_bytes, dtype=np.uint8)
    offsets = layout.token_byte_offsets(geom)
    for page in range(4):
        base = page * geom.page_stride
        sb = offsets[:, geom.value_bytes_per_token:]
        pool[base + sb[rng.random(sb.shape) < 0.3]] = rng.choice(np.array([0, 255], np.uint8))
        pool[base + offsets[rng.integers(0, case.page_size, 2)]] = 0xFF   # unwritten token slots
    assert_report(verify_cache(pool, geom), pool, geom, range(4))


def test_block_table_limits_the_scan_and_progress():
    case = MX_CASES[1]
    rng = np.random.default_rng(4)
    geom, pool, slots = clean_pool(case, rng, num_pages=6)
    pool[scale_pool_index(geom, 4, 0, 0)] = 255        # on a page the block table does not name
    table = np.array([[3, 1, -1], [1, 6, 2**31 - 1]], np.int32)
    calls = []
    report = verify_cache(pool, geom, table, progress=lambda done, total: calls.append((done, total)))
    assert report.clean and report.pages == 2 and report.block_table_out_of_range == 3
    assert calls and calls[-1] == (2, 2) and all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    assert verify_cache(pool, geom).nan_scale_blocks == 1
    with pytest.raises(ValueError, match="block_table must be an integer array"):
        verify_cache(pool, geom, np.zeros(2))
    with pytest.raises(ValueError, match="pool has"):
        verify_cache(pool[:-1], geom)
