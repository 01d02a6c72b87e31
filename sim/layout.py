"""Paged K-cache byte layouts (DESIGN §2): page geometry, page-local byte offsets, page pack/unpack and the
pool writer/reader. Pure NumPy; sim/fast_layout.py is the Numba twin (same bytes).

Notation: P tokens per page, D head dim, S page stride (bytes between page bases), b physical page id, t token
within the page, d element, g = d // 32 scale group. A pool is a flat uint8 array; the cache is a view into it that
starts `view_offset` bytes in, page b at `view_offset + b*S`. Page-local offsets (all layouts: values first, then
scales; the page is exactly P * bytes_per_token bytes, the rest of the stride is not ours):

    fp8          value (t, d)    t*D + d                                   one e4m3fn byte per element
                 scale (t)       P*D + 4t .. P*D + 4t + 3                  fp32, little-endian
    mxfp4        value (t, d)    t*D/2 + d//2                              nibble: low = even d, high = odd d
                 scale (t, g)    P*D/2 + t*D/32 + g                        one E8M0 byte per 32 elements
    mxfp4_tiled  value (t, d)    (d//128)*4*P*16 + ((d%128)//32)*P*16 + t*16 + (d%32)//2     low nibble = even d
                 scale (t, g)    P*D/2 + (g//4)*4*P + (g%4)*P + (t % (P/4))*4 + t // (P/4)
                 (D % 128 == 0, P % 4 == 0; one 4-byte word of tiled scales holds four different tokens)

A token's *bytes* (the unit the writer and reader move) are its value bytes then its scale bytes:
    fp8:    D value bytes (element j)                 + 4 scale bytes (fp32 little-endian)   = D + 4
    mxfp4*: D/2 code bytes (byte j = elements 2j low, 2j+1 high) + D/32 scale bytes (group g) = D/2 + D/32
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import numpy as np

from .formats import MX_BLOCK

# The names and sizes below are hw/layout.py's too (sim may not import hw); tests/hw/test_layout.py pins them equal.
KV_DTYPES = ("fp8", "mxfp4")
LAYOUTS = ("fp8", "mxfp4", "mxfp4_tiled")
LAYOUTS_OF = {"fp8": ("fp8",), "mxfp4": ("mxfp4", "mxfp4_tiled")}
PAGE_SIZES = (16, 32, 64, 128, 256)
HEAD_DIM_MIN, HEAD_DIM_MAX = 32, 256
ALIGN = 16                 # page strides and view offsets are multiples of 16 bytes
FP8_SCALE_BYTES = 4        # one little-endian fp32 per token
TILE_D = 128               # mxfp4_tiled: elements per d-tile (4 scale groups)
TILE_GROUPS = TILE_D // MX_BLOCK
TILE_ROW_BYTES = MX_BLOCK // 2   # 16 code bytes of one token's 32-element group are contiguous
TILE_TOKEN_LANES = 4       # mxfp4_tiled: a 4-byte scale word holds tokens t, t + P/4, t + P/2, t + 3P/4


def _as_int(name: str, value) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


@dataclass(frozen=True)
class PageGeometry:
    """Geometry of a paged K cache: format, layout, page shape, page stride and the view's offset in its pool.

    Resolved and validated on construction (ValueError naming the field): `layout=None` -> the kv_dtype's planar
    layout ("fp8" or "mxfp4"); `page_stride=None` -> page_bytes rounded up to 16.
    """

    kv_dtype: str
    page_size: int
    head_dim: int
    num_pages: int
    page_stride: int | None = None
    layout: str | None = None
    view_offset: int = 0

    def __post_init__(self):
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, got {self.kv_dtype!r}")
        layout = self.kv_dtype if self.layout is None else self.layout
        if layout not in LAYOUTS_OF[self.kv_dtype]:
            raise ValueError(f"layout {layout!r} is not valid for kv_dtype {self.kv_dtype!r}; "
                             f"choose one of {LAYOUTS_OF[self.kv_dtype]}")
        object.__setattr__(self, "layout", layout)
        for name in ("page_size", "head_dim", "num_pages", "view_offset"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        if self.page_size not in PAGE_SIZES:
            raise ValueError(f"page_size must be one of {PAGE_SIZES}, got {self.page_size}")
        if self.head_dim % MX_BLOCK or not HEAD_DIM_MIN <= self.head_dim <= HEAD_DIM_MAX:
            raise ValueError(f"head_dim must be a multiple of {MX_BLOCK} in {HEAD_DIM_MIN}..{HEAD_DIM_MAX}, "
                             f"got {self.head_dim}")
        if layout == "mxfp4_tiled" and (self.head_dim % TILE_D or self.page_size % TILE_TOKEN_LANES):
            raise ValueError(f"layout mxfp4_tiled needs head_dim % {TILE_D} == 0 and page_size % "
                             f"{TILE_TOKEN_LANES} == 0, got head_dim={self.head_dim}, page_size={self.page_size}; "
                             "use layout 'mxfp4' for other shapes")
        if self.num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {self.num_pages}")
        if self.view_offset < 0 or self.view_offset % ALIGN:
            raise ValueError(f"view_offset must be a non-negative multiple of {ALIGN}, got {self.view_offset}")
        if self.page_stride is None:
            object.__setattr__(self, "page_stride", -(-self.page_bytes // ALIGN) * ALIGN)
        else:
            stride = _as_int("page_stride", self.page_stride)
            if stride < self.page_bytes or stride % ALIGN:
                raise ValueError(f"page_stride must be a multiple of {ALIGN} and >= the page's {self.page_bytes} "
                                 f"bytes, got {stride}")
            object.__setattr__(self, "page_stride", stride)

    @property
    def value_bytes_per_token(self) -> int:
        """fp8: D (one byte per element); mxfp4*: D/2 (two codes per byte)."""
        return self.head_dim if self.kv_dtype == "fp8" else self.head_dim // 2

    @property
    def scale_bytes_per_token(self) -> int:
        """fp8: 4 (one fp32); mxfp4*: D/32 (one E8M0 byte per block)."""
        return FP8_SCALE_BYTES if self.kv_dtype == "fp8" else self.head_dim // MX_BLOCK

    @property
    def bytes_per_token(self) -> int:
        return self.value_bytes_per_token + self.scale_bytes_per_token

    @property
    def page_bytes(self) -> int:
        return self.page_size * self.bytes_per_token

    @property
    def scale_base(self) -> int:
        """Page-local offset of the scale region (all P tokens' values come first)."""
        return self.page_size * self.value_bytes_per_token

    @property
    def view_bytes(self) -> int:
        """Bytes from the view base to one past the last page's last byte."""
        return (self.num_pages - 1) * self.page_stride + self.page_bytes

    @property
    def pool_bytes(self) -> int:
        """Smallest pool that holds the view: view_offset + view_bytes."""
        return self.view_offset + self.view_bytes


#: The page-local byte rules of each layout, as printed by `mxidx layout` (the functions below implement them).
BYTE_RULES = {
    "fp8": ("value byte of (t, d) = t*D + d",
            "fp32 scale of t = bytes P*D + 4t .. P*D + 4t + 3, little-endian"),
    "mxfp4": ("code byte of (t, d) = t*D/2 + d//2, low nibble = even d",
              "E8M0 byte of (t, g) = P*D/2 + t*D/32 + g"),
    "mxfp4_tiled": ("code byte of (t, d) = (d//128)*64P + ((d%128)//32)*16P + 16t + (d%32)//2, low nibble = even d",
                    "E8M0 byte of (t, g) = P*D/2 + (g//4)*4P + (g%4)*P + (t % (P/4))*4 + t//(P/4)"),
}


@dataclass(frozen=True)
class Region:
    """A byte range [start, end) of a page's stride with what it holds."""

    name: str
    start: int
    end: int
    rule: str


def page_regions(geom: PageGeometry) -> list[Region]:
    """The page stride's byte ranges: values, scales and (when S > page_bytes) the gap that is not the page's."""
    value_rule, scale_rule = BYTE_RULES[geom.layout]
    regions = [Region("values", 0, geom.scale_base, value_rule),
               Region("scales", geom.scale_base, geom.page_bytes, scale_rule)]
    if geom.page_stride > geom.page_bytes:
        regions.append(Region("gap", geom.page_bytes, geom.page_stride, "not part of the page (other pool data)"))
    return regions


def _checked_index(name: str, x, limit: int) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers, got dtype {x.dtype}")
    if x.size and (x.min() < 0 or x.max() >= limit):   # checked before the int64 cast, which wraps uint64
        raise ValueError(f"{name} must lie in [0, {limit}), got values in [{x.min()}, {x.max()}]")
    return x.astype(np.int64)


def value_offset(geom: PageGeometry, t, d) -> np.ndarray:
    """Page-local byte offset (int64, broadcast over t and d) of element d of token t.

    fp8: the element's own byte. mxfp4 / mxfp4_tiled: the byte holding the element's nibble (low nibble for
    even d, high nibble for odd d).
    """
    P, D = geom.page_size, geom.head_dim
    t = _checked_index("t", t, P)
    d = _checked_index("d", d, D)
    if geom.layout == "fp8":
        return t * D + d
    if geom.layout == "mxfp4":
        return t * (D // 2) + d // 2
    return ((d // TILE_D) * TILE_GROUPS * P * TILE_ROW_BYTES + ((d % TILE_D) // MX_BLOCK) * P * TILE_ROW_BYTES
            + t * TILE_ROW_BYTES + (d % MX_BLOCK) // 2)


def scale_offset(geom: PageGeometry, t, g=0) -> np.ndarray:
    """Page-local byte offset (int64, broadcast over t and g) of the scale of token t, group g.

    fp8: the first of the 4 little-endian fp32 bytes of token t's scale (g must be 0). mxfp4 / mxfp4_tiled: the
    E8M0 byte of elements 32g .. 32g + 31.
    """
    P, D = geom.page_size, geom.head_dim
    t = _checked_index("t", t, P)
    g = _checked_index("g", g, 1 if geom.kv_dtype == "fp8" else D // MX_BLOCK)
    base = geom.scale_base
    if geom.layout == "fp8":
        return base + FP8_SCALE_BYTES * t + g
    if geom.layout == "mxfp4":
        return base + t * (D // MX_BLOCK) + g
    lanes = P // TILE_TOKEN_LANES
    return (base + (g // TILE_GROUPS) * TILE_GROUPS * P + (g % TILE_GROUPS) * P
            + (t % lanes) * TILE_TOKEN_LANES + t // lanes)


@functools.lru_cache(maxsize=64)
def _token_byte_offsets(kv_dtype: str, layout: str, page_size: int, head_dim: int) -> np.ndarray:
    geom = PageGeometry(kv_dtype, page_size, head_dim, 1, layout=layout)
    t = np.arange(page_size)[:, None]
    if geom.kv_dtype == "fp8":
        values = value_offset(geom, t, np.arange(head_dim)[None, :])
        scales = scale_offset(geom, t, 0) + np.arange(FP8_SCALE_BYTES)[None, :]
    else:
        values = value_offset(geom, t, 2 * np.arange(head_dim // 2)[None, :])  # code byte j holds 2j, 2j+1
        scales = scale_offset(geom, t, np.arange(head_dim // MX_BLOCK)[None, :])
    offsets = np.concatenate([values, scales], axis=1)
    offsets.setflags(write=False)
    return offsets


def token_byte_offsets(geom: PageGeometry) -> np.ndarray:
    """int64[P, bytes_per_token] (read-only): page-local offset of byte k of token t's bytes.

    Columns 0 .. value_bytes_per_token - 1 are the value bytes (fp8: element k; mxfp4*: code byte k holding
    elements 2k (low nibble) and 2k+1 (high nibble)); the remaining columns are the scale bytes (fp8: the 4
    little-endian bytes of the fp32 scale; mxfp4*: E8M0 byte of group g). Every layout maps the P * bytes_per_token
    entries one-to-one onto 0 .. page_bytes - 1.
    """
    return _token_byte_offsets(geom.kv_dtype, geom.layout, geom.page_size, geom.head_dim)


def check_array(name: str, x, dtype, shape: tuple) -> np.ndarray:
    """x as an ndarray of exactly `dtype` and `shape`, else ValueError naming `name`."""
    x = np.asarray(x)
    if x.dtype != dtype:
        raise ValueError(f"{name} must have dtype {np.dtype(dtype)}, got {x.dtype}")
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)}")
    return x


def encode_token_bytes(geom: PageGeometry, values, scales, num_tokens: int) -> np.ndarray:
    """(values, scales) of `num_tokens` tokens -> uint8[num_tokens, bytes_per_token] (the order of
    `token_byte_offsets`).

    fp8: values uint8[T, D] (e4m3fn bit patterns), scales float32[T] (stored little-endian).
    mxfp4*: values uint8[T, D/2] (packed codes, even element in the low nibble), scales uint8[T, D/32] (E8M0).
    """
    T = num_tokens
    values = check_array("values", values, np.uint8, (T, geom.value_bytes_per_token))
    if geom.kv_dtype == "fp8":
        scales = check_array("scales", scales, np.float32, (T,))
        scale_bytes = np.ascontiguousarray(scales, dtype="<f4").view(np.uint8).reshape(T, FP8_SCALE_BYTES)
    else:
        scale_bytes = check_array("scales", scales, np.uint8, (T, geom.scale_bytes_per_token))
    return np.concatenate([values, scale_bytes], axis=1)


def decode_token_bytes(geom: PageGeometry, token_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8[T, bytes_per_token] -> (values, scales) in the dtypes/shapes of `encode_token_bytes`."""
    vb = geom.value_bytes_per_token
    values = np.ascontiguousarray(token_bytes[:, :vb])
    scale_bytes = np.ascontiguousarray(token_bytes[:, vb:])
    if geom.kv_dtype == "fp8":
        return values, scale_bytes.view("<f4").reshape(-1).astype(np.float32)
    return values, scale_bytes


def pack_page(geom: PageGeometry, values, scales) -> np.ndarray:
    """The P tokens of one page -> uint8[page_bytes] in geom's layout (see the module docstring for the byte map).

    fp8: values uint8[P, D], scales float32[P]. mxfp4*: values uint8[P, D/2] (packed codes), scales uint8[P, D/32].
    """
    page = np.zeros(geom.page_bytes, dtype=np.uint8)
    page[token_byte_offsets(geom)] = encode_token_bytes(geom, values, scales, geom.page_size)
    return page


def unpack_page(geom: PageGeometry, page) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `pack_page`: uint8[page_bytes] -> (values, scales) of the page's P tokens."""
    page = check_array("page", page, np.uint8, (geom.page_bytes,))
    return decode_token_bytes(geom, page[token_byte_offsets(geom)])


def new_pool(geom: PageGeometry, fill: int = 0xFF) -> np.ndarray:
    """A uint8[pool_bytes] pool filled with `fill` (0xFF by default: unwritten bytes decode as NaN).

    fill=0 uses np.zeros, whose pages the OS commits lazily, so large (> 4 GiB) pools with a few written pages
    stay cheap.
    """
    fill = _as_int("fill", fill)
    if not 0 <= fill <= 0xFF:
        raise ValueError(f"fill must be a byte value 0..255, got {fill}")
    if fill == 0:
        return np.zeros(geom.pool_bytes, dtype=np.uint8)
    return np.full(geom.pool_bytes, fill, dtype=np.uint8)


def check_pool(pool, geom: PageGeometry) -> np.ndarray:
    """pool must be a 1-D uint8 ndarray of at least geom.pool_bytes bytes."""
    if not isinstance(pool, np.ndarray) or pool.dtype != np.uint8 or pool.ndim != 1:
        got = f"{type(pool).__name__} {getattr(pool, 'dtype', '')} {list(getattr(pool, 'shape', ()))}"
        raise ValueError(f"pool must be a 1-D uint8 numpy array, got {got}")
    if pool.size < geom.pool_bytes:
        raise ValueError(f"pool has {pool.size} bytes, the geometry needs {geom.pool_bytes} "
                         "(view_offset + (num_pages - 1) * page_stride + page_bytes)")
    return pool


def check_slot_mapping(geom: PageGeometry, slot_mapping) -> np.ndarray:
    """int[T] slots -> int64[T]; negative slots are kept (skipped by writers); slot >= num_pages * P -> ValueError."""
    slots = np.asarray(slot_mapping)
    if slots.ndim != 1 or slots.dtype.kind not in "iu":
        raise ValueError(f"slot_mapping must be a 1-D integer array, got {slots.dtype} {list(slots.shape)}")
    limit = geom.num_pages * geom.page_size
    if slots.size and slots.max() >= limit:       # checked before the int64 cast: a huge uint64 must not wrap to a skip
        raise ValueError(f"slot_mapping has slot {slots.max()} >= num_pages * page_size = {limit}")
    return slots.astype(np.int64)


def write_tokens(pool: np.ndarray, geom: PageGeometry, slot_mapping, values, scales) -> None:
    """Write T tokens into the pool in place: token i goes to slot s = slot_mapping[i], i.e. page s // P, token
    s % P. Negative slots are skipped; bytes of other tokens and outside the pages are left untouched. When a slot
    repeats, the last token written to it wins (the order a sequential writer gives).

    values / scales as in `encode_token_bytes` with T = len(slot_mapping).
    """
    check_pool(pool, geom)
    slots = check_slot_mapping(geom, slot_mapping)
    token_bytes = encode_token_bytes(geom, values, scales, slots.size)
    keep = slots >= 0
    # Keep only the last occurrence of each slot: numpy's fancy assignment does not promise an order for repeats.
    rev = slots[::-1]
    _, first_in_rev = np.unique(rev, return_index=True)
    last = np.zeros(slots.size, dtype=bool)
    last[slots.size - 1 - first_in_rev] = True
    keep &= last
    slots, token_bytes = slots[keep], token_bytes[keep]
    P = geom.page_size
    page_base = geom.view_offset + (slots // P) * geom.page_stride
    pool[page_base[:, None] + token_byte_offsets(geom)[slots % P]] = token_bytes


def check_block_table_row(geom: PageGeometry, block_table_row, num_tokens) -> tuple[np.ndarray, int]:
    """Validate a block-table row for reading `num_tokens` tokens; returns (page ids of the used pages as int64,
    num_tokens). Entries past the used pages are never looked at (they may hold out-of-range sentinels)."""
    row = np.asarray(block_table_row)
    if row.ndim != 1 or row.dtype.kind not in "iu":
        raise ValueError(f"block_table_row must be a 1-D integer array, got {row.dtype} {list(row.shape)}")
    num_tokens = _as_int("num_tokens", num_tokens)
    P = geom.page_size
    if not 0 <= num_tokens <= row.size * P:
        raise ValueError(f"num_tokens must be in [0, len(block_table_row) * page_size = {row.size * P}], "
                         f"got {num_tokens}")
    used = row[: -(-num_tokens // P)]
    bad = np.flatnonzero((used < 0) | (used >= geom.num_pages))   # before the int64 cast, which wraps uint64
    if bad.size:
        raise ValueError(f"block_table_row[{bad[0]}] = {used[bad[0]]} is not a page id in [0, {geom.num_pages}) "
                         f"and is needed for {num_tokens} tokens")
    return used.astype(np.int64), num_tokens


def block_table_pages(geom: PageGeometry, block_table) -> tuple[np.ndarray, int]:
    """(sorted unique in-range page ids of `block_table`, number of entries outside [0, num_pages)).

    block_table: integers of any shape; out-of-range entries are the sentinels of unused slots.
    """
    table = np.asarray(block_table)
    if table.dtype.kind not in "iu":
        raise ValueError(f"block_table must be an integer array, got dtype {table.dtype}")
    table = table.astype(np.int64).ravel()
    valid = (table >= 0) & (table < geom.num_pages)
    return np.unique(table[valid]), int((~valid).sum())


def read_tokens(pool: np.ndarray, geom: PageGeometry, block_table_row, num_tokens: int):
    """Read the first `num_tokens` tokens of a sequence whose logical page i is physical page block_table_row[i].

    Returns (values, scales) as in `encode_token_bytes` with T = num_tokens. Only the pages covering num_tokens are
    read; num_tokens > len(row) * P or a needed page id outside [0, num_pages) -> ValueError.
    """
    check_pool(pool, geom)
    pages, num_tokens = check_block_table_row(geom, block_table_row, num_tokens)
    i = np.arange(num_tokens)
    P = geom.page_size
    addr = (geom.view_offset + pages[i // P] * geom.page_stride)[:, None] + token_byte_offsets(geom)[i % P]
    return decode_token_bytes(geom, pool[addr])
