"""Hostile integers on the hot path (no validate, no sync): nothing is read or written outside the tensors given,
the affected outputs follow the documented policy (NaN, never stale memory or a value that looks valid), the error
flag names the case, and validate=True raises on the same cases."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hw
from hw.checks import ErrorKind, describe_error_flag, new_error_flag, raise_if_flagged
from hw.logits import declared_precision, scorer_target
from hw.targets import Op
from hw.testing import host_to_device, pair_as_torch, to_numpy, torch_cache_view
from hw.variants import variants
from sim import scorer as sim_scorer
from sim.testing import build_paged_kv, quantized_queries

P, D, H = 16, 64, 3
UNTOUCHED = 12345.0


def _decode_setup(kv_dtype: str, tokens, device, seed=0, next_n=1, heads=H):
    rng = np.random.default_rng(seed)
    kv = build_paged_kv(rng, kv_dtype, None, P, D, tokens, extra_table_entries=2)
    B = len(tokens)
    q_v, q_s, q64, w = quantized_queries(rng, kv_dtype, (B, next_n, heads, D), rng.standard_normal((B, next_n, heads)))
    return kv, pair_as_torch(kv_dtype, q_v, q_s, device), q64, w.reshape(B * next_n, heads)


def _decode(kv, q_t, w, contexts, table, device, variant, width, *, meta=None, clean=True, flag=None,
            settings=None):
    ctx_t = torch.tensor(contexts, dtype=torch.int32, device=device)
    if meta is None:
        meta = hw.get_paged_mqa_logits_metadata(ctx_t, P, 3)
    out = hw.fp8_fp4_paged_mqa_logits(q_t, torch_cache_view(host_to_device(kv.pool, device), kv.geom),
                                      host_to_device(w, device), ctx_t, host_to_device(table, device), meta, width,
                                      clean_logits=clean, variant=variant, error_flag=flag,
                                      launch_settings=settings)
    return to_numpy(out)


def _reference(kv, q64, w, contexts, table, width, kv_dtype, device, variant):
    args = (q64, kv.pool, kv.geom, w, np.array(contexts), table, width)
    n, u = declared_precision(Op.DECODE, kv_dtype, D, device, variant)
    return sim_scorer.decode_logits(*args), sim_scorer.decode_error_bound(*args, n_roundings=n, u=u)


def _decode_variants(kv_dtype, device):
    return [v.name for v in variants(Op.DECODE, kv_dtype, scorer_target(device))]


def _flag(flag):
    count, kind, row, value = flag.tolist()
    return count, ErrorKind(kind), row, value


@pytest.mark.parametrize("kv_dtype", ["fp8", "mxfp4"])
@pytest.mark.parametrize("bad", [1 << 30, -1, "num_pages", -(2 ** 31)])
@pytest.mark.parametrize("next_n,heads", [(1, H), (2, 40)], ids=["N1", "N2xH40"])
def test_decode_bad_page_id_is_nan_and_flagged(kv_dtype, bad, next_n, heads, device):
    """A block-table entry inside the visible span that is no page (the SIGSEGV of 1 << 30, the 576 bytes before
    the view of -1, the read past the pool of num_pages): its columns are NaN in every variant, the rest of the
    row is right, and the flag names the sequence and the id; also at 128 query columns (next_n 2 x H 40 padded
    to 2 x 64), where fp8_keys_m runs both its forms (two MMA halves; one MMA, which a grid this short takes on
    NVIDIA)."""
    kv, q_t, q64, w = _decode_setup(kv_dtype, (40, 20), device, next_n=next_n, heads=heads)
    table = kv.block_table.copy()
    bad_id = kv.geom.num_pages if bad == "num_pages" else bad
    table[0, 1] = bad_id
    runs = [(variant, None) for variant in _decode_variants(kv_dtype, device)]
    if next_n > 1 and kv_dtype == "fp8":
        runs += [("fp8_keys_m", {"fp8_halves": halves}) for halves in (True, False)]
    for variant, settings in runs:
        flag = new_error_flag(device)
        out = _decode(kv, q_t, w, (40, 20), table, device, variant, 48, flag=flag, settings=settings)
        ref, bound = _reference(kv, q64, w, (40, 20), table, 48, kv_dtype, device, variant)
        assert np.isnan(ref[0, P:2 * P]).all() and np.isfinite(ref[0, :P]).all()
        sim_scorer.assert_logits_within_bound(out, ref, bound)
        assert _flag(flag)[1:] == (ErrorKind.PAGE_ID, 0, bad_id), (variant, settings)


@pytest.mark.parametrize("clean", [True, False])
def test_decode_context_past_the_table(clean, device):
    """A context longer than the block table covers: the columns past the table are NaN (not -inf, not unwritten
    memory) and the flag says so; validate=True raises."""
    kv, q_t, q64, w = _decode_setup("fp8", (40,), device)
    table = kv.block_table[:, :2]                 # 2 pages cover 32 of the 40 tokens
    for variant in _decode_variants("fp8", device):
        flag = new_error_flag(device)
        out = _decode(kv, q_t, w, (40,), table, device, variant, 48, clean=clean, flag=flag)
        assert np.isnan(out[0, 32:40]).all() and np.isfinite(out[0, :32]).all(), variant
        assert _flag(flag)[1:] == (ErrorKind.CONTEXT_PAST_TABLE, 0, 40), variant
    with pytest.raises(ValueError, match="cover only 32"):
        hw.fp8_fp4_paged_mqa_logits(q_t, torch_cache_view(host_to_device(kv.pool, device), kv.geom),
                                    host_to_device(w, device), torch.tensor([40], dtype=torch.int32, device=device),
                                    host_to_device(table, device),
                                    hw.get_paged_mqa_logits_metadata(torch.tensor([40], dtype=torch.int32), P, 3)
                                    .to(device), 48, validate=True)


def _deepgemm_meta(contexts, num_sms: int) -> torch.Tensor:
    """DeepGEMM's get_paged_mqa_logits_metadata at block_kv = 16: 64-token segments, program p starts at segment
    p * (total // n) + min(p, total % n); entry (sequence, segment within it)."""
    segs = np.cumsum([-(-c // (4 * P)) for c in contexts])
    total = int(segs[-1])
    rows = []
    for p in range(num_sms + 1):
        start = p * (total // num_sms) + min(p, total % num_sms)
        b = int(np.searchsorted(segs, start, side="right"))
        rows.append((b, start - (int(segs[b - 1]) if b else 0)))
    return torch.tensor(rows, dtype=torch.int32)


@pytest.mark.parametrize("which", ["B=2 for B=1", "B=1 for B=2", "other contexts", "DeepGEMM's"])
def test_decode_foreign_schedule_is_harmless(which, device):
    """A schedule_meta of the right shape but another meaning never reads out of bounds nor changes the logits: no
    decode kernel reads it (their grid comes from the shapes), so nothing is flagged."""
    contexts = (70, 33) if which != "B=2 for B=1" else (70,)
    kv, q_t, q64, w = _decode_setup("mxfp4", contexts, device)
    ctx = torch.tensor(contexts, dtype=torch.int32)
    meta = {"B=2 for B=1": hw.get_paged_mqa_logits_metadata(torch.tensor([70, 33], dtype=torch.int32), P, 3),
            "B=1 for B=2": hw.get_paged_mqa_logits_metadata(ctx[:1], P, 3),
            "other contexts": hw.get_paged_mqa_logits_metadata(ctx + 40, P, 3),
            "DeepGEMM's": _deepgemm_meta(contexts, 3)}[which].to(device)
    assert not torch.equal(meta.cpu(), hw.get_paged_mqa_logits_metadata(ctx, P, 3))
    for variant in _decode_variants("mxfp4", device):
        flag = new_error_flag(device)
        out = _decode(kv, q_t, w, contexts, kv.block_table, device, variant, 80, meta=meta, clean=False, flag=flag)
        ref, bound = _reference(kv, q64, w, contexts, kv.block_table, 80, "mxfp4", device, variant)
        visible = sim_scorer.visible_mask(np.array(contexts), 80)
        sim_scorer.assert_logits_within_bound(out, ref, bound, visible=visible)     # every sequence scored
        assert _flag(flag)[0] == 0, variant


def test_decode_mxfp4_query_on_an_fp8_cache_is_the_callers_contract(device):
    """68 bytes a token is MXFP4 D = 128 and FP8 D = 64: a bare cache view cannot tell them apart, so hw scores the
    cache in q's format (documented: pass q of the cache's format; the hook carries the pool's format and refuses
    the mix, tests/integration/test_indexer.py)."""
    kv, _, _, _ = _decode_setup("fp8", (20,), device)
    assert kv.geom.bytes_per_token == 68
    rng = np.random.default_rng(1)
    q_v, q_s, _, w = quantized_queries(rng, "mxfp4", (1, 1, H, 128), rng.standard_normal((1, 1, H)))
    cache = torch_cache_view(host_to_device(kv.pool, device), kv.geom)
    meta = hw.get_paged_mqa_logits_metadata(torch.tensor([20], dtype=torch.int32), P, 3).to(device)
    out = hw.fp8_fp4_paged_mqa_logits(pair_as_torch("mxfp4", q_v, q_s, device), cache,
                                      host_to_device(w.reshape(1, H), device),
                                      torch.tensor([20], dtype=torch.int32, device=device),
                                      host_to_device(kv.block_table, device), meta, 24)
    assert out.shape == (1, 24)                     # scored as MXFP4 bytes, inside the view


def test_writer_slot_past_the_cache_is_skipped_and_flagged(device):
    kv, _, _, _ = _decode_setup("mxfp4", (20,), device)
    pool_t = host_to_device(kv.pool, device)
    before = to_numpy(pool_t).copy()
    limit = kv.geom.num_pages * P
    flag = new_error_flag(device)
    hw.indexer_k_quant_and_cache(torch.randn(3, D, device=device), torch_cache_view(pool_t, kv.geom),
                                 torch.tensor([limit, -1, 1 << 40], device=device), kv_dtype="mxfp4",
                                 error_flag=flag)
    assert np.array_equal(to_numpy(pool_t), before)
    assert _flag(flag) == (1, ErrorKind.SLOT, 0, limit)
    with pytest.raises(ValueError, match="slot"):
        hw.indexer_k_quant_and_cache(torch.randn(1, D, device=device), torch_cache_view(pool_t, kv.geom),
                                     torch.tensor([limit], device=device), kv_dtype="mxfp4", validate=True)


@pytest.mark.parametrize("cu,num_tokens", [([0, 20, 10], 20), ([0, 20], 5), ([3, 20], 20)],
                         ids=["decreasing", "num_tokens short", "not from 0"])
def test_gather_malformed_cu_seq_lens(cu, num_tokens, device):
    """[0, 20, 10] gave 10 rows and [0, 20] with num_tokens 5 cut the output silently: now validate raises and
    the hot path flags it (rows without a well-formed token are NaN tokens)."""
    kv, _, _, _ = _decode_setup("fp8", (20, 20), device)
    cache = torch_cache_view(host_to_device(kv.pool, device), kv.geom)
    table = host_to_device(kv.block_table[:len(cu) - 1], device)
    cu_t = torch.tensor(cu, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="cu_seq_lens|num_tokens"):
        hw.cp_gather_indexer_k_quant_cache(cache, table, cu_t, "fp8", num_tokens=num_tokens, validate=True)
    flag = new_error_flag(device)
    values, scales = hw.cp_gather_indexer_k_quant_cache(cache, table, cu_t, "fp8", num_tokens=num_tokens,
                                                        error_flag=flag)
    assert values.shape[0] == num_tokens
    assert _flag(flag)[1] == ErrorKind.CU_SEQ_LENS
    with pytest.raises(ValueError, match="cu_seq_lens"):
        raise_if_flagged(flag)


@pytest.mark.parametrize("ks,ke", [(-3, 5), (0, 99), (6, 2)], ids=["ks < 0", "ke > SK", "ks > ke"])
def test_prefill_range_outside_the_keys_is_clamped_and_flagged(ks, ke, device):
    rng = np.random.default_rng(2)
    SK = 10
    k_v, k_s, _, _ = quantized_queries(rng, "fp8", (SK, 1, D), np.ones((SK, 1)))
    q_v, q_s, _, w = quantized_queries(rng, "fp8", (2, H, D), rng.standard_normal((2, H)))
    kv = pair_as_torch("fp8", k_v.reshape(SK, D), np.ones(SK, np.float32), device)
    q = pair_as_torch("fp8", q_v, q_s, device)
    starts = torch.tensor([0, ks], dtype=torch.int32, device=device)
    ends = torch.tensor([4, ke], dtype=torch.int32, device=device)
    for variant in [v.name for v in variants(Op.PREFILL, "fp8", scorer_target(device))]:
        flag = new_error_flag(device)
        out = hw.fp8_fp4_mqa_logits(q, kv, host_to_device(w, device), starts, ends, variant=variant,
                                    error_flag=flag)
        clamped = hw.fp8_fp4_mqa_logits(q, kv, host_to_device(w, device), starts.clamp(0, SK),
                                        torch.maximum(ends.clamp(0, SK), starts.clamp(0, SK)), variant=variant)
        assert torch.equal(torch.nan_to_num(out, neginf=0), torch.nan_to_num(clamped, neginf=0)), variant
        assert _flag(flag)[1:3] == (ErrorKind.RANGE, 1), variant
    with pytest.raises(ValueError, match="row 1"):
        hw.fp8_fp4_mqa_logits(q, kv, host_to_device(w, device), starts, ends, validate=True)


def test_error_flag_api(device):
    flag = new_error_flag(device)
    assert flag.dtype == torch.int32 and flag.shape == (4,) and describe_error_flag(flag.tolist()) is None
    raise_if_flagged(flag)                                             # clear: no error
    flag.copy_(torch.tensor([3, int(ErrorKind.PAGE_ID), 1, 1 << 30]))
    with pytest.raises(ValueError, match=r"sequence 1 needs page id 1073741824.*3 report"):
        raise_if_flagged(flag)
    assert "unknown kind code 99" in describe_error_flag([1, 99, 0, 0])
    kv, q_t, _, w = _decode_setup("fp8", (5,), device)
    for bad in (torch.zeros(4, dtype=torch.int64, device=device), torch.zeros(3, dtype=torch.int32, device=device)):
        with pytest.raises(ValueError, match="error_flag"):
            _decode(kv, q_t, w, (5,), kv.block_table, device, None, 8, flag=bad)


def test_decode_context_near_int32_max(device):
    """context_lens 2^31 - 1 (a garbage length): no int32 overflow in the page counts (it made the persistent
    kernel skip the row), only max_context_len columns are scored, the ones past the table are NaN and flagged."""
    kv, q_t, _, w = _decode_setup("fp8", (20, 5), device)
    contexts = (2 ** 31 - 1, 5)
    table = kv.block_table[:, :2]
    for variant in _decode_variants("fp8", device):
        flag = new_error_flag(device)
        out = _decode(kv, q_t, w, contexts, table, device, variant, 40, flag=flag)
        assert np.isfinite(out[0, :20]).all() and np.isnan(out[0, 32:]).all(), variant
        assert _flag(flag)[1:] == (ErrorKind.CONTEXT_PAST_TABLE, 0, 40), variant


def test_decode_bad_page_with_a_wide_query(device):
    """A query row whose block scales span more than 11 binades sends every key of the MXFP4 fold's program through
    the exact pass (the fold loop does not run); a bad page's columns must still come out NaN, not unwritten."""
    kv, _, _, w = _decode_setup("mxfp4", (40, 20), device)
    rng = np.random.default_rng(5)
    q_v, q_s, _, _ = quantized_queries(rng, "mxfp4", (2, 1, H, D), rng.standard_normal((2, 1, H)))
    q_s[0, 0, 1, 0] = q_s[0, 0, 1].max() - 20               # sequence 0, head 1: 20 binades between its blocks
    q_t, q64 = pair_as_torch("mxfp4", q_v, q_s, device), sim_scorer.dequantize_q(q_v, q_s)
    table = kv.block_table.copy()
    table[0, 1] = 1 << 30
    for variant in _decode_variants("mxfp4", device):
        flag = new_error_flag(device)
        out = _decode(kv, q_t, w, (40, 20), table, device, variant, 48, flag=flag)
        ref, bound = _reference(kv, q64, w, (40, 20), table, 48, "mxfp4", device, variant)
        assert np.isnan(ref[0, P:2 * P]).all() and np.isfinite(ref[0, :P]).all()
        sim_scorer.assert_logits_within_bound(out, ref, bound)
        assert _flag(flag)[1:] == (ErrorKind.PAGE_ID, 0, 1 << 30), variant


def test_decode_bad_page_in_a_tile_with_a_wide_key(device):
    """The keys-on-M MXFP4 fold redoes a tile holding a key whose block scales span more than 11 binades in an
    exact pass; a bad page of the same tile (P = 16: four pages a tile) must keep its NaN there."""
    from sim import layout as sim_layout
    from sim.testing import make_geometry, random_values, sim_quantize

    rng = np.random.default_rng(4)
    geom = make_geometry("mxfp4", None, P, D, 5)
    pool = sim_layout.new_pool(geom)
    values, scales = sim_quantize("mxfp4", random_values(rng, (40, D)))
    scales[3, 1 - scales[3].argmax()] = scales[3].max() - 14    # key 3 (page 0): 14 binades between its blocks
    table = np.array([[0, 4, 1 << 30]], np.int32)          # tokens 32..39: no page (page 0 holds real keys)
    t = np.arange(40)
    sim_layout.write_tokens(pool, geom, np.where(t < 32, table[0, np.minimum(t // P, 1)] * P + t % P, -1), values,
                            scales)
    q_v, q_s, q64, w = quantized_queries(rng, "mxfp4", (1, 1, H, D), rng.standard_normal((1, 1, H)))
    q_t = pair_as_torch("mxfp4", q_v, q_s, device)
    kv = type("KV", (), {"pool": pool, "geom": geom})
    for variant in _decode_variants("mxfp4", device):
        flag = new_error_flag(device)
        out = _decode(kv, q_t, w.reshape(1, H), (40,), table, device, variant, 48, flag=flag)
        ref, bound = _reference(kv, q64, w.reshape(1, H), (40,), table, 48, "mxfp4", device, variant)
        assert np.isnan(ref[0, 32:40]).all() and np.isfinite(ref[0, :32]).all()
        sim_scorer.assert_logits_within_bound(out, ref, bound)
        assert _flag(flag)[1:] == (ErrorKind.PAGE_ID, 0, 1 << 30), variant
