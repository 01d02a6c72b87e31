"""FP8 E4M3FN oracle (DESIGN §1): per-row power-of-two scale, elements RNE and saturating.

Byte layout: values uint8[..., D], one OCP e4m3fn bit pattern per element (bit 7 sign, bits 6..3 exponent with
bias 7, bits 2..0 mantissa; 0x7F/0xFF NaN, no Inf, max 0x7E = 448); scales float32[...], one per row (the K
token, or the (token, head) of Q), equal to 2^k with k the smallest integer such that 448 * 2^k >= max(amax, 1e-4).

Like sim.mxfp4 this is the plain exact reference: the scale exponent comes from np.frexp, elements are encoded by
a nearest-value search over the 127 finite magnitudes with an explicit ties-to-even rule, and x / 2^k is formed
exactly in float64 with np.ldexp.
"""
from __future__ import annotations

import numpy as np

from sim.formats import (
    E4M3_BIAS,
    E4M3_MANTISSA_BITS,
    E4M3_MAX,
    E4M3_MAX_CODE,
    E4M3_NAN,
    E4M3_SIGN_BIT,
    E4M3_SUBNORMAL_STEP,
    FP8_AMAX_FLOOR,
    as_float32_input,
    check_output_dtype,
)

_EXP_MASK, _MANT_MASK = 0xF, (1 << E4M3_MANTISSA_BITS) - 1


def _decode_table() -> np.ndarray:
    """float64 value of every byte 0..255, from the format definition."""
    b = np.arange(256)
    sign = np.where(b & E4M3_SIGN_BIT, -1.0, 1.0)
    e = (b >> E4M3_MANTISSA_BITS) & _EXP_MASK
    m = b & _MANT_MASK
    mag = np.where(e == 0, m * E4M3_SUBNORMAL_STEP,
                   np.ldexp(1.0 + m / (1 << E4M3_MANTISSA_BITS), e - E4M3_BIAS))
    mag = np.where((b & 0x7F) == E4M3_NAN, np.nan, mag)
    return sign * mag


_DECODE = _decode_table()
_MAGNITUDES = _DECODE[:E4M3_MAX_CODE + 1]  # codes 0x00..0x7E, strictly increasing
assert np.all(np.diff(_MAGNITUDES) > 0) and _MAGNITUDES[-1] == E4M3_MAX


def decode_e4m3(bits) -> np.ndarray:
    """uint8 e4m3fn bit patterns (any shape) -> float64 values (0x7F/0xFF -> NaN, 0x80 -> -0.0)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint8:
        raise ValueError(f"bits must be uint8 e4m3fn bit patterns, got {bits.dtype}")
    return _DECODE[bits]


def encode_e4m3(v) -> np.ndarray:
    """float64 values (any shape) -> uint8 e4m3fn bit patterns: round to nearest, ties to even, saturating.

    Nearest-value search: the two finite magnitudes around |v| are found by binary search and |v| is compared
    with their midpoint (exact in float64: magnitudes have 4 significant bits); at the midpoint the code with
    mantissa bit 0 wins. |v| > 448 (and ±inf) saturate to 448 (0x7E); NaN -> 0x7F; negative values, including
    -0.0 and values rounding to 0, get the sign bit 0x80.
    """
    v = np.asarray(v, dtype=np.float64)
    a = np.abs(v)
    nan = np.isnan(a)
    a = np.where(nan, 0.0, np.minimum(a, E4M3_MAX))
    hi = np.searchsorted(_MAGNITUDES, a, side="left")  # first magnitude >= a
    lo = np.maximum(hi - 1, 0)
    mid = (_MAGNITUDES[lo] + _MAGNITUDES[hi]) / 2
    even_hi = (hi & 1) == 0
    take_hi = (a == _MAGNITUDES[hi]) | (a > mid) | ((a == mid) & even_hi)
    code = np.where(take_hi, hi, lo).astype(np.uint8)
    code |= np.where(np.signbit(v), E4M3_SIGN_BIT, 0).astype(np.uint8)
    return np.where(nan, E4M3_NAN, code).astype(np.uint8)


def scale_exponent(amax) -> np.ndarray:
    """k = the smallest integer with 448 * 2^k >= max(amax, 1e-4), exactly (float32 or float64 amax >= 0).

    With t = max(amax, 1e-4) = f * 2^e (np.frexp, 0.5 <= f < 1) and 448 = 7/8 * 2^9: 2^(k-e+9) >= f / (7/8),
    whose right side lies in [4/7, 8/7): k = e - 9 if f <= 7/8, else e - 8. Returns int32, same shape.
    """
    amax = np.asarray(amax)
    if amax.dtype not in (np.float32, np.float64):
        raise ValueError(f"amax must be float32 or float64, got {amax.dtype}")
    if not (np.isfinite(amax).all() and (amax >= 0).all()):
        raise ValueError("amax must be finite and >= 0 (rows with NaN/Inf get a NaN scale in quantize())")
    f, e = np.frexp(np.maximum(amax.astype(np.float64), FP8_AMAX_FLOOR))
    return (e - 9 + (f > 0.875)).astype(np.int32)


def check_quantize_args(x) -> np.ndarray:
    """Shared argument checks of the FP8 quantizers: x as float32 [..., D], D >= 1."""
    x = as_float32_input(x, "x")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must have shape [..., D] with D >= 1, got {x.shape}")
    return x


def quantize(x) -> tuple[np.ndarray, np.ndarray]:
    """Quantize rows of x [..., D] (float32, float16 or uint16 bf16 bit patterns) to FP8 E4M3FN.

    Returns (values uint8[..., D] e4m3fn bit patterns, scales float32[...]) with scale = 2^k per row
    (scale_exponent of the row's absolute maximum) and values = encode_e4m3(x / scale). A row with any NaN/±Inf
    gets scale NaN and all value bytes 0x7F.
    """
    x = check_quantize_args(x)
    finite_elem = np.isfinite(x)
    finite = finite_elem.all(axis=-1)
    x = np.where(finite_elem, x, np.float32(0))  # NaN rows are overwritten below; also keeps sNaN out of casts
    amax = np.abs(x).max(axis=-1)
    k = scale_exponent(amax)
    values = encode_e4m3(np.ldexp(x.astype(np.float64), -k[..., None]))  # exact division by 2^k
    values[~finite] = E4M3_NAN
    scales = np.where(finite, np.ldexp(np.float32(1), k), np.float32(np.nan)).astype(np.float32)
    return values, scales


def check_dequantize_args(values, scales, dtype) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    """Shared argument checks of the FP8 dequantizers."""
    values, scales, dtype = np.asarray(values), np.asarray(scales), check_output_dtype(dtype)
    if values.dtype != np.uint8:
        raise ValueError(f"values must be uint8 e4m3fn bit patterns, got {values.dtype}")
    if scales.dtype != np.float32:
        raise ValueError(f"scales must be float32, got {scales.dtype}")
    if values.ndim == 0 or values.shape[:-1] != scales.shape:
        raise ValueError(f"values [..., D] and scales [...] must agree, got values {values.shape}, "
                         f"scales {scales.shape}")
    return values, scales, dtype


def dequantize(values, scales, *, dtype=np.float32) -> np.ndarray:
    """FP8 (values uint8[..., D], scales float32[...]) -> dtype[..., D] = decode_e4m3(values) * scale.

    The float64 product is exact (4 + 24 significant bits); float32 rounds it once, like an fp32 multiply (±inf
    past the fp32 range: a row with amax >= 1.9375 * 2^127 gets k = 120 and its maximum rounds up to 256 * 2^120
    = 2^128). A NaN scale or a 0x7F/0xFF byte gives NaN.
    """
    values, scales, dtype = check_dequantize_args(values, scales, dtype)
    out = decode_e4m3(values) * scales.astype(np.float64)[..., None]
    with np.errstate(over="ignore"):
        return out.astype(dtype)
