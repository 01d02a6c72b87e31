"""Numba twin of sim/layout.py: page pack/unpack, pool write (slot mapping), pool read (block table), and the
per-block scan that sim/verify.py runs over a saved cache.

The byte offsets are computed here from the DESIGN §2 formulas directly (not from sim.layout's offset tables), so
the tests comparing the two implementations byte for byte check the formulas twice. Argument checks and the
(values, scales) <-> token-bytes conversion are sim.layout's; the functions take and return the same things.
"""
from __future__ import annotations

import numba
import numpy as np

from .formats import E4M3_NAN, E8M0_NAN, MX_BLOCK
from .layout import (
    FP8_SCALE_BYTES,
    LAYOUTS,
    TILE_D,
    TILE_GROUPS,
    TILE_ROW_BYTES,
    TILE_TOKEN_LANES,
    PageGeometry,
    check_array,
    check_block_table_row,
    check_pool,
    check_slot_mapping,
    decode_token_bytes,
    encode_token_bytes,
)

_FP8, _MXFP4 = LAYOUTS.index("fp8"), LAYOUTS.index("mxfp4")   # anything else is mxfp4_tiled
_E4M3_NAN_LOW7 = E4M3_NAN            # 0x7F and 0xFF: the low 7 bits all set
_E2M1_MAGNITUDE = 0x7                # a code with zero magnitude bits is +-0
_F32_EXP_MASK, _F32_MANT_MASK = 0x7F800000, 0x007FFFFF
_UNWRITTEN = 0xFF                    # new_pool's fill: a token whose bytes are all 0xFF was never written
_CODE_BYTES_PER_BLOCK = MX_BLOCK // 2  # token bytes 16g .. 16g + 15 hold block g's 32 codes (any layout)

# Scan counters (indices into the int64 counts array that _scan_pages fills).
TOKENS, UNWRITTEN_TOKENS, BLOCKS, NAN_SCALE_BLOCKS, ZERO_SCALE_NONZERO_BLOCKS, ZERO_SCALE_EMPTY_BLOCKS, \
    FP8_NAN_VALUES, FP8_NAN_SCALES, FP8_BAD_SCALES = range(9)
NUM_COUNTERS = 9


@numba.njit(cache=True, inline="always")
def _token_byte(layout, P, D, t, k):
    """Page-local offset of byte k of token t's bytes (values then scales; see sim.layout.token_byte_offsets)."""
    if layout == _FP8:
        if k < D:
            return t * D + k
        return P * D + FP8_SCALE_BYTES * t + (k - D)
    half = D // 2
    if k < half:                     # code byte k holds elements 2k (low nibble) and 2k + 1 (high nibble)
        if layout == _MXFP4:
            return t * half + k
        d = 2 * k
        return ((d // TILE_D) * TILE_GROUPS * P * TILE_ROW_BYTES + ((d % TILE_D) // MX_BLOCK) * P * TILE_ROW_BYTES
                + t * TILE_ROW_BYTES + (d % MX_BLOCK) // 2)
    g = k - half
    if layout == _MXFP4:
        return P * half + t * (D // MX_BLOCK) + g
    lanes = P // TILE_TOKEN_LANES
    return (P * half + (g // TILE_GROUPS) * TILE_GROUPS * P + (g % TILE_GROUPS) * P
            + (t % lanes) * TILE_TOKEN_LANES + t // lanes)


@numba.njit(cache=True)
def _scatter_page(layout, P, D, token_bytes, page):
    for t in range(P):
        for k in range(token_bytes.shape[1]):
            page[_token_byte(layout, P, D, t, k)] = token_bytes[t, k]


@numba.njit(cache=True)
def _gather_page(layout, P, D, page, token_bytes):
    for t in range(P):
        for k in range(token_bytes.shape[1]):
            token_bytes[t, k] = page[_token_byte(layout, P, D, t, k)]


@numba.njit(cache=True)
def _write_slots(pool, view_offset, stride, layout, P, D, slots, token_bytes):
    for i in range(slots.shape[0]):  # in order: a repeated slot ends with its last token
        s = slots[i]
        if s < 0:
            continue
        base = view_offset + (s // P) * stride
        for k in range(token_bytes.shape[1]):
            pool[base + _token_byte(layout, P, D, s % P, k)] = token_bytes[i, k]


@numba.njit(cache=True)
def _read_pages(pool, view_offset, stride, layout, P, D, pages, num_tokens, token_bytes):
    for i in range(num_tokens):
        base = view_offset + pages[i // P] * stride
        for k in range(token_bytes.shape[1]):
            token_bytes[i, k] = pool[base + _token_byte(layout, P, D, i % P, k)]


def _args(geom: PageGeometry):
    return LAYOUTS.index(geom.layout), geom.page_size, geom.head_dim


def pack_page(geom: PageGeometry, values, scales) -> np.ndarray:
    """Same as sim.layout.pack_page."""
    page = np.zeros(geom.page_bytes, dtype=np.uint8)
    _scatter_page(*_args(geom), encode_token_bytes(geom, values, scales, geom.page_size), page)
    return page


def unpack_page(geom: PageGeometry, page) -> tuple[np.ndarray, np.ndarray]:
    """Same as sim.layout.unpack_page."""
    page = check_array("page", page, np.uint8, (geom.page_bytes,))
    token_bytes = np.empty((geom.page_size, geom.bytes_per_token), np.uint8)
    _gather_page(*_args(geom), page, token_bytes)
    return decode_token_bytes(geom, token_bytes)


def write_tokens(pool: np.ndarray, geom: PageGeometry, slot_mapping, values, scales) -> None:
    """Same as sim.layout.write_tokens."""
    check_pool(pool, geom)
    slots = check_slot_mapping(geom, slot_mapping)
    token_bytes = encode_token_bytes(geom, values, scales, slots.size)
    _write_slots(pool, geom.view_offset, geom.page_stride, *_args(geom), slots, token_bytes)


def read_tokens(pool: np.ndarray, geom: PageGeometry, block_table_row, num_tokens: int):
    """Same as sim.layout.read_tokens."""
    check_pool(pool, geom)
    pages, num_tokens = check_block_table_row(geom, block_table_row, num_tokens)
    token_bytes = np.empty((num_tokens, geom.bytes_per_token), np.uint8)
    _read_pages(pool, geom.view_offset, geom.page_stride, *_args(geom), pages, num_tokens, token_bytes)
    return decode_token_bytes(geom, token_bytes)


@numba.njit(cache=True, inline="always")
def _note_first(first, page, t, where, counter):
    if first[0] < 0:
        first[0], first[1], first[2], first[3] = page, t, where, counter


@numba.njit(cache=True)
def _scan_pages(pool, view_offset, stride, layout, P, D, pages, counts, first):
    """Classify every token / block of `pages` (see sim.verify). counts[NUM_COUNTERS] accumulates; first holds
    (page, token, group or element, counter) of the first hazard seen, -1 while none."""
    bpt = D + FP8_SCALE_BYTES if layout == _FP8 else D // 2 + D // MX_BLOCK
    buf = np.empty(bpt, np.uint8)
    for p in range(pages.shape[0]):
        page = pages[p]
        base = view_offset + page * stride
        for t in range(P):
            unwritten = True
            for k in range(bpt):
                byte = pool[base + _token_byte(layout, P, D, t, k)]
                buf[k] = byte
                if byte != _UNWRITTEN:
                    unwritten = False
            counts[TOKENS] += 1
            if unwritten:
                counts[UNWRITTEN_TOKENS] += 1
                continue
            if layout == _FP8:
                for d in range(D):
                    if (buf[d] & _E4M3_NAN_LOW7) == _E4M3_NAN_LOW7:
                        counts[FP8_NAN_VALUES] += 1
                        _note_first(first, page, t, d, FP8_NAN_VALUES)
                bits = (np.uint32(buf[D]) | (np.uint32(buf[D + 1]) << 8) | (np.uint32(buf[D + 2]) << 16)
                        | (np.uint32(buf[D + 3]) << 24))
                exponent, mantissa = bits & _F32_EXP_MASK, bits & _F32_MANT_MASK
                if exponent == _F32_EXP_MASK and mantissa != 0:
                    counts[FP8_NAN_SCALES] += 1
                    _note_first(first, page, t, 0, FP8_NAN_SCALES)
                elif bits >> 31 or exponent == 0 or exponent == _F32_EXP_MASK or mantissa != 0:
                    counts[FP8_BAD_SCALES] += 1  # negative, zero/subnormal, inf, or not a power of two
                    _note_first(first, page, t, 0, FP8_BAD_SCALES)
                continue
            half = D // 2
            for g in range(D // MX_BLOCK):
                counts[BLOCKS] += 1
                scale = buf[half + g]
                if scale == E8M0_NAN:
                    counts[NAN_SCALE_BLOCKS] += 1
                    _note_first(first, page, t, g, NAN_SCALE_BLOCKS)
                elif scale == 0:
                    nonzero = False
                    for j in range(g * _CODE_BYTES_PER_BLOCK, (g + 1) * _CODE_BYTES_PER_BLOCK):
                        if buf[j] & _E2M1_MAGNITUDE or (buf[j] >> 4) & _E2M1_MAGNITUDE:
                            nonzero = True
                    if nonzero:
                        counts[ZERO_SCALE_NONZERO_BLOCKS] += 1
                        _note_first(first, page, t, g, ZERO_SCALE_NONZERO_BLOCKS)
                    else:
                        counts[ZERO_SCALE_EMPTY_BLOCKS] += 1


def scan_pages(pool: np.ndarray, geom: PageGeometry, pages: np.ndarray, counts: np.ndarray,
               first: np.ndarray) -> None:
    """Accumulate the scan counters of `pages` (int64 page ids, in range) into counts (int64[NUM_COUNTERS]) and
    record the first hazard in first (int64[4], -1 while none). Callers check the arguments (sim.verify does)."""
    _scan_pages(pool, geom.view_offset, geom.page_stride, *_args(geom), pages, counts, first)
