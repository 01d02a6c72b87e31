"""Differential testing: the hw/ kernels against the sim/ oracle (DESIGN §4, §8; `mxidx diff`).

A case is a frozen dataclass; its `run(env)` builds a hostile fixture, runs the kernel and the oracle on the same
bytes and raises `Mismatch` (first differing coordinate, both values) on disagreement. The matrix is three lists:

    CORRECTNESS    every kernel, format and layout on ordinary data (shuffled pages, strided pools, odd H, ...)
    CORNER         extremes: non-finite/tie/boundary inputs, context 0 and 1, all-zero batches, NaN in K, top-k ties
    LARGE_ADDRESS  a pool larger than 4,608,000,000 bytes whose read pages sit past 2^31, 2^32 and 4.608e9

Comparison rules:
    writers, Q quantizers, gather  byte-equal to sim (the writer over the WHOLE pool: nothing outside the written
                                   slots may change)
    prefill / decode logits        sim.scorer.check_logits against sim.scorer's analytic bound (DESIGN §4; n from
                                   hw.logits.dot_product_roundings, u from accumulation_unit_roundoff: what hw
                                   declares for the path the launch takes on the device):
                                   |kernel - ref| <= bound at every visible entry, NaN where ref is NaN, the same
                                   infinity where ref is infinite; invisible entries -inf when clean_logits=True
                                   (unchecked when False). The worst err/bound ratio is reported.
    top-k                          exactly equal to sim.topk on identical fp32 logits

A kernel that raises (anything but Mismatch) fails its case with the exception's type and message.

The module imports sim at import time but neither torch nor hw: `make_env` picks the device (tools.runtime.choose_device
sets TRITON_INTERPRET=1 for the CPU) before the first `import hw`. Fixture builders here (`make_geometry`,
`hostile_values`, `hostile_rows`, `sim_input`, `build_paged_kv`, `torch_cache_view`, `host_to_device`,
`pair_as_torch`, `sim_quantize_q`, ...) are the one implementation the tests share (tools/ cannot import tests/);
torch is imported inside the functions that need it.
"""
from __future__ import annotations

import fnmatch
import math
import time
import zlib
from dataclasses import asdict, dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np

from sim import addressing as sim_addressing
from sim import fp8 as sim_fp8
from sim import layout as sim_layout
from sim import mxfp4 as sim_mxfp4
from sim import scorer as sim_scorer
from sim import topk as sim_topk

PASS, FAIL = "pass", "FAIL"
CPU_NUM_SMS = 4                  # persistent-grid size for the interpreter (the GPU uses its SM count)
ALIGN = 16                       # page strides and view offsets are multiples of 16 bytes (DESIGN §2)
POISON = 0xFF                    # unused pages / scale bytes: E8M0 NaN, e4m3 NaN, fp32 NaN
MX_BLOCK = 32
LARGE_PAGE_STRIDE = 1_077_120    # a page stride reported from production shared pools (FACTS)
INT32_MAX = 2 ** 31 - 1
#: Kernel input dtypes by the names cases use, as torch attribute names (torch is imported lazily).
INPUT_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: E2M1 rounding ties (in units of the block scale) and exactly representable magnitudes, for tie-heavy blocks.
E2M1_TIES = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: hostile_rows' per-row power-of-two range for each input dtype (inside its normal range, fp16's is narrow).
EXPONENT_RANGE = {"fp32": (-140, 124), "bf16": (-140, 124), "fp16": (-22, 13)}


class Mismatch(AssertionError):
    """The kernel disagrees with the oracle; the message names the first differing coordinate and both values."""


# ------------------------------------------------------------------------------------------------ environment


@dataclass
class Env:
    """Where kernels run. Build with `make_env`, which imports hw/ only after the device is chosen."""

    device: str          # "cuda" | "cpu" (Triton interpreter)
    hw: object           # the hw package (cases call env.hw.<launcher>, looked up at call time: tests
                         # monkeypatch hw attributes)
    torch: object        # the torch module
    num_sms: int         # persistent-grid size handed to get_paged_mqa_logits_metadata

    def tensor(self, a: np.ndarray, dtype=None):
        """host_to_device onto the env's device."""
        return host_to_device(a, self.device, dtype)

    def numpy(self, t) -> np.ndarray:
        """torch -> numpy on the host; float8 tensors come back as their uint8 bit patterns."""
        t = t.detach()
        if t.dtype == self.torch.float8_e4m3fn:
            t = t.view(self.torch.uint8)
        return t.cpu().numpy()


def host_to_device(a: np.ndarray, device, dtype=None):
    """numpy -> a torch *copy* on `device` (C-contiguous, torch-allocated, so aligned beyond the 16 bytes cache
    views need); `dtype` reinterprets the bytes (uint8 -> float8_e4m3fn).

    Always a copy: on the CPU a shared buffer would let the kernel write into the oracle's own arrays.
    """
    import torch

    t = torch.from_numpy(np.ascontiguousarray(a)).clone()
    if dtype is not None:
        t = t.view(dtype)
    return t.to(device)


def make_env(device: str | None = "auto") -> Env:
    """Choose the device (sets TRITON_INTERPRET=1 for the CPU) and only then import hw."""
    from tools.runtime import choose_device

    device = choose_device(device)
    import torch

    import hw

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else CPU_NUM_SMS
    return Env(device=device, hw=hw, torch=torch, num_sms=num_sms)


# ------------------------------------------------------------------------------------------------ comparisons


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}") if a.dtype.kind == "f" else a


def _canonical_nan(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), np.float32(np.nan), x).astype(np.float32)


def assert_equal_bits(what: str, kernel: np.ndarray, ref: np.ndarray,
                      locate: Callable[[tuple], str] | None = None) -> None:
    """Bit-for-bit equality (floats compared as their bit patterns, so NaN payloads count)."""
    kernel, ref = np.asarray(kernel), np.asarray(ref)
    if kernel.shape != ref.shape:
        raise Mismatch(f"{what}: kernel shape {list(kernel.shape)} != sim shape {list(ref.shape)}")
    kb, rb = _bits(kernel), _bits(ref)
    if kb.dtype != rb.dtype:
        raise Mismatch(f"{what}: kernel dtype {kernel.dtype} != sim dtype {ref.dtype}")
    diff = kb != rb
    if diff.any():
        idx = tuple(int(i) for i in np.argwhere(diff)[0])
        width = 2 * kb.itemsize
        where = locate(idx) if locate else f"index {idx}"
        raise Mismatch(f"{what}: {int(diff.sum())} of {diff.size} differ; first at {where}: "
                       f"kernel 0x{int(kb[idx]):0{width}x}, sim 0x{int(rb[idx]):0{width}x}")


def pool_locator(geom) -> Callable[[tuple], str]:
    """Describe a pool byte index as (page, page-local offset, value/scale region)."""
    def locate(idx: tuple) -> str:
        i = idx[0] - geom.view_offset
        if i < 0:
            return f"pool byte {idx[0]} (before the view)"
        page, off = divmod(i, geom.page_stride)
        region = ("stride gap" if off >= geom.page_bytes else
                  "scale region" if off >= geom.scale_base else "value region")
        return f"pool byte {idx[0]} (page {page}, page-local byte {off}, {region})"
    return locate


def declared_unit_roundoff(env: Env, kv_dtype: str) -> float:
    """The u the scorer kernels declare for their accumulation on env's device (DESIGN §4: a path accumulating in
    reduced precision, e.g. Hopper's FP8 MMA, declares its u and the test uses it): hw.logits's declaration."""
    return float(env.hw.logits.accumulation_unit_roundoff(kv_dtype, env.device))


def declared_roundings(env: Env, kv_dtype: str, head_dim: int, kernel: str) -> int:
    """The n of DESIGN §4's bound that hw.logits declares for `kernel` ("prefill" | "decode") on env's device, on
    the MXFP4 dot path the launch takes (D/32 on the unpack paths, D on dot_scaled and for FP8)."""
    return int(env.hw.logits.dot_product_roundings(kv_dtype, head_dim, env.device, kernel))


def _u_note(u: float) -> str:
    return "" if u == 2.0 ** -24 else f"declared u = 2^{math.log2(u):.0f}"


def check_scorer(what: str, kernel: np.ndarray, ref: np.ndarray, bound: np.ndarray,
                 visible: np.ndarray | None) -> float:
    """sim.scorer.check_logits (DESIGN §4's rules) as a Mismatch; returns the worst err/bound ratio.

    `ref` comes from the clean_logits=True reference (-inf on invisible entries, bound 0 there), so with
    visible=None the kernel's invisible entries must be exactly -inf; pass `visible` for clean_logits=False.
    """
    kernel = np.asarray(kernel)
    if kernel.shape != ref.shape:
        raise Mismatch(f"{what}: kernel shape {list(kernel.shape)} != reference shape {list(ref.shape)}")
    with np.errstate(invalid="ignore"):   # clean_logits=False leaves invisible entries uninitialized (sNaN casts)
        result = sim_scorer.check_logits(kernel, ref, bound, visible=visible)
    if not result.ok:
        raise Mismatch(f"{what}: {result.describe()}")
    return result.worst_ratio


# ------------------------------------------------------------------------------------------------ fixtures


def case_rng(name: str) -> np.random.Generator:
    """A generator seeded from the case name: every run of a case sees the same data."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def make_geometry(kv_dtype: str, layout: str | None, page_size: int, head_dim: int, num_pages: int,
                  stride_pad: int = 0, view_offset: int = 0, page_stride: int | None = None):
    """sim.layout.PageGeometry with the page stride = the tight stride + stride_pad (or `page_stride`)."""
    tight = sim_layout.PageGeometry(kv_dtype, page_size, head_dim, num_pages, layout=layout)
    if page_stride is None:
        page_stride = tight.page_stride + stride_pad
    return sim_layout.PageGeometry(kv_dtype, page_size, head_dim, num_pages, page_stride=page_stride,
                                   layout=layout, view_offset=view_offset)


def torch_cache_view(pool_t, geom):
    """The uint8[num_pages, P, 1, bytes_per_token] kv_cache view (DESIGN §8) of a flat uint8 pool tensor: page b at
    byte view_offset + b * page_stride, token t at + t * bytes_per_token (the page's bytes are planar/tiled inside;
    the 4-D shape only fixes its size and stride)."""
    bpt = geom.bytes_per_token
    return pool_t.as_strided((geom.num_pages, geom.page_size, 1, bpt), (geom.page_stride, bpt, bpt, 1),
                             geom.view_offset)


def random_values(rng: np.random.Generator, shape: tuple, spread: int = 4) -> np.ndarray:
    """float32 normals, each 32-element block scaled by its own 2^e, e in [-spread, spread] (many scale bytes)."""
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


# FP8 row at scale 2^0 (amax 448) whose other elements sit exactly halfway between e4m3 neighbours:
# 1.0625 -> 1, 1.1875 -> 1.25, 17 -> 16, 19 -> 20, 248 -> 256, 3 * 2^-10 -> 2^-8 (subnormal tie).
FP8_TIE_ROW_VALUES = (448.0, 1.0625, 1.1875, 17.0, 19.0, 248.0, 3 * 2.0 ** -10, -1.0625, -19.0, -(3 * 2.0 ** -10))


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


def hostile_rows(rng: np.random.Generator, rows: int, head_dim: int, dtype: str):
    """torch CPU tensor [rows, head_dim] of input dtype `dtype` ("bf16" | "fp16" | "fp32"): per-row magnitudes
    across that dtype's own exponent range (EXPONENT_RANGE), plus special rows.

    Where hostile_values puts fp32 edge blocks into every row, this covers each input dtype's range: rows cycle
    (r % 8) through random normals at a random power of two 2^e; E2M1 ties and grid values around a block maximum
    of exactly 6 * 2^(e-2); block maxima with mantissa 1.5, 1.75, 1.5 + 2^-7, 1.25 (the scale rules disagree); an
    all-zero first block with -0.0; NaN in one element; +Inf and -Inf; subnormal-only rows (fp32/bf16: below the
    dtype's smallest normal); the dtype's largest finite value.
    """
    import torch

    lo, hi = EXPONENT_RANGE[dtype]
    exps = rng.integers(lo, hi, size=(rows, 1))
    x = rng.standard_normal((rows, head_dim)) * np.exp2(exps.astype(np.float64))
    torch_dtype = getattr(torch, INPUT_DTYPES[dtype])
    finfo = torch.finfo(torch_dtype)
    blocks = head_dim // MX_BLOCK
    for r in range(rows):
        kind = r % 8
        e = int(np.clip(exps[r, 0], lo + 4, hi - 4))
        if kind == 1:  # ties on the grid of a block whose max is exactly 6 * 2^(e-2)
            x[r] = rng.choice(E2M1_TIES + E2M1_GRID, size=head_dim) * rng.choice([-1, 1], size=head_dim) \
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
            x[r] = rng.standard_normal(head_dim) * float(finfo.tiny) * 0.5
        elif kind == 7:
            x[r, rng.integers(head_dim)] = float(finfo.max) * rng.choice([-1, 1])
    return torch.from_numpy(x).to(torch_dtype)


def sim_input(x) -> np.ndarray:
    """The sim/ form of a bf16 / fp16 / fp32 torch tensor, same values (sim.formats.as_float32_input): bf16 as
    uint16 bit patterns, fp16 as float16, fp32 as float32; copied to the host."""
    import torch

    x = x.detach().cpu()
    return x.view(torch.uint16).numpy() if x.dtype == torch.bfloat16 else x.numpy()


def to_input(env: Env, x: np.ndarray, dtype: str):
    """float32 host values -> (torch tensor of `dtype` on the device, the exact same values as sim input)."""
    t = env.torch.from_numpy(np.ascontiguousarray(x)).to(getattr(env.torch, INPUT_DTYPES[dtype]))
    return t.to(env.device), sim_input(t)


def sim_quantize(kv_dtype: str, x: np.ndarray, scale_rule: str = "rceil"):
    """The oracle's quantizer: (values, scales) as DESIGN §8 (fp8: e4m3 bits + fp32; mxfp4: codes + E8M0)."""
    if kv_dtype == "fp8":
        return sim_fp8.quantize(x)
    return sim_mxfp4.quantize(x, scale_rule=scale_rule)


def block_table_sentinels(num_pages: int) -> np.ndarray:
    """Out-of-range page ids for unused block-table entries: never to be read (DESIGN §4)."""
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

    geom: object
    pool: np.ndarray
    block_table: np.ndarray


def build_paged_kv(rng: np.random.Generator, kv_dtype: str, layout: str | None, page_size: int, head_dim: int,
                   tokens: Sequence[int], *, spare_pages: int = 2, extra_table_entries: int = 1,
                   stride_pad: int = 0, view_offset: int = 0, nan_token: tuple[int, int] | None = None) -> PagedKV:
    """Write random K for each sequence with sim's quantizer and writer; `nan_token` = (b, t) gets a NaN block."""
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


def pair_as_torch(kv_dtype: str, values: np.ndarray, scales: np.ndarray | None, device, *,
                  int32_scales: bool = False):
    """A sim (values, scales) pair -> the DESIGN §8 torch pair on `device` (host_to_device copies).

    FP8: e4m3 bit patterns uint8 -> float8_e4m3fn; scales float32, or None for q (its scale is folded into the
    weights). MXFP4: codes uint8 [..., D/2] and E8M0 scales uint8 [..., D/32]; int32_scales views each row's
    scale bytes as int32 words (DeepGEMM packing: [..., 1] int32 at D = 128).
    """
    import torch

    if kv_dtype == "fp8":
        return (host_to_device(values, device, torch.float8_e4m3fn),
                None if scales is None else host_to_device(scales.astype(np.float32), device))
    return host_to_device(values, device), host_to_device(scales, device, torch.int32 if int32_scales else None)


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


# ------------------------------------------------------------------------------------------------ cases


@dataclass(frozen=True, kw_only=True)
class Case:
    """One differential check. `quick` cases form `mxidx diff --quick` (CPU-interpreter sized)."""

    name: str
    quick: bool = False
    kind: ClassVar[str] = "?"

    def run(self, env: Env) -> "Outcome":  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items() if k not in ("name", "quick"))


@dataclass
class Outcome:
    worst_ratio: float | None = None   # scorer cases: worst |err| / bound
    note: str = ""


@dataclass
class CaseResult:
    name: str
    kind: str
    status: str          # PASS | FAIL
    detail: str
    worst_ratio: float | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == PASS


@dataclass(frozen=True, kw_only=True)
class FormatCase(Case):
    """A case over one KV format (fp8 | mxfp4) and head dim."""

    kv_dtype: str = "mxfp4"
    head_dim: int = 64


@dataclass(frozen=True, kw_only=True)
class InputCase(FormatCase):
    """A case quantizing kernel inputs of `dtype` (bf16 | fp16 | fp32) with `scale_rule` (MXFP4): random values, or
    hostile_values with `hostile`."""

    dtype: str = "bf16"
    scale_rule: str = "rceil"
    hostile: bool = False

    def input_values(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """float32 [rows, head_dim]."""
        return hostile_values(rng, rows, self.head_dim) if self.hostile else random_values(rng, (rows, self.head_dim))


@dataclass(frozen=True, kw_only=True)
class PagedCase(FormatCase):
    """A case over a paged pool: layout (None: kv_dtype's planar one), page size, page stride = tight stride +
    stride_pad, view offset (make_geometry)."""

    layout: str | None = None
    page_size: int = 16
    stride_pad: int = 0
    view_offset: int = 0

    def geometry(self, num_pages: int):
        return make_geometry(self.kv_dtype, self.layout, self.page_size, self.head_dim, num_pages, self.stride_pad,
                             self.view_offset)

    def paged_kv(self, rng: np.random.Generator, tokens: Sequence[int], **kwargs) -> PagedKV:
        """build_paged_kv with this case's format and geometry; kwargs: build_paged_kv's nan_token, ..."""
        return build_paged_kv(rng, self.kv_dtype, self.layout, self.page_size, self.head_dim, tokens,
                              stride_pad=self.stride_pad, view_offset=self.view_offset, **kwargs)


@dataclass(frozen=True, kw_only=True)
class WriterCase(PagedCase, InputCase):
    """hw.indexer_k_quant_and_cache vs sim.layout.write_tokens(sim quantize) over the whole (poisoned) pool."""

    kind: ClassVar[str] = "writer"
    num_tokens: int = 20

    def run(self, env: Env) -> Outcome:
        rng = case_rng(self.name)
        P = self.page_size
        num_pages = -(-self.num_tokens // P) + 3
        geom = self.geometry(num_pages)
        pool = sim_layout.new_pool(geom, fill=POISON)
        pool[: geom.view_offset] = rng.integers(0, 256, geom.view_offset, dtype=np.uint8)  # foreign bytes
        # Slots on shuffled pages, not in token order; a few tokens skipped (slot -1).
        slots = rng.permutation(num_pages * P)[: self.num_tokens].astype(np.int64)
        slots[rng.random(self.num_tokens) < 0.15] = -1
        x = self.input_values(rng, self.num_tokens)
        k_t, k_sim = to_input(env, x, self.dtype)
        pool_t = env.tensor(pool)
        env.hw.indexer_k_quant_and_cache(k_t, torch_cache_view(pool_t, geom), env.tensor(slots),
                                         kv_dtype=self.kv_dtype, layout=geom.layout, scale_rule=self.scale_rule)
        v, s = sim_quantize(self.kv_dtype, k_sim, self.scale_rule)
        sim_layout.write_tokens(pool, geom, slots, v, s)
        assert_equal_bits("pool after write", env.numpy(pool_t), pool, pool_locator(geom))
        return Outcome(note=f"{int((slots >= 0).sum())} tokens, {pool.size} pool bytes equal")


@dataclass(frozen=True, kw_only=True)
class QuantQCase(InputCase):
    """hw.quantize_q_mxfp4 / hw.quantize_q_fp8 vs sim (FP8: folded weights = weights * sim scale, exact)."""

    kind: ClassVar[str] = "quant_q"
    tokens: int = 5
    heads: int = 3

    def run(self, env: Env) -> Outcome:
        rng = case_rng(self.name)
        x = self.input_values(rng, self.tokens * self.heads)
        x = x.reshape(self.tokens, self.heads, self.head_dim)
        q_t, q_sim = to_input(env, x, self.dtype)
        if self.kv_dtype == "mxfp4":
            codes, scales = env.hw.quantize_q_mxfp4(q_t, scale_rule=self.scale_rule)
            rc, rs = sim_quantize("mxfp4", q_sim, self.scale_rule)
            assert_equal_bits("q codes", env.numpy(codes), rc)
            assert_equal_bits("q scales", env.numpy(scales), rs)
            return Outcome()
        w = rng.standard_normal((self.tokens, self.heads)).astype(np.float32)
        values, folded = env.hw.quantize_q_fp8(q_t, env.tensor(w))
        rv, rs = sim_quantize("fp8", q_sim)
        assert_equal_bits("q e4m3 values", env.numpy(values), rv)
        # A float product, not stored bytes: any NaN stands for NaN (GPUs produce their own canonical NaN).
        assert_equal_bits("folded weights", _canonical_nan(env.numpy(folded)), _canonical_nan(w * rs))
        return Outcome()


@dataclass(frozen=True, kw_only=True)
class GatherCase(PagedCase):
    """hw.cp_gather_indexer_k_quant_cache vs sim.layout.read_tokens, sequences concatenated at cu_seq_lens."""

    kind: ClassVar[str] = "gather"
    seq_lens: tuple = (1, 17, 40)

    def run(self, env: Env) -> Outcome:
        rng = case_rng(self.name)
        kv = self.paged_kv(rng, self.seq_lens)
        cu = np.concatenate([[0], np.cumsum(self.seq_lens)]).astype(np.int32)
        pool_t = env.tensor(kv.pool)
        values, scales = env.hw.cp_gather_indexer_k_quant_cache(torch_cache_view(pool_t, kv.geom),
                                                                env.tensor(kv.block_table), env.tensor(cu),
                                                                layout=kv.geom.layout)
        ref = [sim_layout.read_tokens(kv.pool, kv.geom, kv.block_table[b], n) for b, n in enumerate(self.seq_lens)]
        assert_equal_bits("gathered values", env.numpy(values), np.concatenate([r[0] for r in ref]))
        assert_equal_bits("gathered scales", env.numpy(scales), np.concatenate([r[1] for r in ref]))
        return Outcome(note=f"{int(cu[-1])} tokens")


@dataclass(frozen=True, kw_only=True)
class PrefillCase(FormatCase):
    """hw.fp8_fp4_mqa_logits vs sim.scorer.prefill_logits (ragged [ks, ke) per query row)."""

    kind: ClassVar[str] = "prefill"
    heads: int = 3
    num_q: int = 7
    num_k: int = 40
    ranges: str = "causal"    # causal | random | empty (ks == ke on some rows)
    clean_logits: bool = True
    nan_k: bool = False       # a NaN block in one key: its column is NaN wherever visible

    def run(self, env: Env) -> Outcome:
        rng = case_rng(self.name)
        S, SK, H, D = self.num_q, self.num_k, self.heads, self.head_dim
        w = rng.standard_normal((S, H)).astype(np.float32)
        qv, qs, q64, wk = quantized_queries(rng, self.kv_dtype, (S, H, D), w)
        xk = random_values(rng, (SK, D))
        if self.nan_k:
            xk[SK // 2, :MX_BLOCK] = np.nan
        kv_v, kv_s = sim_quantize(self.kv_dtype, xk)
        k64 = sim_scorer.dequantize_kv(kv_v, kv_s)
        ke = np.minimum(SK - S + 1 + np.arange(S), SK).clip(0) if self.ranges == "causal" else \
            rng.integers(0, SK + 1, S)
        ks = np.zeros(S, np.int64) if self.ranges == "causal" else rng.integers(0, ke + 1)
        if self.ranges == "empty":
            ks[::2] = ke[::2]
        ks, ke = ks.astype(np.int32), ke.astype(np.int32)
        out = env.hw.fp8_fp4_mqa_logits(pair_as_torch(self.kv_dtype, qv, qs, env.device),
                                        pair_as_torch(self.kv_dtype, kv_v, kv_s, env.device), env.tensor(wk),
                                        env.tensor(ks), env.tensor(ke), clean_logits=self.clean_logits)
        ref = sim_scorer.prefill_logits(q64, k64, wk, ks, ke, clean_logits=True)
        u = declared_unit_roundoff(env, self.kv_dtype)
        n = declared_roundings(env, self.kv_dtype, D, "prefill")
        bound = sim_scorer.prefill_error_bound(q64, k64, wk, ks, ke, n_roundings=n, u=u)
        cols = np.arange(SK)[None, :]
        visible = None if self.clean_logits else (cols >= ks[:, None]) & (cols < ke[:, None])
        return Outcome(worst_ratio=check_scorer("prefill logits", env.numpy(out), ref, bound, visible),
                       note=_u_note(u))


@dataclass(frozen=True, kw_only=True)
class DecodeCase(PagedCase):
    """hw.fp8_fp4_paged_mqa_logits (+ get_paged_mqa_logits_metadata) vs sim.scorer.decode_logits.

    context_lens: per sequence (1-D) or, with two_d, per (sequence, next_n row) as a tuple of tuples.
    """

    kind: ClassVar[str] = "decode"
    heads: int = 3
    context_lens: tuple = (0, 1, 17, 40)
    next_n: int = 1
    two_d: bool = False
    max_context_len: int | None = None    # default: the longest context + 5 (a wider output than needed)
    clean_logits: bool = True
    nan_token: tuple | None = None         # (sequence, token) with a NaN K block

    def run(self, env: Env) -> Outcome:
        rng = case_rng(self.name)
        ctx = np.asarray(self.context_lens, np.int64)
        B, N, H, D = ctx.shape[0], self.next_n, self.heads, self.head_dim
        seq_tokens = ctx.max(axis=1) if self.two_d else ctx
        kv = self.paged_kv(rng, [int(n) for n in seq_tokens], nan_token=self.nan_token)
        W = int(seq_tokens.max(initial=0)) + 5 if self.max_context_len is None else self.max_context_len
        w = rng.standard_normal((B * N, H)).astype(np.float32)
        qv, qs, q64, wk = quantized_queries(rng, self.kv_dtype, (B, N, H, D), w)
        ctx32 = ctx.astype(np.int32)
        return score_paged(env, kv, qv, qs, q64, wk, ctx32, N, W, self.clean_logits)


def score_paged(env: Env, kv: PagedKV, qv, qs, q64, wk, ctx32, next_n: int, width: int, clean_logits: bool,
                pool_t=None) -> Outcome:
    """Run the decode scorer on kv's pool (or `pool_t`, already on the device) and check it against sim."""
    geom, table = kv.geom, kv.block_table
    N = q64.shape[1]
    ctx_t = env.tensor(ctx32)
    meta = env.hw.get_paged_mqa_logits_metadata(ctx_t, geom.page_size, env.num_sms)
    pool_t = env.tensor(kv.pool) if pool_t is None else pool_t
    out = env.hw.fp8_fp4_paged_mqa_logits(pair_as_torch(geom.kv_dtype, qv, qs, env.device),
                                          torch_cache_view(pool_t, geom), env.tensor(wk), ctx_t, env.tensor(table),
                                          meta, width, clean_logits=clean_logits, layout=geom.layout)
    args = (q64, kv.pool, geom, wk, ctx32, table, width)
    ref = sim_scorer.decode_logits(*args, clean_logits=True)
    u = declared_unit_roundoff(env, geom.kv_dtype)
    n = declared_roundings(env, geom.kv_dtype, geom.head_dim, "decode")
    bound = sim_scorer.decode_error_bound(*args, n_roundings=n, u=u)
    visible_n = sim_scorer.decode_visible(ctx32, N, width, table.shape[1], geom.page_size)
    visible = None if clean_logits else np.arange(width)[None, :] < np.asarray(visible_n)[:, None]
    ratio = check_scorer("decode logits", env.numpy(out), ref, bound, visible)
    return Outcome(worst_ratio=ratio, note=" ".join(filter(None, [f"{int(np.sum(visible_n))} visible logits",
                                                                   _u_note(u)])))


@dataclass(frozen=True, kw_only=True)
class TopKCase(Case):
    """hw.top_k_per_row vs sim.topk.top_k on identical fp32 logits: exactly equal indices."""

    kind: ClassVar[str] = "topk"
    rows: int = 6
    width: int = 300
    k: int = 64
    hostile: bool = False   # heavy ties, NaN, +-inf, garbage past the row length

    def run(self, env: Env) -> Outcome:
        rng = case_rng(self.name)
        R, W = self.rows, self.width
        logits = rng.standard_normal((R, W)).astype(np.float32)
        lengths = rng.integers(0, W + 1, R)
        if self.hostile:
            logits = np.round(logits * 2).astype(np.float32)          # few distinct values: ties everywhere
            specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], np.float32)
            hit = rng.random((R, W)) < 0.1
            logits[hit] = rng.choice(specials, int(hit.sum()))
            lengths[: min(R, 4)] = [0, 1, self.k - 1, W][: min(R, 4)]
        lengths = lengths.astype(np.int32)
        out = env.hw.top_k_per_row(env.tensor(logits), env.tensor(lengths), self.k)
        ref = sim_topk.top_k(logits, self.k, ends=lengths)
        assert_equal_bits("top-k indices", env.numpy(out), np.asarray(ref, np.int32),
                          lambda i: f"row {i[0]} (length {lengths[i[0]]}), rank {i[1]}")
        return Outcome()


# ------------------------------------------------------------------------------------------------ large addresses


@dataclass
class LargePool:
    """A pool larger than the last of sim.addressing.BOUNDARIES, with one short sequence per boundary whose (only,
    partial) page is the first page past that boundary (sim.addressing.boundary_report).

    Host pools are np.zeros (lazily committed: only the touched pages cost memory); on the GPU the kernel's pool is
    real device memory. `pool_t` was written by hw.indexer_k_quant_and_cache, `sim_pool` by sim from the same k.
    """

    geom: object
    crossings: list          # [(boundary, page)]
    block_table: np.ndarray  # int32[B, 3]: the crossing page, then out-of-range sentinels
    tokens: int              # tokens per sequence
    sim_pool: np.ndarray
    pool_t: object


@dataclass
class BoundaryResult:
    """What the failure models of sim.addressing predict at one boundary, against what the kernel read."""

    boundary: int
    page: int
    page_byte_offset: int                 # from the view base
    differs_int32_wrap: bool              # the int32_wrap model predicts other bytes than the kernel read
    differs_buffer_u32: bool
    faulted_int32_wrap: bool              # int32_wrap would have faulted (address outside the pool)


def build_large_pool(env: Env, *, kv_dtype: str = "mxfp4", layout: str | None = None, page_size: int = 64,
                     head_dim: int = 128, tokens: int = 5, page_stride: int = LARGE_PAGE_STRIDE,
                     seed: str = "large") -> LargePool:
    """Write `tokens` tokens at the start of each boundary page, through the kernel and through sim."""
    rng = case_rng(seed)
    P = page_size
    last_boundary = max(sim_addressing.BOUNDARIES)
    num_pages = last_boundary // page_stride + 3
    geom = make_geometry(kv_dtype, layout, P, head_dim, num_pages, page_stride=page_stride)
    if geom.view_bytes <= last_boundary:
        raise Mismatch(f"fixture: a view of {geom.view_bytes} bytes does not pass {last_boundary}")
    crossings = [(int(c.boundary), int(c.first_page)) for c in
                 sim_addressing.boundary_report(geom).crossings]
    sentinels = block_table_sentinels(num_pages)
    table = np.array([[page, sentinels[0], sentinels[1]] for _, page in crossings], np.int32)
    slots = np.concatenate([[-1], (table[:, :1].astype(np.int64) * P + np.arange(tokens)).reshape(-1)])
    x = random_values(rng, (slots.size, head_dim))
    sim_pool = sim_layout.new_pool(geom, fill=0)
    pool_t = (env.torch.zeros(geom.pool_bytes, dtype=env.torch.uint8, device="cuda") if env.device == "cuda"
              else env.torch.from_numpy(np.zeros(geom.pool_bytes, np.uint8)))
    k_t, k_sim = to_input(env, x, "bf16")
    env.hw.indexer_k_quant_and_cache(k_t, torch_cache_view(pool_t, geom), env.tensor(slots), kv_dtype=kv_dtype,
                                     layout=geom.layout, scale_rule="rceil")
    v, s = sim_quantize(kv_dtype, k_sim)
    sim_layout.write_tokens(sim_pool, geom, slots, v, s)
    return LargePool(geom, crossings, table, tokens, sim_pool, pool_t)


def _nonzero_bytes(env: Env, pool_t) -> int:
    """Count non-zero bytes of a (lazily committed) pool in chunks, without a pool-sized temporary."""
    if env.device == "cuda":
        return int(env.torch.count_nonzero(pool_t))
    a = pool_t.numpy()
    chunk = 1 << 26
    return sum(int(np.count_nonzero(a[i: i + chunk])) for i in range(0, a.size, chunk))


def check_large_writer(env: Env, lp: LargePool) -> int:
    """Kernel-written bytes equal sim's around every boundary page, and no other byte of the pool changed
    (a scan of the whole pool: its non-zero bytes are exactly those of the written pages). Returns the count."""
    geom = lp.geom
    written = 0
    for boundary, page in lp.crossings:
        lo = geom.view_offset + page * geom.page_stride
        window = slice(lo - ALIGN, lo + geom.page_bytes + ALIGN)
        assert_equal_bits(f"pool bytes around page {page} (past {boundary})", env.numpy(lp.pool_t[window]),
                          lp.sim_pool[window], lambda i, lo=lo, page=page: f"pool byte {lo - ALIGN + i[0]} "
                          f"(page {page}, page-local byte {i[0] - ALIGN})")
        written += int(np.count_nonzero(lp.sim_pool[window]))
    nonzero = _nonzero_bytes(env, lp.pool_t)
    if nonzero != written:
        raise Mismatch(f"the writer changed {nonzero - written} bytes outside the written pages of the "
                       f"{geom.pool_bytes}-byte pool")
    return written


def check_large_gather(env: Env, lp: LargePool) -> list[BoundaryResult]:
    """Gathered bytes equal sim's 64-bit read at every boundary page, and differ from what sim.addressing's
    int32_wrap model predicts at every boundary and its buffer_u32 model past 2^32 (below 2^32 an AMD buffer load
    with a 32-bit offset still reads the right bytes): the 64-bit rebase is what makes the kernel right."""
    geom, n = lp.geom, lp.tokens
    B = len(lp.crossings)
    cu = (np.arange(B + 1) * n).astype(np.int32)
    gv, gs = env.hw.cp_gather_indexer_k_quant_cache(torch_cache_view(lp.pool_t, geom), env.tensor(lp.block_table),
                                                    env.tensor(cu), layout=geom.layout)
    gv, gs = env.numpy(gv), env.numpy(gs)
    model = sim_addressing.AddressModel
    results = []
    for b, (boundary, page) in enumerate(lp.crossings):
        rows = slice(b * n, (b + 1) * n)
        rv, rs = sim_layout.read_tokens(lp.sim_pool, geom, lp.block_table[b], n)
        assert_equal_bits(f"gathered values on page {page} (past {boundary})", gv[rows], rv)
        assert_equal_bits(f"gathered scales on page {page} (past {boundary})", gs[rows], rs)
        differs, faulted = {}, False
        for m in (model.INT32_WRAP, model.BUFFER_U32):
            mv, ms, mf = sim_addressing.read_tokens_as(lp.sim_pool, geom, lp.block_table[b], n, m)
            differs[m] = bool(np.any(_bits(mv) != _bits(gv[rows])) or np.any(_bits(ms) != _bits(gs[rows])))
            faulted |= m == model.INT32_WRAP and bool(np.any(mf))
        results.append(BoundaryResult(boundary, page, page * geom.page_stride, differs[model.INT32_WRAP],
                                      differs[model.BUFFER_U32], faulted))
        if not differs[model.INT32_WRAP]:
            raise Mismatch(f"page {page} (past {boundary}): the int32_wrap model predicts the bytes the kernel "
                           "read, so this fixture cannot tell a rebased kernel from a wrapping one")
        if page * geom.page_stride >= sim_addressing.UINT32 and not differs[model.BUFFER_U32]:
            raise Mismatch(f"page {page} (past 2^32): the buffer_u32 model predicts the bytes the kernel read")
    return results


def check_large_decode(env: Env, lp: LargePool, heads: int = 2, seed: str = "large") -> float:
    """Decode logits over the boundary pages within the §4 bound of sim.scorer; returns the worst ratio."""
    rng = case_rng(seed + "/decode")
    geom, n = lp.geom, lp.tokens
    B = len(lp.crossings)
    w = rng.standard_normal((B, heads)).astype(np.float32)
    qv, qs, q64, wk = quantized_queries(rng, geom.kv_dtype, (B, 1, heads, geom.head_dim), w)
    kv = PagedKV(geom, lp.sim_pool, lp.block_table)
    outcome = score_paged(env, kv, qv, qs, q64, wk, np.full(B, n, np.int32), 1, n + 3, True, pool_t=lp.pool_t)
    return outcome.worst_ratio


@dataclass(frozen=True, kw_only=True)
class LargeAddressCase(FormatCase):
    """build_large_pool + check_large_writer / check_large_gather / check_large_decode as a matrix case."""

    kind: ClassVar[str] = "large_address"
    head_dim: int = 128
    layout: str | None = None
    page_size: int = 64
    heads: int = 2
    tokens_per_page: int = 5

    def run(self, env: Env) -> Outcome:
        lp = build_large_pool(env, kv_dtype=self.kv_dtype, layout=self.layout, page_size=self.page_size,
                              head_dim=self.head_dim, tokens=self.tokens_per_page, seed=self.name)
        check_large_writer(env, lp)
        boundaries = check_large_gather(env, lp)
        ratio = check_large_decode(env, lp, heads=self.heads, seed=self.name)
        pages = ", ".join(f"{r.page}{' (int32 wrap faults)' if r.faulted_int32_wrap else ''}" for r in boundaries)
        return Outcome(worst_ratio=ratio, note=f"pool {lp.geom.pool_bytes / 1e9:.2f} GB, pages {pages}")


# ------------------------------------------------------------------------------------------------ the matrix


def _writer_cases() -> list[Case]:
    out = [
        WriterCase(name="writer-fp8-D64-P16-bf16", quick=True, kv_dtype="fp8", head_dim=64),
        WriterCase(name="writer-mxfp4-D32-P16-fp32", quick=True, head_dim=32, dtype="fp32"),
        WriterCase(name="writer-mxfp4-D128-P64-bf16-strided", quick=True, head_dim=128, page_size=64,
                   num_tokens=70, stride_pad=48, view_offset=32),
        WriterCase(name="writer-tiled-D128-P16-fp16", quick=True, layout="mxfp4_tiled", head_dim=128),
    ]
    for kv_dtype, layout in (("fp8", None), ("mxfp4", None), ("mxfp4", "mxfp4_tiled")):
        for D in ((128,) if layout else (32, 64, 128)):
            for P in (16, 64, 128):
                for dtype in ("bf16", "fp16", "fp32"):
                    out.append(WriterCase(name=f"writer-{layout or kv_dtype}-D{D}-P{P}-{dtype}", kv_dtype=kv_dtype,
                                          layout=layout, head_dim=D, page_size=P, dtype=dtype,
                                          num_tokens=2 * P + 3, stride_pad=16 * (P // 16)))
    return _dedupe(out)


def _dedupe(cases: list[Case]) -> list[Case]:
    """Keep the first case of each name (a hand-written quick case wins over a generated one of the same shape)."""
    seen: dict[str, Case] = {}
    for c in cases:
        seen.setdefault(c.name, c)
    return list(seen.values())


CORRECTNESS: list[Case] = [
    *_writer_cases(),
    QuantQCase(name="qq-mxfp4-H3-D64-bf16", quick=True),
    QuantQCase(name="qq-fp8-H3-D64-bf16", quick=True, kv_dtype="fp8"),
    *[QuantQCase(name=f"qq-{f}-H{H}-D{D}-{dt}", kv_dtype=f, heads=H, head_dim=D, dtype=dt, tokens=9)
      for f in ("mxfp4", "fp8") for H, D in ((1, 32), (5, 128), (32, 128)) for dt in ("bf16", "fp32")],
    GatherCase(name="gather-fp8-D64-P16", quick=True, kv_dtype="fp8"),
    GatherCase(name="gather-mxfp4-D64-P16-strided", quick=True, stride_pad=32, view_offset=16),
    GatherCase(name="gather-tiled-D128-P16", quick=True, layout="mxfp4_tiled", head_dim=128),
    *[GatherCase(name=f"gather-{lay or kv}-D{D}-P{P}", kv_dtype=kv, layout=lay, head_dim=D, page_size=P,
                 seq_lens=(0, 1, P, 3 * P + 5), stride_pad=64)
      for kv, lay, D in (("fp8", None, 128), ("mxfp4", None, 32), ("mxfp4", None, 128),
                         ("mxfp4", "mxfp4_tiled", 256))
      for P in (16, 64, 128)],
    PrefillCase(name="prefill-mxfp4-H3-D64", quick=True),
    PrefillCase(name="prefill-fp8-H3-D64", quick=True, kv_dtype="fp8"),
    *[PrefillCase(name=f"prefill-{kv}-H{H}-D{D}-{rg}", kv_dtype=kv, heads=H, head_dim=D, ranges=rg, num_q=33,
                  num_k=300)
      for kv in ("fp8", "mxfp4") for H, D in ((1, 32), (5, 64), (32, 128)) for rg in ("causal", "random")],
    DecodeCase(name="decode-mxfp4-D64-P16-H3", quick=True),
    DecodeCase(name="decode-fp8-D64-P16-H3", quick=True, kv_dtype="fp8"),
    DecodeCase(name="decode-tiled-D128-P16-N2", quick=True, layout="mxfp4_tiled", head_dim=128, next_n=2,
               context_lens=(3, 35)),
    *[DecodeCase(name=f"decode-{lay or kv}-D{D}-P{P}-H{H}-N{N}{'-2d' if two_d else ''}", kv_dtype=kv, layout=lay,
                 head_dim=D, page_size=P, heads=H, next_n=N, two_d=two_d,
                 context_lens=(((0, 1, 2)[:N], (P + 1, P + 2, 3 * P)[:N], (5 * P, 1, 0)[:N]) if two_d
                               else (0, 1, P, 2 * P + 3, 5 * P - 1)),
                 stride_pad=16 * P, clean_logits=not two_d)
      for kv, lay, D in (("fp8", None, 32), ("fp8", None, 128), ("mxfp4", None, 32), ("mxfp4", None, 64),
                         ("mxfp4", None, 128), ("mxfp4", "mxfp4_tiled", 128))
      for P in (16, 64, 128) for H, N, two_d in ((7, 1, False), (32, 2, False), (3, 3, True))],
    TopKCase(name="topk-R6-W300-k64", quick=True),
    TopKCase(name="topk-R64-W8192-k2048", rows=64, width=8192, k=2048),
    # GPU-sized scorer shapes (the model's H = 32, D = 128; contexts into the thousands)
    *[PrefillCase(name=f"prefill-{kv}-S256-SK2048-H32-D128", kv_dtype=kv, heads=32, head_dim=128, num_q=256,
                  num_k=2048) for kv in ("fp8", "mxfp4")],
    *[DecodeCase(name=f"decode-{lay or kv}-B8-H32-D128-P64-ctx4096", kv_dtype=kv, layout=lay, heads=32,
                 head_dim=128, page_size=64, context_lens=(4096, 1, 3000, 2049, 0, 4095, 64, 1000),
                 max_context_len=4096, clean_logits=False)
      for kv, lay in (("fp8", None), ("mxfp4", None), ("mxfp4", "mxfp4_tiled"))],
    DecodeCase(name="decode-mxfp4-B4-N2-H32-D128-P64-2d", heads=32, head_dim=128, page_size=64, next_n=2,
               two_d=True, context_lens=((2000, 2001), (1, 0), (63, 64), (1500, 700))),
]

CORNER: list[Case] = [
    WriterCase(name="writer-mxfp4-hostile-rceil", quick=True, hostile=True, dtype="fp32", num_tokens=24),
    WriterCase(name="writer-mxfp4-hostile-floor", hostile=True, dtype="fp32", scale_rule="floor", num_tokens=24),
    WriterCase(name="writer-mxfp4-hostile-even", hostile=True, dtype="fp32", scale_rule="even", num_tokens=24),
    WriterCase(name="writer-mxfp4-hostile-bf16", hostile=True, dtype="bf16", num_tokens=24),
    WriterCase(name="writer-tiled-hostile", hostile=True, layout="mxfp4_tiled", head_dim=128, dtype="fp32"),
    WriterCase(name="writer-fp8-hostile", quick=True, kv_dtype="fp8", hostile=True, dtype="fp32", num_tokens=24),
    WriterCase(name="writer-fp8-hostile-fp16", kv_dtype="fp8", hostile=True, dtype="fp16", num_tokens=24),
    QuantQCase(name="qq-mxfp4-hostile", quick=True, hostile=True, dtype="fp32", heads=5, head_dim=32),
    QuantQCase(name="qq-mxfp4-hostile-floor", hostile=True, dtype="fp32", scale_rule="floor"),
    QuantQCase(name="qq-mxfp4-hostile-even", hostile=True, dtype="fp32", scale_rule="even"),
    QuantQCase(name="qq-fp8-hostile", quick=True, kv_dtype="fp8", hostile=True, dtype="fp32", heads=5),
    PrefillCase(name="prefill-mxfp4-empty-rows-unclean", quick=True, ranges="empty", clean_logits=False),
    PrefillCase(name="prefill-fp8-nan-k", kv_dtype="fp8", nan_k=True, ranges="random"),
    PrefillCase(name="prefill-mxfp4-nan-k", nan_k=True, ranges="random"),
    DecodeCase(name="decode-mxfp4-ctx0-ctx1", quick=True, heads=1, context_lens=(0, 1, 0, 1), head_dim=32),
    DecodeCase(name="decode-mxfp4-all-zero-B32", context_lens=(0,) * 32, head_dim=32, heads=1),
    DecodeCase(name="decode-fp8-all-zero-B64-N2", kv_dtype="fp8", context_lens=(0,) * 64, next_n=2, head_dim=32,
               heads=1),
    DecodeCase(name="decode-mxfp4-N3-short-ctx", quick=True, next_n=3, heads=5, context_lens=(1, 2, 4)),
    DecodeCase(name="decode-mxfp4-2d-ctx", quick=True, next_n=2, two_d=True, context_lens=((0, 3), (17, 16))),
    DecodeCase(name="decode-mxfp4-narrow-output", context_lens=(10, 40), max_context_len=20),
    DecodeCase(name="decode-mxfp4-nan-k", quick=True, context_lens=(5, 20), nan_token=(1, 3)),
    DecodeCase(name="decode-fp8-nan-k", kv_dtype="fp8", context_lens=(5, 20), nan_token=(1, 3)),
    DecodeCase(name="decode-mxfp4-unclean", context_lens=(3, 33), clean_logits=False, view_offset=48),
    TopKCase(name="topk-hostile", quick=True, hostile=True, rows=8, width=200, k=48),
    TopKCase(name="topk-hostile-k2048", hostile=True, rows=16, width=4096, k=2048),
]

LARGE_ADDRESS: list[Case] = [
    LargeAddressCase(name="large-mxfp4-P64-D128", quick=True),
    LargeAddressCase(name="large-tiled-P64-D128", layout="mxfp4_tiled", heads=8, tokens_per_page=64),
    LargeAddressCase(name="large-fp8-P64-D128", kv_dtype="fp8", heads=8, tokens_per_page=40),
]

ALL_CASES: list[Case] = CORRECTNESS + CORNER + LARGE_ADDRESS


def select_cases(quick: bool, patterns: Sequence[str] = ()) -> list[Case]:
    """The --quick subset (or every case), filtered by shell-style name patterns; ValueError if none match."""
    cases = [c for c in ALL_CASES if c.quick or not quick]
    if patterns:
        cases = [c for c in ALL_CASES if any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
        if not cases:
            raise ValueError(f"--case {' '.join(patterns)} matches no case; `mxidx diff --list` shows the names")
    return cases


# ------------------------------------------------------------------------------------------------ running


def run_case(case: Case, env: Env) -> CaseResult:
    """Run one case; never raises for a kernel or oracle problem (the result says what went wrong)."""
    t0 = time.perf_counter()
    ratio = None
    try:
        outcome = case.run(env)
        status, ratio, detail = PASS, outcome.worst_ratio, outcome.note
    except Mismatch as e:
        status, detail = FAIL, str(e)
    except Exception as e:  # a crash is a failure of the case, reported with its type
        status, detail = FAIL, f"{type(e).__name__}: {e}"
    return CaseResult(case.name, case.kind, status, detail, ratio, time.perf_counter() - t0)


def run_cases(cases: Sequence[Case], env: Env,
              on_result: Callable[[int, CaseResult], None] | None = None) -> list[CaseResult]:
    results = []
    for i, case in enumerate(cases):
        results.append(run_case(case, env))
        if on_result is not None:
            on_result(i, results[-1])
    return results


def format_ratio(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.3g}"


def format_table(results: Sequence[CaseResult], detail_width: int = 100) -> str:
    """case | kind | status | worst err/bound | seconds | detail (first mismatch or a note), then the summary and
    the untruncated detail of every failed case."""
    head = ("case", "kind", "status", "err/bound", "s", "detail")
    rows = [(r.name, r.kind, r.status, format_ratio(r.worst_ratio), f"{r.seconds:.1f}",
             r.detail if len(r.detail) <= detail_width else r.detail[: detail_width - 3] + "...") for r in results]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    line = lambda x: "  ".join(v.ljust(w) for v, w in zip(x, widths)).rstrip()  # noqa: E731
    failed = sum(not r.ok for r in results)
    footer = f"{len(results) - failed} passed, {failed} failed of {len(results)}"
    details = [f"{r.name} ({r.status}): {r.detail}" for r in results if not r.ok]
    return "\n".join([line(head), line(tuple("-" * w for w in widths)), *map(line, rows), footer, *details])


def results_json(results: Sequence[CaseResult]) -> list[dict]:
    return [dict(asdict(r), ok=r.ok) for r in results]
