"""The reference model: Hadamard rotation, partial RoPE, the indexer inputs, the bf16 reference and recall@k."""
from __future__ import annotations

import math

import pytest
import torch

from integration.model import IndexerModel, ModelConfig, apply_rope, hadamard_matrix, recall_at_k, reference_logits

SMALL = ModelConfig(num_layers=2, hidden=64, q_lora_rank=32, num_heads=3, head_dim=32, rope_dim=16, vocab=50)


@pytest.mark.parametrize("n", [1, 2, 32, 128])
def test_hadamard_is_orthogonal_and_symmetric(n):
    h = hadamard_matrix(n, dtype=torch.float64)
    # entries are +-1/sqrt(n) rounded to float64 (relative u = 2^-53 each), and (|h| |h^T|)_ij = 1: the float64
    # product is within gamma_(n + 2) of the identity
    u = 2.0**-53
    torch.testing.assert_close(h @ h.T, torch.eye(n, dtype=torch.float64), rtol=0,
                               atol=(n + 2) * u / (1 - (n + 2) * u))
    assert torch.equal(h, h.T) and bool((h.abs() == 1 / math.sqrt(n)).all())


def test_hadamard_needs_a_power_of_two():
    with pytest.raises(ValueError, match="power of two, got 96"):
        hadamard_matrix(96)


def test_rope_rotates_only_the_first_channels():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 32, dtype=torch.float32, generator=gen)
    positions = torch.tensor([0, 1, 7, 100, 4095])
    y = apply_rope(x, positions, 16)
    assert torch.equal(y[..., 16:], x[..., 16:])
    assert torch.equal(y[0], x[0])                                     # position 0: identity
    def pair_norms(t):            # channels i and i + 8 form a rotated pair
        return t[..., :8] ** 2 + t[..., 8:16] ** 2

    torch.testing.assert_close(pair_norms(y), pair_norms(x))
    # the score of two rotated vectors depends on the position difference only
    q, k = torch.randn(1, 16, generator=gen), torch.randn(1, 16, generator=gen)

    def score(q_pos, k_pos):
        return float((apply_rope(q, torch.tensor([q_pos]), 16) * apply_rope(k, torch.tensor([k_pos]), 16)).sum())

    # Both scores approximate the same exact value q . R(7) k. Per rotated component a*cos - b*sin: cos/sin rounded
    # to fp32 from float64 angles (angle error <= pos * 2^-51), two products and a difference: error <=
    # (gamma_4 + pos * 2^-51) (|a| + |b|), so |e_x|_2 <= e |x|_2 with e = 2 (gamma_4 + pos * 2^-51); the fp32
    # sum of 16 products adds gamma_16 |R q| |R k|. Per score: (2 e + e^2 + gamma_16 (1 + e)^2) |q| |k|.
    def gamma(n):
        return n * 2.0**-24 / (1 - n * 2.0**-24)

    e = 2 * (gamma(4) + 107 * 2.0**-51)
    per_score = 2 * e + e * e + gamma(16) * (1 + e) ** 2
    scale = float(q.double().norm() * k.double().norm())
    assert abs(score(10, 3) - score(107, 100)) <= 2 * per_score * scale
    assert abs(score(10, 3) - score(10, 4)) > 2 * per_score * scale     # ... and it does depend on the difference


def test_indexer_inputs_shapes_and_dtypes():
    model = IndexerModel(SMALL, "cpu")
    tokens = model.sample_tokens(9, seed=1)
    q, k, w = model.indexer_inputs(1, model.embed(tokens), torch.arange(9))
    assert (q.shape, q.dtype, k.shape, k.dtype, w.shape, w.dtype) == (
        (9, 3, 32), torch.bfloat16, (9, 32), torch.bfloat16, (9, 3), torch.float32)
    assert model.embedding.shape == (50, 64) and len(model.layers) == 2


def test_rotation_is_applied_to_q_and_k_after_rope():
    """The rotated inputs are exactly the unrotated (RoPE'd) fp32 ones times the Hadamard matrix, rounded to bf16
    once; the weights do not depend on the rotation."""
    model = IndexerModel(SMALL, "cpu")
    tokens, positions = model.sample_tokens(12, seed=2), torch.arange(12)
    x = model.embed(tokens)
    plain = model.with_rotation(False).indexer_inputs_fp32(0, x, positions)
    rotated = model.indexer_inputs_fp32(0, x, positions)
    assert model.cfg.rotate and not model.with_rotation(False).cfg.rotate
    assert torch.equal(rotated[0], plain[0] @ model.rotation) and torch.equal(rotated[1], plain[1] @ model.rotation)
    assert torch.equal(rotated[2], plain[2])
    q, k, w = model.indexer_inputs(0, x, positions)
    assert torch.equal(q, rotated[0].bfloat16()) and torch.equal(k, rotated[1].bfloat16()) and w is not None


def test_rotation_preserves_the_scores_within_the_fp32_bound():
    """q.k is rotation-invariant in exact arithmetic; the fp32 product x @ R deviates from the exact x R by at most
    gamma_D (|x| |R|) per element (gamma_D = D u / (1 - D u), u = 2^-24), which bounds the score change."""
    model = IndexerModel(SMALL, "cpu")
    tokens, positions = model.sample_tokens(12, seed=2), torch.arange(12)
    x = model.embed(tokens)
    q, k, _ = (t.double() for t in model.with_rotation(False).indexer_inputs_fp32(0, x, positions))
    q_rot, k_rot, _ = (t.double() for t in model.indexer_inputs_fp32(0, x, positions))
    d = SMALL.head_dim
    gamma = d * 2.0**-24 / (1 - d * 2.0**-24)
    r_abs = model.rotation.double().abs()
    err_q, err_k = gamma * (q.abs() @ r_abs), gamma * (k.abs() @ r_abs)     # elementwise |fl(x @ R) - x R|
    exact_q, exact_k = q.abs() @ r_abs, k.abs() @ r_abs                      # bounds of |x R| elementwise
    got = torch.einsum("thd,sd->ths", q_rot, k_rot)
    want = torch.einsum("thd,sd->ths", q, k)
    bound = (torch.einsum("thd,sd->ths", err_q, exact_k) + torch.einsum("thd,sd->ths", exact_q, err_k)
             + torch.einsum("thd,sd->ths", err_q, err_k))
    # the float64 evaluation of the two dot products adds at most gamma_D(2^-53) of their absolute sums
    bound += 2 * d * 2.0**-53 * torch.einsum("thd,sd->ths", exact_q + err_q, exact_k + err_k)
    assert not torch.equal(q_rot, q)
    excess = (got - want).abs() - bound
    worst = int(excess.argmax())
    assert float(excess.max()) <= 0, f"score {worst}: |rotated - plain| exceeds the bound by {float(excess.max())}"


def test_reference_logits_match_the_definition():
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(4, 3, 8, generator=gen).bfloat16(), torch.randn(6, 8, generator=gen).bfloat16()
    w, positions = torch.randn(4, 3, generator=gen), torch.tensor([0, 2, 5, 3])
    got = reference_logits(q, k, w, positions)
    for i in range(4):
        for j in range(6):
            want = sum(float(w[i, h]) * max(0.0, float(q[i, h].double() @ k[j].double())) for h in range(3))
            if j <= positions[i]:
                # fp32 accumulation: (D + H + 2) u sum_h |w_h| sum_d |q_hd k_d|, the DESIGN §4 bound with n = D
                mass = sum(abs(float(w[i, h])) * float((q[i, h].double() * k[j].double()).abs().sum())
                           for h in range(3))
                assert abs(float(got[i, j]) - want) <= (8 + 3 + 2) * 2.0**-24 * mass
            else:
                assert got[i, j] == float("-inf")


def test_recall_at_k():
    ref = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0], [9.0, 0.0, 0.0, 0.0, 0.0]])
    got = torch.tensor([[0, 2], [4, 3], [0, -1]], dtype=torch.int32)
    positions = torch.tensor([4, 4, 1])          # row 2 sees 2 keys: not more than k = 2, not counted
    total, rows = recall_at_k(got, ref, positions, 2)
    assert rows == 2 and total == pytest.approx(0.5 + 1.0)
    assert recall_at_k(got, ref, torch.tensor([0, 1, 1]), 2) == (0.0, 0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_layers=0), "num_layers must be >= 1, got 0"),
    (dict(num_heads=0), "num_heads must be >= 1, got 0"),
    (dict(head_dim=96), "head_dim must be a power of two"),
    (dict(rope_dim=15), "rope_dim must be even"),
    (dict(rope_dim=256), "rope_dim must be even and in 0..head_dim"),
    (dict(num_outlier_channels=129), "num_outlier_channels must be in 0..head_dim"),
])
def test_config_rejections(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**kwargs)
