"""Numba versions of the MXFP4 and FP8 codecs, byte-identical to the oracles sim.mxfp4 and sim.fp8.

They use integer bit arithmetic on the fp32 patterns (the way a kernel does), deliberately a different algorithm
from the oracles' frexp + nearest-value search, so the cross-check between the two means something:
  * block maximum = integer max of (bits & 0x7FFFFFFF) (monotone for finite non-negative floats);
  * scale byte from the biased exponent field and the mantissa field compared with each rule's threshold
    (a subnormal block maximum always clamps to min_scale_byte, so it needs no normalization here);
  * an element a = M * 2^p (M the 24-bit significand) is rounded to the E2M1/E4M3 grid step 2^t of its binade by
    an integer shift with round-half-even/away/to-zero on the shifted-out bits.
All scale rules and all three E2M1 roundings are implemented here (no fallback to the oracle).
Signatures and byte layouts are those of sim.mxfp4.quantize/dequantize and sim.fp8.quantize/dequantize.
Compiled functions are cached on disk (cache=True); the first call in a fresh environment compiles (seconds).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from sim import fp8 as _fp8
from sim import mxfp4 as _mxfp4
from sim.formats import (
    CANONICAL_MIN_SCALE_BYTE,
    E2M1_EMAX,
    E2M1_SIGN_BIT,
    E2M1_VALUES,
    E4M3_BIAS,
    E4M3_MANTISSA_BITS,
    E4M3_MAX,
    E4M3_MAX_CODE,
    E4M3_MIN_NORMAL_EXP,
    E4M3_NAN,
    E8M0_BIAS,
    E8M0_MAX_FINITE,
    E8M0_NAN,
    FP8_AMAX_FLOOR,
    MX_BLOCK,
    Rounding,
    ScaleRule,
    as_rounding,
    as_scale_rule,
)

_ABS_MASK = 0x7FFFFFFF
_EXP_FIELD = 0x7F800000  # all ones: Inf/NaN
_MANT_BITS = 23
_MANT_MASK = (1 << _MANT_BITS) - 1
_IMPLICIT = 1 << _MANT_BITS
_F32_BIAS = 127
_SIGN_SHIFT = 31
_F32_SUBNORMAL_EXP = -149  # fp32 subnormal = mantissa field * 2^-149
_SHIFT_TO_ZERO = 40
_E2M1_MAX_CODE = 7

# Integer ids passed into the compiled code (numba freezes these globals as constants).
_FLOOR, _RCEIL, _EVEN, _CEIL = range(4)
_HALF_EVEN, _HALF_AWAY, _HALF_TO_ZERO = range(3)
_RULE_ID = {ScaleRule.FLOOR: _FLOOR, ScaleRule.RCEIL: _RCEIL, ScaleRule.EVEN: _EVEN, ScaleRule.CEIL: _CEIL}
_ROUND_ID = {Rounding.RNE: _HALF_EVEN, Rounding.TIES_AWAY: _HALF_AWAY, Rounding.TIES_TO_ZERO: _HALF_TO_ZERO}
# Mantissa thresholds (23-bit field) above which the scale exponent is bumped: m > 1.5, m >= 1.75, m > 1.
_RCEIL_ABOVE = 1 << (_MANT_BITS - 1)                   # m > 1.5  <=>  field > 0x400000
_EVEN_FROM = 3 << (_MANT_BITS - 2)                     # m >= 1.75 <=> field >= 0x600000
_FP8_MAX_MANT = 3 << (_MANT_BITS - 2)                  # 448 = 1.75 * 2^8
_FP8_MAX_EXP = 8
assert math.ldexp(1 + _FP8_MAX_MANT / _IMPLICIT, _FP8_MAX_EXP) == E4M3_MAX
_E4M3_DROP = _MANT_BITS - E4M3_MANTISSA_BITS           # fp32 mantissa bits below the e4m3 mantissa
_FP8_FLOOR_BITS = int(np.float32(FP8_AMAX_FLOOR).view(np.uint32))  # same k as the float64 1e-4 (no 448*2^k between)

_E2M1_LUT = E2M1_VALUES.copy()
_E4M3_LUT = _fp8.decode_e4m3(np.arange(256, dtype=np.uint8))


@numba.njit(cache=True, inline="always")
def _round_shift(m, r, mode):
    """m >> r (r >= 1) rounded on the shifted-out bits; a tie goes by mode (_HALF_EVEN/_AWAY/_TO_ZERO)."""
    if r > _SHIFT_TO_ZERO:  # m < 2^24 is below half a unit (and 1 << r stays in int64)
        return 0
    q = m >> r
    rem = m & ((1 << r) - 1)
    half = 1 << (r - 1)
    if rem > half or (rem == half and (mode == _HALF_AWAY or (mode == _HALF_EVEN and (q & 1) == 1))):
        q += 1
    return q


@numba.njit(cache=True, inline="always")
def _e2m1_code(bits, shift, mode):
    """E2M1 code of the finite fp32 pattern `bits` times 2^-shift (-127 <= shift <= 127)."""
    sign = E2M1_SIGN_BIT if bits >> _SIGN_SHIFT else 0
    biased = (bits >> _MANT_BITS) & 0xFF
    if biased == 0:  # zero or fp32 subnormal: a = m * 2^(-149 - shift) < 2^-126 * 2^127 = 2
        m = np.int64(bits & _MANT_MASK)
        p = _F32_SUBNORMAL_EXP - shift
        ea = -1
    else:            # a = m * 2^p, m the 24-bit significand
        m = np.int64((bits & _MANT_MASK) | _IMPLICIT)
        p = biased - _F32_BIAS - _MANT_BITS - shift
        ea = biased - _F32_BIAS - shift  # floor(log2 a)
    if ea > E2M1_EMAX:  # a >= 8: saturate
        return sign | _E2M1_MAX_CODE
    # grid step 2^t of a's binade: 0.5 below 2 (incl. the E2M1 subnormal 0.5), 1 in [2, 4), 2 in [4, 8)
    t = -1 if ea < 1 else ea - 1
    q = _round_shift(m, t - p, mode)  # t - p >= 20
    # value q * 2^t -> code: t = -1: q (0..4); t = 0: q + 2 (q 2..4); t = 1: q + 4 (q 2..4, 8 saturates)
    code = q if t < 0 else q + 2 * (t + 1)
    return sign | min(code, _E2M1_MAX_CODE)


@numba.njit(cache=True)
def _scale_byte(amax_bits, rule, min_byte):
    """E8M0 byte of a positive finite block maximum given as fp32 bits (DESIGN §1 rules, clamped)."""
    biased = amax_bits >> _MANT_BITS
    if biased == 0:  # subnormal amax: E <= -127, so s <= -128 clamps to min_byte under every rule
        return min_byte
    mant = amax_bits & _MANT_MASK
    s = biased - _F32_BIAS - E2M1_EMAX
    if (rule == _RCEIL and mant > _RCEIL_ABOVE) or (rule == _EVEN and mant >= _EVEN_FROM) \
            or (rule == _CEIL and mant > 0):
        s += 1
    return min(max(s + E8M0_BIAS, min_byte), E8M0_MAX_FINITE)


@numba.njit(cache=True, inline="always")
def _finite_abs_max(bits, base, n):
    """Largest |x| of bits[base:base+n] as fp32 bits (integer order = value order), or -1 if any is NaN/Inf.

    Non-finite values are detected from the exponent field, not by comparison (NaN compares false).
    """
    amax = 0
    for i in range(n):  # no early exit: the branch-free loop vectorizes
        amax = max(amax, bits[base + i] & _ABS_MASK)
    return amax if amax < _EXP_FIELD else -1  # the largest |x| is NaN/Inf iff any is (NaN bits sort above Inf)


@numba.njit(cache=True, parallel=True)
def _mxfp4_kernel(bits, codes, scales, rule, mode, min_byte):
    nblocks = scales.size
    for b in numba.prange(nblocks):
        base = b * MX_BLOCK
        amax = _finite_abs_max(bits, base, MX_BLOCK)
        out = b * (MX_BLOCK // 2)
        if amax < 0:
            scales[b] = E8M0_NAN
            for j in range(MX_BLOCK // 2):
                codes[out + j] = 0
            continue
        byte = min_byte if amax == 0 else _scale_byte(amax, rule, min_byte)
        scales[b] = byte
        shift = byte - E8M0_BIAS
        for j in range(MX_BLOCK // 2):
            lo = _e2m1_code(bits[base + 2 * j], shift, mode)
            hi = _e2m1_code(bits[base + 2 * j + 1], shift, mode)
            codes[out + j] = lo | (hi << 4)


def mxfp4_quantize(x, *, scale_rule: "ScaleRule | str" = "rceil", rounding: "Rounding | str" = "rne",
                   min_scale_byte: int = CANONICAL_MIN_SCALE_BYTE) -> tuple[np.ndarray, np.ndarray]:
    """Numba twin of sim.mxfp4.quantize (same arguments, same bytes)."""
    rule = as_scale_rule(scale_rule)
    rounding = as_rounding(rounding)
    x = _mxfp4.check_quantize_args(x, min_scale_byte)
    bits = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
    codes = np.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=np.uint8)
    scales = np.empty(x.shape[:-1] + (x.shape[-1] // MX_BLOCK,), dtype=np.uint8)
    _mxfp4_kernel(bits, codes.reshape(-1), scales.reshape(-1), _RULE_ID[rule], _ROUND_ID[rounding],
                  int(min_scale_byte))
    return codes, scales


@numba.njit(cache=True, parallel=True)
def _mxfp4_dequant_kernel(codes, scales, out, lut):
    nblocks = scales.size
    for b in numba.prange(nblocks):
        byte = scales[b]
        scale = np.nan if byte == E8M0_NAN else math.ldexp(1.0, np.int64(byte) - E8M0_BIAS)
        for j in range(MX_BLOCK // 2):
            c = codes[b * (MX_BLOCK // 2) + j]
            out[b * MX_BLOCK + 2 * j] = lut[c & 0xF] * scale
            out[b * MX_BLOCK + 2 * j + 1] = lut[c >> 4] * scale


def mxfp4_dequantize(codes, scales, *, dtype=np.float32) -> np.ndarray:
    """Numba twin of sim.mxfp4.dequantize (float32 overflows to ±inf only for |value| >= 2^128)."""
    codes, scales, dtype = _mxfp4.check_dequantize_args(codes, scales, dtype)
    out = np.empty(codes.shape[:-1] + (2 * codes.shape[-1],), dtype=dtype)
    _mxfp4_dequant_kernel(np.ascontiguousarray(codes).reshape(-1), np.ascontiguousarray(scales).reshape(-1),
                          out.reshape(-1), _E2M1_LUT)
    return out


@numba.njit(cache=True, inline="always")
def _e4m3_code(bits, k):
    """e4m3fn code of the finite fp32 pattern `bits` times 2^-k, RNE, saturating to 448."""
    sign = (bits >> _SIGN_SHIFT) << 7
    biased = (bits >> _MANT_BITS) & 0xFF
    if biased == 0:  # fp32 subnormal: |x| < 2^-126 and k >= -22, far below half of 2^-9
        return sign
    e = biased - _F32_BIAS - k
    if e > _FP8_MAX_EXP:
        return sign | E4M3_MAX_CODE
    m = np.int64((bits & _MANT_MASK) | _IMPLICIT)
    if e >= E4M3_MIN_NORMAL_EXP:  # normal: keep 3 of 23 mantissa bits; q in 8..16
        q = _round_shift(m, _E4M3_DROP, _HALF_EVEN)
        code = ((e + E4M3_BIAS) << E4M3_MANTISSA_BITS) + q - 8  # q = 16 carries into the exponent field
    else:  # subnormal: a = m * 2^(e - 23) on the step 2^-9; 0..8 (8 is the smallest normal, 0x08)
        code = _round_shift(m, _E4M3_DROP + E4M3_MIN_NORMAL_EXP - e, _HALF_EVEN)
    return sign | min(code, E4M3_MAX_CODE)  # 0x7F would be 480 (NaN pattern): saturate


@numba.njit(cache=True, parallel=True)
def _fp8_kernel(bits, values, scales, d):
    rows = scales.size
    for r in numba.prange(rows):
        base = r * d
        amax = _finite_abs_max(bits, base, d)
        if amax < 0:
            scales[r] = np.nan
            for i in range(d):
                values[base + i] = E4M3_NAN
            continue
        t = max(amax, _FP8_FLOOR_BITS)  # normal, so exponent and mantissa fields are direct
        k = ((t >> _MANT_BITS) - _F32_BIAS) - _FP8_MAX_EXP
        if (t & _MANT_MASK) > _FP8_MAX_MANT:
            k += 1
        scales[r] = math.ldexp(1.0, k)  # exact in float32: -22 <= k <= 120
        for i in range(d):
            values[base + i] = _e4m3_code(bits[base + i], k)


def fp8_quantize(x) -> tuple[np.ndarray, np.ndarray]:
    """Numba twin of sim.fp8.quantize (same bytes, same scales)."""
    x = _fp8.check_quantize_args(x)
    bits = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
    values = np.empty(x.shape, dtype=np.uint8)
    scales = np.empty(x.shape[:-1], dtype=np.float32)
    _fp8_kernel(bits, values.reshape(-1), scales.reshape(-1), x.shape[-1])
    return values, scales


@numba.njit(cache=True, parallel=True)
def _fp8_dequant_kernel(values, scales, out, lut, d):
    for r in numba.prange(scales.size):
        scale = np.float64(scales[r])
        for i in range(d):
            out[r * d + i] = lut[values[r * d + i]] * scale


def fp8_dequantize(values, scales, *, dtype=np.float32) -> np.ndarray:
    """Numba twin of sim.fp8.dequantize."""
    values, scales, dtype = _fp8.check_dequantize_args(values, scales, dtype)
    out = np.empty(values.shape, dtype=dtype)
    _fp8_dequant_kernel(np.ascontiguousarray(values).reshape(-1), np.ascontiguousarray(scales).reshape(-1),
                        out.reshape(-1), _E4M3_LUT, values.shape[-1])
    return out
