"""sim.mxfp4 / sim.fp8 against independent implementations, byte for byte.

Library versions this was written and checked against: ml_dtypes 0.6.0, torchao 0.18.0 (torch 2.13 CPU).

ml_dtypes (element rounding only):
  * float4_e2m1fn: RNE, saturating; our encode_e2m1 matches on every finite bf16 and fp16 value and on random
    fp32. Inputs are given as float32: ml_dtypes converts float64 through float32 (double rounding, e.g.
    0.25 + 2^-40 -> 0), so float64 probes would test ml_dtypes, not us. NaN: ml_dtypes gives code 8; E2M1 has no
    NaN and our encode rejects it (quantize marks the block with byte 255) — asserted explicitly.
  * float8_e4m3fn: RNE but not saturating (|v| > 464 becomes NaN); we saturate to ±448 (DESIGN §1), so values
    are clipped to ±448 before comparing, and the unclipped difference is asserted to be exactly that. NaN:
    ml_dtypes keeps the sign (0xFF for -NaN); we always write 0x7F — asserted explicitly.
torchao (torchao.prototype.mx_formats.mx_tensor.to_mx, elem dtype torch.float4_e2m1fn_x2, block 32, all four
ScaleCalculationMode values; nibble order: element 2j in the low nibble, like ours). Compared with
sim.mxfp4.quantize(min_scale_byte=0); where torchao departs from DESIGN §1 on purpose, each case is predicted
from our oracle and asserted:
  1. zero/tiny blocks get byte 0 (our min_scale_byte=0 does the same), but their elements are encoded with the
     scale clamped to 2^-126 (FLOOR/CEIL/EVEN: "F32_MIN_NORMAL") or not scaled at all (RCEIL: reciprocal 1.0 at
     byte 0), not with the 2^-127 that byte 0 means.
  2. ±Inf in a block (no NaN): byte 253 (FLOOR/CEIL/EVEN: exponent field 255 read as 2^128) or 254 (RCEIL),
     elements encoded at that scale with Inf saturating to ±6; DESIGN §1 writes 255 and codes 0.
  3. NaN in a block: byte 255 like ours; their codes are unspecified (their fp4 cast has no NaN handling), ours 0.
  4. RCEIL computes ceil(log2(fp32(amax / 6))) in float32: log2 of 2^k * (1 + tiny) rounds to the integer k once
     |k| >= 4, so amax just above 1.5 * 2^E (relative excess <= 2^-17) gets the byte one below the definition
     and its block maximum clips to ±6. (At E = 127 torchao's EVEN does not overflow: its exponent carry reads
     as 2^128, which is the right answer there — asserted equal.)
"""
from __future__ import annotations

import numpy as np
import pytest

from sim import fp8, mxfp4
from tests.sim._assert import assert_exact

ml_dtypes = pytest.importorskip("ml_dtypes")

RULES = ("floor", "rceil", "even", "ceil")


def _all_finite_16bit() -> np.ndarray:
    """Every finite bf16 and fp16 value, as float32."""
    pats = np.arange(1 << 16, dtype=np.uint32)
    bf16 = (pats << 16).view(np.float32)
    fp16 = pats.astype(np.uint16).view(np.float16).astype(np.float32)
    v = np.concatenate([bf16, fp16])
    return v[np.isfinite(v)]


def _random_f32(n: int, seed: int) -> np.ndarray:
    """Random fp32 bit patterns with exponents near the E2M1/E4M3 range, plus uniform values."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    exp = rng.integers(110, 136, n).astype(np.uint32)                      # 2^-17 .. 2^8
    bits = (bits & 0x807FFFFF) | (exp << 23)
    return np.concatenate([bits.view(np.float32), rng.uniform(-8, 8, n).astype(np.float32)])


# ---------------------------------------------------------------------------------------- ml_dtypes: E2M1
def test_e2m1_matches_ml_dtypes_on_every_16bit_value():
    v = _all_finite_16bit()
    theirs = v.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert_exact(mxfp4.encode_e2m1(v.astype(np.float64)), theirs, "encode_e2m1 vs ml_dtypes", context=v)


def test_e2m1_matches_ml_dtypes_on_random_fp32():
    v = _random_f32(1 << 19, seed=1)
    theirs = v.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert_exact(mxfp4.encode_e2m1(v.astype(np.float64)), theirs, "encode_e2m1 vs ml_dtypes", context=v)


def test_e2m1_nan_is_where_ml_dtypes_differs():
    assert np.array([np.nan], np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)[0] == 8
    with pytest.raises(ValueError, match="NaN"):
        mxfp4.encode_e2m1(np.array([np.nan]))
    codes, scales = mxfp4.quantize(np.full((1, 32), np.nan, np.float32))
    assert scales[0, 0] == 255 and not codes.any()


@pytest.mark.parametrize("rule", RULES)
def test_quantized_elements_match_ml_dtypes(rule):
    """quantize's codes = ml_dtypes' e2m1 cast of x * 2^-(byte - 127) (exact in fp32 away from underflow)."""
    rng = np.random.default_rng(RULES.index(rule))
    x = (rng.standard_normal((2048, 64)) * np.exp2(rng.integers(-100, 100, (2048, 1)))).astype(np.float32)
    codes, scales = mxfp4.quantize(x, scale_rule=rule)
    scaled = np.ldexp(x.reshape(2048, 2, 32), -(scales.astype(np.int32) - 127)[..., None]).reshape(2048, 64)
    theirs = mxfp4.pack_nibbles(scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8))
    assert_exact(codes, theirs, f"codes vs ml_dtypes ({rule})", context=x)


# ---------------------------------------------------------------------------------------- ml_dtypes: E4M3
def test_e4m3_matches_ml_dtypes_on_every_16bit_value():
    v = _all_finite_16bit()
    ours = fp8.encode_e4m3(v.astype(np.float64))
    clipped = np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert_exact(ours, clipped, "encode_e4m3 vs ml_dtypes(clip)", context=v)
    # Unclipped, ml_dtypes turns |v| > 464 (beyond the 448/480 midpoint) into NaN; that is the only difference.
    raw = v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    differ = ours != raw
    assert np.array_equal(differ, np.abs(v) > 464), "ml_dtypes differs from us exactly where |v| > 464"
    assert np.all((raw[differ] & 0x7F) == 0x7F) and np.all((ours[differ] & 0x7F) == 0x7E)


def test_e4m3_matches_ml_dtypes_on_random_fp32():
    v = _random_f32(1 << 19, seed=2)
    v = np.concatenate([v, v * np.float32(2.0 ** -12)])                   # the subnormal range too
    clipped = np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert_exact(fp8.encode_e4m3(v.astype(np.float64)), clipped, "encode_e4m3 vs ml_dtypes(clip)", context=v)


def test_e4m3_nan_sign_is_where_ml_dtypes_differs():
    v = np.array([np.nan, -np.nan], np.float32)
    assert_exact(v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8), np.array([0x7F, 0xFF], np.uint8), "ml")
    assert_exact(fp8.encode_e4m3(v.astype(np.float64)), np.array([0x7F, 0x7F], np.uint8), "ours: always 0x7F")


def test_fp8_quantized_values_match_ml_dtypes():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((1024, 128)) * np.exp2(rng.integers(-40, 40, (1024, 1)))).astype(np.float32)
    values, scales = fp8.quantize(x)
    theirs = np.clip(x / scales[:, None], -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert_exact(values, theirs, "fp8 values vs ml_dtypes", context=x)


# ---------------------------------------------------------------------------------------- torchao MX
@pytest.fixture(scope="module")
def torchao_to_mx():
    """(to_mx, ScaleCalculationMode by our rule name); importing torchao is slow and logs missing CUDA kernels."""
    pytest.importorskip("torchao")
    import torch
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    modes = {"floor": ScaleCalculationMode.FLOOR, "rceil": ScaleCalculationMode.RCEIL,
             "even": ScaleCalculationMode.EVEN, "ceil": ScaleCalculationMode.CEIL}

    def run(x: np.ndarray, rule: str):
        t = torch.from_numpy(x).view(torch.bfloat16) if x.dtype == np.uint16 else torch.from_numpy(x)
        scale, data = to_mx(t, torch.float4_e2m1fn_x2, 32, modes[rule])
        return data.view(torch.uint8).numpy().copy(), scale.view(torch.uint8).numpy().copy()

    return run


def _mx_blocks() -> np.ndarray:
    """[N, 128] float32: random blocks over every exponent, threshold mantissas at every E, zero/tiny/NaN/Inf."""
    rng = np.random.default_rng(99)
    exps = rng.integers(-135, 126, (768, 4)).repeat(32, axis=1).astype(np.float64)
    x = (rng.standard_normal((768, 128)) * np.exp2(exps)).astype(np.float32)
    ulp = 2.0 ** -23
    ms = np.array([1.0, 1 + ulp, 1.5, 1.5 + ulp, 1.5 + 7 * ulp, 1.5 + 2.0 ** -17, 1.75 - ulp, 1.75, 2 - ulp])
    grid = np.ldexp(ms[None, :], np.arange(-126, 128)[:, None]).astype(np.float32).reshape(-1)
    grid = np.concatenate([grid, np.zeros((-grid.size) % 4, np.float32)]).reshape(-1, 4)
    thr = np.zeros((grid.shape[0], 128), np.float32)
    thr[:, ::32] = grid                                                   # the block max ...
    thr[:, 1::32] = -grid / np.float32(3)                                 # ... and two other elements
    thr[:, 5::32] = grid / np.float32(5)
    special = np.zeros((8, 128), np.float32)
    special[:, :] = np.linspace(-4, 4, 128, dtype=np.float32)
    special[0, :32] = 0.0
    special[0, 33::2] = -0.0
    special[0, 32::2] = 0.0
    special[1, 7], special[2, 40], special[3, 90] = np.nan, np.inf, -np.inf
    special[4, 100], special[4, 101] = np.inf, np.nan
    special[5] = np.float32(2.0 ** -149) * np.arange(128, dtype=np.float32)   # subnormal blocks
    special[6] = np.linspace(-3e-38, 3e-38, 128, dtype=np.float32)           # byte-0 normal blocks
    special[7] = np.finfo(np.float32).max / np.arange(1, 129, dtype=np.float32)
    return np.concatenate([x, thr, special])


def _encode_at(x_blocks: np.ndarray, byte: np.ndarray) -> np.ndarray:
    """Codes [N, G, 32] of each block encoded at scale 2^(byte - 127) with our oracle (±Inf saturating)."""
    return mxfp4.encode_e2m1(np.ldexp(x_blocks.astype(np.float64), -(byte.astype(np.int32) - 127)[..., None]))


def _torchao_expected(x: np.ndarray, rule: str, their_scales: np.ndarray):
    """Predicted torchao (codes [N, 64], scales [N, 4], mask of blocks whose codes torchao leaves unspecified)."""
    codes, scales = mxfp4.quantize(x, scale_rule=rule, min_scale_byte=0)
    blocks = x.reshape(x.shape[0], 4, 32)
    unpacked = mxfp4.unpack_nibbles(codes).reshape(blocks.shape)
    has_nan = np.isnan(blocks).any(-1)
    has_inf = np.isinf(blocks).any(-1) & ~has_nan
    amax = np.where(np.isfinite(blocks), np.abs(blocks), 0).max(-1)
    # Case 2: Inf blocks.
    scales = np.where(has_inf, 254 if rule == "rceil" else 253, scales)
    # Case 4: RCEIL's float32 log2 rounds k + tiny down to k: byte one lower, block max clipped to 6.
    lowered = (rule == "rceil") & ~has_nan & ~has_inf & (their_scales == scales.astype(np.int32) - 1) & (amax > 0)
    excess = amax / np.ldexp(6.0, their_scales.astype(np.int32) - 127) - 1
    lowered &= (excess > 0) & (excess <= 2.0 ** -17)
    scales = np.where(lowered, scales - 1, scales).astype(np.uint8)
    clean = np.where(np.isnan(blocks), 0, blocks)   # NaN blocks' codes are not predicted (case 3)
    redo = has_inf | lowered
    unpacked = np.where(redo[..., None], _encode_at(clean, scales), unpacked)
    # Case 1: byte-0 blocks are encoded at 2^-126 (FLOOR/CEIL/EVEN) or unscaled (RCEIL, reciprocal 1.0).
    byte0 = (scales == 0) & ~has_nan
    elem_byte = np.full(scales.shape, 127 if rule == "rceil" else 1, np.uint8)
    unpacked = np.where(byte0[..., None], _encode_at(clean, elem_byte), unpacked)
    return mxfp4.pack_nibbles(unpacked.reshape(x.shape)), scales, has_nan, {
        "inf": int(has_inf.sum()), "lowered": int(lowered.sum()), "byte0": int(byte0.sum())}


@pytest.mark.parametrize("rule", RULES)
def test_mxfp4_matches_torchao(torchao_to_mx, rule):
    x = _mx_blocks()
    their_codes, their_scales = torchao_to_mx(x, rule)
    codes, scales, nan_blocks, counts = _torchao_expected(x, rule, their_scales)
    assert_exact(their_scales, scales, f"torchao {rule} scales vs prediction", context=lambda i: f"block "
                 f"{x.reshape(-1, 4, 32)[i[0], i[1]][:4]}...")
    nan_bytes = np.repeat(nan_blocks, 16, axis=1)
    assert_exact(np.where(nan_bytes, 0, their_codes), np.where(nan_bytes, 0, codes), f"torchao {rule} codes")
    assert (scales[nan_blocks] == 255).all() and nan_blocks.sum() == 2
    # Every predicted deviation class was exercised (so the prediction is not vacuous).
    assert counts["inf"] == 2 and counts["byte0"] > 0
    assert (counts["lowered"] > 100) == (rule == "rceil"), counts


@pytest.mark.parametrize("rule", RULES)
def test_mxfp4_matches_torchao_at_e127(torchao_to_mx, rule):
    """At E = 127 (m up to 2 - ulp) torchao's bit tricks agree with the DESIGN §1 definition for all rules.

    (m = 1.5 + 2^-12 stays outside RCEIL's log2 window of case 4, which test_mxfp4_matches_torchao covers.)
    """
    ms = np.array([1.0, 1.25, 1.5, 1.5 + 2.0 ** -12, 1.75 - 2.0 ** -23, 1.75, 1.9, 2 - 2.0 ** -23])
    x = np.zeros((len(ms), 32), np.float32)
    x[:, 0] = np.ldexp(ms, 127).astype(np.float32)
    x[:, 1] = -x[:, 0] / np.float32(2)
    their_codes, their_scales = torchao_to_mx(x, rule)
    codes, scales = mxfp4.quantize(x, scale_rule=rule, min_scale_byte=0)
    assert_exact(their_scales, scales, f"torchao {rule} scales at E=127", context=x[:, 0])
    assert_exact(their_codes, codes, f"torchao {rule} codes at E=127", context=x[:, 0])


@pytest.mark.parametrize("rule", RULES)
def test_mxfp4_matches_torchao_bf16(torchao_to_mx, rule):
    """bf16 input (uint16 bit patterns for us, torch.bfloat16 for torchao): same bytes, same deviation classes."""
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 1 << 16, (512, 128), dtype=np.uint16)
    bits = np.where((bits & 0x7F80) == 0x7F80, bits & 0x807F, bits).astype(np.uint16)   # finite
    their_codes, their_scales = torchao_to_mx(bits, rule)
    as_f32 = (bits.astype(np.uint32) << 16).view(np.float32)                           # exact bf16 values
    want_codes, want_scales, _, _ = _torchao_expected(as_f32, rule, their_scales)
    codes, scales = mxfp4.quantize(bits, scale_rule=rule, min_scale_byte=0)
    assert_exact(codes, mxfp4.quantize(as_f32, scale_rule=rule, min_scale_byte=0)[0], "bf16 input vs fp32 input")
    assert_exact(their_scales, want_scales, f"torchao {rule} bf16 scales")
    assert_exact(their_codes, want_codes, f"torchao {rule} bf16 codes")
