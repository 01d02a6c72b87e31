"""The one table of number-format parameters (DESIGN §1). Everything in sim/ imports its constants from here.

Formats:
  E2M1   4-bit element of MXFP4: 1 sign bit (bit 3), 2 exponent bits, 1 mantissa bit, no Inf/NaN.
  E8M0   8-bit block scale of MXFP4: byte b in 0..254 means 2^(b-127); 255 is NaN.
  E4M3FN 8-bit FP8 element (OCP e4m3fn): bias 7, max 448, no Inf, 0x7F/0xFF NaN.
"""
from __future__ import annotations

import enum

import numpy as np

# ---------------------------------------------------------------------------------------------- E2M1 (FP4)
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # code 0..7
E2M1_SIGN_BIT = 0x8                # bit 3: code 8 is -0.0
E2M1_MAX = 6.0                     # largest magnitude, code 7
E2M1_EMAX = 2                      # exponent of E2M1_MAX: 6 = 1.5 * 2^2
E2M1_NUM_CODES = 16

#: value of every code 0..15 as float64 (code 8 is -0.0).
E2M1_VALUES = np.array(E2M1_MAGNITUDES + tuple(-m for m in E2M1_MAGNITUDES), dtype=np.float64)

# ---------------------------------------------------------------------------------------------- E8M0 (scale)
E8M0_BIAS = 127                    # byte b means 2^(b - 127)
E8M0_NAN = 0xFF                    # 255: the block decodes as NaN
E8M0_MAX_FINITE = 254              # 2^127

# ---------------------------------------------------------------------------------------------- MXFP4 block
MX_BLOCK = 32                      # elements per E8M0 scale, along the head dimension
CANONICAL_MIN_SCALE_BYTE = 1       # byte 0 is never written by the canonical writer (see DESIGN §1)

# ---------------------------------------------------------------------------------------------- FP8 E4M3FN
E4M3_MAX = 448.0                   # 0x7E = 1.75 * 2^8
E4M3_NAN = 0x7F                    # the positive NaN pattern; 0xFF is the negative one
E4M3_SIGN_BIT = 0x80
E4M3_MAX_CODE = 0x7E               # 448, the largest finite magnitude; codes 0x00..0x7E increase in value
E4M3_BIAS = 7
E4M3_MANTISSA_BITS = 3
E4M3_MIN_NORMAL_EXP = -6           # 2^-6; subnormals are k * 2^-9, k = 1..7
E4M3_SUBNORMAL_STEP = 2.0 ** -9
FP8_AMAX_FLOOR = 1e-4              # per-row scale is computed from max(amax, 1e-4)


class ScaleRule(str, enum.Enum):
    """How the E8M0 block scale exponent s is chosen from the fp32 block maximum amax = m * 2^E (1 <= m < 2).

    The byte written is clamp(s + 127, min_scale_byte, 254). Each member's value is its name on the CLI/API.
    """

    FLOOR = "floor"
    """s = E - 2 (OCP MX v1.0 sample algorithm). Values with m > 1.5 at the block max clip to 6."""
    RCEIL = "rceil"
    """s = E - 2, plus 1 if m > 1.5: the smallest 2^s with amax <= 6 * 2^s. The canonical writer."""
    EVEN = "even"
    """s = E - 2, plus 1 if m >= 1.75 (AITER Triton / Quark "even"; defined here without their E=127 overflow)."""
    CEIL = "ceil"
    """s = E - 2, plus 1 if m > 1 (torchao CEIL)."""


class Rounding(str, enum.Enum):
    """How an element x * 2^-s is rounded to the nearest E2M1 value (magnitudes above 6 saturate to 6)."""

    RNE = "rne"
    """Round to nearest; a tie goes to the code whose mantissa bit (bit 0) is 0. Canonical."""
    TIES_AWAY = "ties_away"
    """Round to nearest; a tie goes to the larger magnitude (microxcaling's default)."""
    TIES_TO_ZERO = "ties_to_zero"
    """Round to nearest; a tie goes to the smaller magnitude (bucketize-style references)."""


def parse_choice(enum_cls: type[enum.Enum], value, name: str):
    """`value` (a member or its string value) as a member of the str-valued `enum_cls`; ValueError names the
    argument `name` and lists the valid choices."""
    try:
        return enum_cls(value)
    except ValueError:
        raise ValueError(f"{name} must be one of {[m.value for m in enum_cls]}, got {value!r}") from None


def as_scale_rule(rule: "ScaleRule | str") -> ScaleRule:
    """Parse a scale rule name; ValueError lists the valid choices."""
    return parse_choice(ScaleRule, rule, "scale_rule")


def as_rounding(rounding: "Rounding | str") -> Rounding:
    """Parse an element rounding name; ValueError lists the valid choices."""
    return parse_choice(Rounding, rounding, "rounding")


def check_output_dtype(dtype) -> np.dtype:
    """The `dtype` argument of the dequantizers: np.float32 (what a kernel reads) or np.float64 (exact)."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = None
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be np.float32 or np.float64 (exact), got {dtype}")
    return dtype


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 (exact: bf16 is the top half of an fp32)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise ValueError(f"bf16 bit patterns must be uint16, got {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


def as_float32_input(x, name: str = "x") -> np.ndarray:
    """Accept float32, float16 or uint16 (bfloat16 bit patterns) and return exact float32 values (same shape).

    float64 is refused: the contract quantizes from fp32 values, and a silent rounding to fp32 would hide the
    caller's mistake. Convert explicitly with .astype(np.float32).
    """
    x = np.asarray(x)
    if x.dtype == np.float32:
        return x
    if x.dtype == np.float16:
        return x.astype(np.float32)
    if x.dtype == np.uint16:
        return bf16_bits_to_float32(x)
    raise ValueError(
        f"{name}: input dtype must be float32, float16 or uint16 (bfloat16 bit patterns), got {x.dtype}; "
        "convert with .astype(np.float32) (bfloat16 tensors: .view(torch.uint16).numpy())"
    )
