"""Test support on the NumPy side: hostile fixtures built by sim/ and exact comparisons against it.

Shared by the kernel tests (tests/) and the `mxidx diff` runner. Imports numpy and sim/ only; the torch side of a
fixture (device copies, cache views, input dtypes) is hw.testing's.

    case_rng, make_geometry                    deterministic generators; PageGeometry with padded strides
    random_values, hostile_values, hostile_rows  float inputs at the edges of DESIGN §1
    sim_quantize, sim_quantize_q, quantized_queries  the oracle's K and Q quantizers (FP8 q scale folded)
    PagedKV, build_paged_kv                    a poisoned, strided pool of shuffled pages written by sim
    Mismatch, assert_equal_bits, pool_locator, check_scorer  comparisons whose message names the first difference
    LargePool, build_large_pool, check_large_writer, check_large_gather  a pool past 4,608,000,000 bytes (DESIGN
                                               §3): the kernel's writer is passed in, its bytes checked here
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from sim import addressing as sim_addressing
from sim import fp8 as sim_fp8
from sim import layout as sim_layout
from sim import mxfp4 as sim_mxfp4
from sim import scorer as sim_scorer
from sim.formats import E2M1_MAGNITUDES, MX_BLOCK

POISON = 0xFF                    # unused pages / scale bytes: E8M0 NaN, e4m3 NaN, fp32 NaN
#: A page stride of a shared serving pool (DESIGN §3's example): with P = 64, D = 128 MXFP4 pages, pages 1994,
#: 3988 and 4279 are the first with bytes past 2^31, 2^32 and 4,608,000,000.
LARGE_PAGE_STRIDE = 1_077_120
INT32_MAX = 2 ** 31 - 1
#: E2M1 rounding ties, in units of the block scale (DESIGN §1), for tie-heavy blocks.
E2M1_TIES = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
#: hostile_rows' per-row power-of-two range for each input dtype (inside its normal range, fp16's is narrow).
EXPONENT_RANGE = {"fp32": (-140, 124), "bf16": (-140, 124), "fp16": (-22, 13)}
#: (smallest normal, largest finite) of each input dtype.
INPUT_LIMITS = {"fp32": (2.0 ** -126, float(np.finfo(np.float32).max)),
                "bf16": (2.0 ** -126, (2 - 2.0 ** -7) * 2.0 ** 127),
                "fp16": (2.0 ** -14, 65504.0)}
#: FP8 row at scale 2^0 (amax 448) whose other elements sit exactly halfway between e4m3 neighbours:
#: 1.0625 -> 1, 1.1875 -> 1.25, 17 -> 16, 19 -> 20, 248 -> 256, 3 * 2^-10 -> 2^-8 (subnormal tie).
FP8_TIE_ROW_VALUES = (448.0, 1.0625, 1.1875, 17.0, 19.0, 248.0, 3 * 2.0 ** -10, -1.0625, -19.0, -(3 * 2.0 ** -10))


class Mismatch(AssertionError):
    """The kernel disagrees with the oracle; the message names the first differing coordinate and both values."""


# ------------------------------------------------------------------------------------------------ comparisons


def as_bits(a: np.ndarray) -> np.ndarray:
    """A float array as unsigned integers of its width (its bit patterns); other arrays unchanged."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}") if a.dtype.kind == "f" else a


def canonical_nan(x: np.ndarray) -> np.ndarray:
    """float32 copy of x with every NaN replaced by the one default NaN (for computed, not stored, values)."""
    return np.where(np.isnan(x), np.float32(np.nan), x).astype(np.float32)


def assert_equal_bits(what: str, kernel: np.ndarray, ref: np.ndarray,
                      locate: Callable[[tuple], str] | None = None) -> None:
    """Bit-for-bit equality of same-shape, same-dtype arrays (floats compared as their bit patterns, so NaN
    payloads count); Mismatch otherwise. `locate` describes the first differing index (default: the index)."""
    kernel, ref = np.asarray(kernel), np.asarray(ref)
    if kernel.shape != ref.shape:
        raise Mismatch(f"{what}: kernel shape {list(kernel.shape)} != sim shape {list(ref.shape)}")
    kb, rb = as_bits(kernel), as_bits(ref)
    if kb.dtype != rb.dtype:
        raise Mismatch(f"{what}: kernel dtype {kernel.dtype} != sim dtype {ref.dtype}")
    diff = kb != rb
    if diff.any():
        idx = tuple(int(i) for i in np.argwhere(diff)[0])
        width = 2 * kb.itemsize
        where = locate(idx) if locate else f"index {idx}"
        raise Mismatch(f"{what}: {int(diff.sum())} of {diff.size} differ; first at {where}: "
                       f"kernel 0x{int(kb[idx]):0{width}x}, sim 0x{int(rb[idx]):0{width}x}")


def pool_locator(geom: sim_layout.PageGeometry) -> Callable[[tuple], str]:
    """For assert_equal_bits on a flat pool: a pool byte index as (page, page-local offset, value/scale region)."""
    def locate(idx: tuple) -> str:
        i = idx[0] - geom.view_offset
        if i < 0:
            return f"pool byte {idx[0]} (before the view)"
        page, off = divmod(i, geom.page_stride)
        region = ("stride gap" if off >= geom.page_bytes else
                  "scale region" if off >= geom.scale_base else "value region")
        return f"pool byte {idx[0]} (page {page}, page-local byte {off}, {region})"
    return locate


def check_scorer(what: str, kernel: np.ndarray, ref: np.ndarray, bound: np.ndarray,
                 visible: np.ndarray | None) -> float:
    """sim.scorer.check_logits (DESIGN §4's rules) as a Mismatch; returns the worst err/bound ratio.

    kernel, ref, bound: float [rows, cols]. `ref` comes from the clean_logits=True reference (-inf on invisible
    entries, bound 0 there), so with visible=None the kernel's invisible entries must be exactly -inf; pass
    `visible` (bool [rows, cols]) for clean_logits=False.
    """
    kernel = np.asarray(kernel)
    if kernel.shape != ref.shape:
        raise Mismatch(f"{what}: kernel shape {list(kernel.shape)} != reference shape {list(ref.shape)}")
    with np.errstate(invalid="ignore"):   # clean_logits=False leaves invisible entries uninitialized (sNaN casts)
        result = sim_scorer.check_logits(kernel, ref, bound, visible=visible)
    if not result.ok:
        raise Mismatch(f"{what}: {result.describe()}")
    return result.worst_ratio


# ------------------------------------------------------------------------------------------------ inputs


def case_rng(name: str) -> np.random.Generator:
    """A generator seeded from the case name: every run of a case sees the same data."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def make_geometry(kv_dtype: str, layout: str | None, page_size: int, head_dim: int, num_pages: int,
                  stride_pad: int = 0, view_offset: int = 0, page_stride: int | None = None
                  ) -> sim_layout.PageGeometry:
    """sim.layout.PageGeometry with the page stride = the tight stride + stride_pad (or `page_stride`)."""
    tight = sim_layout.PageGeometry(kv_dtype, page_size, head_dim, num_pages, layout=layout)
    if page_stride is None:
        page_stride = tight.page_stride + stride_pad
    return sim_layout.PageGeometry(kv_dtype, page_size, head_dim, num_pages, page_stride=page_stride,
                                   layout=layout, view_offset=view_offset)


def random_values(rng: np.random.Generator, shape: tuple, spread: int = 4) -> np.ndarray:
    """float32 normals of `shape` (last dim a multiple of 32), each 32-element block scaled by its own 2^e,
    e in [-spread, spread] (many scale bytes)."""
    x = rng.standard_normal(shape).astype(np.float32)
    blocks = x.reshape(*shape[:-1], shape[-1] // MX_BLOCK, MX_BLOCK)
    blocks *= np.exp2(rng.integers(-spread, spread + 1, blocks.shape[:-1] + (1,))).astype(np.float32)
    return x


def _special_blocks(rng: np.random.Generator) -> list[np.ndarray]:
    """32-element float32 blocks at the edges of DESIGN §1's rules (scale boundaries, E2M1 ties, non-finite)."""
    def block(head, fill=0.0):
        b = np.full(MX_BLOCK, fill, np.float32)
        b[: len(head)] = head
        return b

    one_ulp = np.float32(np.nextafter(np.float32(1.5), np.float32(2)))
    ties = np.array(E2M1_TIES + tuple(-t for t in E2M1_TIES), np.float32)
    return [
        block([], 0.0),                                        # all zero
        block([-0.0] * 16, 0.0),                               # signed zeros
        np.where(np.arange(MX_BLOCK) == 5, np.float32(np.nan), random_values(rng, (MX_BLOCK,))),  # byte 255
        block([np.inf], 1.0),
        block([-np.inf], -1.0),
        block(np.concatenate([[6.0], ties])) * np.float32(8),  # amax 6*2^3 (m = 1.5): every E2M1 tie exact
        block([1.5 * 16, 0.3, -0.3]),                          # m == 1.5 exactly: rceil keeps E-2
        block([one_ulp * 16, 0.7]),                            # m just above 1.5: rceil/ceil step up
        block([1.75 * 4, 1.0]),                                # m == 1.75: `even` steps up
        block([np.float32(np.nextafter(np.float32(1.75), np.float32(0))) * 4, 2.0]),
        block([np.float32(np.nextafter(np.float32(1), np.float32(2))), -0.01]),  # m just above 1: ceil steps up
        block([6.0, -1e-3, 1e-3]),                              # tiny values round to +-0 (sign kept)
        block([3e-39, -1e-39, 2.5e-39]),                        # fp32 subnormal amax
        block([3.0e38, -1.0e38, 1.0]),                          # amax near fp32 max (scale 2^126 / 2^127)
    ]


def hostile_values(rng: np.random.Generator, rows: int, head_dim: int) -> np.ndarray:
    """float32[rows, head_dim] at the edges of DESIGN §1.

    Blocks (flattened row-major) cycle through every `_special_blocks` entry, every third block random; with at
    least 3 * len(_special_blocks) / 2 blocks each special appears. Whole rows for the FP8 per-row scale
    (rows >= 4): row 1 all zero (amax floored at 1e-4), row 2 tiny (e4m3 subnormals), row 3 e4m3 ties.
    """
    x = random_values(rng, (rows, head_dim))
    specials = _special_blocks(rng)
    flat = x.reshape(-1, MX_BLOCK)
    slots = [i for i in range(flat.shape[0]) if i % 3 != 2]
    for n, i in enumerate(slots):
        flat[i] = specials[n % len(specials)]
    if rows >= 4:
        x[1] = 0.0
        x[2] = -x[2] * np.float32(1e-30)
        x[3] = np.resize(np.array(FP8_TIE_ROW_VALUES, np.float32), head_dim)
    return x


def hostile_rows(rng: np.random.Generator, rows: int, head_dim: int, dtype: str) -> np.ndarray:
    """float64[rows, head_dim] for input dtype `dtype` ("bf16" | "fp16" | "fp32"), to be rounded to that dtype by
    the caller (hw.testing.as_input): per-row magnitudes across the dtype's own exponent range (EXPONENT_RANGE),
    plus special rows.

    Where hostile_values puts fp32 edge blocks into every row, this covers each input dtype's range: rows cycle
    (r % 8) through random normals at a random power of two 2^e; E2M1 ties and grid values around a block maximum
    of exactly 6 * 2^(e-2); block maxima with mantissa 1.5, 1.75, 1.5 + 2^-7, 1.25 (the scale rules disagree); an
    all-zero first block with -0.0; NaN in one element; +Inf and -Inf; subnormal-only rows (fp32/bf16: below the
    dtype's smallest normal); the dtype's largest finite value.
    """
    lo, hi = EXPONENT_RANGE[dtype]
    tiny, largest = INPUT_LIMITS[dtype]
    exps = rng.integers(lo, hi, size=(rows, 1))
    x = rng.standard_normal((rows, head_dim)) * np.exp2(exps.astype(np.float64))
    blocks = head_dim // MX_BLOCK
    for r in range(rows):
        kind = r % 8
        e = int(np.clip(exps[r, 0], lo + 4, hi - 4))
        if kind == 1:  # ties on the grid of a block whose max is exactly 6 * 2^(e-2)
            x[r] = rng.choice(E2M1_TIES + E2M1_MAGNITUDES, size=head_dim) * rng.choice([-1, 1], size=head_dim) \
                * 2.0 ** (e - 2)
            x[r, ::MX_BLOCK] = 6 * 2.0 ** (e - 2)
        elif kind == 2:  # block maxima with mantissa 1.5, 1.75, just above 1.5 (rule-dependent scales)
            x[r, ::MX_BLOCK] = rng.choice([1.5, 1.75, 1.5 + 2.0 ** -7, 1.25], size=blocks) * 2.0 ** e
        elif kind == 3:
            x[r, :MX_BLOCK] = 0.0
            x[r, 1:MX_BLOCK:2] = -0.0
        elif kind == 4:
            x[r, rng.integers(head_dim)] = np.nan
        elif kind == 5:
            x[r, rng.integers(head_dim)] = np.inf
            x[r, rng.integers(head_dim)] = -np.inf
        elif kind == 6:
            x[r] = rng.standard_normal(head_dim) * tiny * 0.5
        elif kind == 7:
            x[r, rng.integers(head_dim)] = largest * rng.choice([-1, 1])
    return x


# ------------------------------------------------------------------------------------------------ the oracle's side


def sim_quantize(kv_dtype: str, x: np.ndarray, scale_rule: str = "rceil") -> tuple[np.ndarray, np.ndarray]:
    """The oracle's quantizer of sim input x [..., D] (float32, float16 or bf16 bits as uint16): (values, scales)
    as DESIGN §8 (fp8: e4m3 bits uint8 [..., D] + float32 [...]; mxfp4: codes uint8 [..., D/2] + E8M0 uint8
    [..., D/32])."""
    if kv_dtype == "fp8":
        return sim_fp8.quantize(x)
    return sim_mxfp4.quantize(x, scale_rule=scale_rule)


def sim_quantize_q(kv_dtype: str, x: np.ndarray, heads_weights: np.ndarray):
    """q float32 [..., H, D] and weights [..., H] quantized by sim -> (q_values, q_scales, q64 exact, weights for
    the kernel float32 [..., H]).

    FP8 folds the per-(token, head) q scale into the weights (DESIGN §8; exact, the scales are powers of two), so
    q_scales is None and q64 is the e4m3 values alone. MXFP4: codes uint8 [..., H, D/2], E8M0 scales [..., H, D/32].
    """
    v, s = sim_quantize(kv_dtype, x)
    dequantize_q = sim_scorer.dequantize_q
    if kv_dtype == "fp8":
        folded = (heads_weights.astype(np.float32) * s.reshape(heads_weights.shape)).astype(np.float32)
        return v, None, dequantize_q(v, None), folded
    return v, s, dequantize_q(v, s), heads_weights.astype(np.float32)


def quantized_queries(rng: np.random.Generator, kv_dtype: str, shape: tuple, heads_weights: np.ndarray):
    """Random q of `shape` [..., H, D] through sim_quantize_q."""
    return sim_quantize_q(kv_dtype, random_values(rng, shape, spread=2), heads_weights)


def block_table_sentinels(num_pages: int) -> np.ndarray:
    """int64 out-of-range page ids for unused block-table entries: never to be read (DESIGN §4)."""
    return np.array([num_pages, INT32_MAX, -1, num_pages + 12345], np.int64)


@dataclass
class PagedKV:
    """A hostile paged K cache: sequences on shuffled physical pages of a 0xFF-poisoned, strided pool.

    geom         sim.layout.PageGeometry
    pool         uint8[pool_bytes]; every byte not holding a written token is 0xFF (stride gaps, unused pages,
                 the tail of partial last pages)
    block_table  int32[B, max_pages]; sequence b's logical page i is physical page block_table[b, i]; entries past
                 its pages hold out-of-range sentinels (block_table_sentinels)
    """

    geom: sim_layout.PageGeometry
    pool: np.ndarray
    block_table: np.ndarray


def build_paged_kv(rng: np.random.Generator, kv_dtype: str, layout: str | None, page_size: int, head_dim: int,
                   tokens: Sequence[int], *, spare_pages: int = 2, extra_table_entries: int = 1,
                   stride_pad: int = 0, view_offset: int = 0, nan_token: tuple[int, int] | None = None) -> PagedKV:
    """Write random K (random_values) for each sequence of tokens[b] tokens with sim's quantizer and writer;
    `nan_token` = (b, t) gets a NaN block."""
    P = page_size
    pages_needed = [-(-n // P) for n in tokens]
    num_pages = sum(pages_needed) + spare_pages
    geom = make_geometry(kv_dtype, layout, P, head_dim, num_pages, stride_pad, view_offset)
    pool = sim_layout.new_pool(geom, fill=POISON)
    perm = rng.permutation(num_pages)
    max_pages = max(pages_needed, default=0) + extra_table_entries
    sentinels = block_table_sentinels(num_pages)
    table = np.empty((len(tokens), max(max_pages, 1)), np.int64)
    used = 0
    for b, n in enumerate(tokens):
        phys = perm[used: used + pages_needed[b]]
        used += pages_needed[b]
        table[b] = sentinels[(np.arange(table.shape[1]) + b) % sentinels.size]
        table[b, : phys.size] = phys
        x = random_values(rng, (n, head_dim))
        if nan_token is not None and nan_token[0] == b and n:
            x[nan_token[1], :MX_BLOCK] = np.nan
        v, s = sim_quantize(kv_dtype, x)
        slots = table[b, np.arange(n) // P] * P + np.arange(n) % P
        sim_layout.write_tokens(pool, geom, slots, v, s)
    return PagedKV(geom, pool, table.astype(np.int32))


# ------------------------------------------------------------------------------------------------ large addresses


@dataclass
class LargePool:
    """A pool larger than the last of sim.addressing.BOUNDARIES, with one short sequence per boundary whose (only,
    partial) page is the first page past that boundary (sim.addressing.boundary_report).

    geom         sim.layout.PageGeometry, view larger than max(sim.addressing.BOUNDARIES) bytes
    crossings    [(boundary, page)]: the first page with bytes past each boundary, in BOUNDARIES' order
    block_table  int32[B, 3], B = len(crossings): the crossing page, then out-of-range sentinels
    tokens       tokens per sequence, at the start of its page
    sim_pool     uint8[geom.pool_bytes], zeros but the tokens sim wrote from the writer's inputs
    kernel_pool  the kernel-written pool, as build_large_pool's `write` returned it (e.g. a flat uint8 device
                 tensor; on the host lazily committed np.zeros: only the touched pages cost memory)
    """

    geom: sim_layout.PageGeometry
    crossings: list[tuple[int, int]]
    block_table: np.ndarray
    tokens: int
    sim_pool: np.ndarray
    kernel_pool: object

    @property
    def cu_seq_lens(self) -> np.ndarray:
        """int32[B + 1]: the sequences' start rows when gathered one after another (tokens each)."""
        return (np.arange(len(self.crossings) + 1) * self.tokens).astype(np.int32)


@dataclass
class BoundaryResult:
    """What the failure models of sim.addressing predict at one boundary, against what the kernel read."""

    boundary: int
    page: int
    page_byte_offset: int                 # from the view base
    differs_int32_wrap: bool              # the int32_wrap model predicts other bytes than the kernel read
    differs_buffer_u32: bool
    faulted_int32_wrap: bool              # int32_wrap would have faulted (address outside the pool)


def build_large_pool(write: Callable[[sim_layout.PageGeometry, np.ndarray, np.ndarray], tuple[object, np.ndarray]],
                     *, kv_dtype: str = "mxfp4", layout: str | None = None, page_size: int = 64, head_dim: int = 128,
                     tokens: int = 5, page_stride: int = LARGE_PAGE_STRIDE, seed: str = "large") -> LargePool:
    """Write `tokens` random tokens at the start of each boundary page, through the kernel and through sim.

    write(geom, slots, x) -> (pool, x_sim) is the kernel's side: it writes K rows x (float32 [T, head_dim]) at
    slots (int64 [T], -1: skipped) into a zeroed pool of geom.pool_bytes bytes (geom's kv_dtype and layout, the
    rceil scale rule) and returns that pool with the values it quantized in a form sim's quantizers take (its
    input dtype's, e.g. hw.testing.sim_input). sim quantizes x_sim and writes the same slots of `sim_pool`.
    Mismatch if the pool's view does not pass the last boundary.
    """
    rng = case_rng(seed)
    P = page_size
    last_boundary = max(sim_addressing.BOUNDARIES)
    num_pages = last_boundary // page_stride + 3
    geom = make_geometry(kv_dtype, layout, P, head_dim, num_pages, page_stride=page_stride)
    if geom.view_bytes <= last_boundary:
        raise Mismatch(f"fixture: a view of {geom.view_bytes} bytes does not pass {last_boundary}")
    crossings = [(int(c.boundary), int(c.first_page)) for c in sim_addressing.boundary_report(geom).crossings]
    sentinels = block_table_sentinels(num_pages)
    table = np.array([[page, sentinels[0], sentinels[1]] for _, page in crossings], np.int32)
    slots = np.concatenate([[-1], (table[:, :1].astype(np.int64) * P + np.arange(tokens)).reshape(-1)])
    kernel_pool, x_sim = write(geom, slots, random_values(rng, (slots.size, head_dim)))
    sim_pool = sim_layout.new_pool(geom, fill=0)
    v, s = sim_quantize(kv_dtype, x_sim)
    sim_layout.write_tokens(sim_pool, geom, slots, v, s)
    return LargePool(geom, crossings, table, tokens, sim_pool, kernel_pool)


def check_large_writer(lp: LargePool, read: Callable[[slice], np.ndarray], nonzero_bytes: int) -> int:
    """The kernel-written bytes equal sim's around every boundary page, and no other byte of the pool changed.

    read(window) -> uint8 numpy copy of lp.kernel_pool[window] (a slice of pool bytes); nonzero_bytes: the count
    of non-zero bytes in the whole of lp.kernel_pool, which must equal those of the windows. Returns that count;
    Mismatch otherwise.
    """
    geom = lp.geom
    written = 0
    for boundary, page in lp.crossings:
        lo = geom.view_offset + page * geom.page_stride
        window = slice(lo - sim_layout.ALIGN, lo + geom.page_bytes + sim_layout.ALIGN)
        assert_equal_bits(f"pool bytes around page {page} (past {boundary})", read(window), lp.sim_pool[window],
                          lambda i, lo=lo, page=page: f"pool byte {lo - sim_layout.ALIGN + i[0]} "
                          f"(page {page}, page-local byte {i[0] - sim_layout.ALIGN})")
        written += int(np.count_nonzero(lp.sim_pool[window]))
    if nonzero_bytes != written:
        raise Mismatch(f"the writer changed {nonzero_bytes - written} bytes outside the written pages of the "
                       f"{geom.pool_bytes}-byte pool")
    return written


def check_large_gather(lp: LargePool, values: np.ndarray, scales: np.ndarray) -> list[BoundaryResult]:
    """The kernel's gather of lp's sequences (block_table, cu_seq_lens; values and scales as numpy, rows of the
    sequences one after another) equals sim's 64-bit read at every boundary page, and differs from what
    sim.addressing's int32_wrap model predicts at every boundary and its buffer_u32 model past 2^32 (below 2^32 an
    AMD buffer load with a 32-bit offset still reads the right bytes): the 64-bit rebase is what makes the kernel
    right. Returns one BoundaryResult per crossing; Mismatch otherwise."""
    geom, n = lp.geom, lp.tokens
    model = sim_addressing.AddressModel
    results = []
    for b, (boundary, page) in enumerate(lp.crossings):
        rows = slice(b * n, (b + 1) * n)
        rv, rs = sim_layout.read_tokens(lp.sim_pool, geom, lp.block_table[b], n)
        assert_equal_bits(f"gathered values on page {page} (past {boundary})", values[rows], rv)
        assert_equal_bits(f"gathered scales on page {page} (past {boundary})", scales[rows], rs)
        differs, faulted = {}, False
        for m in (model.INT32_WRAP, model.BUFFER_U32):
            mv, ms, mf = sim_addressing.read_tokens_as(lp.sim_pool, geom, lp.block_table[b], n, m)
            differs[m] = bool(np.any(as_bits(mv) != as_bits(values[rows]))
                              or np.any(as_bits(ms) != as_bits(scales[rows])))
            faulted |= m == model.INT32_WRAP and bool(np.any(mf))
        results.append(BoundaryResult(boundary, page, page * geom.page_stride, differs[model.INT32_WRAP],
                                      differs[model.BUFFER_U32], faulted))
        if not differs[model.INT32_WRAP]:
            raise Mismatch(f"page {page} (past {boundary}): the int32_wrap model predicts the bytes the kernel "
                           "read, so this fixture cannot tell a rebased kernel from a wrapping one")
        if page * geom.page_stride >= sim_addressing.UINT32 and not differs[model.BUFFER_U32]:
            raise Mismatch(f"page {page} (past 2^32): the buffer_u32 model predicts the bytes the kernel read")
    return results
