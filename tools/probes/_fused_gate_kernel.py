"""The kernel of tools.probes.prefill_fused_gate (a probe, not a variant): the FP8 prefill scorer's key loop
(hw/_logits_details/prefill_keys_m.py, FP8 path, without clean_logits) with an online bucket gate in place of the
logits store. Imported by the probe after it has chosen the device (TRITON_INTERPRET is read at definition).

Row i (query token) carries a bucket map b(x) = floor(clamp((x - o_i) * inv_i, 0, NB - 1)) (NaN: bucket -1) and a
bucket threshold th_i that only rises (-1: every entry kept). A key tile's visible entries with b >= th_i are
appended, (value, column), to row i's candidate list at the row's running count (the program owns its rows: the
count is carried in registers, no atomics), and added to the row's bucket counts hist[i, b + 1] (global atomics);
after every REFRESH tiles th_i rises to the largest j with count(b >= j) >= K_SEL (the tiles between two refreshes
are an inner loop: with the refresh inside the tile loop Triton does not pipeline its loads). An entry is dropped
only when its bucket is below th_i, and th_i never passes the bucket of the row's K_SEL-th largest value (at least
K_SEL kept entries lie at or above it), so the candidates hold the row's top K_SEL, ties at the K_SEL-th value
included.
"""
import triton
import triton.language as tl

from hw.logits import fp8_tile_scores, key_span


@triton.jit
def _gate_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, cols, d, qt, w, ks, ke, tokens, row_in, SK, o, inv, th,
               count, hist_ptr, cand_v_ptr, cand_i_ptr, BLOCK_Q: tl.constexpr, H_PAD: tl.constexpr,
               CAP: tl.constexpr, NB: tl.constexpr, MASKED: tl.constexpr):
    """Score the keys `cols` of one tile, append the entries the gate keeps -> the rows' new counts."""
    sums, k_scale = fp8_tile_scores(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, cols, d, qt, w, SK, BLOCK_Q, H_PAD,
                                    0, MASKED)
    logits = sums * k_scale[:, None]
    visible = (cols[:, None] >= ks[None, :]) & (cols[:, None] < ke[None, :]) & row_in[None, :]
    f = tl.minimum(tl.maximum((logits - o[None, :]) * inv[None, :], 0.0), NB - 1.0)
    b = tl.where(logits != logits, -1, f.to(tl.int32))
    keep = visible & (b >= th[None, :])
    kept = keep.to(tl.int32)
    place = count[None, :] + tl.cumsum(kept, 0) - 1            # candidates stay in column order
    at = tokens[None, :] * CAP + place
    tl.store(cand_v_ptr + at, logits, mask=keep & (place < CAP))
    tl.store(cand_i_ptr + at, cols[:, None] + 0 * place, mask=keep & (place < CAP))
    tl.atomic_add(hist_ptr + tokens[None, :] * (NB + 1) + (b + 1), kept, mask=keep, sem="relaxed")
    return count + tl.sum(kept, 0)


@triton.jit
def _refresh(hist_ptr, tokens, row_in, th, K_SEL: tl.constexpr, NB: tl.constexpr):
    """th -> max(th, the largest bucket j with count(b >= j) >= K_SEL) (-1 while fewer than K_SEL were kept)."""
    # the counts read may miss some of this program's latest adds (a lower threshold, a looser gate: still a
    # superset); the barrier keeps the reads after the adds of every thread
    tl.debug_barrier()
    j = tl.arange(0, NB)
    h = tl.load(hist_ptr + tokens[:, None] * (NB + 1) + 1 + j[None, :], mask=row_in[:, None], other=0,
                cache_modifier=".cg")                                                   # [BLOCK_Q, NB], from L2
    at_least = tl.sum(h, 1)[:, None] - tl.cumsum(h, 1) + h
    return tl.maximum(th, tl.max(tl.where(at_least >= K_SEL, j[None, :], -1), 1))


@triton.jit
def gated_fp8_kernel(q_v_ptr, k_v_ptr, k_s_ptr, w_ptr, ks_ptr, ke_ptr, o_ptr, inv_ptr, hist_ptr, count_ptr,
                     cand_v_ptr, cand_i_ptr, S, SK, stride_qv_s, stride_qv_h, stride_kv_t, stride_ks_t, stride_w_s,
                     H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr,
                     BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr, K_SEL: tl.constexpr, CAP: tl.constexpr,
                     NB: tl.constexpr, REFRESH: tl.constexpr):
    """q_v e4m3 bytes [S, H, D], k_v e4m3 bytes [SK, D], k_s fp32 [SK], w fp32 [S, H], ks/ke int32 [S] (clamped
    as the scorer clamps them), o/inv fp32 [S] (the bucket maps; inv >= 0, else the map reverses the order and the
    gate may drop a top-k entry), hist int32 [S, NB + 1] zeroed. Writes count int32
    [S] (the row's kept entries; more than CAP: its list overflowed) and cand_v fp32 / cand_i int32 [S, CAP] (the
    first min(count, CAP) entries: values and columns, in column order). Grid (cdiv(S, BLOCK_Q),), longest rows
    first as the scorer."""
    pid = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)
    tokens = pid * BLOCK_Q + tl.arange(0, BLOCK_Q)
    row_in = tokens < S
    ks, ke, lo, hi, first, end = key_span(ks_ptr, ke_ptr, tokens, row_in, S, SK, BLOCK_K)
    whole_end = SK // BLOCK_K * BLOCK_K
    NQ: tl.constexpr = BLOCK_Q * H_PAD
    m = tl.arange(0, NQ)
    m_tok = pid * BLOCK_Q + m // H_PAD
    m_h = m % H_PAD
    col_ok = (m_tok < S) & (m_h < H)
    w = tl.load(w_ptr + m_tok * stride_w_s + m_h, mask=col_ok, other=0.0)
    t = tl.arange(0, BLOCK_K)
    d = tl.arange(0, D)
    q = tl.load(q_v_ptr + (m_tok * stride_qv_s + m_h * stride_qv_h)[:, None] + d[None, :], mask=col_ok[:, None],
                other=0)
    qt = tl.trans(q.to(tl.float8e4nv, bitcast=True))
    o = tl.load(o_ptr + tokens, mask=row_in, other=0.0)
    inv = tl.load(inv_ptr + tokens, mask=row_in, other=0.0)
    th = tl.full((BLOCK_Q,), -1, tl.int32)
    count = tl.zeros((BLOCK_Q,), tl.int32)
    body_end = tl.minimum(hi, whole_end)
    for c0 in range(first, body_end, REFRESH * BLOCK_K):
        for k0 in tl.range(c0, tl.minimum(c0 + REFRESH * BLOCK_K, body_end), BLOCK_K, num_stages=NUM_STAGES):
            count = _gate_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, k0 + t, d, qt, w, ks, ke, tokens, row_in,
                               SK, o, inv, th, count, hist_ptr, cand_v_ptr, cand_i_ptr, BLOCK_Q, H_PAD, CAP, NB, False)
        th = _refresh(hist_ptr, tokens, row_in, th, K_SEL, NB)
    for k0 in tl.range(tl.maximum(first, whole_end), hi, BLOCK_K, num_stages=1):       # the tile past SK
        count = _gate_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, k0 + t, d, qt, w, ks, ke, tokens, row_in, SK,
                           o, inv, th, count, hist_ptr, cand_v_ptr, cand_i_ptr, BLOCK_Q, H_PAD, CAP, NB, True)
    tl.store(count_ptr + tokens, count, mask=row_in)
