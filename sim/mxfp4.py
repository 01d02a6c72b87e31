"""MXFP4 oracle (DESIGN §1): E2M1 elements in blocks of 32 with one E8M0 scale byte per block.

This module is the reference every kernel and sim.fast_codecs is judged against, so it uses the plainest exact
algorithms rather than bit tricks:
  * scale exponents come from np.frexp on the fp32 block maximum (exact, subnormals normalized, no log2);
  * an element is encoded by a nearest-value search over the E2M1 magnitudes with an explicit tie rule;
  * element values x * 2^-s are formed in float64 with np.ldexp, which is exact for every fp32 x and every
    s in -127..127 (in fp32 the product can fall into the subnormal range at clamped scales and round).

Byte layout per row of D elements (D % 32 == 0):
  codes  uint8[D/2]:  byte j holds element 2j in bits 0..3 (low nibble) and element 2j+1 in bits 4..7.
                      A nibble is an E2M1 code: bit 3 sign, bits 2..1 exponent, bit 0 mantissa.
  scales uint8[D/32]: byte g is the E8M0 scale of elements 32g .. 32g+31; value 2^(byte-127), 255 = NaN block.
"""
from __future__ import annotations

import numpy as np

from sim.formats import (
    CANONICAL_MIN_SCALE_BYTE,
    E2M1_EMAX,
    E2M1_MAGNITUDES,
    E2M1_MAX,
    E2M1_NUM_CODES,
    E2M1_SIGN_BIT,
    E2M1_VALUES,
    E8M0_BIAS,
    E8M0_MAX_FINITE,
    E8M0_NAN,
    MX_BLOCK,
    Rounding,
    ScaleRule,
    as_float32_input,
    as_rounding,
    as_scale_rule,
    check_output_dtype,
)

_MAGNITUDES = np.array(E2M1_MAGNITUDES, dtype=np.float64)  # code 0..7, increasing
_CODE_IDS = np.arange(len(E2M1_MAGNITUDES))
#: preference among the (at most two, adjacent) nearest magnitudes, highest wins; indexed by code 0..7.
_TIE_PREFERENCE = {
    Rounding.RNE: 1 - (_CODE_IDS & 1),          # mantissa bit 0 wins
    Rounding.TIES_AWAY: _CODE_IDS,               # larger magnitude wins
    Rounding.TIES_TO_ZERO: -_CODE_IDS,           # smaller magnitude wins
}
_ENCODE_CHUNK = 1 << 18  # elements per nearest-value search step (bounds the [chunk, 8] distance table)


def _bump(f: np.ndarray, rule: ScaleRule) -> np.ndarray:
    """The rule's +1 on s = E - 2, from the frexp mantissa f = m / 2 in [0.5, 1) (exact comparisons)."""
    if rule is ScaleRule.FLOOR:
        return np.zeros(f.shape, dtype=np.int32)
    if rule is ScaleRule.RCEIL:
        return (f > 0.75).astype(np.int32)      # m > 1.5
    if rule is ScaleRule.EVEN:
        return (f >= 0.875).astype(np.int32)    # m >= 1.75
    return (f > 0.5).astype(np.int32)           # CEIL: m > 1


def scale_exponent(amax, rule: "ScaleRule | str") -> np.ndarray:
    """Unclamped E8M0 scale exponent s of each block maximum (DESIGN §1 table), exactly.

    amax: float32 array (any shape) of positive finite block maxima; subnormals are normalized
    (amax = m * 2^E with 1 <= m < 2 and E below -126). Returns int32 s of the same shape; the byte a writer stores
    is clamp(s + 127, min_scale_byte, 254). Zero and non-finite maxima have no exponent (quantize() handles those
    blocks) and raise ValueError.
    """
    rule = as_scale_rule(rule)
    amax = np.asarray(amax)
    if amax.dtype != np.float32:
        raise ValueError(f"amax must be float32 (the fp32 block maximum), got {amax.dtype}")
    if not (np.isfinite(amax).all() and (amax > 0).all()):
        raise ValueError("amax must be positive and finite; zero and NaN/Inf blocks have no scale exponent")
    f, e = np.frexp(amax)  # exact: amax = f * 2^e, 0.5 <= f < 1 (also for subnormals)
    return (e.astype(np.int32) - 1 - E2M1_EMAX + _bump(f, rule)).astype(np.int32)


def decode_e2m1(codes) -> np.ndarray:
    """E2M1 codes 0..15 (any integer dtype, any shape) -> float64 values (code 8 is -0.0)."""
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes must be an integer array of E2M1 codes 0..15, got {codes.dtype}")
    if codes.size and (codes.min() < 0 or codes.max() >= E2M1_NUM_CODES):
        raise ValueError("codes must lie in 0..15 (one unpacked E2M1 code per element); use unpack_nibbles first")
    return E2M1_VALUES[codes]


def encode_e2m1(v, rounding: "Rounding | str" = "rne") -> np.ndarray:
    """Round float64 values to E2M1 codes 0..15 (uint8, same shape, one code per element).

    Nearest-value search over the 8 magnitudes of |v|; a tie between two neighbours is broken by `rounding`
    (rne: the code with mantissa bit 0; ties_away: the larger; ties_to_zero: the smaller). |v| > 6 (including
    ±inf) saturates to 6. The sign bit 0x8 is set for every negative v, including -0.0 and values rounding to 0.
    NaN raises ValueError (quantize() maps NaN blocks to byte 255 before encoding).

    The float64 distances |a - m| decide exactly: for a <= 6 the subtraction is exact unless a < m/2, and such an
    m is then farther than 0 even after rounding (fl is monotone and m - a > m/2 > a), so it never wins or ties.
    """
    rounding = as_rounding(rounding)
    v = np.asarray(v, dtype=np.float64)
    if np.isnan(v).any():
        raise ValueError("v must not contain NaN: E2M1 has no NaN (a NaN block is marked by scale byte 255)")
    flat = v.reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint8)
    preference = _TIE_PREFERENCE[rounding]
    for lo in range(0, flat.size, _ENCODE_CHUNK):
        a = np.abs(flat[lo:lo + _ENCODE_CHUNK])
        saturated = a > E2M1_MAX
        a = np.where(saturated, E2M1_MAX, a)  # a huge a would make all distances round equal
        dist = np.abs(a[:, None] - _MAGNITUDES[None, :])
        nearest = dist == dist.min(axis=1, keepdims=True)
        score = np.where(nearest, preference[None, :], np.iinfo(np.int64).min)
        code = np.argmax(score, axis=1).astype(np.uint8)
        out[lo:lo + _ENCODE_CHUNK] = code | np.where(np.signbit(flat[lo:lo + _ENCODE_CHUNK]), E2M1_SIGN_BIT, 0)
    return out.reshape(v.shape)


def pack_nibbles(codes) -> np.ndarray:
    """uint8 codes 0..15 [..., D] (D even) -> uint8 [..., D/2]; element 2j in the low nibble of byte j."""
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise ValueError(f"codes must be uint8, got {codes.dtype}")
    if codes.ndim == 0 or codes.shape[-1] % 2:
        raise ValueError(f"codes must have an even last dimension, got shape {codes.shape}")
    if codes.size and codes.max() >= E2M1_NUM_CODES:
        raise ValueError("codes must lie in 0..15 (4-bit E2M1 codes) to be packed")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed) -> np.ndarray:
    """uint8 [..., D/2] -> uint8 codes [..., D]; the low nibble of byte j is element 2j, the high one 2j+1."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim == 0:
        raise ValueError(f"packed codes must be a uint8 array of rank >= 1, got {packed.dtype} rank {packed.ndim}")
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = packed & 0xF
    out[..., 1::2] = packed >> 4
    return out


def check_quantize_args(x, min_scale_byte) -> np.ndarray:
    """Shared argument checks of the MXFP4 quantizers: returns x as float32 [..., D] (D % 32 == 0)."""
    x = as_float32_input(x, "x")
    if x.ndim == 0 or x.shape[-1] == 0 or x.shape[-1] % MX_BLOCK:
        raise ValueError(f"x must have a last dimension that is a positive multiple of {MX_BLOCK}, got shape "
                         f"{x.shape}; pad the head dimension to a multiple of {MX_BLOCK}")
    if isinstance(min_scale_byte, bool) or not isinstance(min_scale_byte, (int, np.integer)) \
            or not 0 <= min_scale_byte <= E8M0_MAX_FINITE:
        raise ValueError(f"min_scale_byte must be an integer in 0..{E8M0_MAX_FINITE}, got {min_scale_byte!r}")
    return x


def quantize(x, *, scale_rule: "ScaleRule | str" = "rceil", rounding: "Rounding | str" = "rne",
             min_scale_byte: int = CANONICAL_MIN_SCALE_BYTE) -> tuple[np.ndarray, np.ndarray]:
    """Quantize x [..., D] (float32, float16 or uint16 bf16 bit patterns; D % 32 == 0) to MXFP4.

    Returns (codes uint8[..., D/2], scales uint8[..., D/32]) in the byte layout of the module docstring.
    Per block of 32: any NaN/±Inf -> byte 255, codes 0; all zeros -> byte min_scale_byte, codes 0x0/0x8 by sign;
    else byte = clamp(s + 127, min_scale_byte, 254) with s = scale_exponent(amax, scale_rule), and each element
    is encode_e2m1(x * 2^-(byte - 127), rounding) (the clamped scale is the one the elements are encoded with).
    """
    rule = as_scale_rule(scale_rule)
    rounding = as_rounding(rounding)
    x = check_quantize_args(x, min_scale_byte)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // MX_BLOCK, MX_BLOCK))
    finite = np.isfinite(blocks).all(axis=-1)                # NaN must be detected explicitly, max() skips nothing
    amax = np.where(finite, np.abs(blocks).max(axis=-1), np.float32(0))
    nonzero = amax > 0
    s = scale_exponent(np.where(nonzero, amax, np.float32(1)), rule)
    scales = np.clip(s + E8M0_BIAS, min_scale_byte, E8M0_MAX_FINITE)
    scales = np.where(nonzero, scales, min_scale_byte)
    scales = np.where(finite, scales, E8M0_NAN).astype(np.uint8)
    # Exact in float64 for every fp32 element and clamped exponent (-127..127).
    shift = np.where(finite, scales.astype(np.int32) - E8M0_BIAS, 0)[..., None]
    v = np.ldexp(np.where(finite[..., None], blocks, np.float32(0)).astype(np.float64), -shift)
    codes = encode_e2m1(v, rounding).reshape(x.shape)
    return pack_nibbles(codes), scales


def check_dequantize_args(codes, scales, dtype) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    """Shared argument checks of the MXFP4 dequantizers."""
    codes, scales, dtype = np.asarray(codes), np.asarray(scales), check_output_dtype(dtype)
    if codes.dtype != np.uint8 or scales.dtype != np.uint8:
        raise ValueError(f"codes and scales must be uint8, got codes {codes.dtype}, scales {scales.dtype}")
    if codes.ndim == 0 or scales.ndim == 0 or codes.shape[:-1] != scales.shape[:-1] \
            or codes.shape[-1] != scales.shape[-1] * (MX_BLOCK // 2):
        raise ValueError(f"codes [..., D/2] and scales [..., D/32] must agree (codes.shape[-1] == 16 * "
                         f"scales.shape[-1], same leading dims), got codes {codes.shape}, scales {scales.shape}")
    return codes, scales, dtype


def dequantize(codes, scales, *, dtype=np.float32) -> np.ndarray:
    """MXFP4 (codes uint8[..., D/2], scales uint8[..., D/32]) -> dtype[..., D] (float32 or float64).

    float64 is exact. float32 rounds nothing either (every value is 1..2 significant bits times 2^-128..2^129)
    except that |value| >= 2^128 overflows to ±inf: byte 253 with |code value| >= 4, byte 254 with >= 2. A writer
    produces such blocks only from amax >= 1.75 * 2^127 (byte 253; the maximum 2m >= 3.5 rounds to 4 under rne and
    ties_away, so DESIGN §1's "> 1.75 * 2^127" is exact only for ties_to_zero). Byte 255: NaN for the whole block.
    """
    codes, scales, dtype = check_dequantize_args(codes, scales, dtype)
    values = decode_e2m1(unpack_nibbles(codes))
    values = values.reshape(scales.shape + (MX_BLOCK,))
    exponent = scales.astype(np.int32) - E8M0_BIAS
    out = np.ldexp(values, exponent[..., None])
    out[scales == E8M0_NAN] = np.nan
    with np.errstate(over="ignore"):  # the documented ±inf for |value| >= 2^128
        return out.reshape(codes.shape[:-1] + (2 * codes.shape[-1],)).astype(dtype)
