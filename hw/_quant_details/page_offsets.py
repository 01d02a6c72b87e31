"""Page-local byte offsets of the K-cache page layouts (DESIGN §2), shared by the writer and the gather.

(Divisibility asserts are written (a // b) * b == a: the interpreter's tl.constexpr has no __rmod__.)

All offsets are int32 and relative to the page base `cache + page_id.to(int64) * page_stride`. t: token within
the page [R] (int32), P: page size, D: head dim. MXFP4 value byte j of a token holds elements 2j (low nibble) and
2j + 1 (high nibble); scale byte g covers elements 32g .. 32g + 31.
"""
import triton
import triton.language as tl

TILE_D = tl.constexpr(128)         # mxfp4_tiled: head-dim elements per tile
TILE_BYTES = tl.constexpr(16)      # mxfp4_tiled: bytes of one token's 32-element block (16 code bytes)
TILE_TOKENS = tl.constexpr(4)      # mxfp4_tiled: tokens sharing a 4-byte scale word


@triton.jit
def fp8_value_offsets(t, d, D: tl.constexpr):
    """fp8 value byte (t, d): t * D + d. t [R], d [C] -> [R, C]."""
    return t[:, None] * D + d[None, :]


@triton.jit
def fp8_scale_offsets(t, i, P: tl.constexpr, D: tl.constexpr):
    """Byte i (0..3, little-endian) of token t's fp32 scale: P * D + 4t + i. t [R], i [4] -> [R, 4]."""
    return P * D + 4 * t[:, None] + i[None, :]


@triton.jit
def mxfp4_value_offsets(t, j, P: tl.constexpr, D: tl.constexpr, TILED: tl.constexpr):
    """Code byte j (0..D/2-1) of token t. t [R], j [C] -> [R, C].

    planar: t * D/2 + j.
    tiled:  DESIGN's (d//128)*4*P*16 + ((d%128)//32)*P*16 + t*16 + (d%32)//2 with j = d // 2; since
            (d//128)*4 + (d%128)//32 = d//32 = j//16 this is (j // 16) * P * 16 + t * 16 + j % 16: the 32-element
            blocks of all tokens one after another, 16 bytes per token.
    """
    if TILED:
        tl.static_assert((D // TILE_D) * TILE_D == D, "mxfp4_tiled needs D % 128 == 0")
        tl.static_assert((P // TILE_TOKENS) * TILE_TOKENS == P, "mxfp4_tiled needs P % 4 == 0")
        jj = j[None, :]
        return (jj // TILE_BYTES) * (P * TILE_BYTES) + t[:, None] * TILE_BYTES + jj % TILE_BYTES
    else:
        return t[:, None] * (D // 2) + j[None, :]


@triton.jit
def mxfp4_scale_offsets(t, g, P: tl.constexpr, D: tl.constexpr, TILED: tl.constexpr):
    """Scale byte g (0..D/32-1) of token t, including the page's scale base P * D/2. t [R], g [C] -> [R, C].

    planar: t * D/32 + g.
    tiled:  DESIGN's (g//4)*4*P + (g%4)*P + (t % (P/4))*4 + t // (P/4) = g * P + (t % (P/4)) * 4 + t // (P/4):
            one 4-byte word holds 4 tokens, so writers store bytes and never whole words.
    """
    if TILED:
        tl.static_assert((P // TILE_TOKENS) * TILE_TOKENS == P, "mxfp4_tiled needs P % 4 == 0")
        QUARTER: tl.constexpr = P // TILE_TOKENS
        tt = t[:, None]
        local = g[None, :] * P + (tt % QUARTER) * TILE_TOKENS + tt // QUARTER
    else:
        local = t[:, None] * (D // 32) + g[None, :]
    return P * (D // 2) + local
