"""The reference model: Hadamard rotation, partial RoPE, the indexer inputs, the bf16 reference and recall@k."""
from __future__ import annotations

import math

import pytest
import torch

from integration.model import (IndexerModel, ModelConfig, apply_rope, hadamard_matrix, recall_at_k,
                               reference_logits)

SMALL = ModelConfig(num_layers=2, hidden=64, q_lora_rank=32, num_heads=3, head_dim=32, rope_dim=16, vocab=50)


@pytest.mark.parametrize("n", [1, 2, 32, 128])
def test_hadamard_is_orthogonal_and_symmetric(n):
    h = hadamard_matrix(n, dtype=torch.float64)
    torch.testing.assert_close(h @ h.T, torch.eye(n, dtype=torch.float64), rtol=0, atol=1e-15)
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

    # fp32 rotations: the two scores agree to a few ulps of |q| |k| (a relative test would fail near a zero score)
    scale = float(q.norm() * k.norm())
    assert abs(score(10, 3) - score(107, 100)) <= 1e-5 * scale
    assert abs(score(10, 3) - score(10, 4)) > 1e-3 * scale      # ... and it does depend on the difference


def test_indexer_inputs_shapes_and_dtypes():
    model = IndexerModel(SMALL, "cpu")
    tokens = model.sample_tokens(9, seed=1)
    q, k, w = model.indexer_inputs(1, model.embed(tokens), torch.arange(9))
    assert (q.shape, q.dtype, k.shape, k.dtype, w.shape, w.dtype) == (
        (9, 3, 32), torch.bfloat16, (9, 32), torch.bfloat16, (9, 3), torch.float32)
    assert model.embedding.shape == (50, 64) and len(model.layers) == 2


def test_rotation_changes_the_inputs_not_the_scores():
    model = IndexerModel(SMALL, "cpu")
    tokens, positions = model.sample_tokens(12, seed=2), torch.arange(12)
    x = model.embed(tokens)
    rotated = model.indexer_inputs(0, x, positions)
    plain = model.with_rotation(False).indexer_inputs(0, x, positions)
    assert model.cfg.rotate and not model.with_rotation(False).cfg.rotate
    assert not torch.equal(rotated[0], plain[0])
    torch.testing.assert_close(rotated[2], plain[2], rtol=0, atol=0)    # weights do not depend on the rotation
    scores = [reference_logits(q, k, w, positions) for q, k, w in (rotated, plain)]
    finite = torch.isfinite(scores[0])
    assert torch.equal(finite, torch.isfinite(scores[1]))
    # equal up to the bf16 rounding of q and k (2^-8 relative per element)
    torch.testing.assert_close(scores[0][finite], scores[1][finite], rtol=0.05, atol=0.05)


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
    (dict(head_dim=96), "head_dim must be a power of two"),
    (dict(rope_dim=15), "rope_dim must be even"),
    (dict(rope_dim=256), "rope_dim must be even and in 0..head_dim"),
    (dict(num_outlier_channels=129), "num_outlier_channels must be in 0..head_dim"),
])
def test_config_rejections(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**kwargs)
