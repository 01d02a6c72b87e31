"""integration.compat.deep_gemm called as an engine calls DeepGEMM, checked against sim.scorer and its fp32 bound.

The inputs are built in DeepGEMM's forms from sim's quantized values (int8 packed FP4, one int32 scale word per row
with DeepGEMM's padding at D = 64, bf16 weights, bf16 logits, 2-D context lengths, bare FP8 q for the older names);
the expected logits are sim's float64 reference of the same quantized values.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hw
from hw.logits import declared_precision
from hw.targets import Op
from hw.testing import host_to_device, torch_cache_view
from integration.compat import deep_gemm
from sim import scorer
from sim.formats import E8M0_BIAS
from sim.testing import build_paged_kv, case_rng, random_values, sim_quantize, sim_quantize_q
from tests.hw._logits_fixtures import case_variants

HEADS = 2
DEEPGEMM_SCALE_PAD = E8M0_BIAS        # DeepGEMM pads a D = 64 scale word with two 1.0 scales (byte 127)


def scale_words(scales: np.ndarray) -> np.ndarray:
    """uint8 [..., D/32] E8M0 scales -> DeepGEMM's int32 [...] words (byte g = block g, padded with 1.0)."""
    padded = np.full((*scales.shape[:-1], 4), DEEPGEMM_SCALE_PAD, np.uint8)
    padded[..., : scales.shape[-1]] = scales
    return padded.view("<i4")[..., 0]


def deepgemm_pair(kv_dtype: str, values: np.ndarray, scales, device):
    """sim's quantized (values, scales) in DeepGEMM's form: FP8 (e4m3, fp32 or None), FP4 (int8, int32 words)."""
    if kv_dtype == "fp8":
        return (host_to_device(values, device, torch.float8_e4m3fn),
                None if scales is None else host_to_device(scales.astype(np.float32), device))
    return host_to_device(values, device, torch.int8), host_to_device(scale_words(scales), device)


def prefill_inputs(kv_dtype: str, head_dim: int, num_q: int, num_k: int, device, name: str):
    rng = case_rng(name)
    w = torch.from_numpy(rng.standard_normal((num_q, HEADS)).astype(np.float32)).to(torch.bfloat16)
    qv, qs, q64, w_ref = sim_quantize_q(kv_dtype, random_values(rng, (num_q, HEADS, head_dim), spread=2),
                                        w.float().numpy())
    kv, ks_ = sim_quantize(kv_dtype, random_values(rng, (num_k, head_dim)))
    k64 = scorer.dequantize_kv(kv, ks_)
    starts = rng.integers(0, num_k // 2, num_q).astype(np.int32)
    ends = np.minimum(starts + rng.integers(0, num_k, num_q), num_k).astype(np.int32)
    weights = w if kv_dtype == "mxfp4" else torch.from_numpy(w_ref)   # FP8: the q scale folded in (fp32)
    args = (deepgemm_pair(kv_dtype, qv, qs, device), deepgemm_pair(kv_dtype, kv, ks_, device), weights.to(device),
            torch.from_numpy(starts).to(device), torch.from_numpy(ends).to(device))
    n, u = declared_precision(Op.PREFILL, kv_dtype, head_dim, device)
    ref = scorer.prefill_logits(q64, k64, w_ref, starts, ends)
    bound = scorer.prefill_error_bound(q64, k64, w_ref, starts, ends, n_roundings=n, u=u)
    return args, ref, bound, starts, ends


@pytest.mark.parametrize("head_dim", [64, 128])
def test_prefill_fp4_int8_values_int32_words_bf16_weights_and_logits(head_dim, device):
    """int8 FP4, int32 [S, H] / [SK] scale words (padded at D = 64), bf16 weights;
    fp32 logits within the bound, bf16 logits = those rounded to bf16."""
    args, ref, bound, _, _ = prefill_inputs("mxfp4", head_dim, 5, 40, device, f"dg-prefill-{head_dim}")
    assert args[0][1].shape == (5, HEADS) and args[1][1].shape == (40,) and args[2].dtype == torch.bfloat16
    fp32 = deep_gemm.fp8_fp4_mqa_logits(*args)
    assert fp32.dtype == torch.float32
    scorer.assert_logits_within_bound(fp32.cpu().numpy(), ref, bound)
    bf16 = deep_gemm.fp8_fp4_mqa_logits(*args, logits_dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16, fp32.to(torch.bfloat16))


def test_prefill_older_name_bare_fp8_q_and_compressed_logits(device):
    """fp8_mqa_logits with a bare FP8 q; max_seqlen_k > 0 gives entry (i, j) = logit of key ks[i] + j."""
    args, ref, bound, starts, ends = prefill_inputs("fp8", 128, 6, 32, device, "dg-prefill-fp8")
    (q, _), kv, weights, ks, ke = args
    full = deep_gemm.fp8_mqa_logits(q, kv, weights, ks, ke)
    scorer.assert_logits_within_bound(full.cpu().numpy(), ref, bound)
    width = int((ends - starts).max())
    packed = deep_gemm.fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False, max_seqlen_k=width).cpu().numpy()
    assert packed.shape == (6, width)
    cols = np.arange(width)
    inside = cols[None, :] < (ends - starts)[:, None]
    at = np.minimum(starts[:, None] + cols[None, :], ref.shape[1] - 1)
    scorer.assert_logits_within_bound(packed, np.take_along_axis(ref, at, 1), np.take_along_axis(bound, at, 1),
                                      visible=inside)


PAGE = 16


def decode_inputs(kv_dtype: str, head_dim: int, contexts_2d: np.ndarray, max_context_len: int, device, name: str):
    """DeepGEMM-form decode inputs over a hostile sim pool: returns (q, kv_cache, weights fp32 torch, context_lens,
    block_table) and (reference, bound, visible)."""
    rng = case_rng(name)
    batch, next_n = contexts_2d.shape
    cache = build_paged_kv(rng, kv_dtype, None, PAGE, head_dim, contexts_2d.max(axis=1).tolist(), stride_pad=32,
                           view_offset=16)
    w = rng.standard_normal((batch, next_n, HEADS)).astype(np.float32)
    qv, qs, q64, w_ref = sim_quantize_q(kv_dtype, random_values(rng, (batch, next_n, HEADS, head_dim), spread=2), w)
    w_ref = w_ref.reshape(batch * next_n, HEADS)
    kv_cache = torch_cache_view(host_to_device(cache.pool, device), cache.geom)
    q = deepgemm_pair(kv_dtype, qv, qs, device)
    args = (q[0] if kv_dtype == "fp8" else q, kv_cache, torch.from_numpy(w_ref).to(device),
            torch.from_numpy(contexts_2d.astype(np.int32)).to(device), torch.from_numpy(cache.block_table).to(device))
    n, u = declared_precision(Op.DECODE, kv_dtype, head_dim, device)
    ref_args = (q64, cache.pool, cache.geom, w_ref, contexts_2d, cache.block_table, max_context_len)
    ref = scorer.decode_logits(*ref_args, clean_logits=True)
    bound = scorer.decode_error_bound(*ref_args, n_roundings=n, u=u)
    visible = scorer.visible_mask(scorer.decode_visible(contexts_2d, next_n, max_context_len,
                                                        cache.block_table.shape[1], PAGE), max_context_len)
    return args, (ref, bound, visible)


CONTEXTS = np.array([[30, 31], [5, 6], [0, 1]])
MAX_CONTEXT = 48


def test_paged_fp4_deepgemm_pages_2d_contexts_bf16(device):
    """int8 FP4 q with int32 [B, N, H] words, DeepGEMM's 68-byte D = 128 pages, 2-D context_lens,
    bf16 weights and logits; the schedule from the compat metadata call."""
    (q, kv_cache, w, ctx, bt), (ref, bound, visible) = decode_inputs("mxfp4", 128, CONTEXTS, MAX_CONTEXT, device,
                                                                     "dg-decode-fp4")
    assert kv_cache.shape[-1] == 64 + 4 and q[1].shape == (3, 2, HEADS)
    schedule = deep_gemm.get_paged_mqa_logits_metadata(ctx, PAGE, 3)
    fp32 = deep_gemm.fp8_fp4_paged_mqa_logits(q, kv_cache, w, ctx, bt, schedule, MAX_CONTEXT)
    scorer.assert_logits_within_bound(fp32.cpu().numpy(), ref, bound, visible=visible)
    w_bf16 = w.to(torch.bfloat16)
    exact = deep_gemm.fp8_fp4_paged_mqa_logits(q, kv_cache, w_bf16.float(), ctx, bt, schedule, MAX_CONTEXT,
                                               clean_logits=True)
    bf16 = deep_gemm.fp8_fp4_paged_mqa_logits(q, kv_cache, w_bf16, ctx, bt, schedule, MAX_CONTEXT, clean_logits=True,
                                              logits_dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16, exact.to(torch.bfloat16))


def test_paged_older_name_bare_fp8_q(device):
    """fp8_paged_mqa_logits with a bare FP8 q [B, N, H, D]."""
    (q, kv_cache, w, ctx, bt), (ref, bound, visible) = decode_inputs("fp8", 64, CONTEXTS, MAX_CONTEXT, device,
                                                                     "dg-decode-fp8")
    schedule = deep_gemm.get_paged_mqa_logits_metadata(ctx, PAGE, 2)
    out = deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, ctx, bt, schedule, MAX_CONTEXT)
    scorer.assert_logits_within_bound(out.cpu().numpy(), ref, bound, visible=visible)


def deepgemm_schedule(context_lens: np.ndarray, block_kv: int, num_sms: int) -> np.ndarray:
    """A schedule by DeepGEMM's documented metadata algorithm: the work unit is a split of 4 * block_kv keys (its
    four math warpgroups), counted from each batch's last context length; the splits in (batch, split) order are
    cut into num_sms runs, the first `total % num_sms` one split longer; entry s = (batch, split) where run s starts."""
    last = context_lens[:, -1] if context_lens.ndim == 2 else context_lens
    splits = -(-np.maximum(last, 0) // (4 * block_kv))
    ends = np.cumsum(splits)
    total = int(ends[-1]) if ends.size else 0
    per, extra = divmod(total, num_sms)
    meta = np.zeros((num_sms + 1, 2), np.int32)
    for s in range(num_sms + 1):
        start = s * per + min(s, extra)
        b = int(np.searchsorted(ends, start, side="right"))
        meta[s] = (b, start - (int(ends[b - 1]) if b else 0))
    return meta


@pytest.mark.parametrize("contexts", [np.array([[300, 301], [70, 71], [0, 0], [129, 130]]),
                                      np.array([301, 71, 0, 130])], ids=["2d", "1d"])
def test_deepgemm_computed_schedule_never_gives_wrong_logits(contexts, device):
    """A schedule computed by DeepGEMM's algorithm (same shape as ours, boundaries inside sequences) is
    refused or gives right logits, through the compat entry point and in every decode variant that runs here."""
    next_n = 2
    contexts_2d = contexts if contexts.ndim == 2 else contexts[:, None] - np.arange(next_n - 1, -1, -1)
    (q, kv_cache, w, _, bt), (ref, bound, visible) = decode_inputs("mxfp4", 128, contexts_2d.clip(0), 320, device,
                                                                   f"dg-foreign-schedule-{contexts.ndim}")
    ctx = torch.from_numpy(contexts.astype(np.int32)).to(device)
    foreign = deepgemm_schedule(contexts, PAGE, 4)
    assert not np.array_equal(foreign, deep_gemm.get_paged_mqa_logits_metadata(ctx, PAGE, 4).cpu().numpy())
    assert (foreign[1:-1, 1] > 0).any(), "a DeepGEMM run boundary must fall inside a sequence"
    foreign = torch.from_numpy(foreign).to(device)
    runs = [lambda: deep_gemm.fp8_fp4_paged_mqa_logits(q, kv_cache, w, ctx, bt, foreign, 320, clean_logits=True)]
    runs += [lambda v=v: hw.fp8_fp4_paged_mqa_logits((q[0].view(torch.uint8), q[1].unsqueeze(-1)), kv_cache, w, ctx,
                                                     bt, foreign, 320, clean_logits=True, variant=v)
             for v in case_variants(Op.DECODE, "mxfp4")]
    for run in runs:
        try:
            out = run()
        except ValueError as e:
            assert "schedule" in str(e), e
            continue
        scorer.assert_logits_within_bound(out.cpu().numpy(), ref, bound, visible=visible)


def test_refusals_say_what_to_do(device):
    """`indices`, DeepGEMM's D = 64 FP4 pages and the other unsupported DeepGEMM features: ValueErrors naming
    the fix."""
    (q, kv_cache, w, ctx, bt), _ = decode_inputs("mxfp4", 64, CONTEXTS, MAX_CONTEXT, device, "dg-refusals")
    schedule = deep_gemm.get_paged_mqa_logits_metadata(ctx, PAGE, 2)
    indices = torch.arange(3, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="indices=None"):
        deep_gemm.get_paged_mqa_logits_metadata(ctx, PAGE, 2, indices=indices)
    with pytest.raises(ValueError, match="indices=None"):
        deep_gemm.fp8_fp4_paged_mqa_logits(q, kv_cache, w, ctx, bt, schedule, MAX_CONTEXT, indices=indices)
    padded = torch.zeros(kv_cache.shape[0], PAGE, 1, 36, dtype=torch.uint8, device=device)     # DeepGEMM's D = 64
    with pytest.raises(ValueError, match=r"bytes_per_token\('mxfp4', 64\)"):
        deep_gemm.fp8_fp4_paged_mqa_logits(q, padded, w, ctx, bt, schedule, MAX_CONTEXT)
    with pytest.raises(ValueError, match="torch.float32 or torch.bfloat16"):
        deep_gemm.fp8_fp4_paged_mqa_logits(q, kv_cache, w, ctx, bt, schedule, MAX_CONTEXT,
                                           logits_dtype=torch.float16)
    (pq, kv, pw, ks, ke), *_ = prefill_inputs("fp8", 64, 2, 8, device, "dg-refusals-prefill")
    with pytest.raises(ValueError, match="clean_logits=False"):
        deep_gemm.fp8_fp4_mqa_logits(pq, kv, pw, ks, ke, max_seqlen_k=4)
    with pytest.raises(ValueError, match="pass None"):
        deep_gemm.fp8_fp4_mqa_logits(pq, kv, pw, ks, ke, schedule_meta=schedule)
    words = torch.zeros(2, HEADS, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"pass \(q, None\)"):
        deep_gemm.fp8_fp4_mqa_logits((pq[0], words), kv, pw, ks, ke)

