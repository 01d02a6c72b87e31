"""The MXFP4 arithmetic the scorers share (paged_keys_m, paged_keys_m_wgmma, prefill_keys_m): the fold of e2m1
codes with their E8M0 block scales into exact e4m3 bytes, its inline PTX and portable twin, the exact pass for
tokens outside the fold's range, and the packed block-scale words both read.

The fold. Relative to a token's (query row's) largest block scale smax, block g's codes become the e4m3 bytes of
e2m1 * 2^(rel + 6), rel = s_g - smax: exact as normal e4m3 for -FOLD_SPAN <= rel <= 0 (12 binades;
6 * 2^6 = 384 <= 448). Each magnitude 0..7 is a byte of an 8-entry table built from rel (_fold_tables; its first
nonzero byte is d = (rel + FOLD_TABLE_BIAS) << 3, table_byte), so a 32-bit word of 8 codes folds by byte-permute
lookups: `prmt` in inline PTX on NVIDIA (FOLD_PTX: 9 instructions per 8 codes; FOLD_BYTES_PTX: 12 on packed bytes,
the tables built in place), the same lookup in portable Triton integer ops on the interpreter (MX_FOLD_TL; it
cannot run inline assembly). MX_MODE picks the form: MX_FOLD_PTX, MX_FOLD_TL, or MX_DOT_SCALED (no fold: the
scorers' tl.dot_scaled path). fold_codes converts code words in natural element order, fold_split code bytes
into two operands of the split K order (word a's elements 8a + 0..3 at columns 4a + 0..3 of the first,
8a + 4..7 of the second; two K = D/2 MMAs sum them, for D >= 2 MIN_SPLIT_K), in the codes' own layout. With the
fold, q_h . k = 2^(sqmax_h - 133) * 2^(skmax - 133) * s_fold: the scorers fold 2^(sqmax_h - c) into the weights
and apply 2^(skmax + c - FOLD_KEY_BIAS) (exp2_int) to the key after the head sum.

The exact pass (mx_exact_scores). A token whose block scales span more than FOLD_SPAN binades is scored from
operands e4m3(e2m1 * 2^-5) (rel = EXACT_REL, exact), one block at a time with the others zeroed: 32 products of at
most 13 significant bits, an exact block sum, times EXACT_RESCALE = 2^10 and the two E8M0 factors in fp32
(e8m0_to_f32), D/32 fp32 adds.

Scaling range (the exact pass's: 2^(sq + sk - 254) exact in fp32 for -149 <= sq + sk - 254 <= 127): the fold is
exact while |w_h| * 2^(sqmax_h - c) is 0 or at least 2^-126 (a head whose largest q block scale lies more than
~2^126 below the program's largest rounds or drops) and 2^(skmax + c - 266) lies in [2^-149, 2^127] (outside, the
logit is 0 or inf; that happens only where |logit| itself leaves fp32's range by about the size of the head sum).

The helpers are written in `tl` and also run inside the Gluon kernel (paged_keys_m_wgmma) on its layouts.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .._constant import Constant
from .._quant_details.codecs import E8M0_NAN, F32_QNAN_BITS
from .._quant_details.page_offsets import MX_BLOCK, mxfp4_scale_base, mxfp4_scale_block_stride, mxfp4_scale_offset

MX_FOLD_PTX = Constant(0)        # fold, conversion in inline PTX (NVIDIA)
MX_FOLD_TL = Constant(1)         # fold, the same conversion in portable Triton (interpreter)
MX_DOT_SCALED = Constant(2)      # tl.dot_scaled (gfx950's scaled MFMA)
E8M0_ONE = Constant(127)         # the `other` of masked scale loads (2^0)
FOLD_SPAN = Constant(11)         # block scales of a token may span 0..FOLD_SPAN binades on the fold path
FOLD_TABLE_BIAS = Constant(12)   # e4m3 exponent field of e2m1 code 1 (0.5) at rel: rel + 12
FOLD_KEY_BIAS = Constant(266)    # 2 * (127 + 6): both operands' E8M0 bias and their 2^6 fold offset
EXACT_REL = Constant(-11)        # the exact pass's operands: e2m1 * 2^(EXACT_REL + 6) = e2m1 * 2^-5 (normal e4m3)
EXACT_RESCALE = Constant(1024.0)  # 2^10 = (2^5)^2 undoes the exact pass's operands' 2^-5
WORD_BYTES = Constant(4)         # bytes of a 32-bit word of codes
BLOCK_WORDS = Constant(4)        # 32-bit words of codes per 32-element block
MIN_SPLIT_K = Constant(32)       # the split K order needs K = D/2 >= one FP8 MMA's K (D >= 64)


@triton.jit
def exp2_int(e):
    """int32 e -> fp32 2^e: exact for -149 <= e <= 127 (subnormal below -126), 0 below, +inf above."""
    normal = (tl.minimum(tl.maximum(e, -126), 128) + 127) << 23
    subnormal = 1 << tl.minimum(tl.maximum(e + 149, 0), 22)
    bits = tl.where(e >= -126, normal, tl.where(e >= -149, subnormal, 0))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e8m0_to_f32(s):
    """int32 E8M0 bytes -> fp32 2^(s - 127); 255 -> NaN (DESIGN §1)."""
    return tl.where(s == E8M0_NAN, F32_QNAN_BITS, tl.where(s == 0, 1 << 22, s << 23)).to(tl.float32, bitcast=True)


@triton.jit
def _fold_tables(rel):
    """int32 rel in [-FOLD_SPAN, 0] -> (lo, hi) int32 byte tables of the e2m1 magnitudes 0..7 as e4m3 bytes of
    e2m1 * 2^(rel + 6): lo = [0, d, d + 8, d + 12], hi = [d + 16, d + 20, d + 24, d + 28] (byte 0 first),
    d = (rel + 12) << 3 in 8..96 (the e4m3 byte of 0.5 * 2^(rel + 6)); no byte carries."""
    d = (rel + FOLD_TABLE_BIAS) << 3
    return d * 0x01010100 + 0x0C080000, d * 0x01010101 + 0x1C181410


#: The fold of one 32-bit word of codes ($2; code i in bits 4i..4i+3) by the byte tables {lo, hi} of its block into
#: $0 (e4m3 bytes of codes 0..3) and $1 (codes 4..7), 9 instructions. prmt picks bytes of {lo, hi} (0..7) by the
#: codes' low 3 bits (0x77777777 keeps each selector's sign-replicate bit 3 clear; prmt reads the low 16 bits, so
#: the high half is shifted down). Element i's sign is bit 4i + 3 of the word, bit 4i + 7 of u = word << 4: bit 7
#: of bytes u.0, word.0, u.1, word.1 (prmt 0x5140) are the signs of elements 0..3, of u.2, word.2, u.3, word.3
#: (0x7362) those of 4..7; lop3 0xF8 = a | (b & c) keeps only those bits and merges them with the magnitudes.
_FOLD_BODY = """
shl.b32 u, $2, 4;
and.b32 s, $2, 0x77777777;
prmt.b32 m, {lo}, {hi}, s;
prmt.b32 g, u, $2, 0x5140;
lop3.b32 $0, m, g, 0x80808080, 0xF8;
shr.u32 s, s, 16;
prmt.b32 m, {lo}, {hi}, s;
prmt.b32 g, u, $2, 0x7362;
lop3.b32 $1, m, g, 0x80808080, 0xF8;
"""
#: _fold_words_ptx's body: $3, $4 = the tables (_fold_tables).
FOLD_PTX = Constant("{\n.reg .b32 s, m, u, g;" + _FOLD_BODY.format(lo="$3", hi="$4") + "}\n")
#: fold_bytes_ptx's body: $3 = the block's table byte d in all 4 bytes (4 packed uint8 of one block); the tables
#: of _fold_tables from it in 3 instructions (lo = (d * 0x01010101 & ~0xFF) + 0x0C080000, hi = d * 0x01010101 +
#: 0x1C181410), then the fold: 12 instructions per 8 codes.
FOLD_BYTES_PTX = Constant("{\n.reg .b32 s, m, u, g, lo, hi;\nand.b32 lo, $3, 0xFFFFFF00;\n"
                              "add.u32 lo, lo, 0x0C080000;\nadd.u32 hi, $3, 0x1C181410;"
                              + _FOLD_BODY.format(lo="lo", hi="hi") + "}\n")


@triton.jit
def _fold_words_ptx(words, lo, hi):
    """int32 words of 8 e2m1 codes (code i in bits 4i..4i+3) + their block's tables -> (e4m3 bytes of codes 0..3,
    e4m3 bytes of codes 4..7) as int32 words (code i in byte i % 4); 9 instructions per 8 codes (FOLD_PTX)."""
    return tl.inline_asm_elementwise(asm=FOLD_PTX, constraints="=r,=r,r,r,r", args=[words, lo, hi],
                                     dtype=(tl.int32, tl.int32), is_pure=True, pack=1)


@triton.jit
def _fold_words_tl(words, lo, hi):
    """_fold_words_ptx in portable Triton integer ops (same tables, same outputs)."""
    out_lo = tl.zeros_like(words)
    out_hi = tl.zeros_like(words)
    for i in tl.static_range(8):
        mag = (words >> (4 * i)) & 7
        table = tl.where(mag < 4, lo, hi)
        byte = ((table >> (8 * (mag & 3))) & 0xFF) | (((words >> (4 * i + 3)) & 1) << 7)
        if i < 4:
            out_lo = out_lo | (byte << (8 * i))
        else:
            out_hi = out_hi | (byte << (8 * (i - 4)))
    return out_lo, out_hi


@triton.jit
def _words_to_e4m3(lo, hi):
    """int32 [R, W] output words of _fold_words_* -> uint8 [R, 8W] e4m3 bytes in natural element order
    (element 8a + i of a row is byte i % 4 of lo[a] (i < 4) or hi[a] (i >= 4))."""
    R: tl.constexpr = lo.shape[0]
    W: tl.constexpr = lo.shape[1]
    x = tl.reshape(tl.join(lo, hi), (R, 2 * W))
    b0 = (x & 0xFF).to(tl.uint8)
    b1 = ((x >> 8) & 0xFF).to(tl.uint8)
    b2 = ((x >> 16) & 0xFF).to(tl.uint8)
    b3 = ((x >> 24) & 0xFF).to(tl.uint8)
    return tl.reshape(tl.join(tl.join(b0, b2), tl.join(b1, b3)), (R, 8 * W))


@triton.jit
def fold_codes(words, rel, MX_MODE: tl.constexpr):
    """int32 [R, D/8] code words + int32 [R, D/32] per-block rel (-FOLD_SPAN..0) -> uint8 [R, D] e4m3 bytes of
    e2m1 * 2^(rel + 6) (exact)."""
    R: tl.constexpr = words.shape[0]
    WORDS: tl.constexpr = words.shape[1]
    lo, hi = _fold_tables(rel)
    lo = tl.reshape(tl.broadcast_to(lo[:, :, None], (R, WORDS // BLOCK_WORDS, BLOCK_WORDS)), (R, WORDS))
    hi = tl.reshape(tl.broadcast_to(hi[:, :, None], (R, WORDS // BLOCK_WORDS, BLOCK_WORDS)), (R, WORDS))
    if MX_MODE == MX_FOLD_PTX:
        out_lo, out_hi = _fold_words_ptx(words, lo, hi)
    else:
        out_lo, out_hi = _fold_words_tl(words, lo, hi)
    return _words_to_e4m3(out_lo, out_hi)


@triton.jit
def fold_bytes_ptx(codes, d8):
    """fold_split's inline PTX (FOLD_BYTES_PTX): 4 packed uint8 of codes and of their block's d per instance."""
    return tl.inline_asm_elementwise(asm=FOLD_BYTES_PTX, constraints="=r,=r,r,r", args=[codes, d8],
                                     dtype=(tl.uint8, tl.uint8), is_pure=True, pack=4)


@triton.jit
def bytes_to_words(x):
    """uint8 [R, 4W] -> int32 [R, W]: byte 4a + i is byte i of word a."""
    R: tl.constexpr = x.shape[0]
    W: tl.constexpr = x.shape[1] // WORD_BYTES
    even, odd = tl.split(tl.reshape(x.to(tl.int32), (R, W, 2, 2)))     # bytes (4a, 4a + 2), (4a + 1, 4a + 3)
    b0, b2 = tl.split(even)
    b1, b3 = tl.split(odd)
    return b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)


@triton.jit
def fold_split(codes, d8, MX_MODE: tl.constexpr):
    """uint8 [R, C] codes (byte j: elements 2j, 2j + 1 of the row; C % 4 == 0) + uint8 [R, C] table byte
    d = (rel + 12) << 3 of each byte's block (equal within each aligned 4 bytes) -> (first, second) uint8 [R, C]
    e4m3 bytes of e2m1 * 2^(rel + 6) (exact) in the split K order: column 4a + i of `first` is element 8a + i, of
    `second` element 8a + 4 + i (i < 4). Both stay in the codes' layout (no layout conversion)."""
    if MX_MODE == MX_FOLD_PTX:
        return fold_bytes_ptx(codes, d8)
    else:
        d = bytes_to_words(d8) & 0xFF
        lo, hi = _fold_tables((d >> 3) - FOLD_TABLE_BIAS)
        out_lo, out_hi = _fold_words_tl(bytes_to_words(codes), lo, hi)
        R: tl.constexpr = codes.shape[0]
        C: tl.constexpr = codes.shape[1]
        first = tl.reshape(tl.join(tl.join(out_lo & 0xFF, (out_lo >> 16) & 0xFF),
                                   tl.join((out_lo >> 8) & 0xFF, (out_lo >> 24) & 0xFF)), (R, C))
        second = tl.reshape(tl.join(tl.join(out_hi & 0xFF, (out_hi >> 16) & 0xFF),
                                    tl.join((out_hi >> 8) & 0xFF, (out_hi >> 24) & 0xFF)), (R, C))
        return first.to(tl.uint8), second.to(tl.uint8)


@triton.jit
def table_byte(rel):
    """int32 rel in [-FOLD_SPAN, 0] -> the uint8 table byte d = (rel + 12) << 3 (_fold_tables)."""
    return ((rel + FOLD_TABLE_BIAS) << 3).to(tl.uint8)


@triton.jit
def d8_broadcast(rel, C: tl.constexpr):
    """int32 [R, D/32] per-block rel -> uint8 [R, C = D/2] table byte of each code byte's block, by a reshape of
    the broadcast blocks (a layout conversion through shared memory on GPUs)."""
    R: tl.constexpr = rel.shape[0]
    G: tl.constexpr = rel.shape[1]
    return tl.reshape(tl.broadcast_to(table_byte(rel)[:, :, None], (R, G, C // G)), (R, C))


@triton.jit
def scale_byte(sw, g: tl.constexpr):
    """int32 byte g of the packed scale words sw (int64 [R], byte g = block g's E8M0)."""
    return ((sw >> (8 * g)) & 0xFF).to(tl.int32)


@triton.jit
def scale_max_min(sw, G: tl.constexpr):
    """int32 [R] largest and smallest of the G E8M0 bytes packed in sw: two elementwise passes, no reduction."""
    s_max = scale_byte(sw, 0)
    s_min = s_max
    for g in tl.static_range(1, G):
        s_max = tl.maximum(s_max, scale_byte(sw, g))
        s_min = tl.minimum(s_min, scale_byte(sw, g))
    return s_max, s_min


@triton.jit
def bit_or(a, b):
    """a | b: the combine function of a bitwise-or reduction (tl.reduce), e.g. of per-key flag bits."""
    return a | b


@triton.jit
def mx_exact_scores(k_words, ks, q_exact, qs, MX_MODE: tl.constexpr):
    """The exact pass: fp32 [KEYS, NH] q.k from int32 [KEYS, D/8] key code words, int32 [KEYS, D/32] key E8M0
    bytes, uint8 [D, NH] query operand: e4m3 bytes of e2m1 * 2^-5 (the query rows' codes transposed) and int32
    [NH, D/32] query E8M0 bytes. Block g's sums come from one K = D MMA of all keys against the query operand with
    every other block zeroed: 32 nonzero products of at most 13 significant bits, exact in any accumulator that
    keeps 13 (zero products add nothing)."""
    D: tl.constexpr = q_exact.shape[0]
    G: tl.constexpr = D // MX_BLOCK
    k8 = fold_codes(k_words, tl.full(ks.shape, EXACT_REL, tl.int32), MX_MODE).to(tl.float8e4nv, bitcast=True)
    blk = tl.arange(0, D) // MX_BLOCK
    g_idx = tl.arange(0, G)
    acc = tl.zeros((k_words.shape[0], q_exact.shape[1]), dtype=tl.float32)
    for g in tl.range(0, G, num_stages=1):          # not unrolled: the rare path keeps registers low
        q_g = tl.where(blk[:, None] == g, q_exact, 0).to(tl.float8e4nv, bitcast=True)
        part = tl.dot(k8, q_g)
        k_scale = e8m0_to_f32(tl.sum(tl.where(g_idx[None, :] == g, ks, 0), axis=1))
        q_scale = e8m0_to_f32(tl.sum(tl.where(g_idx[None, :] == g, qs, 0), axis=1))
        # part * 2^10 is the exact block sum; k_scale * q_scale = 2^(sk + sq - 254) is exact in fp32's range
        acc += (part * EXACT_RESCALE) * (k_scale[:, None] * q_scale[None, :])
    return acc


@triton.jit
def mx_key_scale_words(cache_ptr, page_off, t_in, k_ok, P: tl.constexpr, D: tl.constexpr, TILED: tl.constexpr):
    """A tile's block scales packed per key: int64 [KEYS], byte g = block g's E8M0 byte (masked keys: 255, NaN, in
    every byte of the D/32). Planar with D % 128 == 0: one 32-bit load per 4 blocks (a token's scale bytes are
    contiguous and 4-byte aligned; the pipeliner can copy them asynchronously); else one byte load per block."""
    G: tl.constexpr = D // MX_BLOCK
    token = cache_ptr + page_off + mxfp4_scale_base(P, D) + mxfp4_scale_offset(t_in, 0, P, D, TILED)
    sw = (t_in * 0).to(tl.int64)       # zeros in t_in's layout (the Hopper kernel's too)
    if TILED or (D // (WORD_BYTES * MX_BLOCK)) * (WORD_BYTES * MX_BLOCK) != D:
        for g in tl.static_range(G):
            byte = tl.load(token + g * mxfp4_scale_block_stride(P, TILED), mask=k_ok, other=E8M0_NAN)
            sw = sw | (byte.to(tl.int64) << (8 * g))
    else:
        for w in tl.static_range(G // WORD_BYTES):
            word = tl.load(token.to(tl.pointer_type(tl.int32)) + w, mask=k_ok, other=-1)     # 4 bytes 255
            sw = sw | ((word.to(tl.int64) & 0xFFFFFFFF) << (32 * w))
    return sw
