"""Quantizing kernels: K quantize + paged insert, Q quantize (launchers and argument checks: hw/quant.py).

Every kernel handles BLOCK_T rows of D elements per program. D need not be a power of two (32..256 in steps of 32),
so tiles are D_PAD = next_power_of_2(D) wide and masked; padding columns load as 0 and never change a block's
maximum (32 divides D, so a 32-element block is either all real or all padding). Program ids are cast to int64
before any offset arithmetic, and each token's page is addressed as `cache + page_id.to(int64) * page_stride` with
32-bit page-local offsets (DESIGN §3).
"""
import triton
import triton.language as tl

from .._constant import Constant
from .._error_flag import KIND_SLOT, report_if
from .codecs import fp8_quantize_tile, mxfp4_quantize_tile
from .page_offsets import (
    MX_BLOCK,
    SCALE_BYTES,
    fp8_scale_offsets,
    fp8_value_offsets,
    mxfp4_scale_offsets,
    mxfp4_value_offsets,
)

BF16_SHIFT = Constant(16)       # a bf16 is the high half of the fp32 with the same value
BF16_BITS_MASK = Constant(0xFFFF)


@triton.jit
def to_f32(x):
    """bf16/fp16/fp32 tensor -> the same values in fp32, exactly (subnormals included) on every backend.

    bf16 is the top 16 bits of an fp32, so its widening is a pure bit operation (what a GPU's value cast does too);
    it is done on the bits because the Triton interpreter's bf16 -> fp32 cast flushes bf16 subnormals to zero.
    """
    if x.dtype == tl.bfloat16:
        bits = x.to(tl.int16, bitcast=True).to(tl.int32) & BF16_BITS_MASK  # zero-extend the 16 bits
        return (bits << BF16_SHIFT).to(tl.float32, bitcast=True)
    return x.to(tl.float32)


@triton.jit
def _load_rows(x_ptr, rows, mask, stride_r, stride_c, D: tl.constexpr, D_PAD: tl.constexpr):
    """fp32 [BLOCK_T, D_PAD] tile of rows (int64 [BLOCK_T]) of a bf16/fp16/fp32 matrix; masked lanes are 0."""
    tl.static_assert((D // MX_BLOCK) * MX_BLOCK == D, "head dim must be a multiple of 32")
    tl.static_assert(D_PAD >= D, "D_PAD must be next_power_of_2(D)")
    d = tl.arange(0, D_PAD)
    m = mask[:, None] & (d < D)[None, :]
    return to_f32(tl.load(x_ptr + rows[:, None] * stride_r + d[None, :] * stride_c, mask=m, other=0.0))


@triton.jit
def _slot_rows(slot_ptr, flag_ptr, stride_s, num_tokens, num_slots, BLOCK_T: tl.constexpr, HAS_FLAG: tl.constexpr):
    """This program's rows (int64), their slots, and which rows write: 0 <= slot < num_pages * P (negative slots
    skip; slots past the cache skip too, reported with HAS_FLAG: the first such row and its slot)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    slot = tl.load(slot_ptr + rows * stride_s, mask=rows < num_tokens, other=-1)
    if HAS_FLAG:
        past = slot >= num_slots
        first = tl.min(tl.where(past, rows, num_tokens))
        report_if(flag_ptr, KIND_SLOT, first < num_tokens, first, tl.max(tl.where(rows == first, slot, -1)), True)
    return rows, slot, (slot >= 0) & (slot < num_slots)


@triton.jit
def k_quant_cache_mxfp4_kernel(k_ptr, cache_ptr, slot_ptr, flag_ptr, num_tokens, num_slots, page_stride,
                               stride_kt, stride_kd, stride_s,
                               D: tl.constexpr, D_PAD: tl.constexpr, P: tl.constexpr, TILED: tl.constexpr,
                               RULE: tl.constexpr, BLOCK_T: tl.constexpr, HAS_FLAG: tl.constexpr):
    """k [T, D] -> MXFP4 codes + E8M0 scales of token `slot` in page slot // P, token slot % P (planar or tiled).

    Writes exactly D/2 + D/32 bytes per written token, byte by byte; rows with an out-of-view slot write nothing.
    """
    rows, slot, write = _slot_rows(slot_ptr, flag_ptr, stride_s, num_tokens, num_slots, BLOCK_T, HAS_FLAG)
    x = _load_rows(k_ptr, rows, write, stride_kt, stride_kd, D, D_PAD)
    codes, scales = mxfp4_quantize_tile(x, D_PAD // MX_BLOCK, RULE)
    page = tl.where(write, slot // P, 0)
    t = tl.where(write, slot % P, 0).to(tl.int32)
    base = cache_ptr + page * page_stride
    j = tl.arange(0, D_PAD // 2)
    tl.store(base[:, None] + mxfp4_value_offsets(t, j, P, D, TILED), codes.to(tl.uint8),
             mask=write[:, None] & (j < D // 2)[None, :])
    g = tl.arange(0, D_PAD // MX_BLOCK)
    tl.store(base[:, None] + mxfp4_scale_offsets(t, g, P, D, TILED), scales.to(tl.uint8),
             mask=write[:, None] & (g < D // MX_BLOCK)[None, :])


@triton.jit
def k_quant_cache_fp8_kernel(k_ptr, cache_ptr, slot_ptr, flag_ptr, num_tokens, num_slots, page_stride,
                             stride_kt, stride_kd, stride_s,
                             D: tl.constexpr, D_PAD: tl.constexpr, P: tl.constexpr, BLOCK_T: tl.constexpr,
                             HAS_FLAG: tl.constexpr, HW_E4M3: tl.constexpr):
    """k [T, D] -> E4M3FN values + the fp32 per-token scale (4 little-endian bytes) of token `slot`.
    HW_E4M3: fp8_quantize_tile's."""
    rows, slot, write = _slot_rows(slot_ptr, flag_ptr, stride_s, num_tokens, num_slots, BLOCK_T, HAS_FLAG)
    x = _load_rows(k_ptr, rows, write, stride_kt, stride_kd, D, D_PAD)
    values, scale_bits = fp8_quantize_tile(x, HW_E4M3)
    page = tl.where(write, slot // P, 0)
    t = tl.where(write, slot % P, 0).to(tl.int32)
    base = cache_ptr + page * page_stride
    d = tl.arange(0, D_PAD)
    tl.store(base[:, None] + fp8_value_offsets(t, d, D), values.to(tl.uint8),
             mask=write[:, None] & (d < D)[None, :])
    i = tl.arange(0, SCALE_BYTES)
    scale_bytes = (scale_bits[:, None] >> (8 * i)[None, :]) & 0xFF
    tl.store(base[:, None] + fp8_scale_offsets(t, i, P, D), scale_bytes.to(tl.uint8), mask=write[:, None])


@triton.jit
def q_quant_mxfp4_kernel(q_ptr, codes_ptr, scales_ptr, num_rows, stride_qr, stride_qd,
                         D: tl.constexpr, D_PAD: tl.constexpr, RULE: tl.constexpr, BLOCK_T: tl.constexpr):
    """q rows [R, D] -> codes uint8 [R, D/2] and E8M0 scales uint8 [R, D/32] (both contiguous)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    live = rows < num_rows
    x = _load_rows(q_ptr, rows, live, stride_qr, stride_qd, D, D_PAD)
    codes, scales = mxfp4_quantize_tile(x, D_PAD // MX_BLOCK, RULE)
    j = tl.arange(0, D_PAD // 2)
    tl.store(codes_ptr + rows[:, None] * (D // 2) + j[None, :], codes.to(tl.uint8),
             mask=live[:, None] & (j < D // 2)[None, :])
    g = tl.arange(0, D_PAD // MX_BLOCK)
    tl.store(scales_ptr + rows[:, None] * (D // MX_BLOCK) + g[None, :], scales.to(tl.uint8),
             mask=live[:, None] & (g < D // MX_BLOCK)[None, :])


@triton.jit
def q_quant_fp8_kernel(q_ptr, w_ptr, values_ptr, w_out_ptr, num_rows, stride_qr, stride_qd, stride_w,
                       D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_T: tl.constexpr, HW_E4M3: tl.constexpr):
    """q rows [R, D] -> E4M3FN bytes [R, D] (contiguous) and w_out[r] = w[r] * scale[r] (fp32; NaN rows give NaN).

    The scale is a power of two, so the product is the exact fp32 rounding of w * scale. HW_E4M3:
    fp8_quantize_tile's.
    """
    rows = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    live = rows < num_rows
    x = _load_rows(q_ptr, rows, live, stride_qr, stride_qd, D, D_PAD)
    values, scale_bits = fp8_quantize_tile(x, HW_E4M3)
    d = tl.arange(0, D_PAD)
    tl.store(values_ptr + rows[:, None] * D + d[None, :], values.to(tl.uint8),
             mask=live[:, None] & (d < D)[None, :])
    w = to_f32(tl.load(w_ptr + rows * stride_w, mask=live, other=0.0))
    tl.store(w_out_ptr + rows, w * scale_bits.to(tl.float32, bitcast=True), mask=live)
