"""hw quantizers and the paged K-cache writer, byte for byte against sim/ (DESIGN §1, §2).

Runs on the CPU interpreter (tests/conftest.py) with tiny shapes, or on a GPU when one is present.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
import torch

import hw
import sim.fp8
import sim.layout
import sim.mxfp4
from hw.checks import VALIDATE_ENV
from hw.testing import host_to_device, sim_input, torch_cache_view
from sim.layout import PageGeometry
from sim.testing import make_geometry, sim_quantize
from tests.hw._inputs import hostile_input
from tests.hw._kv_pool import random_pool
from tests.sim._assert import assert_exact

pytestmark = pytest.mark.interp


# ---------------------------------------------------------------------------------------------- Q quantizers
@dataclass(frozen=True)
class QCase:
    lead: tuple          # leading dims of q; q is [*lead, D]
    head_dim: int
    dtype: str
    scale_rule: str = "rceil"


Q_CASES = [
    QCase((5, 3), 32, "fp32", "rceil"),
    QCase((2, 3, 3), 64, "bf16", "floor"),
    QCase((7, 1), 128, "fp16", "even"),
    QCase((3, 5), 96, "fp32", "ceil"),     # D not a power of two: padded tiles
    QCase((1, 33), 128, "bf16", "rceil"),  # more rows than one program
    QCase((2, 2), 256, "fp32", "rceil"),
]


@pytest.mark.parametrize("case", Q_CASES, ids=lambda c: f"{c.lead}x{c.head_dim}-{c.dtype}-{c.scale_rule}")
def test_quantize_q_mxfp4_matches_sim(case, device):
    rng = np.random.default_rng(case.head_dim + len(case.lead))
    rows = int(np.prod(case.lead))
    q = hostile_input(rng, rows, case.head_dim, case.dtype).reshape(*case.lead, case.head_dim)
    codes, scales = hw.quantize_q_mxfp4(q.to(device), scale_rule=case.scale_rule)
    want_codes, want_scales = sim.mxfp4.quantize(sim_input(q), scale_rule=case.scale_rule)
    assert codes.dtype == torch.uint8 and scales.dtype == torch.uint8
    assert_exact(scales.cpu().numpy(), want_scales, "scales")
    assert_exact(codes.cpu().numpy(), want_codes, "codes")


@pytest.mark.parametrize("case", Q_CASES[:5], ids=lambda c: f"{c.lead}x{c.head_dim}-{c.dtype}")
def test_quantize_q_fp8_matches_sim(case, device):
    rng = np.random.default_rng(7 + case.head_dim)
    rows = int(np.prod(case.lead))
    q = hostile_input(rng, rows, case.head_dim, case.dtype).reshape(*case.lead, case.head_dim)
    weights = torch.from_numpy(rng.standard_normal(case.lead).astype(np.float32))
    values, folded = hw.quantize_q_fp8(q.to(device), weights.to(device))
    want_values, want_scales = sim.fp8.quantize(sim_input(q))
    assert values.dtype == hw.checks.FP8_DTYPE and folded.dtype == torch.float32
    assert_exact(values.view(torch.uint8).cpu().numpy(), want_values, "values")
    assert_exact(folded.cpu().numpy(), weights.numpy() * want_scales, "folded weights")


@dataclass(frozen=True)
class WeightCase:
    dtype: str
    values: tuple        # float64 literals, rounded to `dtype` (RNE) by a third-party codec, not by the kernel
    subnormals: int      # how many of `values` must round to nonzero subnormals of `dtype` (guards the fixture)


WEIGHT_CASES = [
    # bf16 subnormals (the interpreter's bf16 -> fp32 cast flushes them), bf16's smallest and largest
    # subnormal, its smallest normal, -0.0, its largest finite value, Inf and NaN.
    WeightCase("bf16", (1e-39, 3e-39, 5e-40, -2e-39, 2.0 ** -133, -(2.0 ** -126 - 2.0 ** -133), 2.0 ** -126, -0.0,
                        3.3895313892515355e38, np.inf, np.nan, -1.5), subnormals=6),
    WeightCase("fp16", (2.0 ** -24, -3e-6, 6e-5, 2.0 ** -14, -0.0, 65504.0, -np.inf, np.nan, 0.75), subnormals=3),
]
# Row maxima 2^e of q: the folded scale 2^k runs from 2^-22 (every subnormal weight underflows, rounded) to 2^93
# (subnormal weights become normal).
Q_ROW_EXPONENTS = (-40, -5, 0, 12, 100)


def _weights_in(dtype: str, values) -> tuple[torch.Tensor, np.ndarray]:
    """(weights as a torch tensor of `dtype`, the same values widened to float32 by ml_dtypes / numpy)."""
    v = np.asarray(values, dtype=np.float32)
    if dtype == "bf16":
        narrow = v.astype(ml_dtypes.bfloat16)
        return torch.from_numpy(narrow.view(np.uint16).copy()).view(torch.bfloat16), narrow.astype(np.float32)
    narrow = v.astype(np.float16)
    return torch.from_numpy(narrow.copy()), narrow.astype(np.float32)


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")  # max weight * 2^93 -> inf
@pytest.mark.parametrize("case", WEIGHT_CASES, ids=lambda c: c.dtype)
def test_quantize_q_fp8_folds_narrow_weights_exactly(case, device):
    """bf16/fp16 weights, subnormals included, fold to exactly fp32(weight) * 2^k (one rounding, of the product).

    The expected values widen the weights with ml_dtypes (bf16) or numpy (fp16) and take 2^k from sim.fp8, so
    nothing in them comes from the kernel. The interpreter's bf16 -> fp32 cast flushes subnormals; this is the
    test that the kernel does not use it.
    """
    weights, w32 = _weights_in(case.dtype, case.values)
    tiny = np.finfo(np.float32).tiny if case.dtype == "bf16" else np.finfo(np.float16).tiny
    assert ((w32 != 0) & (np.abs(w32) < tiny)).sum() == case.subnormals, "the fixture lost its subnormal weights"
    rng = np.random.default_rng(21)
    rows, heads = len(Q_ROW_EXPONENTS), len(case.values)
    q = rng.standard_normal((rows, heads, 32)) * np.exp2(np.array(Q_ROW_EXPONENTS, dtype=np.float64))[:, None, None]
    q = q.astype(np.float32)
    w_rows = weights.expand(rows, heads).contiguous()
    values, folded = hw.quantize_q_fp8(torch.from_numpy(q).to(device), w_rows.to(device))
    want_values, want_scales = sim.fp8.quantize(q)
    assert_exact(values.view(torch.uint8).cpu().numpy(), want_values, "values")
    assert_exact(folded.cpu().numpy(), w32[None, :] * want_scales, f"folded {case.dtype} weights",
                 context=lambda i: f"weight {w32[i[1]]!r}, scale {want_scales[i]!r}")


def test_quantizers_on_random_fp32_bit_patterns(device):
    """Uniformly random fp32 bit patterns: every exponent from subnormal to 2^127 (extreme scale exponents, where
    a float 2^-s would leave the fp32 range) and every mantissa; Inf/NaN patterns included."""
    bits = np.random.default_rng(12).integers(0, 2**32, size=(64, 2, 64), dtype=np.uint64).astype(np.uint32)
    finite = bits[:32]  # half the rows finite only (exponent field 255 -> 254), so their blocks quantize
    finite[((finite >> 23) & 0xFF) == 0xFF] ^= np.uint32(1 << 23)
    x = bits.view(np.float32)
    q = torch.from_numpy(x).to(device)
    for rule in ("rceil", "floor", "even", "ceil"):
        codes, scales = hw.quantize_q_mxfp4(q, scale_rule=rule)
        want_codes, want_scales = sim.mxfp4.quantize(x, scale_rule=rule)
        assert_exact(scales.cpu().numpy(), want_scales, f"scales ({rule})")
        assert_exact(codes.cpu().numpy(), want_codes, f"codes ({rule})")
    values, folded = hw.quantize_q_fp8(q, torch.ones(64, 2, device=device))
    want_values, want_scales = sim.fp8.quantize(x)
    assert_exact(values.view(torch.uint8).cpu().numpy(), want_values, "fp8 values")
    assert_exact(folded.cpu().numpy(), want_scales, "fp8 scales")


def _boundary_blocks(rule: str) -> np.ndarray:
    """fp32 [blocks, 32]: for every scale exponent s a block can get under `rule`, a block whose maximum sets s and
    whose other values sit on E2M1's rounding boundaries t * 2^s (t = 0.25, 0.75, ..., 5) and one ulp either side,
    signs alternating; plus blocks of fp32 subnormals (s clamped to -126), where those values are subnormal too.
    Under rceil the largest fp32 gets s = 126, where 5 * 2^s lies past every finite value."""
    top = 1.5 if rule == "rceil" else 1.9921875     # the largest block maximum 2^(s + 2) * top that keeps s
    rows = []
    for s in range(-126, 127 if rule == "rceil" else 126):
        row = [np.float32(np.ldexp(top, s + 2)) if s < 126 else np.finfo(np.float32).max]
        for t in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0):
            if np.ldexp(t, s) < row[0]:   # in float64: 5 * 2^126 and above are past the largest fp32
                v = np.float32(np.ldexp(t, s))
                row += [np.nextafter(v, np.float32(0)), v, np.nextafter(v, np.float32(np.inf))]
        row = [min(r, row[0]) * (-1) ** i for i, r in enumerate(row)]
        rows.append((row + [np.float32(0)] * 32)[:32])
    for amax in (0.875, 0.5, 0.1):   # fp32 subnormal block maxima
        v = np.float32(np.ldexp(amax, -126))
        row = [v] + [np.float32(np.ldexp(t, -126)) * (-1) ** i for i, t in enumerate((0.25, 0.75, 0.125)) if t < amax]
        rows.append((row + [np.float32(np.ldexp(1, -149))] * 32)[:32])
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("rule", ["rceil", "floor"])
def test_quantize_q_mxfp4_on_e2m1_boundaries(rule, device):
    """Every scale exponent, values on E2M1's rounding boundaries and one ulp from them (ties to even, the
    saturation past 5, subnormal values and blocks), byte for byte against sim."""
    x = _boundary_blocks(rule)
    codes, scales = hw.quantize_q_mxfp4(torch.from_numpy(x).to(device), scale_rule=rule)
    want_codes, want_scales = sim.mxfp4.quantize(x, scale_rule=rule)
    assert_exact(scales.cpu().numpy(), want_scales, f"scales ({rule})")
    assert_exact(codes.cpu().numpy(), want_codes, f"codes ({rule})", context=lambda i: f"block {x[i[0]]!r}")


def test_quantize_q_mxfp4_strided_rows(device):
    """A [T, H, D] slice of a wider buffer (row stride > D) whose rows still merge into one stride."""
    rng = np.random.default_rng(3)
    base = hostile_input(rng, 12, 96, "fp32").reshape(4, 3, 96)
    q = base.to(device)[..., :64]
    codes, scales = hw.quantize_q_mxfp4(q)
    want_codes, want_scales = sim.mxfp4.quantize(base[..., :64].contiguous().numpy())
    assert_exact(codes.cpu().numpy(), want_codes, "codes")
    assert_exact(scales.cpu().numpy(), want_scales, "scales")


def test_q_mxfp4_rows_per_program_rule(monkeypatch):
    """On a GPU the MXFP4 q quantizer takes Q_MXFP4_WIDE_BLOCK_T rows a program from Q_MXFP4_WIDE_ROWS rows of at
    most Q_MXFP4_WIDE_MAX_D unit-stride elements, BLOCK_T otherwise; the interpreter its own block."""
    import hw.quant as hq
    monkeypatch.setattr(hq, "kernels_interpreted", lambda kernel: False)
    n = hq.Q_MXFP4_WIDE_ROWS
    wide = torch.empty(n, 128)
    assert hq._rows_per_program(wide) == hq.Q_MXFP4_WIDE_BLOCK_T != hq.BLOCK_T
    assert hq._rows_per_program(torch.empty(n - 1, 128)) == hq.BLOCK_T
    assert hq._rows_per_program(torch.empty(n, 256)) == hq.BLOCK_T
    assert hq._rows_per_program(torch.empty(n, 256)[:, ::2]) == hq.BLOCK_T   # 128 elements, stride 2
    assert hq._rows_per_program() == hq.BLOCK_T
    monkeypatch.setattr(hq, "kernels_interpreted", lambda kernel: True)
    assert hq._rows_per_program(wide) == hq.QUANT_INTERPRETER_BLOCK_T


def test_quantize_q_mxfp4_wide_programs(device, monkeypatch):
    """Q_MXFP4_WIDE_BLOCK_T rows a program (lowered to 33 rows here; forced under the interpreter), a partial last
    program among them: the same bytes as sim."""
    import hw.quant as hq
    monkeypatch.setattr(hq, "Q_MXFP4_WIDE_ROWS", 33)
    monkeypatch.setattr(hq, "kernels_interpreted", lambda kernel: False)
    rng = np.random.default_rng(11)
    q = hostile_input(rng, 3 * hq.Q_MXFP4_WIDE_BLOCK_T + 5, 128, "bf16").reshape(-1, 1, 128)
    assert hq._rows_per_program(q.view(-1, 128)) == hq.Q_MXFP4_WIDE_BLOCK_T
    codes, scales = hw.quantize_q_mxfp4(q.to(device))
    want_codes, want_scales = sim.mxfp4.quantize(sim_input(q))
    assert_exact(scales.cpu().numpy(), want_scales, "scales")
    assert_exact(codes.cpu().numpy(), want_codes, "codes")


def test_quantize_q_empty(device):
    codes, scales = hw.quantize_q_mxfp4(torch.zeros(0, 4, 64, device=device))
    assert codes.shape == (0, 4, 32) and scales.shape == (0, 4, 2)
    values, folded = hw.quantize_q_fp8(torch.zeros(0, 4, 64, device=device), torch.zeros(0, 4, device=device))
    assert values.shape == (0, 4, 64) and folded.shape == (0, 4)


# ---------------------------------------------------------------------------------------------- K cache writer
@dataclass(frozen=True)
class CacheCase:
    kv_dtype: str
    layout: str | None
    head_dim: int
    page_size: int
    num_pages: int
    stride_pad: int = 0     # page stride = page bytes rounded up to 16 + stride_pad (a multiple of 16)
    view_offset: int = 0
    dtype: str = "fp32"
    scale_rule: str = "rceil"
    num_tokens: int = 24

    @property
    def geom(self) -> PageGeometry:
        return make_geometry(self.kv_dtype, self.layout, self.page_size, self.head_dim, self.num_pages,
                             self.stride_pad, self.view_offset)


CACHE_CASES = [
    CacheCase("fp8", None, 32, 16, 4, stride_pad=48, view_offset=32, dtype="bf16"),
    CacheCase("fp8", "fp8", 128, 64, 2, stride_pad=16, view_offset=16, dtype="fp32"),
    CacheCase("fp8", None, 64, 16, 3, dtype="fp16"),
    CacheCase("mxfp4", None, 32, 16, 4, stride_pad=32, view_offset=48, dtype="bf16", scale_rule="rceil"),
    CacheCase("mxfp4", "mxfp4", 64, 64, 2, stride_pad=112, view_offset=16, dtype="fp32", scale_rule="floor"),
    CacheCase("mxfp4", "mxfp4", 128, 16, 3, stride_pad=16, dtype="fp16", scale_rule="even"),
    CacheCase("mxfp4", "mxfp4", 96, 32, 2, view_offset=64, dtype="fp32", scale_rule="ceil"),
    CacheCase("mxfp4", "mxfp4_tiled", 128, 16, 4, stride_pad=64, view_offset=16, dtype="bf16"),
    CacheCase("mxfp4", "mxfp4_tiled", 128, 64, 2, stride_pad=16, dtype="fp32", scale_rule="floor"),
    CacheCase("mxfp4", "mxfp4_tiled", 256, 16, 2, view_offset=32, dtype="fp16", scale_rule="even", num_tokens=20),
]


def _slots(rng, geom: PageGeometry, num_tokens: int) -> np.ndarray:
    """Distinct shuffled slots over all pages, with a few negative (skip) entries."""
    slots = rng.permutation(geom.num_pages * geom.page_size)[:num_tokens].astype(np.int64)
    slots[rng.choice(num_tokens, size=3, replace=False)] = -rng.integers(1, 2**40, size=3)
    return slots


def _write_and_compare(case: CacheCase, device, slots: np.ndarray, k: torch.Tensor, hw_slots: np.ndarray,
                       validate: bool = False):
    """Run the writer on a random-filled pool; compare every pool byte with sim's writer (slots: the sim's)."""
    geom = case.geom
    rng = np.random.default_rng(11)
    want = random_pool(geom, rng)
    pool = host_to_device(want, device)
    hw.indexer_k_quant_and_cache(k.to(device), torch_cache_view(pool, geom), torch.from_numpy(hw_slots).to(device),
                                 kv_dtype=case.kv_dtype, layout=case.layout, scale_rule=case.scale_rule,
                                 validate=validate)
    values, scales = sim_quantize(case.kv_dtype, sim_input(k), case.scale_rule)
    sim.layout.write_tokens(want, geom, slots, values, scales)
    assert_exact(pool.cpu().numpy(), want, "pool bytes")


def _cache_id(c: CacheCase) -> str:
    return f"{c.layout or c.kv_dtype}-D{c.head_dim}-P{c.page_size}-{c.dtype}-{c.scale_rule}"


@pytest.mark.parametrize("case", CACHE_CASES, ids=_cache_id)
def test_k_quant_and_cache_matches_sim(case, device):
    rng = np.random.default_rng(case.head_dim * case.page_size)
    slots = _slots(rng, case.geom, case.num_tokens)
    k = hostile_input(rng, case.num_tokens, case.head_dim, case.dtype)
    _write_and_compare(case, device, slots, k, slots)


def test_k_quant_and_cache_strided_k_and_slots(device):
    """k a column slice of a wider tensor, slot_mapping a strided view: the launcher passes strides through."""
    case = CACHE_CASES[4]
    rng = np.random.default_rng(5)
    slots = _slots(rng, case.geom, case.num_tokens)
    wide = hostile_input(rng, case.num_tokens, 128, "fp32")
    k = wide[:, 32:32 + case.head_dim]
    geom = case.geom
    want = random_pool(geom, rng)
    pool = host_to_device(want, device)
    slot_t = torch.from_numpy(np.stack([slots, -np.ones_like(slots)], axis=1)).to(device)[:, 0]
    hw.indexer_k_quant_and_cache(wide.to(device)[:, 32:32 + case.head_dim], torch_cache_view(pool, geom),
                                 slot_t, kv_dtype="mxfp4", layout=case.layout, scale_rule=case.scale_rule)
    values, scales = sim.mxfp4.quantize(k.contiguous().numpy(), scale_rule=case.scale_rule)
    sim.layout.write_tokens(want, geom, slots, values, scales)
    assert_exact(pool.cpu().numpy(), want, "pool bytes")


@pytest.mark.parametrize("case", [CACHE_CASES[0], CACHE_CASES[7]], ids=["fp8", "mxfp4_tiled"])
def test_k_quant_and_cache_skips_slots_past_the_view(case, device, monkeypatch):
    """Without validation (the hot path: no device sync, legal in CUDA-graph capture) slots >= num_pages * P,
    which are invalid, are not checked but skipped: the kernel masks them and nothing in or outside the view
    changes for them. (Validate mode rejects them instead: test_writer_validate_rejects_slots_past_the_view.)"""
    monkeypatch.delenv(VALIDATE_ENV, raising=False)
    rng = np.random.default_rng(9)
    geom = case.geom
    slots = _slots(rng, geom, case.num_tokens)
    hw_slots = slots.copy()
    past = rng.choice(np.flatnonzero(slots >= 0), size=4, replace=False)
    hw_slots[past] = geom.num_pages * geom.page_size + rng.integers(0, 2**40, size=4)
    sim_slots = hw_slots.copy()
    sim_slots[past] = -1
    _write_and_compare(case, device, sim_slots, hostile_input(rng, case.num_tokens, case.head_dim, "fp32"),
                       hw_slots)


def test_k_quant_and_cache_empty(device):
    geom = CACHE_CASES[3].geom
    want = random_pool(geom, np.random.default_rng(0))
    pool = host_to_device(want, device)
    hw.indexer_k_quant_and_cache(torch.zeros(0, 32, device=device), torch_cache_view(pool, geom),
                                 torch.zeros(0, dtype=torch.int64, device=device), kv_dtype="mxfp4")
    assert_exact(pool.cpu().numpy(), want, "pool bytes")


# ---------------------------------------------------------------------------------------------- rejections
GOOD_PAGE_BYTES = 16 * (32 + 2)  # the valid call's page: P = 16 tokens of D/2 + D/32 bytes (D = 64)


def _good_args(device):
    """A valid call (mxfp4, D = 64, P = 16, 2 pages) as a dict of keyword arguments."""
    geom = PageGeometry("mxfp4", 16, 64, 2)
    assert geom.page_bytes == GOOD_PAGE_BYTES
    pool = torch.zeros(geom.pool_bytes + 64, dtype=torch.uint8, device=device)
    return dict(k=torch.zeros(4, 64, device=device), kv_cache=torch_cache_view(pool, geom),
                slot_mapping=torch.arange(4, device=device), kv_dtype="mxfp4", layout=None, scale_rule="rceil")


def _strided_cache(args, page_stride, offset=0):
    view = args["kv_cache"]
    return view.as_strided(view.shape, (page_stride, *view.stride()[1:]), view.storage_offset() + offset)


BAD_WRITER_ARGS = {
    "k dtype": (lambda a: {**a, "k": a["k"].double()}, "k must have dtype"),
    "k 3-D": (lambda a: {**a, "k": a["k"][None]}, "k must be 2-D"),
    "k head dim": (lambda a: {**a, "k": torch.zeros(4, 48)}, "kv_cache: head dim"),
    "slot dtype": (lambda a: {**a, "slot_mapping": a["slot_mapping"].int()}, "slot_mapping must have dtype"),
    "slot shape": (lambda a: {**a, "slot_mapping": a["slot_mapping"][:3]}, "slot_mapping must have shape"),
    "cache dtype": (lambda a: {**a, "kv_cache": a["kv_cache"].view(torch.int8)}, "kv_cache must have dtype"),
    "bytes per token (fp8 cache, mxfp4 call)": (lambda a: {**a, "kv_dtype": "fp8"}, r"\[num_pages, P, 1, 68\]"),
    "kv_dtype": (lambda a: {**a, "kv_dtype": "fp4"}, "kv_dtype must be one of"),
    "layout of another format": (lambda a: {**a, "layout": "fp8"}, "layout 'fp8' is not valid for mxfp4"),
    "tiled with D = 64": (lambda a: {**a, "layout": "mxfp4_tiled"}, "multiple of 128"),
    "scale rule": (lambda a: {**a, "scale_rule": "nearest"}, "scale_rule must be one of"),
    "page stride not a multiple of 16": (lambda a: {**a, "kv_cache": _strided_cache(a, GOOD_PAGE_BYTES + 8)},
                                         "multiple of 16"),
    "page stride below the page": (lambda a: {**a, "kv_cache": _strided_cache(a, GOOD_PAGE_BYTES - 16)}, "page stride"),
    "view offset not a multiple of 16": (lambda a: {**a, "kv_cache": _strided_cache(a, GOOD_PAGE_BYTES, 8)},
                                         "16-byte boundary"),
    "token stride": (lambda a: {**a, "kv_cache": a["kv_cache"].as_strided(
        a["kv_cache"].shape, (GOOD_PAGE_BYTES, 35, 35, 1))}, r"stride\(1\)"),
    "k not a tensor": (lambda a: {**a, "k": np.zeros((4, 64), np.float32)}, "k must be a torch.Tensor"),
}


@pytest.mark.parametrize("name", list(BAD_WRITER_ARGS))
def test_writer_rejects(name, device):
    make, match = BAD_WRITER_ARGS[name]
    with pytest.raises(ValueError, match=match):
        hw.indexer_k_quant_and_cache(**make(_good_args(device)))


def test_writer_rejects_scale_rule_for_fp8(device):
    geom = PageGeometry("fp8", 16, 32, 1)
    pool = torch.zeros(geom.pool_bytes, dtype=torch.uint8, device=device)
    with pytest.raises(ValueError, match="scale_rule applies to mxfp4 only"):
        hw.indexer_k_quant_and_cache(torch.zeros(2, 32, device=device), torch_cache_view(pool, geom),
                                     torch.arange(2, device=device), kv_dtype="fp8", scale_rule="floor")


def test_writer_rejects_device_mismatch(device):
    """Checked on the host before any launch, so a "meta" tensor stands in for a second device."""
    args = _good_args(device)
    with pytest.raises(ValueError, match="share a device"):
        hw.indexer_k_quant_and_cache(**{**args, "slot_mapping": args["slot_mapping"].to("meta")})


# ---------------------------------------------------------------------------------------------- writer validate mode
PAST_SLOTS = [0, -5, 32, 40]   # _good_args' cache has 2 pages of 16 = 32 slots: entries 2 and 3 are past it
PAST_MESSAGE = "slot_mapping[2] = 32 is past the cache's num_pages * P = 32 slots"


def _request_validation(monkeypatch, via_env: bool) -> bool:
    """Turn validate mode on through MXIDX_VALIDATE=1 (via_env) or not; returns the validate argument to pass."""
    if via_env:
        monkeypatch.setenv(VALIDATE_ENV, "1")
    else:
        monkeypatch.delenv(VALIDATE_ENV, raising=False)
    return not via_env


@pytest.mark.parametrize("via_env", [False, True], ids=["validate=True", "MXIDX_VALIDATE=1"])
def test_writer_validate_rejects_slots_past_the_view(via_env, device, monkeypatch):
    """Validate mode names the first slot past the cache (a device sync) before anything is written."""
    args = _good_args(device)
    before = args["kv_cache"].clone()
    args["slot_mapping"] = torch.tensor(PAST_SLOTS, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match=re.escape(PAST_MESSAGE)):
        hw.indexer_k_quant_and_cache(**args, validate=_request_validation(monkeypatch, via_env))
    assert torch.equal(args["kv_cache"].cpu(), before.cpu()), "a rejected call wrote into the cache"


def test_writer_validate_rejects_past_slot_in_strided_mapping(device, monkeypatch):
    """The index reported is slot_mapping's own (a strided view), not the underlying buffer's."""
    monkeypatch.delenv(VALIDATE_ENV, raising=False)
    args = _good_args(device)
    buffer = torch.tensor([[0, 99], [1, 99], [-1, 99], [31, 99], [33, 99]], dtype=torch.int64, device=device)
    args["k"] = torch.zeros(5, 64, device=device)
    args["slot_mapping"] = buffer[:, 0]
    with pytest.raises(ValueError, match=re.escape("slot_mapping[4] = 33 is past the cache's num_pages * P = 32")):
        hw.indexer_k_quant_and_cache(**args, validate=True)


@pytest.mark.parametrize("case", [CACHE_CASES[0], CACHE_CASES[7]], ids=["fp8", "mxfp4_tiled"])
@pytest.mark.parametrize("via_env", [False, True], ids=["validate=True", "MXIDX_VALIDATE=1"])
def test_writer_validate_accepts_good_slots(case, via_env, device, monkeypatch):
    """Valid slots, negative (skip) ones and the last slot of the view included, pass validation and are written
    exactly as without it."""
    rng = np.random.default_rng(13)
    slots = _slots(rng, case.geom, case.num_tokens)
    last = case.geom.num_pages * case.geom.page_size - 1
    if last not in slots:                          # keep the slots distinct
        slots[np.flatnonzero(slots >= 0)[0]] = last
    assert (slots < 0).any() and last in slots
    _write_and_compare(case, device, slots, hostile_input(rng, case.num_tokens, case.head_dim, "fp32"), slots,
                       validate=_request_validation(monkeypatch, via_env))


BAD_Q_ARGS = {
    "q dtype": (lambda q, w: (q.to(torch.float64), w), "q must have dtype"),
    "q 1-D": (lambda q, w: (q[0, 0], w), "at least 2-D"),
    "q head dim": (lambda q, w: (q[..., :48], w), "multiple of 32"),
    "q rows not mergeable": (lambda q, w: (q.transpose(0, 1), w.t()), "mergeable"),
    "weights shape": (lambda q, w: (q, w[:, :2]), "weights must have shape"),
    "weights dtype": (lambda q, w: (q, w.to(torch.float64)), "weights must have dtype"),
    "weights device": (lambda q, w: (q, w.to("meta")), "share a device"),
}


@pytest.mark.parametrize("name", list(BAD_Q_ARGS))
def test_q_quantizers_reject(name, device):
    q, w = BAD_Q_ARGS[name][0](torch.zeros(3, 4, 64, device=device), torch.zeros(3, 4, device=device))
    match = BAD_Q_ARGS[name][1]
    with pytest.raises(ValueError, match=match):
        hw.quantize_q_fp8(q, w)
    if not name.startswith("weights"):
        with pytest.raises(ValueError, match=match):
            hw.quantize_q_mxfp4(q)
    with pytest.raises(ValueError, match="scale_rule must be one of"):
        hw.quantize_q_mxfp4(torch.zeros(3, 4, 64, device=device), scale_rule="round")
