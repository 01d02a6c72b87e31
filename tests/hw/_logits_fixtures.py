"""Query/key fixtures shared by the hw scorer tests (test_logits_prefill.py, test_logits_decode.py).

The sim side (quantization, FP8 weight folding, exact float64 dequantization) is sim.testing's, the torch pair
hw.testing's; this module adds what only these tests vary: the scorer variant (every one of hw.variants that runs
on this machine), the int32 scale packing and the torch device. The n and u of each bound are what hw declares
for the variant (hw.logits.declared_precision).
"""
from __future__ import annotations

import numpy as np
import torch

from hw.logits import declared_precision, kernels_interpreted, scorer_target
from hw.targets import Op
from hw.testing import pair_as_torch
from hw.variants import variants
from sim.formats import E4M3_NAN, E8M0_BIAS, E8M0_NAN
from sim.testing import sim_quantize_q

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def case_variants(op: Op, kv_dtype: str) -> list[str]:
    """Names of the `op` variants for `kv_dtype` that run here (the GPU, else the interpreter): each case runs on
    every one of them."""
    return [v.name for v in variants(op, kv_dtype, scorer_target(DEVICE))]


ADVERSARIAL_HEAD_DIM = 128
ADVERSARIAL_TINY_EXP = -26      # 2^-26 < half an ulp of 1.0 (2^-24): lost when added to 1.0 in fp32


def adversarial_key():
    """The adversarial key that separates n = D from n = D/32 (DESIGN §4), D = 128, H = 1, one token:
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


def quantize_queries(kv_dtype: str, q: np.ndarray, weights: np.ndarray, device, *, int32_scales: bool = False):
    """q float32 [..., H, D], weights float32 [..., H] -> (torch q pair of DESIGN §8, torch weights (FP8: q scale
    folded in), exact float64 q for sim.scorer, the weights as float32 numpy)."""
    values, scales, q64, folded = sim_quantize_q(kv_dtype, q, weights)
    pair = pair_as_torch(kv_dtype, values, scales, device, int32_scales=int32_scales)
    return pair, torch.from_numpy(folded).to(device), q64, folded


def poison_key(kv_dtype: str, values: np.ndarray, scales: np.ndarray, token: int, block: int) -> None:
    """Make key `token` NaN in place, as the writer leaves a non-finite row (DESIGN §1). FP8: every byte 0x7F and
    the scale NaN (the interpreter's fp8 dot does not decode 0x7F as NaN; the scale carries it). MXFP4: scale
    block `block` = E8M0 NaN."""
    if kv_dtype == "fp8":
        values[token] = E4M3_NAN
        scales[token] = np.nan
    else:
        scales[token, block] = E8M0_NAN


def check_adversarial_key(variant: str, op: Op, got: float, want: float, bound_with, device) -> None:
    """The adversarial key's logit `got` against the float64 `want`: within the bound of the (n, u) that hw
    declares for `variant` (bound_with(n, u) -> bound). In the interpreter, tl.dot_scaled's fp32 sum drops (all or,
    with some NumPy summation orders, most of) the 96 tiny products and breaks the n = D/32 bound: why that variant
    declares n = D."""
    D = ADVERSARIAL_HEAD_DIM
    assert want == 1 + 96 * 2.0 ** ADVERSARIAL_TINY_EXP
    n, u = declared_precision(op, "mxfp4", D, device, variant)
    err = abs(got - want)
    declared_bound = bound_with(n, u)
    assert err <= declared_bound, f"{variant}: error {err:.3g} > declared (n = {n}) bound {declared_bound:.3g}"
    if variant.endswith("dot_scaled") and kernels_interpreted():
        block_bound = bound_with(D // 32, u)
        assert n == D and got < want and err > block_bound, \
            f"dot_scaled: {got!r}, error {err:.3g} vs the n = D/32 bound {block_bound:.3g}"
