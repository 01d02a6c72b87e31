"""sim.fast_codecs (numba, bit arithmetic) == the numpy oracles sim.mxfp4 / sim.fp8, byte for byte.

The oracles are validated against exact rational references in test_mxfp4.py / test_fp8.py; here the two
independent implementations are compared on random and adversarial inputs: every scale rule and rounding, both
min_scale_byte values, NaN/Inf blocks at every position, zero and -0.0 blocks, subnormal and fp32-max blocks,
every fp32 exponent, fp16 and bf16 inputs, and the argument checks.
"""
from __future__ import annotations

import numpy as np
import pytest

from sim import fast_codecs, fp8, mxfp4
from tests.sim._assert import assert_exact

RULES = ("floor", "rceil", "even", "ceil")
ROUNDINGS = ("rne", "ties_away", "ties_to_zero")


def _mxfp4_inputs() -> np.ndarray:
    """[rows, 128] float32: random blocks at every exponent plus hand-made hostile blocks."""
    rng = np.random.default_rng(2024)
    n = 512
    mant = rng.standard_normal((n, 128))
    exps = rng.integers(-150, 128, (n, 4)).repeat(32, axis=1)             # per-block exponent, all binades
    with np.errstate(over="ignore"):
        x = (mant * np.exp2(exps.astype(np.float64))).astype(np.float32)
    x[~np.isfinite(x)] = np.float32(3e38)
    # random bit patterns (all finite classes, incl. subnormals)
    bits = rng.integers(0, 1 << 32, (64, 128), dtype=np.uint64).astype(np.uint32)
    bits = np.where((bits & 0x7F800000) == 0x7F800000, bits & 0x807FFFFF, bits).astype(np.uint32)
    x = np.concatenate([x, bits.view(np.float32)])
    hostile = np.zeros((40, 128), dtype=np.float32)
    for i, pos in enumerate((0, 1, 17, 31)):
        hostile[i, 32 + pos] = np.nan
        hostile[4 + i, 64 + pos] = np.inf
        hostile[8 + i, 96 + pos] = -np.inf
        hostile[12 + i, pos] = np.float32(np.nan) * -1
    hostile[:16, :] += np.linspace(-7, 7, 128, dtype=np.float32)
    hostile[16, 1::2] = -0.0                                                    # ±0 blocks
    hostile[17] = 2.0 ** -149
    hostile[18] = -np.finfo(np.float32).max
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], dtype=np.float32)
    for j, e in enumerate((-127, -126, -100, 0, 100, 125)):
        hostile[19 + j] = np.ldexp(np.resize(ties, 128) * np.where(np.arange(128) % 3, 1, -1), e)
    for j, m in enumerate((1.0, 1 + 2.0 ** -23, 1.5, 1.5 + 2.0 ** -23, 1.75 - 2.0 ** -23, 1.75, 2 - 2.0 ** -23)):
        hostile[25 + j] = np.float32(np.ldexp(m, 127)) / np.arange(1, 129, dtype=np.float32)
        hostile[32 + j, ::32] = np.float32(np.ldexp(m, -130 + 3 * j))            # subnormal / tiny amax
        hostile[32 + j, 1::32] = -np.float32(np.ldexp(m, -140))
    # Scale-rule thresholds at every exponent: m = 1, 1+ulp, 1.5, 1.5+ulp, 1.75-ulp, 1.75, 2-ulp as block max.
    ulp = 2.0 ** -23
    ms = np.array([1.0, 1 + ulp, 1.5, 1.5 + ulp, 1.75 - ulp, 1.75, 2 - ulp])
    grid = np.ldexp(ms[None, :], np.arange(-149, 128)[:, None]).astype(np.float32).reshape(-1)
    grid = np.concatenate([grid, np.zeros((-grid.size) % 4, np.float32)]).reshape(-1, 4)
    thresholds = np.zeros((grid.shape[0], 128), np.float32)
    thresholds[:, ::32] = grid
    thresholds[:, 9::32] = -grid / np.float32(3)
    thresholds[:, 30::32] = grid / np.float32(5)
    return np.concatenate([x, hostile, thresholds])


X = _mxfp4_inputs()


@pytest.mark.parametrize("min_scale_byte", [0, 1])
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("rule", RULES)
def test_mxfp4_quantize_matches_oracle(rule, rounding, min_scale_byte):
    kw = dict(scale_rule=rule, rounding=rounding, min_scale_byte=min_scale_byte)
    codes, scales = fast_codecs.mxfp4_quantize(X, **kw)
    want_codes, want_scales = mxfp4.quantize(X, **kw)
    assert_exact(scales, want_scales, f"scales {kw}")
    assert_exact(codes, want_codes, f"codes {kw}")


@pytest.mark.parametrize("min_scale_byte", [100, 254])
def test_mxfp4_large_min_scale_byte_matches_oracle(min_scale_byte):
    for rule in RULES:
        kw = dict(scale_rule=rule, min_scale_byte=min_scale_byte)
        codes, scales = fast_codecs.mxfp4_quantize(X, **kw)
        want_codes, want_scales = mxfp4.quantize(X, **kw)
        assert_exact(scales, want_scales, f"scales {kw}")
        assert_exact(codes, want_codes, f"codes {kw}")


@pytest.mark.parametrize("rule", RULES)
def test_mxfp4_half_precision_inputs(rule):
    rng = np.random.default_rng(RULES.index(rule))
    bf16 = rng.integers(0, 1 << 16, (64, 64), dtype=np.uint16)
    bf16[0, 3] = 0x7FC0      # NaN
    bf16[1, 40] = 0xFF80     # -Inf
    bf16[2, :] = 0x8000      # -0.0 row
    with np.errstate(over="ignore"):  # some rows overflow fp16 on purpose: ±inf blocks
        x16 = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-24, 16, (64, 1)))).astype(np.float16)
    x16[0, 0] = np.inf
    for x in (bf16, x16):
        got, want = fast_codecs.mxfp4_quantize(x, scale_rule=rule), mxfp4.quantize(x, scale_rule=rule)
        assert_exact(got[1], want[1], f"{x.dtype} scales")
        assert_exact(got[0], want[0], f"{x.dtype} codes")


def test_mxfp4_dequantize_matches_oracle():
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 256, (3, 300, 64), dtype=np.uint8)
    scales = rng.integers(0, 256, (3, 300, 4), dtype=np.uint8)
    scales[0, :256, 0] = np.arange(256)                       # every byte, including 0, 254 and 255
    for dtype in (np.float32, np.float64):
        assert_exact(fast_codecs.mxfp4_dequantize(codes, scales, dtype=dtype),
                     mxfp4.dequantize(codes, scales, dtype=dtype), f"dequantize {np.dtype(dtype)}")


def _fp8_inputs() -> np.ndarray:
    rng = np.random.default_rng(77)
    x = (rng.standard_normal((400, 96)) * np.exp2(rng.integers(-149, 128, (400, 1)).astype(np.float64)))
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
    x[~np.isfinite(x)] = np.float32(-3e38)
    bits = rng.integers(0, 1 << 32, (64, 96), dtype=np.uint64).astype(np.uint32)
    bits = np.where((bits & 0x7F800000) == 0x7F800000, bits & 0x807FFFFF, bits).astype(np.uint32)
    x = np.concatenate([x, bits.view(np.float32)])
    x[0, 5], x[1, 95], x[2, 0] = np.nan, np.inf, -np.inf
    x[3] = 0.0
    x[4, ::2] = -0.0
    x[4, 1::2] = 0.0
    x[5] = np.float32(1e-4)
    x[6] = np.float32(448 * 2.0 ** -22)
    x[7, :] = np.float32(1.75 * 2.0 ** 127)
    x[8, :] = np.float32(2.0 ** -149)
    e4m3 = fp8.decode_e4m3(np.arange(0x7F, dtype=np.uint8))
    mids = (e4m3[1:] + e4m3[:-1]) / 2
    x[9] = np.resize(mids, 96)                                  # ties at scale 1 (row max 446 -> k = 0)
    x[10] = np.resize(mids[:96], 96) * 2.0 ** -22                # subnormal ties at the 1e-4 floor
    x[11] = np.resize(e4m3, 96) * -2.0 ** 50
    return x


def test_fp8_quantize_matches_oracle():
    x = _fp8_inputs()
    values, scales = fast_codecs.fp8_quantize(x)
    want_values, want_scales = fp8.quantize(x)
    assert_exact(scales, want_scales, "scales")
    assert_exact(values, want_values, "values", context=x)


def test_fp8_half_precision_inputs_and_shapes():
    rng = np.random.default_rng(4)
    bf16 = rng.integers(0, 1 << 16, (4, 5, 128), dtype=np.uint16)
    x16 = (rng.standard_normal((7, 3)) * 1000).astype(np.float16)
    for x in (bf16, x16, np.ones((1, 1), np.float32)):
        got, want = fast_codecs.fp8_quantize(x), fp8.quantize(x)
        assert_exact(got[1], want[1], f"{x.dtype} scales")
        assert_exact(got[0], want[0], f"{x.dtype} values")


def test_fp8_dequantize_matches_oracle():
    rng = np.random.default_rng(2)
    values = rng.integers(0, 256, (2, 100, 256), dtype=np.uint8)
    values[0, 0] = np.arange(256)
    scales = np.exp2(rng.integers(-30, 121, (2, 100))).astype(np.float32)
    scales[1, :3] = [np.nan, 0.3, 3e38]
    for dtype in (np.float32, np.float64):
        assert_exact(fast_codecs.fp8_dequantize(values, scales, dtype=dtype),
                     fp8.dequantize(values, scales, dtype=dtype), f"dequantize {np.dtype(dtype)}")


def test_same_rejections_as_oracle():
    with pytest.raises(ValueError, match="multiple of 32"):
        fast_codecs.mxfp4_quantize(np.zeros((2, 40), np.float32))
    with pytest.raises(ValueError, match="scale_rule"):
        fast_codecs.mxfp4_quantize(np.zeros((2, 32), np.float32), scale_rule="nearest")
    with pytest.raises(ValueError, match="rounding"):
        fast_codecs.mxfp4_quantize(np.zeros((2, 32), np.float32), rounding="up")
    with pytest.raises(ValueError, match="min_scale_byte"):
        fast_codecs.mxfp4_quantize(np.zeros((2, 32), np.float32), min_scale_byte=300)
    with pytest.raises(ValueError, match="must agree"):
        fast_codecs.mxfp4_dequantize(np.zeros((2, 16), np.uint8), np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="x: input dtype"):
        fast_codecs.fp8_quantize(np.zeros((2, 4), np.float64))
    with pytest.raises(ValueError, match="scales must be float32"):
        fast_codecs.fp8_dequantize(np.zeros((2, 4), np.uint8), np.zeros(2, np.float64))


def test_non_contiguous_inputs():
    """Strided and Fortran-ordered views give the same bytes as their contiguous copies (and as the oracle)."""
    views = {"every other row": X[::2], "fortran": np.asfortranarray(X[:64]),
             "column slice": X[:, 32:96]}
    for name, x in views.items():
        got, want = fast_codecs.mxfp4_quantize(x), mxfp4.quantize(np.ascontiguousarray(x))
        assert_exact(got[0], want[0], f"mxfp4 codes ({name})")
        assert_exact(got[1], want[1], f"mxfp4 scales ({name})")
        got, want = fast_codecs.fp8_quantize(x), fp8.quantize(np.ascontiguousarray(x))
        assert_exact(got[0], want[0], f"fp8 values ({name})")
        assert_exact(got[1], want[1], f"fp8 scales ({name})")
