"""A reference DeepSeek-style indexer and a small multi-layer model that feeds it (DESIGN §6).

The indexer module follows the structure of DeepSeek-V3.2's lightning indexer (public reference inference code):

    qr = RMSNorm(x @ wq_a)                              the low-rank query latent MLA also uses
    q  = (qr @ wq_b).view(T, H, D)                      k = LayerNorm(x @ wk)            [T, D]
    RoPE on the first rope_dim channels of q and k (position-dependent), the rest unrotated
    q, k = q @ R, k @ R   with R the D x D Hadamard matrix / sqrt(D) (orthogonal, so q.k is unchanged in exact
                          arithmetic; it spreads channel outliers across each 32-element MXFP4 block) — switchable
    weights = (x @ weights_proj) * H^-0.5 * softmax_scale,  softmax_scale = D^-0.5          [T, H]

q and k leave as bfloat16 (the dtype a serving engine hands the indexer op), weights as float32.

The model around it has seeded random weights (nothing is trained) but realistic activation structure: Zipf-
distributed tokens, a few massive-activation channels in the hidden state, and a few outlier channels in q and k
(large LayerNorm gains and matching wq_b columns), the case the Hadamard rotation exists for. Layers differ
through a residual MLP between them; tokens do not mix (no attention), which the indexer does not need.

reference_logits/reference_top_k give the bf16 reference: float32 scores of the unquantized bf16 q and k, the
figure recall@k of the quantized paths is measured against.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass

import torch

HIDDEN_OUTLIERS = 4           # massive-activation channels of the hidden state
HIDDEN_OUTLIER_GAIN = 20.0
ZIPF_EXPONENT = 1.1
ROPE_THETA = 10000.0
NORM_EPS = 1e-6


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the reference model. Defaults are small enough for the CPU interpreter."""

    num_layers: int = 2
    hidden: int = 256
    q_lora_rank: int = 128
    num_heads: int = 8
    head_dim: int = 128
    rope_dim: int = 64
    vocab: int = 512
    num_outlier_channels: int = 4     # channels of q and k with large gains
    outlier_gain: float = 8.0
    rotate: bool = True               # Hadamard rotation of q and k before quantization
    seed: int = 0

    def __post_init__(self):
        for name in ("num_layers", "num_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        d = self.head_dim
        if d < 1 or d & (d - 1):
            raise ValueError(f"head_dim must be a power of two for the Hadamard rotation, got {d}")
        if not 0 <= self.rope_dim <= d or self.rope_dim % 2:
            raise ValueError(f"rope_dim must be even and in 0..head_dim ({d}), got {self.rope_dim}")
        if not 0 <= self.num_outlier_channels <= d:
            raise ValueError(f"num_outlier_channels must be in 0..head_dim, got {self.num_outlier_channels}")

    @property
    def softmax_scale(self) -> float:
        return self.head_dim ** -0.5


def hadamard_matrix(n: int, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """The n x n Sylvester Hadamard matrix divided by sqrt(n) (orthogonal and symmetric); n a power of two."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"the Hadamard size must be a power of two, got {n}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(n)).to(dtype=dtype, device=device)


def rms_norm(x: torch.Tensor, gain: torch.Tensor | float) -> torch.Tensor:
    """x float32 [..., C] scaled to unit root-mean-square over C (eps NORM_EPS), times gain ([C] or a scalar)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * gain


def apply_rope(x: torch.Tensor, positions: torch.Tensor, rope_dim: int) -> torch.Tensor:
    """Rotate channel pairs (i, i + rope_dim/2) of the first rope_dim channels by position * theta^(-2i/rope_dim).

    x float32 [T, ..., D], positions int64 [T]. Channels rope_dim.. pass through.
    """
    if rope_dim == 0:
        return x
    half = rope_dim // 2
    inv_freq = ROPE_THETA ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]                 # [T, half]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (half,)
    cos, sin = angle.cos().float().view(shape), angle.sin().float().view(shape)
    a, b, rest = x[..., :half], x[..., half:rope_dim], x[..., rope_dim:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos, rest], dim=-1)


@dataclass
class _LayerWeights:
    mlp_in: torch.Tensor        # [hidden, 2 hidden]
    mlp_out: torch.Tensor       # [2 hidden, hidden]
    wq_a: torch.Tensor          # [hidden, q_lora_rank]
    q_norm: torch.Tensor        # [q_lora_rank]
    wq_b: torch.Tensor          # [q_lora_rank, H * D]
    wk: torch.Tensor            # [hidden, D]
    k_norm_gain: torch.Tensor   # [D]
    k_norm_bias: torch.Tensor   # [D]
    weights_proj: torch.Tensor  # [hidden, H]


class IndexerModel:
    """Seeded random weights (float32) on `device`; `indexer_inputs` produces what each layer's hook receives."""

    def __init__(self, cfg: ModelConfig, device: torch.device | str):
        self.cfg = cfg
        self.device = torch.device(device)
        gen = torch.Generator().manual_seed(cfg.seed)

        def randn(*shape, std=1.0):
            return (torch.randn(*shape, generator=gen) * std).to(self.device)

        h, r, heads, d = cfg.hidden, cfg.q_lora_rank, cfg.num_heads, cfg.head_dim
        self.embedding = randn(cfg.vocab, h)
        massive = torch.randperm(h, generator=gen)[:HIDDEN_OUTLIERS]
        self.embedding[:, massive.to(self.device)] *= HIDDEN_OUTLIER_GAIN
        self.outlier_channels = torch.randperm(d, generator=gen)[:cfg.num_outlier_channels].to(self.device)
        self.layers = []
        for _ in range(cfg.num_layers):
            w = _LayerWeights(
                mlp_in=randn(h, 2 * h, std=h ** -0.5), mlp_out=randn(2 * h, h, std=(2 * h) ** -0.5),
                wq_a=randn(h, r, std=h ** -0.5), q_norm=1.0 + randn(r, std=0.1),
                wq_b=randn(r, heads, d, std=r ** -0.5), wk=randn(h, d, std=h ** -0.5),
                k_norm_gain=1.0 + randn(d, std=0.1), k_norm_bias=randn(d, std=0.1),
                weights_proj=randn(h, heads, std=h ** -0.5))
            w.wq_b[:, :, self.outlier_channels] *= cfg.outlier_gain
            w.wq_b = w.wq_b.reshape(r, heads * d)
            w.k_norm_gain[self.outlier_channels] *= cfg.outlier_gain
            self.layers.append(w)
        self.rotation = hadamard_matrix(d, device=self.device)

    def with_rotation(self, rotate: bool) -> "IndexerModel":
        """The same weights with the Hadamard rotation switched on or off (shares every tensor)."""
        other = copy.copy(self)
        other.cfg = dataclasses.replace(self.cfg, rotate=rotate)
        return other

    def sample_tokens(self, count: int, *, seed: int) -> torch.Tensor:
        """Zipf-distributed token ids int64[count] (repeated tokens give the indexer something to find)."""
        ranks = torch.arange(1, self.cfg.vocab + 1, dtype=torch.float64)
        probs = ranks ** -ZIPF_EXPONENT
        gen = torch.Generator().manual_seed(seed)
        return torch.multinomial(probs / probs.sum(), count, replacement=True, generator=gen).to(self.device)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """token ids int64 [T] -> hidden states float32 [T, hidden] (the massive-activation channels included)."""
        return self.embedding[tokens]

    def next_hidden(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The residual MLP between indexer layers: float32 [T, hidden] -> [T, hidden]."""
        w = self.layers[layer]
        return x + torch.nn.functional.gelu(rms_norm(x, 1.0) @ w.mlp_in) @ w.mlp_out

    def indexer_inputs(self, layer: int, x: torch.Tensor, positions: torch.Tensor):
        """Layer `layer`'s indexer inputs for hidden states x float32 [T, hidden] at positions int64 [T].

        Returns q bfloat16 [T, H, D], k bfloat16 [T, D], weights float32 [T, H]: indexer_inputs_fp32's q and k
        rounded to bf16 (the dtype a serving engine hands the indexer op).
        """
        q, k, weights = self.indexer_inputs_fp32(layer, x, positions)
        return q.to(torch.bfloat16), k.to(torch.bfloat16), weights

    def indexer_inputs_fp32(self, layer: int, x: torch.Tensor, positions: torch.Tensor):
        """indexer_inputs before the bf16 rounding: q float32 [T, H, D], k float32 [T, D], weights float32
        [T, H] (contiguous). With the rotation on, q and k are exactly the unrotated ones times `rotation`."""
        cfg, w = self.cfg, self.layers[layer]
        xn = rms_norm(x, 1.0)
        qr = rms_norm(xn @ w.wq_a, w.q_norm)
        q = (qr @ w.wq_b).view(x.shape[0], cfg.num_heads, cfg.head_dim)
        k = torch.nn.functional.layer_norm(xn @ w.wk, (cfg.head_dim,), w.k_norm_gain, w.k_norm_bias, NORM_EPS)
        q = apply_rope(q, positions, cfg.rope_dim)
        k = apply_rope(k, positions, cfg.rope_dim)
        if cfg.rotate:
            q, k = q @ self.rotation, k @ self.rotation
        weights = (xn @ w.weights_proj) * (cfg.num_heads ** -0.5 * cfg.softmax_scale)
        return q, k, weights.float().contiguous()


def reference_logits(q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor, positions: torch.Tensor):
    """float32 scores of the unquantized inputs: logits[i, j] = sum_h w[i,h] relu(q[i,h].k[j]) for j <= positions[i],
    -inf elsewhere. q bf16 [T, H, D] (rows of one request), k bf16 [SK, D] (the request's keys), weights [T, H]."""
    dots = torch.einsum("thd,sd->ths", q.float(), k.float())
    logits = torch.einsum("th,ths->ts", weights, dots.clamp_min(0))
    visible = torch.arange(k.shape[0], device=k.device)[None, :] <= positions[:, None]
    return logits.masked_fill(~visible, float("-inf"))


def recall_at_k(got: torch.Tensor, ref_logits: torch.Tensor, positions: torch.Tensor, k: int):
    """(sum of recalls, rows counted) over the rows that see more than k keys (others have recall 1 trivially).

    got int32 [T, k] (-1 padded) from the hook; ref_logits float32 [T, SK]; recall of a row = |got & ref| / k with
    ref the k best reference columns.
    """
    rows = (positions + 1 > k).nonzero().flatten()
    if rows.numel() == 0:
        return 0.0, 0
    in_ref = torch.zeros(rows.numel(), ref_logits.shape[1], dtype=torch.bool, device=ref_logits.device)
    in_ref.scatter_(1, ref_logits[rows].topk(k, dim=1).indices, True)
    got = got[rows].long()
    hits = (in_ref.gather(1, got.clamp(min=0)) & (got >= 0)).sum(1)
    return float((hits.double() / k).sum()), int(rows.numel())
