"""sim.fp8 against expectations derived independently of it (DESIGN §1, OCP e4m3fn).

Expected values come from exact rational arithmetic written here: each bit pattern's value from its fields,
nearest-value search by exact distances with ties to the even mantissa, and the per-row scale exponent by
searching for the smallest k with 448 * 2^k >= max(amax, 1e-4).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest

from sim import fp8
from tests.sim._assert import assert_exact

NAN_BITS = (0x7F, 0xFF)
AMAX_FLOOR = Fraction(1e-4)  # the float64 1e-4 of the contract


# ---------------------------------------------------------------------------------------- exact references
def ref_value(bits: int) -> Fraction | None:
    """Exact value of an e4m3fn bit pattern (None for NaN), from sign / 4-bit exponent (bias 7) / 3-bit mantissa."""
    if bits in NAN_BITS:
        return None
    sign = -1 if bits & 0x80 else 1
    e, m = (bits >> 3) & 0xF, bits & 0x7
    mag = Fraction(m, 8) * Fraction(2) ** -6 if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 7)
    return sign * mag


FINITE_MAGS = [(b, ref_value(b)) for b in range(0x7F)]  # 0x00..0x7E


@functools.lru_cache(maxsize=None)
def ref_encode(mag: Fraction, negative: bool) -> int:
    """Nearest finite magnitude by exact distance, ties to the even mantissa bit; saturating at 448."""
    sign = 0x80 if negative else 0
    best = min(abs(mag - v) for _, v in FINITE_MAGS)
    cands = [b for b, v in FINITE_MAGS if abs(mag - v) == best]
    if len(cands) == 2:
        cands = [b for b in cands if b % 2 == 0]
    return sign | cands[0]


def ref_encode_float(v: float) -> int:
    if math.isnan(v):
        return 0x7F
    mag = Fraction(448) if math.isinf(v) else Fraction(abs(v))
    return ref_encode(mag, math.copysign(1.0, v) < 0)


def ref_scale_exponent(amax: float) -> int:
    t = max(Fraction(amax), AMAX_FLOOR)
    k = -40
    while 448 * Fraction(2) ** k < t:
        k += 1
    assert 448 * Fraction(2) ** (k - 1) < t  # the search started low enough
    return k


def ref_quantize(x: np.ndarray):
    """Exact reference on float32 rows [N, D]: (values uint8[N, D], scales float32[N])."""
    values = np.full(x.shape, 0x7F, dtype=np.uint8)
    scales = np.full(x.shape[0], np.nan, dtype=np.float32)
    for r, row in enumerate(x):
        row = [float(v) for v in row]
        if not all(math.isfinite(v) for v in row):
            continue
        k = ref_scale_exponent(max(abs(v) for v in row))
        scales[r] = 2.0 ** k
        for i, v in enumerate(row):
            values[r, i] = ref_encode(abs(Fraction(v)) / Fraction(2) ** k, math.copysign(1.0, v) < 0)
    return values, scales


# ---------------------------------------------------------------------------------------- elements
ALL_BITS = np.arange(256, dtype=np.uint8)


def test_decode_every_bit_pattern():
    want = np.array([np.nan if ref_value(b) is None else float(ref_value(b)) for b in range(256)])
    want[0x80] = -0.0
    assert_exact(fp8.decode_e4m3(ALL_BITS), want, "decode_e4m3")


def test_encode_every_bit_pattern_round_trips():
    finite = np.array([b not in NAN_BITS for b in range(256)])
    values = fp8.decode_e4m3(ALL_BITS)
    assert_exact(fp8.encode_e4m3(values[finite]), ALL_BITS[finite], "encode(decode(bits))")


def test_encode_near_every_midpoint():
    """Every midpoint between neighbouring magnitudes (and above 448), ±1 ulp in fp64 and fp32, both signs."""
    mags = [float(v) for _, v in FINITE_MAGS] + [480.0]
    points = mags + [(a + b) / 2 for a, b in zip(mags, mags[1:])] + [1e6, 2.0 ** -149, 2.0 ** -11]
    probes = set()
    for p in points:
        probes.update({p, np.nextafter(p, np.inf), np.nextafter(p, -np.inf),
                       float(np.nextafter(np.float32(p), np.float32(np.inf))),
                       float(np.nextafter(np.float32(p), np.float32(-np.inf)))})
    v = np.array(sorted(probes))
    v = np.concatenate([v, -v, [np.inf, -np.inf, np.nan, -np.nan, 1e300]])
    want = np.array([ref_encode_float(float(x)) for x in v], dtype=np.uint8)
    assert_exact(fp8.encode_e4m3(v), want, "encode_e4m3", context=v)


def test_encode_literal_cases():
    v = np.array([464.0, 464.0001, 500.0, -1e9, 2.0 ** -10, 3 * 2.0 ** -10, -0.0, -1e-30, np.nan, 17.0, 18.0])
    want = [0x7E, 0x7E, 0x7E, 0xFE, 0x00, 0x02, 0x80, 0x80, 0x7F, 0x58, 0x59]
    assert_exact(fp8.encode_e4m3(v), np.array(want, dtype=np.uint8), "literal cases", context=v)


# ---------------------------------------------------------------------------------------- scales
def _amax_grid() -> np.ndarray:
    ulp = 2.0 ** -23
    ms = (1.0, 1.0 + ulp, 1.75 - ulp, 1.75, 1.75 + ulp, 2.0 - ulp)
    vals = {math.ldexp(m, e) for e in range(-126, 128) for m in ms}
    vals |= {math.ldexp(1.0, e) for e in range(-149, -126)}
    f32_1e4 = np.float32(1e-4)
    vals |= {0.0, float(f32_1e4), float(np.nextafter(f32_1e4, np.float32(0))),
             float(np.nextafter(f32_1e4, np.float32(1))), 448 * 2.0 ** -22,
             float(np.nextafter(np.float32(448 * 2.0 ** -22), np.float32(1))), float(np.float32(1e-5))}
    out = np.array(sorted(vals), dtype=np.float32)
    assert np.all(out.astype(np.float64) == np.array(sorted(vals)))
    return out


AMAX = _amax_grid()


def test_scale_exponent_every_binade():
    want = np.array([ref_scale_exponent(float(a)) for a in AMAX], dtype=np.int32)
    assert_exact(fp8.scale_exponent(AMAX), want, "scale_exponent", context=AMAX)


def test_scale_literal_cases():
    amax = np.array([0.0, 1e-4, 448.0, 448.0 * (1 + 2.0 ** -23), 1.0, 2.0 ** 127, 1.75 * 2.0 ** 127],
                    dtype=np.float32)
    assert_exact(fp8.scale_exponent(amax), np.array([-22, -22, 0, 1, -8, 119, 119], dtype=np.int32), "k")


def test_quantize_scale_every_binade():
    x = np.zeros((AMAX.size, 8), dtype=np.float32)
    x[:, 3] = AMAX
    x[:, 0] = -AMAX / np.float32(3)
    x[:, 5] = AMAX / np.float32(1000)
    x[::3, 1] = -0.0
    got = fp8.quantize(x)
    want = ref_quantize(x)
    assert_exact(got[1], want[1], "scales", context=AMAX)
    assert_exact(got[0], want[0], "values", context=x)


def test_quantize_random_and_adversarial_rows():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((24, 64)) * np.exp2(rng.integers(-60, 60, (24, 1)))).astype(np.float32)
    mids = np.array([(float(a) + float(b)) / 2 for (_, a), (_, b) in zip(FINITE_MAGS, FINITE_MAGS[1:])])
    x[0] = np.resize(mids[-64:], 64) * np.where(np.arange(64) % 2, -1, 1)    # exact ties at scale 1
    x[0, 0] = 448.0
    x[1] = np.resize(mids[:64], 64) * 2.0 ** -22                               # subnormal ties at the floor
    x[2] = 0.0
    x[2, 1::2] = -0.0
    x[3, :] = np.float32(2.0 ** -149)
    x[4] = np.finfo(np.float32).max / np.arange(1, 65, dtype=np.float32)
    x[5, 17], x[6, 0], x[7, 63] = np.nan, np.inf, -np.inf
    got = fp8.quantize(x)
    want = ref_quantize(x)
    assert_exact(got[1], want[1], "scales")
    assert_exact(got[0], want[0], "values", context=x)
    assert np.isnan(got[1][5:8]).all() and (got[0][5:8] == 0x7F).all()


def test_half_precision_inputs_and_leading_dims():
    rng = np.random.default_rng(5)
    x16 = (rng.standard_normal((2, 3, 16)) * 300).astype(np.float16)
    got = fp8.quantize(x16)
    want = ref_quantize(x16.astype(np.float32).reshape(6, 16))
    assert got[0].shape == (2, 3, 16) and got[1].shape == (2, 3)
    assert_exact(got[0].reshape(6, 16), want[0], "fp16 values")
    assert_exact(got[1].reshape(6), want[1], "fp16 scales")
    bf16 = rng.integers(0, 1 << 16, (4, 32), dtype=np.uint16)
    bf16[0, 0] = 0x7FC0                                          # NaN row
    f32 = (bf16.astype(np.uint32) << 16).view(np.float32)       # bf16 is the top half of an fp32
    got = fp8.quantize(bf16)
    want = ref_quantize(f32)
    assert_exact(got[0], want[0], "bf16 values")
    assert_exact(got[1], want[1], "bf16 scales")


# ---------------------------------------------------------------------------------------- dequantize
def test_dequantize_every_pattern_exact():
    scales = np.array([1.0, 2.0 ** -22, 2.0 ** 120, 0.3, np.nan], dtype=np.float32)
    values = np.broadcast_to(ALL_BITS, (5, 256)).copy()
    want64 = np.empty((5, 256))
    want32 = np.empty((5, 256), dtype=np.float32)
    for r, s in enumerate(scales):
        for b in range(256):
            v = ref_value(b)
            if v is None or np.isnan(s):
                want64[r, b] = want32[r, b] = np.nan
                continue
            exact = v * Fraction(float(s))
            want64[r, b] = float(exact) if exact else math.copysign(0.0, -1.0 if b & 0x80 else 1.0)
            assert Fraction(want64[r, b]) == exact        # 4 + 24 significant bits: exact in float64
            with np.errstate(over="ignore"):
                want32[r, b] = np.float32(want64[r, b])   # one IEEE rounding (±inf past the fp32 range)
    assert_exact(fp8.dequantize(values, scales, dtype=np.float64), want64, "float64")
    assert_exact(fp8.dequantize(values, scales), want32, "float32")


def test_top_binade_rounds_past_the_fp32_range():
    """amax >= 1.9375 * 2^127: k = 120 and the maximum rounds up to 256 (0x78) -> 2^128, inf in float32 (documented
    in dequantize); just below, 1.9375 * 2^127 - ulp rounds to 240 (0x77) and stays finite."""
    x = np.array([[1.9375 * 2.0 ** 127, -1.0], [np.nextafter(np.float32(1.9375 * 2.0 ** 127), np.float32(0)), 1.0]],
                 np.float32)
    values, scales = fp8.quantize(x)
    assert_exact(scales, np.array([2.0 ** 120, 2.0 ** 120], np.float32), "scales")
    assert_exact(values[:, 0], np.array([0x78, 0x77], np.uint8), "the row maxima")
    assert_exact(fp8.dequantize(values, scales, dtype=np.float64)[:, 0], np.array([2.0 ** 128, 240 * 2.0 ** 120]),
                 "float64")
    assert_exact(fp8.dequantize(values, scales)[:, 0], np.array([np.inf, 240 * 2.0 ** 120], np.float32), "float32")


def test_quantize_dequantize_error_bound():
    """|x - dq(q(x))| <= half an e4m3 step of x's binade (relative 2^-4) or half the subnormal step."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((32, 128)) * np.exp2(rng.integers(-20, 20, (32, 1)))).astype(np.float32)
    values, scales = fp8.quantize(x)
    err = np.abs(fp8.dequantize(values, scales, dtype=np.float64) - x)
    bound = np.maximum(np.abs(x) * 2.0 ** -4, 2.0 ** -10 * scales[:, None].astype(np.float64))
    assert (err <= bound).all(), f"worst ratio {np.max(err / bound)}"


# ---------------------------------------------------------------------------------------- rejections
def test_rejections():
    with pytest.raises(ValueError, match="x: input dtype"):
        fp8.quantize(np.zeros((2, 4), np.float64))
    with pytest.raises(ValueError, match="D >= 1"):
        fp8.quantize(np.zeros((2, 0), np.float32))
    with pytest.raises(ValueError, match="D >= 1"):
        fp8.quantize(np.float32(1))
    v, s = np.zeros((2, 4), np.uint8), np.ones(2, np.float32)
    with pytest.raises(ValueError, match="values must be uint8"):
        fp8.dequantize(v.astype(np.int8), s)
    with pytest.raises(ValueError, match="scales must be float32"):
        fp8.dequantize(v, s.astype(np.float64))
    with pytest.raises(ValueError, match="must agree"):
        fp8.dequantize(v, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="dtype"):
        fp8.dequantize(v, s, dtype=np.float16)
    with pytest.raises(ValueError, match="dtype must be np.float32 or np.float64"):
        fp8.dequantize(v, s, dtype=[1, 2])
    with pytest.raises(ValueError, match="bits must be uint8"):
        fp8.decode_e4m3(np.array([1]))
    with pytest.raises(ValueError, match="finite"):
        fp8.scale_exponent(np.array([np.inf], np.float32))
    with pytest.raises(ValueError, match="float32 or float64"):
        fp8.scale_exponent(np.array([1], np.int32))
