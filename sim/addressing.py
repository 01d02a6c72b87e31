"""64-bit cache addressing and the two classic 32-bit failures (DESIGN §3).

A cache is a view into a pool: byte `off` of page b lives at pool index `view_offset + b*S + off`, computed in 64
bits (kernels rebase once per page: `page_ptr = base + page_id.to(int64) * S`, page-local offsets 32-bit). The
failure models give what a kernel that does *not* rebase would read:

    INT32_WRAP   the view-relative offset b*S + off is evaluated in signed 32-bit (two's-complement wrap) and added
                 to the view base; a pool index outside [0, pool size) is a fault (reported; read as 0).
    BUFFER_U32   an AMD buffer load: the offset is taken mod 2^32 from the view base, and offsets at or past the
                 buffer's num_records, min(view_bytes, 2^32) by default (DESIGN §3's rule), read 0.

Why BUFFER_U32 takes `buffer_num_records`: with DESIGN §3's rule taken literally no byte of the view ever reads
0. A wrapped offset (b*S + off) mod 2^32 is always below 2^32; a view of at most 2^32 bytes never wraps and every
offset is below view_bytes, and a longer view has num_records = 2^32. So the default models the *silent* failure
(pages past 2^32 read the bytes 2^32 lower, wrong data but no zeros), and the reported zero-read failure (DESIGN §3: a
scorer reading 0 past its range, then zero logits and top-k ties) needs a descriptor whose range is smaller than
the view: e.g. buffer_num_records = 2^31 - 1 for offsets kept in int32, where the pages from 2^31 up to 2^32 read
0 (past 2^32 the wrapped offsets are back in range and read wrong data again).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from .formats import parse_choice
from .layout import (
    PageGeometry,
    block_table_pages,
    check_block_table_row,
    check_pool,
    decode_token_bytes,
    token_byte_offsets,
)

INT31 = 2 ** 31
UINT32 = 2 ** 32
FIRST_REPORTED_FAILURE = 4_608_000_000   # first failing byte offset reported for an FP4 scorer (DESIGN §3)
BOUNDARIES = (INT31, UINT32, FIRST_REPORTED_FAILURE)


class AddressModel(str, enum.Enum):
    """How a kernel turns (page id, page-local offset) into a pool address."""

    REBASE64 = "rebase64"
    """view base + b*S + off in 64 bits: always right."""
    INT32_WRAP = "int32_wrap"
    """b*S + off wraps in signed 32-bit; out-of-pool results fault."""
    BUFFER_U32 = "buffer_u32"
    """(b*S + off) mod 2^32; offsets at or past num_records (default min(view_bytes, 2^32)) read 0."""


def as_address_model(model: "AddressModel | str") -> AddressModel:
    """Parse an address model name; ValueError lists the valid choices."""
    return parse_choice(AddressModel, model, "model")


def _num_records(geom: PageGeometry, buffer_num_records: int | None) -> int:
    if buffer_num_records is None:
        return min(geom.view_bytes, UINT32)
    if isinstance(buffer_num_records, bool) or not isinstance(buffer_num_records, (int, np.integer)) \
            or not 0 <= buffer_num_records <= UINT32:
        raise ValueError(f"buffer_num_records must be an integer in [0, 2^32], got {buffer_num_records!r}")
    return int(buffer_num_records)


def resolve_addresses(geom: PageGeometry, pool_size: int, relative, model: "AddressModel | str", *,
                      buffer_num_records: int | None = None):
    """Where a kernel using `model` reads the view-relative byte offsets `relative` (int64, true b*S + off).

    Returns (index int64, reads bool, faulted bool), all shaped like `relative`: pool index of the byte read (only
    meaningful where `reads`), whether a byte is read at all (False: the load returns 0), whether the access
    faults (an address outside the pool; the byte is then reported and taken as 0). `buffer_num_records`
    (BUFFER_U32 only): the buffer's range in bytes, default min(view_bytes, 2^32).
    """
    model = as_address_model(model)
    if buffer_num_records is not None and model is not AddressModel.BUFFER_U32:
        raise ValueError(f"buffer_num_records applies to the buffer_u32 model only, not {model.value}; drop it")
    records = _num_records(geom, buffer_num_records)
    relative = np.asarray(relative, dtype=np.int64)
    if model is AddressModel.REBASE64:
        index = geom.view_offset + relative
        return index, np.ones(relative.shape, bool), np.zeros(relative.shape, bool)
    if model is AddressModel.INT32_WRAP:
        index = geom.view_offset + ((relative + INT31) % UINT32 - INT31)
        faulted = (index < 0) | (index >= pool_size)
        return index, ~faulted, faulted
    index = geom.view_offset + relative % UINT32
    in_range = relative % UINT32 < records
    faulted = in_range & (index >= pool_size)   # only when buffer_num_records reaches past the pool
    return index, in_range & ~faulted, faulted


def read_tokens_as(pool: np.ndarray, geom: PageGeometry, block_table_row, num_tokens: int,
                   model: "AddressModel | str", *, buffer_num_records: int | None = None):
    """`sim.layout.read_tokens` as a kernel using `model` would do it.

    Returns (values, scales, faulted): values/scales as `sim.layout.read_tokens` (bytes that a BUFFER_U32 load
    returns as 0, and faulting bytes, are 0); faulted bool[num_tokens] is True for a token with any faulting byte.
    REBASE64 gives exactly `sim.layout.read_tokens`. Argument checks as there; buffer_num_records as in
    `resolve_addresses`.
    """
    check_pool(pool, geom)
    pages, num_tokens = check_block_table_row(geom, block_table_row, num_tokens)
    P = geom.page_size
    i = np.arange(num_tokens)
    relative = (pages[i // P] * geom.page_stride)[:, None] + token_byte_offsets(geom)[i % P]
    index, reads, faulted = resolve_addresses(geom, pool.size, relative, model,
                                              buffer_num_records=buffer_num_records)
    token_bytes = np.where(reads, pool[np.where(reads, index, 0)], np.uint8(0)).astype(np.uint8)
    values, scales = decode_token_bytes(geom, token_bytes)
    return values, scales, faulted.any(axis=1)


@dataclass(frozen=True)
class BoundaryCrossing:
    """The first page of a geometry with any byte at or past `boundary` bytes from the view base."""

    boundary: int
    first_page: int          # may be >= num_pages: then no page of the view reaches the boundary
    first_page_base: int     # view-relative offset of that page's first byte
    in_view: bool            # first_page < num_pages
    straddles: bool          # the page starts below the boundary and ends at/after it
    pages_past: int          # pages of the view with bytes at or past the boundary (0 if none)
    touched_pages: tuple     # block-table page ids (sorted, unique, in range) with bytes at/past the boundary


@dataclass(frozen=True)
class BoundaryReport:
    """`boundary_report`'s result: one BoundaryCrossing per entry of BOUNDARIES, plus block-table facts."""

    geometry: PageGeometry
    crossings: tuple                # BoundaryCrossing per BOUNDARIES entry, in that order
    last_byte: int                  # view-relative offset of the view's last byte
    has_block_table: bool
    block_table_pages: int          # distinct in-range page ids in the block table
    block_table_out_of_range: int   # entries outside [0, num_pages) (sentinels; ignored)


def first_page_reaching(geom: PageGeometry, boundary: int) -> int:
    """Smallest page id b whose last byte b*S + page_bytes - 1 is at or past `boundary` (may exceed num_pages)."""
    return max(0, -(-(boundary - geom.page_bytes + 1) // geom.page_stride))


def boundary_report(geom: PageGeometry, block_table=None) -> BoundaryReport:
    """For each of BOUNDARIES: the first page with any byte at or past it (view-relative), whether it is inside the
    view and straddles the boundary, and which pages of `block_table` (any shape of integers; entries outside
    [0, num_pages) are sentinels, counted and ignored) have bytes at or past it."""
    table_pages, out_of_range = (np.zeros(0, np.int64), 0) if block_table is None else \
        block_table_pages(geom, block_table)
    crossings = []
    for boundary in BOUNDARIES:
        first = first_page_reaching(geom, boundary)
        base = first * geom.page_stride
        crossings.append(BoundaryCrossing(
            boundary=boundary, first_page=first, first_page_base=base, in_view=first < geom.num_pages,
            straddles=base < boundary, pages_past=max(0, geom.num_pages - first),
            touched_pages=tuple(int(p) for p in table_pages[table_pages >= first])))
    return BoundaryReport(geometry=geom, crossings=tuple(crossings), last_byte=geom.view_bytes - 1,
                          has_block_table=block_table is not None, block_table_pages=int(table_pages.size),
                          block_table_out_of_range=out_of_range)
