"""A timing sketch of the MXFP4 decode fold in Gluon (triton.experimental.gluon): the key codes are loaded straight
into the registers of the wgmma A operand, folded there (the kernel's prmt conversion) and multiplied, with no
shared-memory round trip; against the shipped `mxfp4_keys_m` on the same inputs, logits compared:

    PYTHONPATH=. python3 docs/perf/h200-gluon-fold-sketch.py OUT.json

Not a kernel of the library: B64 / H32 / D128 / page 64 / full pages only, no masks, NaN or wide-span keys. The
query operands are built on the host (folded, in the K order the sketch loads the keys in); a float64 emulation of
the same arithmetic checks them against the shipped kernel. MODE 0 loads each tile's codes and scales when it scores
it; 1 loads the next tile's into registers first; 2 keeps 3 tiles in flight through a cp.async ring in shared memory;
3 loads two tiles, then scores both.
"""
import json
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

import hw
from hw._logits_details.paged_keys_m import FOLD_BYTES_PTX
from sim.formats import E2M1_VALUES


@gluon.jit
def _load_tile(cache_ptr, pid, page_stride, rows, gcol):
    base = cache_ptr + pid.to(gl.int64) * page_stride
    codes = gl.load(base + rows[:, None] * 64 + gcol[None, :])
    sw = gl.load((base + 4096 + rows * 4).to(gl.pointer_type(gl.int32)))
    return codes, sw


@gluon.jit
def _issue_tile(kc, ks, cache_ptr, pid, page_stride, rows, gcol):
    """cp.async of one tile's codes (each thread its own 4-byte chunks, in the A layout) and scale words."""
    base = cache_ptr + pid.to(gl.int64) * page_stride
    async_copy.async_copy_global_to_shared(kc, base + rows[:, None] * 64 + gcol[None, :])
    async_copy.async_copy_global_to_shared(ks, (base + 4096 + rows * 4).to(gl.pointer_type(gl.int32)))


@gluon.jit
def _score_tile(codes, sw, page, b, out_ptr, width, q1, q2, w, c, blk, rows_o, mma: gl.constexpr):
    s0 = sw & 0xFF
    s1 = (sw >> 8) & 0xFF
    s2 = (sw >> 16) & 0xFF
    s3 = (sw >> 24) & 0xFF
    smax = gl.maximum(gl.maximum(s0, s1), gl.maximum(s2, s3))
    sg = ((sw[:, None] >> (8 * blk[None, :])) & 0xFF)
    d8 = ((gl.maximum(sg - smax[:, None], -11) + 12) << 3).to(gl.uint8)
    k1, k2 = gl.inline_asm_elementwise(FOLD_BYTES_PTX, "=r,=r,r,r", [codes, d8], dtype=(gl.uint8, gl.uint8),
                                       is_pure=True, pack=4)
    acc = gl.zeros([64, 32], gl.float32, layout=mma)
    acc = warpgroup_mma(k1.to(gl.float8e4nv, bitcast=True), q1.permute((1, 0)), acc)
    acc = warpgroup_mma(k2.to(gl.float8e4nv, bitcast=True), q2.permute((1, 0)), acc)
    logit = gl.sum(gl.maximum(acc, 0.0) * w[None, :], axis=1)
    kf = ((gl.convert_layout(smax, gl.SliceLayout(1, mma)) + c - 139) << 23).to(gl.float32, bitcast=True)
    gl.store(out_ptr + b * width + page * 64 + rows_o, logit * kf)


@gluon.jit
def sketch_kernel(cache_ptr, qop_ptr, w_ptr, c_ptr, bt_ptr, out_ptr, page_stride, max_pages, width,
                  TILES: gl.constexpr, NUM_WARPS: gl.constexpr, MODE: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                  instr_shape=[16, 32, 32])
    A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
    QL: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [NUM_WARPS, 1], [1, 0])
    QS: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=8, rank=2)
    b = gl.program_id(0).to(gl.int64)
    chunk = gl.program_id(1)
    # Q operands (host-prepared: [B, 2, 32 columns, 64 K bytes]) into shared memory
    qn = gl.arange(0, 32, layout=gl.SliceLayout(1, QL))
    qk = gl.arange(0, 64, layout=gl.SliceLayout(0, QL))
    q_at = qop_ptr + b * 4096 + qn[:, None] * 64 + qk[None, :]
    q1 = gl.allocate_shared_memory(gl.float8e4nv, [32, 64], QS, gl.load(q_at).to(gl.float8e4nv, bitcast=True))
    q2 = gl.allocate_shared_memory(gl.float8e4nv, [32, 64], QS, gl.load(q_at + 2048).to(gl.float8e4nv, bitcast=True))
    fence_async_shared()
    w = gl.load(w_ptr + b * 32 + gl.arange(0, 32, layout=gl.SliceLayout(0, mma)))
    c = gl.load(c_ptr + b)
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, A))
    cols = gl.arange(0, 64, layout=gl.SliceLayout(0, A))
    gcol = 16 * ((cols % 16) // 4) + 4 * (cols // 16) + cols % 4      # thread j's chunks: block j's 16 bytes
    gcol = gl.max_contiguous(gl.multiple_of(gcol, 4), 4)
    blk = (cols % 16) // 4
    rows_o = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    bt_row = bt_ptr + b * max_pages + chunk * TILES
    if MODE == 2:       # a cp.async ring of STAGES tiles; each thread reads back only what it copied
        STAGES: gl.constexpr = 3
        IDS: gl.constexpr = gl.BlockedLayout([TILES], [32], [NUM_WARPS], [0])
        tt = gl.arange(0, TILES, layout=IDS)
        ids = gl.load(bt_row + tt)
        CS: gl.constexpr = gl.SwizzledSharedLayout(4, 1, 1, [1, 0])
        SS: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        kc = gl.allocate_shared_memory(gl.uint8, [STAGES, 64, 64], CS)
        ks = gl.allocate_shared_memory(gl.int32, [STAGES, 64], SS)
        for p in gl.static_range(STAGES - 1):
            if p < TILES:
                _issue_tile(kc.index(p), ks.index(p), cache_ptr, gl.sum(gl.where(tt == p, ids, 0), 0), page_stride,
                            rows, gcol)
            async_copy.commit_group()
        for t in range(TILES):
            nt = t + STAGES - 1
            if nt < TILES:
                _issue_tile(kc.index(nt % STAGES), ks.index(nt % STAGES), cache_ptr,
                            gl.sum(gl.where(tt == nt, ids, 0), 0), page_stride, rows, gcol)
            async_copy.commit_group()
            async_copy.wait_group(STAGES - 1)
            codes = kc.index(t % STAGES).load(A)
            sw = ks.index(t % STAGES).load(gl.SliceLayout(1, A))
            _score_tile(codes, sw, chunk * TILES + t, b, out_ptr, width, q1, q2, w, c, blk, rows_o, mma)
    elif MODE == 3:     # two tiles loaded, then both scored: twice the bytes in flight per warp
        for t in range(0, TILES, 2):
            codes, sw = _load_tile(cache_ptr, gl.load(bt_row + t), page_stride, rows, gcol)
            codes2, sw2 = _load_tile(cache_ptr, gl.load(bt_row + t + 1), page_stride, rows, gcol)
            _score_tile(codes, sw, chunk * TILES + t, b, out_ptr, width, q1, q2, w, c, blk, rows_o, mma)
            _score_tile(codes2, sw2, chunk * TILES + t + 1, b, out_ptr, width, q1, q2, w, c, blk, rows_o, mma)
    elif MODE == 1:     # the next tile's codes and scales loaded into registers while this one is scored
        codes, sw = _load_tile(cache_ptr, gl.load(bt_row), page_stride, rows, gcol)
        pid_next = gl.load(bt_row + 1 % TILES)
        for t in range(TILES):
            codes_next, sw_next = _load_tile(cache_ptr, pid_next, page_stride, rows, gcol)
            pid_next = gl.load(bt_row + gl.minimum(t + 2, TILES - 1))
            _score_tile(codes, sw, chunk * TILES + t, b, out_ptr, width, q1, q2, w, c, blk, rows_o, mma)
            codes = codes_next
            sw = sw_next
    else:
        for t in range(TILES):
            codes, sw = _load_tile(cache_ptr, gl.load(bt_row + t), page_stride, rows, gcol)
            _score_tile(codes, sw, chunk * TILES + t, b, out_ptr, width, q1, q2, w, c, blk, rows_o, mma)


def decode_codes(codes):
    """uint8 [..., D/2] -> float64 [..., D] e2m1 values (element 2j low nibble), by sim's table of the format."""
    nib = torch.stack([codes & 0xF, codes >> 4], -1).flatten(-2).long()
    return torch.from_numpy(E2M1_VALUES).to(codes.device)[nib]


def perm_index(D=128):
    """element index of logical column L of operand 1 / 2 (K = D/2 each)."""
    L = torch.arange(D // 2)
    j, m, i = (L % 16) // 4, L // 16, L % 4
    e1 = 32 * j + 8 * m + i
    return e1, e1 + 4


def build_inputs(batch, context, device, seed, page=64, heads=32, D=128):
    gen = torch.Generator(device=device).manual_seed(seed)
    pages = context // page
    bpt = 68
    page_stride = page * bpt
    pool = torch.zeros(batch * pages * page_stride, dtype=torch.uint8, device=device)
    kv_cache = pool.as_strided((batch * pages, page, 1, bpt), (page_stride, bpt, bpt, 1))
    bt = torch.randperm(batch * pages, device=device, generator=gen).to(torch.int32).view(batch, pages).contiguous()
    slots = (bt.to(torch.int64)[:, :, None] * page + torch.arange(page, device=device)).reshape(-1)
    k = torch.randn(batch * context, D, device=device, generator=gen).to(torch.bfloat16)
    hw.indexer_k_quant_and_cache(k, kv_cache, slots, kv_dtype="mxfp4")
    q_bf16 = torch.randn(batch, 1, heads, D, device=device, generator=gen).to(torch.bfloat16)
    weights = torch.randn(batch, heads, device=device, generator=gen)
    codes, scales = hw.quantize_q_mxfp4(q_bf16)
    ctx = torch.full((batch,), context, dtype=torch.int32, device=device)
    # the sketch's query operands: q e2m1 x 2^(rel + 6) as e4m3, split K order permuted as the sketch loads keys
    s = scales[:, 0].to(torch.int32)                                 # [B, H, 4]
    sqmax = s.max(-1).values
    rel = torch.clamp(s - sqmax[..., None], min=-11)
    vals = decode_codes(codes[:, 0]) * torch.pow(2.0, (rel + 6).double()).repeat_interleave(32, -1)
    e1, e2 = perm_index(D)
    ops = torch.stack([vals[..., e1.to(device)], vals[..., e2.to(device)]], 1)   # [B, 2, H, 64]
    qop = ops.to(torch.float8_e4m3fn).view(torch.uint8).contiguous()
    assert torch.equal(qop.view(torch.float8_e4m3fn).double(), ops), "query operand not exact in e4m3"
    c = sqmax.max(-1).values                                          # [B]
    w_fold = (weights.double() * torch.pow(2.0, (sqmax - c[:, None]).double())).float().contiguous()
    meta = hw.get_paged_mqa_logits_metadata(ctx, page, 132)

    def ref():
        return hw.fp8_fp4_paged_mqa_logits((codes, scales), kv_cache, weights, ctx, bt, meta, context,
                                           clean_logits=False)
    return dict(pool=pool, bt=bt, qop=qop, w_fold=w_fold, c=c.to(torch.int32).contiguous(), ref=ref,
                page_stride=page_stride, pages=pages)


def emulate(inp, batch, context, page=64):
    """float64 emulation of the sketch's arithmetic on the host (checks operands and permutation)."""
    pool, bt = inp["pool"].cpu(), inp["bt"].cpu()
    qop = inp["qop"].cpu().view(torch.float8_e4m3fn).double()
    out = torch.empty(batch, context, dtype=torch.float64)
    e1, e2 = perm_index()
    for b in range(batch):
        for p in range(inp["pages"]):
            base = int(bt[b, p]) * inp["page_stride"]
            kc = pool[base: base + 4096].view(64, 64)
            ks = pool[base + 4096: base + 4352].view(64, 4).to(torch.int32)
            smax = ks.max(-1).values
            rel = torch.clamp(ks - smax[:, None], min=-11)
            kv = decode_codes(kc) * torch.pow(2.0, (rel + 6).double()).repeat_interleave(32, -1)
            s = kv[:, e1] @ qop[b, 0].T + kv[:, e2] @ qop[b, 1].T     # [64, H]
            kf = torch.pow(2.0, (smax + int(inp["c"][b]) - 266).double())
            out[b, p * page:(p + 1) * page] = kf * (torch.clamp(s, min=0) * inp["w_fold"][b].cpu().double()).sum(-1)
    return out


def main(out_path, configs=((4, 0), (8, 0), (4, 1), (8, 1), (16, 1), (4, 2), (8, 2), (16, 2), (4, 3), (8, 3))):
    from tools.cmd_bench import _copy_GBps
    from tools.timing import graph_time_us
    batch, context = 64, 8192
    result = {"copy": _copy_GBps(20, 30)}
    sets = [build_inputs(batch, context, "cuda", seed) for seed in range(4)]
    outs = [torch.empty(batch, context, device="cuda") for _ in sets]

    def sketch(i, tiles, mode):
        inp = sets[i]
        return lambda: sketch_kernel[(batch, context // (64 * tiles))](
            inp["pool"], inp["qop"], inp["w_fold"], inp["c"], inp["bt"], outs[i], inp["page_stride"], inp["pages"],
            context, TILES=tiles, NUM_WARPS=4, MODE=mode, num_warps=4)

    ref = sets[0]["ref"]()
    emu = emulate(sets[0], 2, context)
    scale = ref.abs().max()
    result["emulation_vs_shipped_rows0_1"] = float((emu - ref[:2].double().cpu()).abs().max() / scale.double().cpu())
    result["shipped_mxfp4_us"] = graph_time_us([s["ref"] for s in sets], inner=20, replays=30)
    for tiles, mode in configs:
        outs[0].fill_(float("nan"))
        sketch(0, tiles, mode)()
        torch.cuda.synchronize()
        name = f"sketch_tiles{tiles}{('', '_prefetch', '_cp_async', '_pairs')[mode]}"
        result[name] = {"equal_to_shipped": bool(torch.equal(outs[0], ref)),
                        "max_abs_diff_over_max": float((outs[0] - ref).abs().max() / scale),
                        "time_us": graph_time_us([sketch(i, tiles, mode) for i in range(4)], inner=20,
                                                  replays=30)}
        print(name, result[name])
    print(result)
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
