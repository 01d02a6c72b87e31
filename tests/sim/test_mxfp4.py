"""sim.mxfp4 against expectations derived independently of it (DESIGN §1).

Expected values come from the spec's literal tables (E2M1 values, the tie table) and from exact rational
arithmetic written here (fractions.Fraction): nearest-value search by exact distances, and each scale rule from
its mathematical definition (rceil as "the smallest 2^s with amax <= 6 * 2^s").
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from sim import mxfp4
from tests.sim._assert import assert_exact

# The spec's table, typed again here rather than imported: code -> value (DESIGN §1).
SPEC_E2M1 = {0: 0.0, 1: 0.5, 2: 1.0, 3: 1.5, 4: 2.0, 5: 3.0, 6: 4.0, 7: 6.0}
RULES = ("floor", "rceil", "even", "ceil")
ROUNDINGS = ("rne", "ties_away", "ties_to_zero")
F32_ULP_AT_1 = 2.0 ** -23


# ---------------------------------------------------------------------------------------- exact references
@functools.lru_cache(maxsize=None)
def ref_e2m1(value: Fraction, negative: bool, rounding: str) -> int:
    """Nearest E2M1 code of a non-negative exact magnitude, by exact distances; sign bit for negative inputs."""
    sign = 8 if negative else 0
    if value > 6:
        return sign | 7
    dist = {code: abs(value - Fraction(v)) for code, v in SPEC_E2M1.items()}
    best = min(dist.values())
    cands = sorted(code for code, d in dist.items() if d == best)
    if len(cands) == 1:
        return sign | cands[0]
    lo, hi = cands
    pick = {"rne": lo if lo % 2 == 0 else hi, "ties_away": hi, "ties_to_zero": lo}[rounding]
    return sign | pick


def ref_binade(a: Fraction) -> tuple[int, Fraction]:
    """a = m * 2^E with 1 <= m < 2, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    return e, a / Fraction(2) ** e


def ref_scale_exponent(amax: float, rule: str) -> int:
    """Unclamped s from each rule's definition (rceil by search: the smallest s with amax <= 6 * 2^s)."""
    a = Fraction(amax)
    e, m = ref_binade(a)
    if rule == "rceil":
        s = e - 4
        while a > 6 * Fraction(2) ** s:
            s += 1
        return s
    bump = {"floor": False, "even": m >= Fraction(7, 4), "ceil": m > 1}[rule]
    return e - 2 + int(bump)


def ref_quantize(x: np.ndarray, rule: str, rounding: str, min_scale_byte: int):
    """Exact reference quantizer on float32 rows [N, D]: (codes [N, D/2], scales [N, D/32])."""
    n, d = x.shape
    codes = np.zeros((n, d), dtype=np.uint8)
    scales = np.zeros((n, d // 32), dtype=np.uint8)
    for r in range(n):
        for g in range(d // 32):
            block = [float(v) for v in x[r, 32 * g:32 * g + 32]]
            if not all(math.isfinite(v) for v in block):
                scales[r, g] = 255
                continue
            amax = max(abs(v) for v in block)
            byte = min_scale_byte if amax == 0 else \
                min(max(ref_scale_exponent(amax, rule) + 127, min_scale_byte), 254)
            scales[r, g] = byte
            for i, v in enumerate(block):
                exact = abs(Fraction(v)) / Fraction(2) ** (byte - 127)
                codes[r, 32 * g + i] = ref_e2m1(exact, math.copysign(1.0, v) < 0, rounding)
    return codes[:, 0::2] | (codes[:, 1::2] << 4), scales


def bf16_value(bits: int) -> float:
    """bf16 bit pattern -> value, from the fields (sign, 8-bit exponent, 7-bit mantissa)."""
    bits = int(bits)
    sign = -1.0 if bits >> 15 else 1.0
    e, m = (bits >> 7) & 0xFF, bits & 0x7F
    return sign * (math.ldexp(m, -133) if e == 0 else math.ldexp(128 + m, e - 134))


# ---------------------------------------------------------------------------------------- E2M1 elements
def test_decode_every_code():
    codes = np.arange(16, dtype=np.uint8)
    want = np.array([SPEC_E2M1[c & 7] * (-1 if c & 8 else 1) for c in range(16)], dtype=np.float64)
    want[8] = -0.0
    assert_exact(mxfp4.decode_e2m1(codes), want, "decode_e2m1")


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_encode_every_code_round_trips(rounding):
    codes = np.arange(16, dtype=np.uint8)
    values = np.array([SPEC_E2M1[c & 7] for c in range(16)]) * np.where(codes & 8, -1.0, 1.0)
    assert_exact(mxfp4.encode_e2m1(values, rounding), codes, "encode(decode(code))")


@dataclass(frozen=True)
class TieCase:
    value: float
    rne: float
    ties_away: float
    ties_to_zero: float


# Every midpoint between neighbouring E2M1 magnitudes; rne column is DESIGN §1's literal tie table.
TIES = (
    TieCase(0.25, rne=0.0, ties_away=0.5, ties_to_zero=0.0),
    TieCase(0.75, rne=1.0, ties_away=1.0, ties_to_zero=0.5),
    TieCase(1.25, rne=1.0, ties_away=1.5, ties_to_zero=1.0),
    TieCase(1.75, rne=2.0, ties_away=2.0, ties_to_zero=1.5),
    TieCase(2.5, rne=2.0, ties_away=3.0, ties_to_zero=2.0),
    TieCase(3.5, rne=4.0, ties_away=4.0, ties_to_zero=3.0),
    TieCase(5.0, rne=4.0, ties_away=6.0, ties_to_zero=4.0),
)


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("case", TIES, ids=lambda c: f"tie{c.value}")
def test_every_tie(case, rounding):
    want = getattr(case, rounding)
    v = np.array([case.value, -case.value])
    got = mxfp4.decode_e2m1(mxfp4.encode_e2m1(v, rounding))
    assert_exact(got, np.array([want, -want]), f"tie {case.value} under {rounding}")


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_encode_near_every_midpoint_and_edge(rounding):
    """Midpoints ±1 ulp (fp32 and fp64), values, saturation, zeros and tiny values against exact distances."""
    mags = sorted(SPEC_E2M1.values())
    points = mags + [(a + b) / 2 for a, b in zip(mags, mags[1:])] + [6.5, 7.0, 8.0, 1e30, 2.0 ** -149]
    probes = set()
    for p in points:
        for q in (p, np.nextafter(p, np.inf), np.nextafter(p, -np.inf),
                  float(np.nextafter(np.float32(p), np.float32(np.inf))),
                  float(np.nextafter(np.float32(p), np.float32(-np.inf)))):
            probes.add(float(q))
    v = np.array(sorted(probes))
    v = np.concatenate([v, -v, [np.inf, -np.inf, 1e300, -1e300]])
    want = np.array([ref_e2m1(Fraction(abs(x)) if math.isfinite(x) else Fraction(7), math.copysign(1, x) < 0,
                              rounding) for x in v], dtype=np.uint8)
    assert_exact(mxfp4.encode_e2m1(v, rounding), want, "encode_e2m1", context=v)


def test_negative_zero_and_negative_underflow_keep_sign():
    v = np.array([-0.0, -1e-30, -0.25, -2.0 ** -1074, 0.0, 1e-30])
    assert_exact(mxfp4.encode_e2m1(v), np.array([8, 8, 8, 8, 0, 0], dtype=np.uint8), "signed zeros")


# ---------------------------------------------------------------------------------------- E8M0 scales
def test_dequantize_every_scale_byte_and_code():
    """Each byte 0..255 with all 16 codes: float64 exact, float32 exact or ±inf at >= 2^128, 255 -> NaN."""
    unpacked = np.tile(np.arange(16, dtype=np.uint8), 2)            # one block: codes 0..15 twice
    codes = np.broadcast_to(unpacked[0::2] | (unpacked[1::2] << 4), (256, 16)).copy()
    scales = np.arange(256, dtype=np.uint8)[:, None]
    want64 = np.empty((256, 32))
    want32 = np.empty((256, 32), dtype=np.float32)
    for b in range(256):
        for i, c in enumerate(unpacked):
            if b == 255:
                want64[b, i] = want32[b, i] = np.nan
                continue
            exact = Fraction(SPEC_E2M1[c & 7]) * Fraction(2) ** (b - 127)
            neg = bool(c & 8)
            want64[b, i] = math.copysign(float(exact), -1.0 if neg else 1.0)   # exact: float64 covers the range
            mag32 = np.float32(np.inf) if exact >= Fraction(2) ** 128 else np.float32(float(exact))
            assert mag32 == np.inf or Fraction(float(mag32)) == exact       # the reference itself is exact
            want32[b, i] = -mag32 if neg else mag32
    assert_exact(mxfp4.dequantize(codes, scales, dtype=np.float64), want64, "dequantize float64")
    assert_exact(mxfp4.dequantize(codes, scales), want32, "dequantize float32")


def _amax_grid() -> np.ndarray:
    """amax = m * 2^E at m = 1, 1+ulp, 1.5, 1.5+ulp, 1.75-ulp, 1.75, 2-ulp for E = -126..127, plus subnormals."""
    ms = (1.0, 1.0 + F32_ULP_AT_1, 1.5, 1.5 + F32_ULP_AT_1, 1.75 - F32_ULP_AT_1, 1.75, 2.0 - F32_ULP_AT_1)
    vals = [math.ldexp(m, e) for e in range(-126, 128) for m in ms]
    # Subnormal amax: the same mantissa patterns as far as they fit, and every power of two down to 2^-149.
    for e in range(-149, -126):
        for m in ms:
            v = math.ldexp(m, e)
            if float(np.float32(v)) == v:
                vals.append(v)
        vals.append(math.ldexp(1.0, e + 1) - 2.0 ** -149)   # 2-ulp at the subnormal step
    out = np.array(sorted(set(vals)), dtype=np.float32)
    assert np.all(out.astype(np.float64) == np.array(sorted(set(vals))))  # every grid point is exactly fp32
    return out


AMAX = _amax_grid()


@pytest.mark.parametrize("rule", RULES)
def test_scale_exponent_every_binade(rule):
    want = np.array([ref_scale_exponent(float(a), rule) for a in AMAX], dtype=np.int32)
    assert_exact(mxfp4.scale_exponent(AMAX, rule), want, f"scale_exponent {rule}", context=AMAX)


@pytest.mark.parametrize("min_scale_byte", [0, 1])
@pytest.mark.parametrize("rule", RULES)
def test_quantize_scale_byte_every_binade(rule, min_scale_byte):
    """Block = [amax, -amax/3, amax/7, 0, ...]: byte and codes against the exact reference, both clamps."""
    x = np.zeros((AMAX.size, 32), dtype=np.float32)
    x[:, 0] = AMAX
    x[:, 1] = -AMAX / np.float32(3)
    x[:, 2] = AMAX / np.float32(7)
    x[::2, 3] = -0.0
    codes, scales = mxfp4.quantize(x, scale_rule=rule, min_scale_byte=min_scale_byte)
    want_codes, want_scales = ref_quantize(x, rule, "rne", min_scale_byte)
    assert_exact(scales, want_scales, f"scales {rule}", context=x[:, 0])
    assert_exact(codes, want_codes, f"codes {rule}", context=x[:, 0])


def test_rule_differences_at_the_thresholds():
    """The four rules at m = 1.5 and m just above it (E = 0): the literal DESIGN §1 table."""
    amax = np.array([1.0, 1.5, 1.5 + F32_ULP_AT_1, 1.75, 2.0 - F32_ULP_AT_1], dtype=np.float32)
    want = {"floor": [-2, -2, -2, -2, -2], "rceil": [-2, -2, -1, -1, -1],
            "even": [-2, -2, -2, -1, -1], "ceil": [-2, -1, -1, -1, -1]}
    for rule, s in want.items():
        assert_exact(mxfp4.scale_exponent(amax, rule), np.array(s, dtype=np.int32), rule)


def test_top_binade_literal_bytes():
    """E = 127, the largest fp32 binade: every rule's bump lands on byte 253 (s = 126), never on the 254 clamp,
    so no fp32 input is ever written with byte 254 (which only a decoder sees); floor stays at 252 and clips."""
    x = np.zeros((4, 32), np.float32)
    x[:, 0] = np.array([1.0, 1.5 + F32_ULP_AT_1, 1.75, 2.0 - F32_ULP_AT_1]) * np.float32(2.0 ** 127)
    # (byte, code of the block max): byte 252 -> element 4m (m = 1: 4.0 = code 6; above 1.5: > 6, saturates to
    # code 7), byte 253 -> element 2m (1.5+ulp: 3.0 = code 5; 1.75: the tie 3.5 -> 4.0 = code 6; 2-ulp: 4.0).
    want = {"floor": ([252, 252, 252, 252], [6, 7, 7, 7]), "rceil": ([252, 253, 253, 253], [6, 5, 6, 6]),
            "even": ([252, 252, 253, 253], [6, 7, 6, 6]), "ceil": ([252, 253, 253, 253], [6, 5, 6, 6])}
    for rule, (bytes_, max_codes) in want.items():
        codes, scales = mxfp4.quantize(x, scale_rule=rule)
        assert_exact(scales[:, 0], np.array(bytes_, np.uint8), f"{rule} bytes at E = 127", context=x[:, 0])
        assert_exact(codes[:, 0] & 0xF, np.array(max_codes, np.uint8), f"{rule} block-max codes at E = 127")
    assert mxfp4.quantize(np.full((1, 32), np.finfo(np.float32).max), scale_rule="ceil")[1][0, 0] == 253
    # amax = 1.75 * 2^127 (row 2): the tie 3.5 -> 4.0 at byte 253 is 2^128, past fp32 (ties_to_zero: 3.0, finite)
    for rounding, want in (("rne", np.inf), ("ties_away", np.inf), ("ties_to_zero", 1.5 * 2.0 ** 127)):
        codes, scales = mxfp4.quantize(x[2:3], rounding=rounding)
        assert mxfp4.dequantize(codes, scales)[0, 0] == np.float32(want), rounding
        assert mxfp4.dequantize(codes, scales, dtype=np.float64)[0, 0] == (2.0 ** 128 if want == np.inf else want)


@pytest.mark.parametrize("min_scale_byte", [120, 254])
def test_large_min_scale_byte_clamps_and_encodes_at_the_clamped_scale(min_scale_byte):
    """min_scale_byte well above the natural byte: scale = the clamp, elements encoded at it (mostly to ±0)."""
    x = np.zeros((AMAX.size, 32), dtype=np.float32)
    x[:, 0] = AMAX
    x[:, 1] = -AMAX / np.float32(3)
    codes, scales = mxfp4.quantize(x, min_scale_byte=min_scale_byte)
    want_codes, want_scales = ref_quantize(x, "rceil", "rne", min_scale_byte)
    assert_exact(scales, want_scales, "scales", context=x[:, 0])
    assert_exact(codes, want_codes, "codes", context=x[:, 0])
    assert (scales >= min_scale_byte).all()


# ---------------------------------------------------------------------------------------- whole blocks
def _random_rows(rng, n, d=64) -> np.ndarray:
    x = rng.standard_normal((n, d)) * np.exp2(rng.integers(-40, 40, (n, 1)))
    return x.astype(np.float32)


def _adversarial_rows() -> np.ndarray:
    """Exact midpoints after scaling, clamped tiny blocks, huge blocks, subnormals, and max-sized values."""
    rows = []
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], dtype=np.float32)
    for e in (-130, -120, -3, 0, 7, 120):
        r = np.zeros(32, dtype=np.float32)
        r[:16] = np.ldexp(np.tile(mids, 2) * np.where(np.arange(16) % 2, -1, 1), e)
        rows.append(r)
    rows.append(np.full(32, 2.0 ** -149, dtype=np.float32))                   # all smallest subnormal
    rows.append(np.linspace(-3e-38, 3e-38, 32, dtype=np.float32))            # clamped at byte 0/1
    big = np.float32(np.finfo(np.float32).max)
    rows.append(np.array([big, -big] + [big / np.float32(k) for k in range(3, 33)], dtype=np.float32))
    rows.append(np.array([1.5 * 2.0 ** 127, 1.75 * 2.0 ** 127] + [-2.0 ** 120] * 30, dtype=np.float32))
    rows.append(np.array([(-1) ** i * i * 2.0 ** -140 for i in range(32)], dtype=np.float32))
    rows.append(np.array([(-1) ** i * (2.0 + i * 2.0 ** -21) for i in range(32)], dtype=np.float32))  # m near 1
    return np.stack(rows)


@pytest.mark.parametrize("min_scale_byte", [0, 1])
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("rule", RULES)
def test_quantize_matches_exact_reference(rule, rounding, min_scale_byte):
    rng = np.random.default_rng(1000 + RULES.index(rule) * 10 + ROUNDINGS.index(rounding))
    x = np.concatenate([_random_rows(rng, 12), _adversarial_rows().reshape(-1, 64)])
    codes, scales = mxfp4.quantize(x, scale_rule=rule, rounding=rounding, min_scale_byte=min_scale_byte)
    want_codes, want_scales = ref_quantize(x, rule, rounding, min_scale_byte)
    assert_exact(scales, want_scales, "scales")
    assert_exact(codes, want_codes, "codes")


@pytest.mark.parametrize("min_scale_byte", [0, 1, 200])
def test_zero_blocks(min_scale_byte):
    x = np.zeros((2, 64), dtype=np.float32)
    x[1, 1::2] = -0.0                       # odd elements -0.0 -> high nibbles 0x8
    x[1, 32:] = 3.0                          # second block is non-zero
    codes, scales = mxfp4.quantize(x, min_scale_byte=min_scale_byte)
    assert_exact(scales[:, 0], np.array([min_scale_byte] * 2, dtype=np.uint8), "zero-block byte")
    assert_exact(codes[0], np.zeros(32, dtype=np.uint8), "+0 block codes")
    assert_exact(codes[1, :16], np.full(16, 0x80, dtype=np.uint8), "±0 block codes (sign in the high nibble)")
    assert scales[1, 1] == max(127 - 1, min_scale_byte), "3.0 under rceil: E = 1, m = 1.5 -> s = -1 (or the clamp)"


@pytest.mark.parametrize("position", [0, 13, 31])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_block_is_nan_block(bad, position):
    x = np.linspace(-5, 5, 96, dtype=np.float32).reshape(1, 96)
    x[0, 32 + position] = bad
    codes, scales = mxfp4.quantize(x)
    clean_codes, clean_scales = mxfp4.quantize(np.delete(x, np.s_[32:64], axis=1))
    assert_exact(scales[0], np.array([clean_scales[0, 0], 255, clean_scales[0, 1]], dtype=np.uint8), "scales")
    assert_exact(codes[0, 16:32], np.zeros(16, dtype=np.uint8), "codes of the NaN block")
    assert_exact(np.delete(codes, np.s_[16:32], axis=1), clean_codes, "neighbour blocks unaffected")
    assert np.isnan(mxfp4.dequantize(codes, scales)[0, 32:64]).all()


def test_nibble_order_even_element_low():
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, :4] = [0.5, 6.0, -1.0, 3.0]        # rceil: amax 6 = 1.5 * 2^2 -> s = 0
    codes, scales = mxfp4.quantize(x)
    assert scales[0, 0] == 127
    assert_exact(codes[0, :2], np.array([0x71, 0x5A], dtype=np.uint8), "packed bytes")
    assert_exact(mxfp4.unpack_nibbles(codes)[0, :4], np.array([1, 7, 0xA, 5], dtype=np.uint8), "unpacked")
    assert_exact(mxfp4.pack_nibbles(mxfp4.unpack_nibbles(codes)), codes, "pack(unpack)")


def test_half_precision_inputs():
    rng = np.random.default_rng(7)
    x16 = (rng.standard_normal((8, 64)) * 100).astype(np.float16)
    x16[0, :3] = [np.float16(6.1e-5), np.float16(-6e-8), np.float16(65504)]  # fp16 normal min, subnormal, max
    want = ref_quantize(x16.astype(np.float32), "rceil", "rne", 1)
    got = mxfp4.quantize(x16)
    assert_exact(got[0], want[0], "fp16 codes")
    assert_exact(got[1], want[1], "fp16 scales")
    bf16 = rng.integers(0, 1 << 16, (8, 64), dtype=np.uint16)
    bf16 = np.where((bf16 & 0x7F80) == 0x7F80, bf16 & 0x807F, bf16).astype(np.uint16)  # keep these finite
    as_f32 = np.array([[bf16_value(b) for b in row] for row in bf16], dtype=np.float32)
    want = ref_quantize(as_f32, "rceil", "rne", 1)
    got = mxfp4.quantize(bf16)
    assert_exact(got[0], want[0], "bf16 codes")
    assert_exact(got[1], want[1], "bf16 scales")


def test_leading_dims_and_round_trip():
    """Any leading shape; values already on the MXFP4 grid (at the rceil scale) come back exactly."""
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 16, (2, 3, 5, 128), dtype=np.uint8)
    codes[..., 0] = 7                        # block max 6 -> rceil s = byte - 127 exactly
    codes[..., 32::32] = 15
    scales = rng.integers(1, 250, (2, 3, 5, 4), dtype=np.uint8)
    packed = mxfp4.pack_nibbles(codes)
    x = mxfp4.dequantize(packed, scales)
    got_codes, got_scales = mxfp4.quantize(x)
    assert_exact(got_scales, scales, "scales")
    assert_exact(got_codes, packed, "codes")


# ---------------------------------------------------------------------------------------- rejections
@pytest.mark.parametrize("x, match", [
    (np.zeros((4, 48), np.float32), "multiple of 32"),
    (np.zeros((4, 0), np.float32), "multiple of 32"),
    (np.float32(1.0), "multiple of 32"),
    (np.zeros((4, 32), np.float64), "x: input dtype"),
    (np.zeros((4, 32), np.int32), "x: input dtype"),
])
def test_quantize_rejects_bad_x(x, match):
    with pytest.raises(ValueError, match=match):
        mxfp4.quantize(x)


@pytest.mark.parametrize("kwargs, match", [
    ({"scale_rule": "round"}, "scale_rule"),
    ({"rounding": "stochastic"}, "rounding"),
    ({"min_scale_byte": -1}, "min_scale_byte"),
    ({"min_scale_byte": 255}, "min_scale_byte"),
    ({"min_scale_byte": True}, "min_scale_byte"),
    ({"min_scale_byte": 1.0}, "min_scale_byte"),
])
def test_quantize_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mxfp4.quantize(np.zeros((1, 32), np.float32), **kwargs)


def test_other_rejections():
    codes, scales = np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8)
    with pytest.raises(ValueError, match="codes and scales must be uint8"):
        mxfp4.dequantize(codes.astype(np.int8), scales)
    with pytest.raises(ValueError, match="must agree"):
        mxfp4.dequantize(np.zeros((2, 8), np.uint8), scales)
    with pytest.raises(ValueError, match="must agree"):
        mxfp4.dequantize(codes, np.zeros((3, 1), np.uint8))
    with pytest.raises(ValueError, match="dtype"):
        mxfp4.dequantize(codes, scales, dtype=np.float16)
    with pytest.raises(ValueError, match="dtype must be np.float32 or np.float64"):
        mxfp4.dequantize(codes, scales, dtype="not a dtype")
    with pytest.raises(ValueError, match="NaN"):
        mxfp4.encode_e2m1(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="0..15"):
        mxfp4.decode_e2m1(np.array([16]))
    with pytest.raises(ValueError, match="integer"):
        mxfp4.decode_e2m1(np.array([1.0]))
    with pytest.raises(ValueError, match="even"):
        mxfp4.pack_nibbles(np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="0..15"):
        mxfp4.pack_nibbles(np.array([0, 16], np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        mxfp4.unpack_nibbles(np.zeros(3, np.int16))
    with pytest.raises(ValueError, match="positive and finite"):
        mxfp4.scale_exponent(np.array([0.0], np.float32), "rceil")
    with pytest.raises(ValueError, match="float32"):
        mxfp4.scale_exponent(np.array([1.0]), "rceil")
