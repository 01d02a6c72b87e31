"""Tile helpers shared by the prefill and the paged scorer kernels (DESIGN §1, §4, §5).

Both kernels score an [M, BN] tile: M query rows (a query row is one (token, head) pair, heads padded to a power of
two) against BN keys. Keys are addressed by per-token byte offsets plus a per-block stride, so one helper serves
contiguous K (prefill), the block-planar pages and the MFMA-tiled pages:

    MXFP4 code byte (token t, byte j of its D/2)  = k_tok_v[t] + (j // 16) * k_blk_v + j % 16
    MXFP4 scale byte (token t, block g)           = k_tok_s[t] + g * k_blk_s
    FP8 value byte (token t, element d)           = k_tok[t] + d          (fp32 scale loaded by the caller)

MXFP4 paths (constexpr MX_PATH):
  MX_DOT_SCALED   tl.dot_scaled(q, q_scale, "e2m1", k^T, k_scale, "e2m1"): native scaled MFMA on gfx950
                  (v_mfma_scale_f32_*_f8f6f4), Triton's bf16 decomposition elsewhere, exact emulation in the
                  interpreter.
  MX_UNPACK       pure Triton: each 32-element block is unpacked exactly to e4m3 bytes, scored with one K = 32 FP8
                  dot (exact: at most 13 significant bits), and scaled in fp32 by the two E8M0 factors.
Exact e2m1 -> e4m3: the e4m3 byte ((c & 7) << 2) | ((c & 8) << 4) has the value e2m1(c) * 2^-6 for every code c,
including the subnormal 0.5 (-> 4 * 2^-9); the 2^-6 of both operands is undone by UNPACK_RESCALE = 2^12.
"""
import triton
import triton.language as tl

MX_DOT_SCALED = tl.constexpr(0)
MX_UNPACK = tl.constexpr(1)

E8M0_ONE = tl.constexpr(127)          # scale byte of 2^0: the `other` of masked scale loads
E8M0_NAN_BYTE = tl.constexpr(255)
F32_TWO_POW_M127 = tl.constexpr(0x00400000)   # fp32 bits of 2^-127 (E8M0 byte 0, a subnormal)
F32_QNAN = tl.constexpr(0x7FC00000)
F32_EXP_SHIFT = tl.constexpr(23)
UNPACK_RESCALE = tl.constexpr(4096.0)         # 2^12 = (2^6)^2, see the module docstring
MX_BLOCK_BYTES = tl.constexpr(16)             # 32 e2m1 codes


@triton.jit
def relu_keep_nan(x):
    """max(x, 0) that returns NaN for NaN (tl.maximum(x, 0) returns 0 there)."""
    return tl.where((x > 0) | (x != x), x, 0.0)


@triton.jit
def e8m0_to_f32(b):
    """uint8 E8M0 bytes -> fp32 2^(b - 127); byte 0 -> 2^-127 (subnormal), byte 255 -> NaN (DESIGN §1)."""
    bits = b.to(tl.int32) << F32_EXP_SHIFT
    bits = tl.where(b == 0, F32_TWO_POW_M127, bits)
    bits = tl.where(b == E8M0_NAN_BYTE, F32_QNAN, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_nibble_to_e4m3_bits(c):
    """int32 e2m1 codes 0..15 -> int32 e4m3 bytes of value e2m1(c) * 2^-6 (magnitude bits 2..4, sign bit 7)."""
    return ((c & 7) << 2) | ((c & 8) << 4)


@triton.jit
def _unpack_e2m1_pure(packed):
    """uint8 [R, 16] packed codes -> (even, odd) uint8 [R, 16] e4m3 bytes, element-wise Triton integer ops."""
    w = packed.to(tl.int32)
    even = _e2m1_nibble_to_e4m3_bits(w & 0xF).to(tl.uint8)
    odd = _e2m1_nibble_to_e4m3_bits(w >> 4).to(tl.uint8)
    return even, odd


@triton.jit
def unpack_e2m1_block(packed, MX_PATH: tl.constexpr):
    """uint8 [R, 16] (one 32-element block per row, even element in the low nibble) -> float8e4nv [R, 32].

    Element order inside the block is (0, 1, 2, ..., 31); value = e2m1 * 2^-6 exactly.
    """
    even, odd = _unpack_e2m1_pure(packed)
    rows: tl.constexpr = packed.shape[0]
    x = tl.reshape(tl.join(even, odd), (rows, 2 * MX_BLOCK_BYTES))
    return x.to(tl.float8e4nv, bitcast=True)


@triton.jit
def mxfp4_tile(q_v_ptr, q_s_ptr, q_row_v, q_row_s, q_ok,
               k_v_ptr, k_s_ptr, k_tok_v, k_tok_s, k_ok, k_blk_v, k_blk_s,
               D: tl.constexpr, MX_PATH: tl.constexpr):
    """fp32 [M, BN] dot products of M MXFP4 query rows with BN MXFP4 keys.

    q row m: codes at q_v_ptr + q_row_v[m] + j (j < D/2), scales at q_s_ptr + q_row_s[m] + g (g < D/32).
    Keys: see the module docstring. Rows with q_ok False are not read (codes 0, scale 2^0); keys with k_ok False
    are not read either (codes 0, scale byte 255: NaN scores, which the callers never store as visible logits, and
    which make the decode scorer's keys of a page without a valid id NaN).
    """
    if MX_PATH == MX_DOT_SCALED:
        j = tl.arange(0, D // 2)
        g = tl.arange(0, D // 32)
        qv = tl.load(q_v_ptr + q_row_v[:, None] + j[None, :], mask=q_ok[:, None], other=0)
        qs = tl.load(q_s_ptr + q_row_s[:, None] + g[None, :], mask=q_ok[:, None], other=E8M0_ONE)
        k_byte = (j // MX_BLOCK_BYTES) * k_blk_v + j % MX_BLOCK_BYTES
        kv = tl.load(k_v_ptr + k_tok_v[None, :] + k_byte[:, None], mask=k_ok[None, :], other=0)      # [D/2, BN]
        ks = tl.load(k_s_ptr + k_tok_s[:, None] + g[None, :] * k_blk_s, mask=k_ok[:, None], other=E8M0_NAN_BYTE)
        acc = tl.dot_scaled(qv, qs, "e2m1", kv, ks, "e2m1")
    else:
        j = tl.arange(0, MX_BLOCK_BYTES)
        acc = tl.zeros((q_row_v.shape[0], k_tok_v.shape[0]), dtype=tl.float32)
        for blk in tl.static_range(D // 32):
            qv = tl.load(q_v_ptr + q_row_v[:, None] + blk * MX_BLOCK_BYTES + j[None, :], mask=q_ok[:, None],
                         other=0)
            kv = tl.load(k_v_ptr + k_tok_v[:, None] + blk * k_blk_v + j[None, :], mask=k_ok[:, None], other=0)
            part = tl.dot(unpack_e2m1_block(qv, MX_PATH), tl.trans(unpack_e2m1_block(kv, MX_PATH)))
            qs = e8m0_to_f32(tl.load(q_s_ptr + q_row_s + blk, mask=q_ok, other=E8M0_ONE))
            ks = e8m0_to_f32(tl.load(k_s_ptr + k_tok_s + blk * k_blk_s, mask=k_ok, other=E8M0_NAN_BYTE))
            # part * 2^12 is the exact block sum; the scale product 2^(sq + sk) is exact while
            # -149 <= sq + sk <= 127 (DESIGN §4 keeps fixtures in -147..117), so the only rounding is the add.
            acc += (part * UNPACK_RESCALE) * (qs[:, None] * ks[None, :])
    return acc


@triton.jit
def fp8_tile(q_ptr, q_row, q_ok, k_ptr, k_tok, k_ok, k_scale, D: tl.constexpr, PROMOTE_K: tl.constexpr):
    """fp32 [M, BN] dot products of M e4m3 query rows with BN e4m3 keys times the keys' fp32 scales.

    q row m: D bytes at q_ptr + q_row[m]; key t: D bytes at k_ptr + k_tok[t]; k_scale fp32 [BN].
    PROMOTE_K: elements accumulated in the MMA's own accumulator before promotion to fp32 (Hopper FP8 MMA keeps
    about 14 bits; 32 keeps the fp32 bound of DESIGN §4; ignored where the MMA accumulates in fp32).
    """
    d = tl.arange(0, D)
    q = tl.load(q_ptr + q_row[:, None] + d[None, :], mask=q_ok[:, None], other=0).to(tl.float8e4nv, bitcast=True)
    k = tl.load(k_ptr + k_tok[None, :] + d[:, None], mask=k_ok[None, :], other=0).to(tl.float8e4nv, bitcast=True)
    return tl.dot(q, k, max_num_imprecise_acc=PROMOTE_K) * k_scale[None, :]


@triton.jit
def weighted_head_sum(scores, w, row_ok, ROWS: tl.constexpr, H_PAD: tl.constexpr):
    """[ROWS * H_PAD, BN] scores -> [ROWS, BN] logits = sum_h w * relu(score); padded rows contribute exactly 0
    (not w * relu, which is NaN when a NaN key meets a padded row)."""
    contrib = tl.where(row_ok[:, None], relu_keep_nan(scores) * w[:, None], 0.0)
    return tl.sum(tl.reshape(contrib, (ROWS, H_PAD, scores.shape[1])), axis=1)
