"""Page-local byte offsets of the K-cache page layouts (DESIGN §2): the one definition the writer, the gather and
the paged decode scorer all address pages with.

(Divisibility asserts are written (a // b) * b == a: the interpreter's tl.constexpr has no __rmod__.)

All offsets are int32 and relative to the page base `cache + page_id.to(int64) * page_stride`. t: token within
the page (int32), P: page size, D: head dim. MXFP4 value byte j of a token holds elements 2j (low nibble) and
2j + 1 (high nibble); scale byte g covers elements 32g .. 32g + 31.

Two forms, one set of formulas:
  per token   *_token_offset / mxfp4_scale_offset(t, 0), *_scale_base, *_block_stride: elementwise over t of any
              shape; the paged scorer passes t [BN] and walks a token's blocks with the stride
              (hw/_logits_details/paged_keys_m.py).
  per byte    *_offsets(t [R], byte index [C]) -> [R, C]: the writer and the gather; built on the per-token form.
Bases and strides are compile-time constants; a jit function returns them as int32 scalars (Triton cannot return
a constexpr), which the compiler folds exactly as it folds the constexpr expression.
"""
import triton
import triton.language as tl

from .. import checks, layout
from .._constant import Constant

# jit views of the host-side constants (hw/layout.py, hw/checks.py): one definition each
TILE_D = Constant(layout.TILE_HEAD_DIM)          # mxfp4_tiled: head-dim elements per tile
TILE_TOKENS = Constant(layout.TILE_TOKENS)       # mxfp4_tiled: tokens sharing a 4-byte scale word
MX_BLOCK = Constant(checks.MX_BLOCK)             # MXFP4: elements per block (one scale byte)
TILE_BYTES = Constant(checks.MX_BLOCK // 2)      # MXFP4: code bytes of one block
SCALE_BYTES = Constant(4)                         # fp8: a token's fp32 scale, 4 little-endian bytes


@triton.jit
def fp8_value_token_offset(t, D: tl.constexpr):
    """First value byte of token t: t * D (elementwise; value byte d of the token is d bytes past it)."""
    return t * D


@triton.jit
def fp8_scale_base(P: tl.constexpr, D: tl.constexpr):
    """The scale region's page-local offset: P * D, after all tokens' values."""
    return P * D


@triton.jit
def fp8_scale_token_offset(t):
    """Token t's little-endian fp32 scale within the scale region: 4t (elementwise; 4-byte aligned)."""
    return SCALE_BYTES * t


@triton.jit
def fp8_value_offsets(t, d, D: tl.constexpr):
    """fp8 value byte (t, d): t * D + d. t [R], d [C] -> [R, C]."""
    return fp8_value_token_offset(t[:, None], D) + d[None, :]


@triton.jit
def fp8_scale_offsets(t, i, P: tl.constexpr, D: tl.constexpr):
    """Byte i (0..3, little-endian) of token t's fp32 scale: P * D + 4t + i. t [R], i [4] -> [R, 4]."""
    return fp8_scale_base(P, D) + fp8_scale_token_offset(t[:, None]) + i[None, :]


@triton.jit
def mxfp4_value_token_offset(t, P: tl.constexpr, D: tl.constexpr, TILED: tl.constexpr):
    """Offset of token t's first code byte (elementwise). Code byte j of token t is byte j % 16 of its 16-byte
    block j // 16, at mxfp4_value_token_offset(t) + (j // 16) * mxfp4_value_block_stride() + j % 16.

    planar: t * D/2 (a token's D/2 bytes are contiguous).
    tiled:  t * 16: DESIGN's (d//128)*4*P*16 + ((d%128)//32)*P*16 + t*16 + (d%32)//2 with j = d // 2; since
            (d//128)*4 + (d%128)//32 = d//32 = j//16, the 32-element blocks of all P tokens lie one after
            another, 16 bytes per token.
    """
    if TILED:
        tl.static_assert((D // TILE_D) * TILE_D == D, "mxfp4_tiled needs D % 128 == 0")
        tl.static_assert((P // TILE_TOKENS) * TILE_TOKENS == P, "mxfp4_tiled needs P % 4 == 0")
        return t * TILE_BYTES
    else:
        return t * (D // 2)


@triton.jit
def mxfp4_value_block_stride(P: tl.constexpr, TILED: tl.constexpr):
    """Bytes between a token's consecutive 16-byte code blocks: 16 (planar), P * 16 (tiled)."""
    if TILED:
        return P * TILE_BYTES
    else:
        return TILE_BYTES


@triton.jit
def mxfp4_scale_base(P: tl.constexpr, D: tl.constexpr):
    """The scale region's page-local offset: P * D/2, after all tokens' codes."""
    return P * (D // 2)


@triton.jit
def mxfp4_scale_offset(t, g, P: tl.constexpr, D: tl.constexpr, TILED: tl.constexpr):
    """Scale byte g (block g) of token t within the scale region; t and g broadcast elementwise. g = 0 gives
    the per-token offset that, with mxfp4_scale_block_stride, addresses every scale byte of the token.

    planar: t * D/32 + g.
    tiled:  g * P + (t % (P/4)) * 4 + t // (P/4): DESIGN's (g//4)*4*P + (g%4)*P + (t % (P/4))*4 + t // (P/4);
            one 4-byte word holds tokens t, t + P/4, t + P/2, t + 3P/4, so writers store bytes, never words.
    """
    if TILED:
        tl.static_assert((P // TILE_TOKENS) * TILE_TOKENS == P, "mxfp4_tiled needs P % 4 == 0")
        QUARTER: tl.constexpr = P // TILE_TOKENS
        return g * P + (t % QUARTER) * TILE_TOKENS + t // QUARTER
    else:
        return t * (D // 32) + g


@triton.jit
def mxfp4_scale_block_stride(P: tl.constexpr, TILED: tl.constexpr):
    """Bytes between a token's consecutive scale bytes: 1 (planar), P (tiled)."""
    if TILED:
        return P
    else:
        return 1


@triton.jit
def mxfp4_value_offsets(t, j, P: tl.constexpr, D: tl.constexpr, TILED: tl.constexpr):
    """Code byte j (0..D/2-1) of token t. t [R], j [C] -> [R, C] (see mxfp4_value_token_offset)."""
    if TILED:
        jj = j[None, :]
        return ((jj // TILE_BYTES) * mxfp4_value_block_stride(P, TILED)
                + mxfp4_value_token_offset(t[:, None], P, D, TILED) + jj % TILE_BYTES)
    else:   # the stride is 16: byte j is j bytes past the token's first
        return mxfp4_value_token_offset(t[:, None], P, D, TILED) + j[None, :]


@triton.jit
def mxfp4_scale_offsets(t, g, P: tl.constexpr, D: tl.constexpr, TILED: tl.constexpr):
    """Scale byte g (0..D/32-1) of token t, including the page's scale base P * D/2. t [R], g [C] -> [R, C]."""
    return mxfp4_scale_base(P, D) + mxfp4_scale_offset(t[:, None], g[None, :], P, D, TILED)
