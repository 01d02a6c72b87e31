"""Query/key fixtures shared by the hw scorer tests (test_logits_prefill.py, test_logits_decode.py).

The sim side (quantization, FP8 weight folding, exact float64 dequantization) is tools.difftest's; this module
adds what only these tests vary: the MXFP4 dot path, the int32 scale packing and the torch device. The n and u of
each bound are hw.logits's declarations (dot_product_roundings, accumulation_unit_roundoff) for the path forced here.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import triton

from hw.logits import dot_scaled_available

from sim.formats import E4M3_NAN, E8M0_BIAS, E8M0_NAN
from tools.difftest import pair_as_torch, sim_quantize_q

#: MXFP4 dot paths each accuracy case runs (unpack_ptx: inline PTX, NVIDIA GPUs only; dot_scaled where it runs:
#: compiled, or interpreted by triton >= 3.8).
MX_PATHS = (("dot_scaled",) if dot_scaled_available() else ()) + ("unpack",) + \
    (("unpack_ptx",) if torch.cuda.is_available() and not torch.version.hip else ())


def case_paths(kv_format: str) -> list:
    """The dot paths a case of `kv_format` runs: FP8 has one (None: the launcher's default), MXFP4 each of MX_PATHS."""
    return [None] if kv_format == "fp8" else list(MX_PATHS)


def mx_path(monkeypatch, path: str | None) -> None:
    """Force the MXFP4 dot path of hw.logits (None: the launcher's default for the device); skip the test where
    the path does not run (dot_scaled in the interpreter of a triton without it)."""
    if path == "dot_scaled" and not dot_scaled_available():
        pytest.skip(f"tl.dot_scaled does not run in the triton {triton.__version__} interpreter (needs 3.8)")
    if path is None:
        monkeypatch.delenv("MXIDX_MXFP4_PATH", raising=False)
    else:
        monkeypatch.setenv("MXIDX_MXFP4_PATH", path)


ADVERSARIAL_HEAD_DIM = 128
ADVERSARIAL_TINY_EXP = -26      # 2^-26 < half an ulp of 1.0 (2^-24): lost when added to 1.0 in fp32


def adversarial_key():
    """The reviewer's key that separates n = D from n = D/32 (DESIGN §4), D = 128, H = 1, one token:
    q all 1.0; the key has 1.0 at element 0 (the rest of block 0 zero) and 2^-26 in all 96 elements of blocks 1..3,
    so q.k = 1 + 96 * 2^-26. Summed one product at a time in fp32 from element 0 every 2^-26 is lost (result 1.0,
    error 1.43e-6); exact 32-element block sums (2^-21 each) are kept.

    Returns (q codes uint8 [1, 1, 1, D/2], q scales uint8 [1, 1, 1, D/32], k codes uint8 [1, D/2],
    k scales uint8 [1, D/32]); index q[0] for the prefill [S, H, ...] shape."""
    D = ADVERSARIAL_HEAD_DIM
    one_both_nibbles = 0x22                                       # e2m1 code 2 = 1.0 in the low and high nibble
    q_codes = np.full((1, 1, 1, D // 2), one_both_nibbles, np.uint8)
    q_scales = np.full((1, 1, 1, D // 32), E8M0_BIAS, np.uint8)   # 2^0
    k_codes = np.full((1, D // 2), one_both_nibbles, np.uint8)
    k_codes[0, :16] = 0
    k_codes[0, 0] = 0x02                                          # element 0 (low nibble) = 1.0
    k_scales = np.array([[E8M0_BIAS] + [E8M0_BIAS + ADVERSARIAL_TINY_EXP] * 3], np.uint8)
    return q_codes, q_scales, k_codes, k_scales


def quantize_queries(kv_format: str, q: np.ndarray, weights: np.ndarray, device, *, int32_scales: bool = False):
    """q float32 [..., H, D], weights float32 [..., H] -> (torch q pair of DESIGN §8, torch weights (FP8: q scale
    folded in), exact float64 q for sim.scorer, the weights as float32 numpy)."""
    values, scales, q64, folded = sim_quantize_q(kv_format, q, weights)
    pair = pair_as_torch(kv_format, values, scales, device, int32_scales=int32_scales)
    return pair, torch.from_numpy(folded).to(device), q64, folded


def poison_key(kv_format: str, values: np.ndarray, scales: np.ndarray, token: int, block: int) -> None:
    """Make key `token` NaN in place, as the writer leaves a non-finite row (DESIGN §1). FP8: every byte 0x7F and
    the scale NaN (the interpreter's fp8 dot does not decode 0x7F as NaN; the scale carries it). MXFP4: scale
    block `block` = E8M0 NaN."""
    if kv_format == "fp8":
        values[token] = E4M3_NAN
        scales[token] = np.nan
    else:
        scales[token, block] = E8M0_NAN


def check_adversarial_key(path: str, kernel: str, got: float, want: float, bound_with, device) -> None:
    """The adversarial key's logit `got` against the float64 `want`: within the bound of the n that hw declares for
    `path` (bound_with(n) -> bound), the n = D/32 bound too on the exact unpack path; in the interpreter,
    tl.dot_scaled's fp32 sum drops the 96 tiny products and breaks the D/32 bound (why it declares n = D)."""
    from hw.logits import accumulation_unit_roundoff, dot_product_roundings, kernels_interpreted

    D = ADVERSARIAL_HEAD_DIM
    assert want == 1 + 96 * 2.0 ** ADVERSARIAL_TINY_EXP
    n = dot_product_roundings("mxfp4", D, device, kernel)
    u = accumulation_unit_roundoff("mxfp4", device)
    assert n == (D // 32 if path == "unpack" else D)
    err = abs(got - want)
    block_bound, declared_bound = bound_with(D // 32, u), bound_with(n, u)
    assert err <= declared_bound, f"{path}: error {err:.3g} > declared (n = {n}) bound {declared_bound:.3g}"
    if path == "unpack":
        assert err <= block_bound, f"unpack: error {err:.3g} > the n = D/32 bound {block_bound:.3g}"
    elif kernels_interpreted():
        assert got == 1.0 and err > block_bound, \
            f"dot_scaled: {got!r}, error {err:.3g} vs the n = D/32 bound {block_bound:.3g}"
