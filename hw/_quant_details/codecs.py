"""Exact encoders on fp32 bit patterns (DESIGN §1), shared by every quantizing kernel.

Everything here is integer arithmetic on the int32 bit pattern of an fp32 value (and exact conversions of integers
below 2^24 to fp32): no log2, no division and no floating-point multiply, so the result is the same on every
backend whatever its denormal mode (AMD kernels may flush fp32 subnormals, libdevice calls on NVIDIA do) and at
every scale exponent, including the extremes where a power of two 2^-s would leave the fp32 range. The one
exception is e4m3_byte_hw, the hardware E4M3 conversion the FP8 quantizers take on NVIDIA GPUs that have one
(measured: docs/perf/h200-prefill-ablation.md); its docstring says why the bytes are the same, and the GPU tests
compare them with sim/.

An fp32 magnitude with bits `a` (sign cleared) is written as M * 2^(be - 150), where be = max(a >> 23, 1) is the
biased exponent (subnormals use 1) and M = mantissa field | implicit bit (2^23, normals only) < 2^24.
A value v = |x| * 2^-s then has v = M * 2^(ev - 23) with ev = be - 127 - s (for a normal x, ev = floor(log2 v)).
Rounding v to a grid of step 2^k is a right shift of M by n = k - ev + 23 with round-to-nearest-even (E4M3);
E2M1's eight values are found by comparing |x|'s bits with its rounding boundaries scaled by 2^s instead.
"""
import triton
import triton.language as tl

from .._constant import Constant

F32_SIGN_MASK = Constant(0x7FFFFFFF)    # clears the sign bit
F32_INF_BITS = Constant(0x7F800000)     # abs bits >= this: Inf or NaN
F32_MANT_MASK = Constant(0x7FFFFF)
F32_IMPLICIT_BIT = Constant(0x800000)
F32_BIAS = Constant(127)
F32_MANT_BITS = Constant(23)
F32_QNAN_BITS = Constant(0x7FC00000)    # the NaN numpy writes (np.float32("nan"))
MAX_SHIFT = Constant(25)                # M < 2^24, so M >> 25 rounds to 0 without overflowing 1 << n

# Scale rules (DESIGN §1; ids shared with hw/quant.py): the exponent s = E - 2 is bumped by one when the block
# maximum's mantissa field f (m = 1 + f / 2^23) is above the rule's threshold.
RULE_FLOOR = Constant(0)   # never
RULE_RCEIL = Constant(1)   # m > 1.5
RULE_EVEN = Constant(2)    # m >= 1.75
RULE_CEIL = Constant(3)    # m > 1
RCEIL_F = Constant(0x400000)  # f of m = 1.5
EVEN_F = Constant(0x600000)   # f of m = 1.75

E2M1_EMAX = Constant(2)       # 6 = 1.5 * 2^2
# fp32 bits of E2M1's rounding boundaries (e2m1_code)
E2M1_B025 = Constant(0x3E800000)   # 0.25
E2M1_B075 = Constant(0x3F400000)   # 0.75
E2M1_B125 = Constant(0x3FA00000)   # 1.25
E2M1_B175 = Constant(0x3FE00000)   # 1.75
E2M1_B250 = Constant(0x40200000)   # 2.5
E2M1_B350 = Constant(0x40600000)   # 3.5
E2M1_B500 = Constant(0x40A00000)   # 5
E2M1_SIGN = Constant(8)
E8M0_BIAS = Constant(127)
E8M0_MIN_BYTE = Constant(1)   # canonical writer: byte 0 is never written
E8M0_MAX_BYTE = Constant(254)
E8M0_NAN = Constant(255)

E4M3_MIN_EXP = Constant(-6)   # smallest normal exponent; subnormal step 2^-9
E4M3_MANT_BITS = Constant(3)
E4M3_MAX_BITS = Constant(0x7E)  # 448
E4M3_NAN = Constant(0x7F)
E4M3_SIGN = Constant(0x80)
E4M3_MAX_EXP = Constant(8)    # 448 = 1.75 * 2^8
E4M3_MAX_F = Constant(0x600000)  # f of 1.75
# fp32(1e-4): the per-row scale uses max(amax, 1e-4). sim compares with the float64 1e-4; both give k = -22 for
# any amax below them (448 * 2^-23 < fp32(1e-4) < 1e-4 < 448 * 2^-22), so the scales agree.
FP8_AMAX_FLOOR_BITS = Constant(0x38D1B717)


@triton.jit
def abs_bits(x):
    """fp32 tensor -> (int32 bits with the sign cleared, bool sign). -0.0 has sign True."""
    bits = x.to(tl.int32, bitcast=True)
    return bits & F32_SIGN_MASK, bits < 0


@triton.jit
def _mantissa_and_exponent(a):
    """abs bits -> (M, be): |x| = M * 2^(be - 150), M < 2^24 (see module docstring)."""
    e_field = a >> F32_MANT_BITS
    m = (a & F32_MANT_MASK) | tl.where(e_field > 0, F32_IMPLICIT_BIT, 0)
    return m, tl.maximum(e_field, 1)


@triton.jit
def _round_shift_rne(m, n):
    """round(m / 2^n) to nearest, ties to even; m >= 0. n is clamped to 1..MAX_SHIFT (callers that saturate
    compute a shift out of that range for lanes whose result they replace; the clamp keeps every shift defined)."""
    n = tl.minimum(tl.maximum(n, 1), MAX_SHIFT)
    q = m >> n
    rem = m - (q << n)
    half = 1 << (n - 1)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    return q + up.to(tl.int32)


@triton.jit
def e8m0_scale_byte(amax_bits, RULE: tl.constexpr):
    """abs bits of a finite block maximum -> canonical E8M0 byte clamp(s + 127, 1, 254) (int32).

    Subnormal or zero amax gives E <= -127, so s <= -128 under every rule and the byte clamps to 1: the rule's
    mantissa test only matters for normal amax, where E = (bits >> 23) - 127 exactly.
    """
    f = amax_bits & F32_MANT_MASK
    if RULE == RULE_FLOOR:
        bump = tl.zeros_like(f)
    elif RULE == RULE_RCEIL:
        bump = (f > RCEIL_F).to(tl.int32)
    elif RULE == RULE_EVEN:
        bump = (f >= EVEN_F).to(tl.int32)
    else:
        tl.static_assert(RULE == RULE_CEIL, "unknown scale rule id")
        bump = (f > 0).to(tl.int32)
    s_plus_bias = (amax_bits >> F32_MANT_BITS) - F32_BIAS - E2M1_EMAX + bump + E8M0_BIAS
    return tl.minimum(tl.maximum(s_plus_bias, E8M0_MIN_BYTE), E8M0_MAX_BYTE)


@triton.jit
def _boundary_bits(b_bits: tl.constexpr, s):
    """int32 bits of the fp32 b * 2^s, for the bits b_bits of one of E2M1's rounding boundaries b (0.25 .. 5) and a
    scale exponent -126 <= s <= 126: exact (the product has at most 3 significant bits and lies above 2^-149), a
    subnormal where it falls below 2^-126 (only 0.25 and 0.75 can, by at most two binades), and for 5 * 2^126 (past
    the largest fp32) the bits above every finite value's."""
    e_field: tl.constexpr = b_bits >> F32_MANT_BITS
    # the tensor on the left: triton 3.8's interpreter cannot take a constexpr + tensor as a later operand
    normal = (s << F32_MANT_BITS) + b_bits
    if e_field > F32_BIAS - 1:   # b >= 1: b * 2^-126 is normal
        return normal
    else:
        # below 2^-126: the significand shifted right by 1 - (e_field + s), 1 or 2 binades (exact: its low bits are 0)
        significand: tl.constexpr = (b_bits & F32_MANT_MASK) | F32_IMPLICIT_BIT
        shift = tl.full([], 1 - e_field, tl.int32) - s   # a tensor, not 1 - e_field - s: triton 3.8's interpreter
        return tl.where(s + e_field >= 1, normal, significand >> tl.minimum(tl.maximum(shift, 1), 2))


@triton.jit
def e2m1_code(a, negative, s):
    """Code 0..15 (int32) of x * 2^-s rounded to E2M1 (RNE, sign kept on zero).

    a: abs bits of a finite x; s: the scale exponent of x's block (e8m0_scale_byte - 127, -126 <= s <= 126,
    broadcastable), so that v = |x| * 2^-s < 8. The magnitude code is the number of E2M1's rounding boundaries (the
    midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 of the values 0, 0.5, 1, 1.5, 2, 3, 4, 6) that v passes: v > t, or
    v >= t where a tie rounds to the even code above; v in (5, 8) saturates to 7 (6). Found by a search of three
    compares of |x| with the boundaries scaled by 2^s (|x| >= t 2^s exactly when v >= t: both sides are exact fp32
    values, but for 5 * 2^126, past the largest fp32, whose bits lie above every finite value's; _boundary_bits,
    computed once per block in integer arithmetic, so subnormal x and every s in range give the same codes on every
    backend), whose bits order non-negative fp32 values as their magnitudes.
    """
    c2 = a >= _boundary_bits(E2M1_B175, s)                    # code >= 4 (1.75 | 2: a tie rounds up)
    c1 = a >= tl.where(c2, _boundary_bits(E2M1_B350, s), _boundary_bits(E2M1_B075, s))   # 3.5 | 4 or 0.75 | 1: up
    t0 = tl.where(c2, tl.where(c1, _boundary_bits(E2M1_B500, s), _boundary_bits(E2M1_B250, s)),
                  tl.where(c1, _boundary_bits(E2M1_B125, s), _boundary_bits(E2M1_B025, s)))   # ties stay down
    code = c2.to(tl.int32) * 4 + c1.to(tl.int32) * 2 + (a > t0).to(tl.int32)
    return code | tl.where(negative, E2M1_SIGN, 0)


@triton.jit
def fp8_scale_exponent(amax_bits):
    """abs bits of a finite row maximum -> k (int32), the smallest integer with 448 * 2^k >= max(amax, 1e-4).

    With a = max(amax, 1e-4) = m * 2^E (normal): k = E - 8 if m <= 1.75, else E - 7.
    """
    a = tl.maximum(amax_bits, FP8_AMAX_FLOOR_BITS)
    e = (a >> F32_MANT_BITS) - F32_BIAS
    return e - E4M3_MAX_EXP + ((a & F32_MANT_MASK) > E4M3_MAX_F).to(tl.int32)


@triton.jit
def e4m3_byte(a, negative, k):
    """E4M3FN bits (int32 0..255) of x * 2^-k: RNE, saturating to +-448, sign kept on zero. a: abs bits of finite x.

    The grid step is 2^(max(ev, -6) - 3); q steps of it encode as (max(ev, -6) + 6) * 8 + q (the carry of q = 16
    into the exponent and the subnormal range both fall out of this sum).
    """
    m, be = _mantissa_and_exponent(a)
    ev = be - F32_BIAS - k
    ev_n = tl.minimum(tl.maximum(ev, E4M3_MIN_EXP), E4M3_MAX_EXP)
    q = _round_shift_rne(m, ev_n - E4M3_MANT_BITS - ev + F32_MANT_BITS)
    bits = tl.minimum((ev_n - E4M3_MIN_EXP) * 8 + q, E4M3_MAX_BITS)
    bits = tl.where(ev > E4M3_MAX_EXP, E4M3_MAX_BITS, bits)
    return bits | tl.where(negative, E4M3_SIGN, 0)


@triton.jit
def e4m3_byte_hw(x, k):
    """e4m3_byte of finite x for the k of fp8_scale_exponent (-22 <= k <= 120), by one multiply and the hardware
    conversion (cvt.rn.satfinite.e4m3x2.f32 on NVIDIA, round to nearest even): 2^-k is a normal fp32, so x * 2^-k
    is exact whenever it is at least 2^-126. Below that, and for every subnormal x (|x| * 2^-k < 2^-104 as k >= -22,
    whether the input is flushed or not), it lies far under half of e4m3's smallest step 2^-9 and both encoders
    give a zero of x's sign. The product is at most 448 in magnitude, so the conversion's saturation never acts.
    Not for the interpreter or AMD, whose conversions are not this one."""
    v = x * pow2_bits(-k).to(tl.float32, bitcast=True)
    return v.to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.int32)


@triton.jit
def pow2_bits(k):
    """int32 bits of the fp32 2^k for -126 <= k <= 127."""
    return (k + F32_BIAS) << F32_MANT_BITS


@triton.jit
def mxfp4_quantize_tile(x, BLOCKS: tl.constexpr, RULE: tl.constexpr):
    """x: fp32 [R, 32 * BLOCKS] -> (packed codes int32 [R, 16 * BLOCKS], E8M0 bytes int32 [R, BLOCKS]).

    Byte j of a row holds element 2j in its low nibble and 2j + 1 in its high nibble. A block with any NaN/Inf
    gets byte 255 and codes 0 (detected from the bits: their abs bits are the largest).
    """
    R: tl.constexpr = x.shape[0]
    a, negative = abs_bits(x)
    a3 = tl.reshape(a, (R, BLOCKS, 32))
    amax = tl.max(a3, axis=2)  # the integer max of the abs bits: the fp32 max of a finite block
    nonfinite = amax >= F32_INF_BITS
    scale = e8m0_scale_byte(amax, RULE)
    # a non-finite block's scale may stand for s = 127, past e2m1_code's range: its codes are replaced below
    s = tl.minimum(scale, E8M0_MAX_BYTE - 1) - E8M0_BIAS
    codes = e2m1_code(a3, tl.reshape(negative, (R, BLOCKS, 32)), s[:, :, None])
    codes = tl.where(nonfinite[:, :, None], 0, codes)
    lo, hi = tl.split(tl.reshape(codes, (R, 16 * BLOCKS, 2)))
    return lo | (hi << 4), tl.where(nonfinite, E8M0_NAN, scale)


@triton.jit
def fp8_quantize_tile(x, HW_E4M3: tl.constexpr):
    """x: fp32 [R, D] -> (E4M3FN bytes int32 [R, D], scale bits int32 [R]: 2^k, or NaN for a non-finite row).

    HW_E4M3: encode with the hardware conversion (e4m3_byte_hw; NVIDIA compute capability >= 8.9), else with the
    integer encoder e4m3_byte. Same bytes."""
    a, negative = abs_bits(x)
    amax = tl.max(a, axis=1)   # the integer max of the abs bits: the fp32 max of a finite row
    nonfinite = amax >= F32_INF_BITS
    k = fp8_scale_exponent(amax)   # in -22 .. 120 for every row (a non-finite one's is not used)
    if HW_E4M3:
        values = e4m3_byte_hw(x, k[:, None])
    else:
        values = e4m3_byte(a, negative, k[:, None])
    values = tl.where(nonfinite[:, None], E4M3_NAN, values)
    return values, tl.where(nonfinite, F32_QNAN_BITS, pow2_bits(k))
