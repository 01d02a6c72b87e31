"""Verify a saved K cache against a geometry: count, byte by byte, the blocks and values a scorer would mis-read.

Per token (its bytes found through the layout, sim.layout.token_byte_offsets):
  * all bytes 0xFF                -> an unwritten slot (the pool's fill); counted, not examined further.
MXFP4 (per 32-element block, its E8M0 byte and 16 code bytes):
  * scale byte 255                -> NaN block (hazard: every logit touching it is NaN).
  * scale byte 0, some code with nonzero magnitude (code & 7 != 0)
                                  -> hazard: Triton's compiled dot_scaled decomposition (3.6) decodes byte 0 as 0,
                                     the interpreter and the oracle as 2^-127, so results depend on the backend.
  * scale byte 0, all codes +-0   -> an empty block (written by min_scale_byte=0 producers); counted, not a hazard:
                                     it decodes to zeros either way.
FP8 (per token, D e4m3fn bytes and one little-endian fp32 scale):
  * value byte 0x7F / 0xFF        -> NaN element (hazard).
  * scale NaN                     -> a non-finite row (hazard: NaN logits).
  * scale negative, zero, subnormal, inf, or not a power of two
                                  -> hazard: the writer's scale is always 2^k with 2^k * 448 >= 1e-4 (DESIGN §1);
                                     anything else is a foreign or corrupted writer (inf / 0 give inf or NaN logits,
                                     a negative scale flips the relu, a non-power-of-two loses exactness).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import fast_layout as fl
from .layout import PageGeometry, block_table_pages, check_pool

#: bytes of page strides per scan call; the progress callback fires after each chunk
CHUNK_BYTES = 64 << 20
_COUNTER_NAMES = {
    fl.NAN_SCALE_BLOCKS: "nan_scale_block", fl.ZERO_SCALE_NONZERO_BLOCKS: "zero_scale_nonzero_block",
    fl.FP8_NAN_VALUES: "fp8_nan_value", fl.FP8_NAN_SCALES: "fp8_nan_scale", fl.FP8_BAD_SCALES: "fp8_bad_scale",
}


@dataclass(frozen=True)
class Hazard:
    """Where the first hazard was found: page id, token in the page, scale group (mxfp4) / element or 0 (fp8)."""

    kind: str       # one of "nan_scale_block", "zero_scale_nonzero_block", "fp8_nan_value", "fp8_nan_scale",
                    # "fp8_bad_scale"
    page: int
    token: int
    index: int


@dataclass(frozen=True)
class VerifyReport:
    """Counts over the verified pages (see the module docstring for what each means)."""

    geometry: PageGeometry
    pages: int                      # pages verified
    tokens: int                     # token slots verified (pages * P)
    unwritten_tokens: int           # all bytes 0xFF
    blocks: int                     # mxfp4 blocks examined (written tokens only)
    nan_scale_blocks: int
    zero_scale_nonzero_blocks: int  # hazard
    zero_scale_empty_blocks: int    # not a hazard
    fp8_nan_values: int
    fp8_nan_scales: int
    fp8_bad_scales: int
    first_hazard: Hazard | None
    block_table_out_of_range: int   # block-table entries outside [0, num_pages): sentinels, not verified

    @property
    def hazards(self) -> int:
        return (self.nan_scale_blocks + self.zero_scale_nonzero_blocks + self.fp8_nan_values + self.fp8_nan_scales
                + self.fp8_bad_scales)

    @property
    def clean(self) -> bool:
        return self.hazards == 0


def verify_cache(pool: np.ndarray, geom: PageGeometry, block_table=None, *,
                 progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Verify the pages of `pool` (uint8[>= geom.pool_bytes], e.g. a np.load(..., mmap_mode="r") array) that
    `block_table` names (any shape of integers; entries outside [0, num_pages) are sentinels, counted and skipped),
    or every page when it is None. `progress(pages_done, pages_total)` is called after each chunk of pages."""
    check_pool(pool, geom)
    if block_table is None:
        pages, out_of_range = np.arange(geom.num_pages, dtype=np.int64), 0
    else:
        pages, out_of_range = block_table_pages(geom, block_table)
    counts = np.zeros(fl.NUM_COUNTERS, np.int64)
    first = np.full(4, -1, np.int64)
    chunk = max(1, CHUNK_BYTES // geom.page_stride)
    for start in range(0, pages.size, chunk):
        fl.scan_pages(pool, geom, pages[start:start + chunk], counts, first)
        if progress is not None:
            progress(min(start + chunk, pages.size), pages.size)
    hazard = None if first[0] < 0 else Hazard(_COUNTER_NAMES[int(first[3])], *(int(x) for x in first[:3]))
    return VerifyReport(
        geometry=geom, pages=int(pages.size), tokens=int(counts[fl.TOKENS]),
        unwritten_tokens=int(counts[fl.UNWRITTEN_TOKENS]), blocks=int(counts[fl.BLOCKS]),
        nan_scale_blocks=int(counts[fl.NAN_SCALE_BLOCKS]),
        zero_scale_nonzero_blocks=int(counts[fl.ZERO_SCALE_NONZERO_BLOCKS]),
        zero_scale_empty_blocks=int(counts[fl.ZERO_SCALE_EMPTY_BLOCKS]),
        fp8_nan_values=int(counts[fl.FP8_NAN_VALUES]), fp8_nan_scales=int(counts[fl.FP8_NAN_SCALES]),
        fp8_bad_scales=int(counts[fl.FP8_BAD_SCALES]), first_hazard=hazard, block_table_out_of_range=out_of_range)
