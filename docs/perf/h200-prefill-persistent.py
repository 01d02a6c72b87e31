"""A persistent, work-balanced form of the FP8 keys-on-M prefill scorer against the shipped one on the H200.

    PYTHONPATH=. python3 docs/perf/h200-prefill-persistent.py OUT.json

The shipped grid has a program per query block, the longest rows first: a full 8192 batch is 1024 equal programs
on 264 slots (two per SM), 3.9 waves, so the last wave leaves slots idle (h200-prefill-ablation.md, the
timeline). Here a grid of at most `slots` programs splits the batch's key tiles, counted per block in the shipped
order, into equal contiguous shares: a program scores the tail of one block's key range, whole blocks, then the
head of another's (a key tile is scored by exactly one program, so no two programs write one entry). Each program
stores the -inf columns outside the key tiles of blocks prog, prog + P, ..., one after each of its segments and
the rest at its end. The per-block tile counts and their prefix sum come from a small kernel and torch.cumsum
before it (both timed with it). Timing probe, not a kernel: FP8 only, no error flag. Rows: 8192 and 4096
queries = keys, H32 / D128, full and causal, alternating over two rounds, outputs compared bit for bit.
"""
import sys

import torch
import triton
import triton.language as tl

from hw._logits_details.prefill_keys_m import _clean_outside, _fp8_tile, _key_span, keys_m_prefill_settings
from hw.targets import Target
from tools.cmd_bench import _graph_time_us, json_recorder

INNER, REPLAYS, HEADS, HEAD_DIM = 3, 10, 32, 128


@triton.jit
def block_tiles_kernel(ks_ptr, ke_ptr, cum_ptr, S, SK, NB, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """cum[1 + i] = key tiles of block NB-1-i (the shipped order); cum[0] = 0 is set by the caller."""
    blk = tl.program_id(0).to(tl.int64)
    tokens = blk * BLOCK_Q + tl.arange(0, BLOCK_Q)
    _, _, _, _, first, end = _key_span(ks_ptr, ke_ptr, tokens, tokens < S, S, SK, BLOCK_K)
    tl.store(cum_ptr + NB - blk, ((end - first) // BLOCK_K).to(tl.int32))


@triton.jit
def _opaque_zero(x):
    """0, which the compiler cannot see through: offsets built on it are not hoisted out of the block loop (held
    across the key loop, they would take registers the key loop needs)."""
    return tl.inline_asm_elementwise("mov.u32 $0, 0;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def persistent_fp8_kernel(q_v_ptr, k_v_ptr, k_s_ptr, w_ptr, ks_ptr, ke_ptr, out_ptr, cum_ptr, S, SK, NB,
                          stride_qv_s, stride_qv_h, stride_kv_t, stride_ks_t, stride_w_s, stride_out_s,
                          H: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr,
                          BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr, PROMOTE_K: tl.constexpr,
                          CLEAN: tl.constexpr):
    # work indices in int32 (a batch's key tiles fit), row offsets in int64
    prog = tl.program_id(0)
    P = tl.num_programs(0)
    total = tl.load(cum_ptr + NB)
    u = (total.to(tl.int64) * prog // P).to(tl.int32)
    u_end = (total.to(tl.int64) * (prog + 1) // P).to(tl.int32)
    # the block (shipped order) holding tile u: the largest a with cum[a] <= u
    a = prog * 0
    b = NB + prog * 0
    while b - a > 1:
        mid = (a + b) // 2
        if tl.load(cum_ptr + mid) <= u:
            a = mid
        else:
            b = mid
    i = a
    clean_b = prog
    NQ: tl.constexpr = BLOCK_Q * H_PAD
    m = tl.arange(0, NQ)
    t = tl.arange(0, BLOCK_K)
    d = tl.arange(0, D)
    whole_end = SK // BLOCK_K * BLOCK_K
    while u < u_end:
        base = tl.load(cum_ptr + i)
        blk = (NB - 1 - i).to(tl.int64)
        tokens = blk * BLOCK_Q + tl.arange(0, BLOCK_Q)
        row_in = tokens < S
        ks, ke, lo, hi, first, end = _key_span(ks_ptr, ke_ptr, tokens, row_in, S, SK, BLOCK_K)
        seg_lo = first + (u - base) * BLOCK_K
        seg_hi = first + (tl.minimum(u_end, tl.load(cum_ptr + i + 1)) - base) * BLOCK_K
        out_cols = out_ptr + tokens[None, :] * stride_out_s
        mi = m + _opaque_zero(i)
        m_tok = blk * BLOCK_Q + mi // H_PAD
        m_h = mi % H_PAD
        col_ok = (m_tok < S) & (m_h < H)
        w = tl.load(w_ptr + m_tok * stride_w_s + m_h, mask=col_ok, other=0.0)
        q = tl.load(q_v_ptr + (m_tok * stride_qv_s + m_h * stride_qv_h)[:, None] + d[None, :], mask=col_ok[:, None],
                    other=0)
        qt = tl.trans(q.to(tl.float8e4nv, bitcast=True))
        for k0 in tl.range(seg_lo, tl.minimum(tl.minimum(hi, whole_end), seg_hi), BLOCK_K, num_stages=NUM_STAGES):
            _fp8_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, k0 + t, d, qt, w, ks, ke, out_cols, row_in, SK,
                      BLOCK_Q, H_PAD, PROMOTE_K, CLEAN, False)
        for k0 in tl.range(tl.maximum(seg_lo, whole_end), tl.minimum(hi, seg_hi), BLOCK_K, num_stages=1):
            _fp8_tile(k_v_ptr, k_s_ptr, stride_kv_t, stride_ks_t, k0 + t, d, qt, w, ks, ke, out_cols, row_in, SK,
                      BLOCK_Q, H_PAD, PROMOTE_K, CLEAN, True)
        if CLEAN:
            if clean_b < NB:
                _clean_outside(ks_ptr, ke_ptr, out_ptr, clean_b, S, SK, stride_out_s, BLOCK_Q, BLOCK_K, BLOCK_K)
                clean_b += P
        u = tl.minimum(u_end, tl.load(cum_ptr + i + 1))     # reloaded: fewer values live across the key loop
        i += 1
    if CLEAN:
        for cb in range(clean_b, NB, P):
            _clean_outside(ks_ptr, ke_ptr, out_ptr, cb, S, SK, stride_out_s, BLOCK_Q, BLOCK_K, BLOCK_K)


def inputs(size: int, causal: bool, device: str):
    """FP8 operands as tools.cmd_bench.prefill_inputs builds them (queries = keys = size)."""
    import hw
    gen = torch.Generator(device=device).manual_seed(0)
    q_bf16 = torch.randn(size, HEADS, HEAD_DIM, device=device, generator=gen).to(torch.bfloat16)
    k_bf16 = torch.randn(size, 1, HEAD_DIM, device=device, generator=gen).to(torch.bfloat16)
    weights = torch.randn(size, HEADS, device=device, generator=gen)
    q_v, weights = hw.quantize_q_fp8(q_bf16, weights)
    k_vals, k_scales = hw.quantize_q_fp8(k_bf16, torch.ones(size, 1, device=device))
    rows = torch.arange(size, device=device, dtype=torch.int32)
    ks = torch.zeros(size, dtype=torch.int32, device=device)
    ke = rows + 1 if causal else torch.full_like(ks, size)
    return q_v, (k_vals[:, 0], k_scales[:, 0].contiguous()), weights, ks, ke


def shipped_call(q_v, kv, weights, ks, ke):
    import hw
    return lambda: hw.fp8_fp4_mqa_logits((q_v, None), kv, weights, ks, ke, clean_logits=True,
                                         variant="fp8_keys_m")


def persistent_call(q_v, kv, weights, ks, ke, slots: int):
    """A call of the persistent form (out allocated per call, as the shipped launcher does)."""
    k_v, k_s = kv[0].view(torch.uint8), kv[1]           # e4m3 bytes, as the shipped launcher passes them
    q_v = q_v.view(torch.uint8)
    S, H, D = q_v.shape
    SK = k_v.shape[0]
    s = keys_m_prefill_settings(Target.NVIDIA, "fp8", H, D)
    NB = triton.cdiv(S, s.block_q)
    cum = torch.zeros(NB + 1, dtype=torch.int32, device=q_v.device)

    def call():
        out = torch.empty(S, SK, dtype=torch.float32, device=q_v.device)
        block_tiles_kernel[(NB,)](ks, ke, cum, S, SK, NB, BLOCK_Q=s.block_q, BLOCK_K=s.block_k, num_warps=1)
        cum.cumsum_(0)
        persistent_fp8_kernel[(min(NB, slots),)](
            q_v, k_v, k_s, weights, ks, ke, out, cum, S, SK, NB, q_v.stride(0), q_v.stride(1), k_v.stride(0),
            k_s.stride(0), weights.stride(0), out.stride(0), H=H, H_PAD=s.h_pad, D=D, BLOCK_Q=s.block_q,
            BLOCK_K=s.block_k, NUM_STAGES=s.num_stages, PROMOTE_K=s.promote_k, CLEAN=True, num_warps=s.num_warps)
        return out
    return call


def main(out_path: str) -> None:
    log = json_recorder(out_path)
    slots = 2 * torch.cuda.get_device_properties(0).multi_processor_count
    for size in (8192, 4096):
        for causal in (True, False):
            args = inputs(size, causal, "cuda")
            calls = {"shipped": shipped_call(*args), "persistent": persistent_call(*args, slots=slots)}
            same = bool(torch.equal(calls["persistent"](), calls["shipped"]()))
            pairs = int(args[4].sum()) - int(args[3].sum())
            for round_ in (1, 2):
                for label, call in calls.items():
                    us = _graph_time_us([call], inner=INNER, replays=REPLAYS)
                    log(f"{size}/{'causal' if causal else 'full'}/{label}/{round_}",
                        {"time_us": us, "TFLOPs": 2 * HEADS * HEAD_DIM * pairs / us / 1e6, "output_equal": same})
            del calls, args
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
