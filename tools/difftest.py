"""Differential testing: the hw/ kernels against the sim/ oracle (DESIGN §4, §8; `mxidx diff`).

A case is a frozen DiffCase dataclass, one class per kernel (WriterDiff, QuantQDiff, GatherDiff, PrefillDiff,
DecodeDiff, TopKDiff, LargeAddressDiff); its `run(env)` builds a hostile fixture, runs the kernel and the oracle on
the same bytes and raises `Mismatch` (first differing coordinate, both values) on disagreement. The matrix is three
lists:

    CORRECTNESS    every kernel, format and layout on ordinary data (shuffled pages, strided pools, odd H, ...)
    CORNER         extremes: non-finite/tie/boundary inputs, context 0 and 1, all-zero batches, NaN in K, top-k ties
    LARGE_ADDRESS  a pool larger than 4,608,000,000 bytes whose read pages sit past 2^31, 2^32 and 4.608e9

Comparison rules:
    writers, Q quantizers, gather  byte-equal to sim (the writer over the WHOLE pool: nothing outside the written
                                   slots may change)
    prefill / decode logits        every variant of the op that runs on the device (hw.variants), each against
                                   sim.scorer's analytic bound (DESIGN §4) with the (n, u) hw declares for it
                                   (hw.logits.declared_precision):
                                   |kernel - ref| <= bound at every visible entry, NaN where ref is NaN, the same
                                   infinity where ref is infinite; invisible entries -inf when clean_logits=True
                                   (unchecked when False). The worst err/bound ratio is reported.
    top-k                          exactly equal to sim.topk on identical fp32 logits

A kernel that raises (anything but Mismatch) fails its case with the exception's type and message.

The fixtures come from sim.testing (numpy: hostile inputs, pools written by sim, comparisons) and hw.testing
(torch adapters: device copies, cache views, input dtypes). The module imports sim at import time but neither torch
nor hw: `make_env` picks the device (tools.runtime.choose_device sets TRITON_INTERPRET=1 for the CPU) before the
first `import hw`, and cases reach hw.testing through `Env.testing`.
"""
from __future__ import annotations

import fnmatch
import functools
import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np

from sim import layout as sim_layout
from sim import scorer as sim_scorer
from sim import topk as sim_topk
from sim.formats import MX_BLOCK
from sim.testing import (
    POISON,
    LargePool,
    Mismatch,
    PagedKV,
    assert_equal_bits,
    build_large_pool,
    build_paged_kv,
    canonical_nan,
    case_rng,
    check_large_gather,
    check_large_writer,
    check_scorer,
    hostile_values,
    make_geometry,
    pool_locator,
    quantized_queries,
    random_values,
    sim_quantize,
)

PASS, FAIL = "pass", "FAIL"


# ------------------------------------------------------------------------------------------------ environment


@dataclass
class Env:
    """Where kernels run. Build with `make_env`, which imports hw/ only after the device is chosen."""

    device: str          # "cuda" | "cpu" (Triton interpreter)
    hw: object           # the hw package (cases call env.hw.<launcher>, looked up at call time: tests
                         # monkeypatch hw attributes)
    testing: object      # hw.testing: the numpy <-> torch adapters
    num_sms: int         # persistent-grid size handed to get_paged_mqa_logits_metadata (the hook's default)

    def tensor(self, a: np.ndarray, dtype=None):
        """hw.testing.host_to_device onto the env's device."""
        return self.testing.host_to_device(a, self.device, dtype)

    def numpy(self, t) -> np.ndarray:
        """hw.testing.to_numpy: on the host, float8 as uint8 bit patterns."""
        return self.testing.to_numpy(t)

    def cache_view(self, pool_t, geom):
        """hw.testing.torch_cache_view: the kv_cache view of a flat pool tensor."""
        return self.testing.torch_cache_view(pool_t, geom)

    def pair(self, kv_dtype: str, values: np.ndarray, scales: np.ndarray | None):
        """hw.testing.pair_as_torch onto the env's device."""
        return self.testing.pair_as_torch(kv_dtype, values, scales, self.device)

    def variants(self, op: str, kv_dtype: str | None = None) -> list[str]:
        """Names of the hw.variants of `op` ("prefill" | "decode" | "topk") for `kv_dtype` that run on env's
        device: every case of the op checks each of them."""
        target = self.hw.logits.scorer_target(self.device)
        return [v.name for v in self.hw.variants.variants(self.hw.targets.Op(op), kv_dtype, target)]

    def precision(self, op: str, kv_dtype: str, head_dim: int, variant: str) -> tuple[int, float]:
        """The (n, u) of DESIGN §4's bound that hw declares for `variant` on env's device."""
        return self.hw.logits.declared_precision(self.hw.targets.Op(op), kv_dtype, head_dim, self.device, variant)


def make_env(device: str | None = "auto") -> Env:
    """Choose the device (sets TRITON_INTERPRET=1 for the CPU) and only then import hw."""
    from tools.runtime import choose_device

    device = choose_device(device)
    import torch

    import hw
    from hw import testing
    from integration.schedule import default_num_sms  # the persistent grid the hook uses

    return Env(device=device, hw=hw, testing=testing, num_sms=default_num_sms(torch.device(device)))


# ------------------------------------------------------------------------------------------------ comparisons


def check_variants(op: str, variants: Sequence[str], check: Callable[[str], tuple[float, float]]) -> Outcome:
    """Run check(variant) -> (worst err/bound ratio, declared u) for every variant; a Mismatch names the variant.
    The outcome has the worst ratio over them and notes the variants (and a u other than fp32's), and those that
    do not cover the case (hw.targets.NotCovered: nothing ran)."""
    from hw.targets import NotCovered  # hw is imported once make_env has chosen the device

    worst, notes = 0.0, []
    for variant in variants:
        try:
            ratio, u = check(variant)
        except Mismatch as e:
            raise Mismatch(f"{op} variant {variant}: {e}") from None
        except NotCovered:
            notes.append(f"{variant} (does not cover the case)")
            continue
        worst = max(worst, ratio)
        notes.append(variant if u == 2.0 ** -24 else f"{variant} (u = 2^{math.log2(u):.0f})")
    return Outcome(worst_ratio=worst, note="variants " + ", ".join(notes))


# ------------------------------------------------------------------------------------------------ cases


@dataclass(frozen=True, kw_only=True)
class DiffCase:
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
class FormatDiff(DiffCase):
    """A case over one KV format (fp8 | mxfp4) and head dim."""

    kv_dtype: str = "mxfp4"
    head_dim: int = 64


@dataclass(frozen=True, kw_only=True)
class InputDiff(FormatDiff):
    """A case quantizing kernel inputs of `dtype` (bf16 | fp16 | fp32) with `scale_rule` (MXFP4): random values, or
    hostile_values with `hostile`."""

    dtype: str = "bf16"
    scale_rule: str = "rceil"
    hostile: bool = False

    def input_values(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """float32 [rows, head_dim]."""
        return hostile_values(rng, rows, self.head_dim) if self.hostile else random_values(rng, (rows, self.head_dim))


@dataclass(frozen=True, kw_only=True)
class PagedDiff(FormatDiff):
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
class WriterDiff(PagedDiff, InputDiff):
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
        k_t, k_sim = env.testing.to_input(x, self.dtype, env.device)
        pool_t = env.tensor(pool)
        env.hw.indexer_k_quant_and_cache(k_t, env.cache_view(pool_t, geom), env.tensor(slots),
                                         kv_dtype=self.kv_dtype, layout=geom.layout, scale_rule=self.scale_rule)
        v, s = sim_quantize(self.kv_dtype, k_sim, self.scale_rule)
        sim_layout.write_tokens(pool, geom, slots, v, s)
        assert_equal_bits("pool after write", env.numpy(pool_t), pool, pool_locator(geom))
        return Outcome(note=f"{int((slots >= 0).sum())} tokens, {pool.size} pool bytes equal")


@dataclass(frozen=True, kw_only=True)
class QuantQDiff(InputDiff):
    """hw.quantize_q_mxfp4 / hw.quantize_q_fp8 vs sim (FP8: folded weights = weights * sim scale, exact)."""

    kind: ClassVar[str] = "quant_q"
    tokens: int = 5
    heads: int = 3

    def run(self, env: Env) -> Outcome:
        rng = case_rng(self.name)
        x = self.input_values(rng, self.tokens * self.heads)
        x = x.reshape(self.tokens, self.heads, self.head_dim)
        q_t, q_sim = env.testing.to_input(x, self.dtype, env.device)
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
        assert_equal_bits("folded weights", canonical_nan(env.numpy(folded)), canonical_nan(w * rs))
        return Outcome()


@dataclass(frozen=True, kw_only=True)
class GatherDiff(PagedDiff):
    """hw.cp_gather_indexer_k_quant_cache vs sim.layout.read_tokens, sequences concatenated at cu_seq_lens."""

    kind: ClassVar[str] = "gather"
    seq_lens: tuple = (1, 17, 40)

    def run(self, env: Env) -> Outcome:
        rng = case_rng(self.name)
        kv = self.paged_kv(rng, self.seq_lens)
        cu = np.concatenate([[0], np.cumsum(self.seq_lens)]).astype(np.int32)
        pool_t = env.tensor(kv.pool)
        values, scales = env.hw.cp_gather_indexer_k_quant_cache(env.cache_view(pool_t, kv.geom),
                                                                env.tensor(kv.block_table), env.tensor(cu),
                                                                layout=kv.geom.layout)
        ref = [sim_layout.read_tokens(kv.pool, kv.geom, kv.block_table[b], n) for b, n in enumerate(self.seq_lens)]
        assert_equal_bits("gathered values", env.numpy(values), np.concatenate([r[0] for r in ref]))
        assert_equal_bits("gathered scales", env.numpy(scales), np.concatenate([r[1] for r in ref]))
        return Outcome(note=f"{int(cu[-1])} tokens")


@dataclass(frozen=True, kw_only=True)
class PrefillDiff(FormatDiff):
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
        ref = sim_scorer.prefill_logits(q64, k64, wk, ks, ke, clean_logits=True)
        cols = np.arange(SK)[None, :]
        visible = None if self.clean_logits else (cols >= ks[:, None]) & (cols < ke[:, None])

        def check(variant: str) -> tuple[float, float]:
            out = env.hw.fp8_fp4_mqa_logits(env.pair(self.kv_dtype, qv, qs),
                                            env.pair(self.kv_dtype, kv_v, kv_s), env.tensor(wk),
                                            env.tensor(ks), env.tensor(ke), clean_logits=self.clean_logits,
                                            variant=variant)
            n, u = env.precision("prefill", self.kv_dtype, D, variant)
            bound = sim_scorer.prefill_error_bound(q64, k64, wk, ks, ke, n_roundings=n, u=u)
            return check_scorer("prefill logits", env.numpy(out), ref, bound, visible), u

        return check_variants("prefill", env.variants("prefill", self.kv_dtype), check)


@dataclass(frozen=True, kw_only=True)
class DecodeDiff(PagedDiff):
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
    """Run every decode variant on kv's pool (or `pool_t`, already on the device) and check it against sim."""
    geom, table = kv.geom, kv.block_table
    N = q64.shape[1]
    ctx_t = env.tensor(ctx32)
    meta = env.hw.get_paged_mqa_logits_metadata(ctx_t, geom.page_size, env.num_sms)
    pool_t = env.tensor(kv.pool) if pool_t is None else pool_t
    args = (q64, kv.pool, geom, wk, ctx32, table, width)
    ref = sim_scorer.decode_logits(*args, clean_logits=True)
    visible_n = sim_scorer.decode_visible(ctx32, N, width, table.shape[1], geom.page_size)
    visible = None if clean_logits else np.arange(width)[None, :] < np.asarray(visible_n)[:, None]

    def check(variant: str) -> tuple[float, float]:
        out = env.hw.fp8_fp4_paged_mqa_logits(env.pair(geom.kv_dtype, qv, qs), env.cache_view(pool_t, geom),
                                              env.tensor(wk), ctx_t, env.tensor(table), meta, width,
                                              clean_logits=clean_logits, layout=geom.layout, variant=variant)
        n, u = env.precision("decode", geom.kv_dtype, geom.head_dim, variant)
        bound = sim_scorer.decode_error_bound(*args, n_roundings=n, u=u)
        return check_scorer("decode logits", env.numpy(out), ref, bound, visible), u

    outcome = check_variants("decode", env.variants("decode", geom.kv_dtype), check)
    return Outcome(worst_ratio=outcome.worst_ratio,
                   note=f"{int(np.sum(visible_n))} visible logits; {outcome.note}")


@dataclass(frozen=True, kw_only=True)
class TopKDiff(DiffCase):
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
        ref = np.asarray(sim_topk.top_k(logits, self.k, ends=lengths), np.int32)

        def check(variant: str) -> tuple[float, float]:
            out = env.hw.top_k_per_row(env.tensor(logits), env.tensor(lengths), self.k, variant=variant)
            assert_equal_bits("top-k indices", env.numpy(out), ref,
                              lambda i: f"row {i[0]} (length {lengths[i[0]]}), rank {i[1]}")
            return 0.0, 2.0 ** -24       # exact: no error ratio, no accumulation

        return Outcome(note=check_variants("top-k", env.variants("topk"), check).note)


# ------------------------------------------------------------------------------------------------ large addresses


def check_large_decode(env: Env, lp: LargePool, heads: int = 2, seed: str = "large") -> float:
    """Every decode variant's logits over lp's boundary pages (lp.kernel_pool on env's device) within the §4 bound
    of sim.scorer; returns the worst err/bound ratio."""
    rng = case_rng(seed + "/decode")
    geom, n = lp.geom, lp.tokens
    B = len(lp.crossings)
    w = rng.standard_normal((B, heads)).astype(np.float32)
    qv, qs, q64, wk = quantized_queries(rng, geom.kv_dtype, (B, 1, heads, geom.head_dim), w)
    kv = PagedKV(geom, lp.sim_pool, lp.block_table)
    outcome = score_paged(env, kv, qv, qs, q64, wk, np.full(B, n, np.int32), 1, n + 3, True, pool_t=lp.kernel_pool)
    return outcome.worst_ratio


@dataclass(frozen=True, kw_only=True)
class LargeAddressDiff(FormatDiff):
    """sim.testing.build_large_pool (written by hw.testing.write_zeros_pool) + check_large_writer /
    check_large_gather / check_large_decode as a matrix case."""

    kind: ClassVar[str] = "large_address"
    head_dim: int = 128
    layout: str | None = None
    page_size: int = 64
    heads: int = 2
    tokens_per_page: int = 5

    def run(self, env: Env) -> Outcome:
        lp = build_large_pool(functools.partial(env.testing.write_zeros_pool, device=env.device),
                              kv_dtype=self.kv_dtype, layout=self.layout, page_size=self.page_size,
                              head_dim=self.head_dim, tokens=self.tokens_per_page, seed=self.name)
        pool_t, geom = lp.kernel_pool, lp.geom
        check_large_writer(lp, lambda window: env.numpy(pool_t[window]), env.testing.count_nonzero_bytes(pool_t))
        values, scales = env.hw.cp_gather_indexer_k_quant_cache(env.cache_view(pool_t, geom),
                                                                env.tensor(lp.block_table), env.tensor(lp.cu_seq_lens),
                                                                layout=geom.layout)
        boundaries = check_large_gather(lp, env.numpy(values), env.numpy(scales))
        ratio = check_large_decode(env, lp, heads=self.heads, seed=self.name)
        pages = ", ".join(f"{r.page}{' (int32 wrap faults)' if r.faulted_int32_wrap else ''}" for r in boundaries)
        return Outcome(worst_ratio=ratio, note=f"pool {lp.geom.pool_bytes / 1e9:.2f} GB, pages {pages}")


# ------------------------------------------------------------------------------------------------ the matrix


def _writer_cases() -> list[DiffCase]:
    out = [
        WriterDiff(name="writer-fp8-D64-P16-bf16", quick=True, kv_dtype="fp8", head_dim=64),
        WriterDiff(name="writer-mxfp4-D32-P16-fp32", quick=True, head_dim=32, dtype="fp32"),
        WriterDiff(name="writer-mxfp4-D128-P64-bf16-strided", quick=True, head_dim=128, page_size=64,
                   num_tokens=70, stride_pad=48, view_offset=32),
        WriterDiff(name="writer-tiled-D128-P16-fp16", quick=True, layout="mxfp4_tiled", head_dim=128),
    ]
    for kv_dtype, layout in (("fp8", None), ("mxfp4", None), ("mxfp4", "mxfp4_tiled")):
        for D in ((128,) if layout else (32, 64, 128)):
            for P in (16, 64, 128):
                for dtype in ("bf16", "fp16", "fp32"):
                    out.append(WriterDiff(name=f"writer-{layout or kv_dtype}-D{D}-P{P}-{dtype}", kv_dtype=kv_dtype,
                                          layout=layout, head_dim=D, page_size=P, dtype=dtype,
                                          num_tokens=2 * P + 3, stride_pad=16 * (P // 16)))
    return _dedupe(out)


def _dedupe(cases: list[DiffCase]) -> list[DiffCase]:
    """Keep the first case of each name (a hand-written quick case wins over a generated one of the same shape)."""
    seen: dict[str, DiffCase] = {}
    for c in cases:
        seen.setdefault(c.name, c)
    return list(seen.values())


CORRECTNESS: list[DiffCase] = [
    *_writer_cases(),
    QuantQDiff(name="qq-mxfp4-H3-D64-bf16", quick=True),
    QuantQDiff(name="qq-fp8-H3-D64-bf16", quick=True, kv_dtype="fp8"),
    *[QuantQDiff(name=f"qq-{f}-H{H}-D{D}-{dt}", kv_dtype=f, heads=H, head_dim=D, dtype=dt, tokens=9)
      for f in ("mxfp4", "fp8") for H, D in ((1, 32), (5, 128), (32, 128)) for dt in ("bf16", "fp32")],
    GatherDiff(name="gather-fp8-D64-P16", quick=True, kv_dtype="fp8"),
    GatherDiff(name="gather-mxfp4-D64-P16-strided", quick=True, stride_pad=32, view_offset=16),
    GatherDiff(name="gather-tiled-D128-P16", quick=True, layout="mxfp4_tiled", head_dim=128),
    *[GatherDiff(name=f"gather-{lay or kv}-D{D}-P{P}", kv_dtype=kv, layout=lay, head_dim=D, page_size=P,
                 seq_lens=(0, 1, P, 3 * P + 5), stride_pad=64)
      for kv, lay, D in (("fp8", None, 128), ("mxfp4", None, 32), ("mxfp4", None, 128),
                         ("mxfp4", "mxfp4_tiled", 256))
      for P in (16, 64, 128)],
    PrefillDiff(name="prefill-mxfp4-H3-D64", quick=True),
    PrefillDiff(name="prefill-fp8-H3-D64", quick=True, kv_dtype="fp8"),
    *[PrefillDiff(name=f"prefill-{kv}-H{H}-D{D}-{rg}", kv_dtype=kv, heads=H, head_dim=D, ranges=rg, num_q=33,
                  num_k=300)
      for kv in ("fp8", "mxfp4") for H, D in ((1, 32), (5, 64), (32, 128)) for rg in ("causal", "random")],
    DecodeDiff(name="decode-mxfp4-D64-P16-H3", quick=True),
    DecodeDiff(name="decode-fp8-D64-P16-H3", quick=True, kv_dtype="fp8"),
    DecodeDiff(name="decode-tiled-D128-P16-N2", quick=True, layout="mxfp4_tiled", head_dim=128, next_n=2,
               context_lens=(3, 35)),
    *[DecodeDiff(name=f"decode-{lay or kv}-D{D}-P{P}-H{H}-N{N}{'-2d' if two_d else ''}", kv_dtype=kv, layout=lay,
                 head_dim=D, page_size=P, heads=H, next_n=N, two_d=two_d,
                 context_lens=(((0, 1, 2)[:N], (P + 1, P + 2, 3 * P)[:N], (5 * P, 1, 0)[:N]) if two_d
                               else (0, 1, P, 2 * P + 3, 5 * P - 1)),
                 stride_pad=16 * P, clean_logits=not two_d)
      for kv, lay, D in (("fp8", None, 32), ("fp8", None, 128), ("mxfp4", None, 32), ("mxfp4", None, 64),
                         ("mxfp4", None, 128), ("mxfp4", "mxfp4_tiled", 128))
      for P in (16, 64, 128) for H, N, two_d in ((7, 1, False), (32, 2, False), (3, 3, True))],
    TopKDiff(name="topk-R6-W300-k64", quick=True),
    TopKDiff(name="topk-R64-W8192-k2048", rows=64, width=8192, k=2048),
    # GPU-sized scorer shapes (the model's H = 32, D = 128; contexts into the thousands)
    *[PrefillDiff(name=f"prefill-{kv}-S256-SK2048-H32-D128", kv_dtype=kv, heads=32, head_dim=128, num_q=256,
                  num_k=2048) for kv in ("fp8", "mxfp4")],
    *[DecodeDiff(name=f"decode-{lay or kv}-B8-H32-D128-P64-ctx4096", kv_dtype=kv, layout=lay, heads=32,
                 head_dim=128, page_size=64, context_lens=(4096, 1, 3000, 2049, 0, 4095, 64, 1000),
                 max_context_len=4096, clean_logits=False)
      for kv, lay in (("fp8", None), ("mxfp4", None), ("mxfp4", "mxfp4_tiled"))],
    DecodeDiff(name="decode-mxfp4-B4-N2-H32-D128-P64-2d", heads=32, head_dim=128, page_size=64, next_n=2,
               two_d=True, context_lens=((2000, 2001), (1, 0), (63, 64), (1500, 700))),
]

CORNER: list[DiffCase] = [
    WriterDiff(name="writer-mxfp4-hostile-rceil", quick=True, hostile=True, dtype="fp32", num_tokens=24),
    WriterDiff(name="writer-mxfp4-hostile-floor", hostile=True, dtype="fp32", scale_rule="floor", num_tokens=24),
    WriterDiff(name="writer-mxfp4-hostile-even", hostile=True, dtype="fp32", scale_rule="even", num_tokens=24),
    WriterDiff(name="writer-mxfp4-hostile-bf16", hostile=True, dtype="bf16", num_tokens=24),
    WriterDiff(name="writer-tiled-hostile", hostile=True, layout="mxfp4_tiled", head_dim=128, dtype="fp32"),
    WriterDiff(name="writer-fp8-hostile", quick=True, kv_dtype="fp8", hostile=True, dtype="fp32", num_tokens=24),
    WriterDiff(name="writer-fp8-hostile-fp16", kv_dtype="fp8", hostile=True, dtype="fp16", num_tokens=24),
    QuantQDiff(name="qq-mxfp4-hostile", quick=True, hostile=True, dtype="fp32", heads=5, head_dim=32),
    QuantQDiff(name="qq-mxfp4-hostile-floor", hostile=True, dtype="fp32", scale_rule="floor"),
    QuantQDiff(name="qq-mxfp4-hostile-even", hostile=True, dtype="fp32", scale_rule="even"),
    QuantQDiff(name="qq-fp8-hostile", quick=True, kv_dtype="fp8", hostile=True, dtype="fp32", heads=5),
    PrefillDiff(name="prefill-mxfp4-empty-rows-unclean", quick=True, ranges="empty", clean_logits=False),
    PrefillDiff(name="prefill-fp8-nan-k", kv_dtype="fp8", nan_k=True, ranges="random"),
    PrefillDiff(name="prefill-mxfp4-nan-k", nan_k=True, ranges="random"),
    DecodeDiff(name="decode-mxfp4-ctx0-ctx1", quick=True, heads=1, context_lens=(0, 1, 0, 1), head_dim=32),
    DecodeDiff(name="decode-mxfp4-all-zero-B32", context_lens=(0,) * 32, head_dim=32, heads=1),
    DecodeDiff(name="decode-fp8-all-zero-B64-N2", kv_dtype="fp8", context_lens=(0,) * 64, next_n=2, head_dim=32,
               heads=1),
    DecodeDiff(name="decode-mxfp4-N3-short-ctx", quick=True, next_n=3, heads=5, context_lens=(1, 2, 4)),
    DecodeDiff(name="decode-mxfp4-2d-ctx", quick=True, next_n=2, two_d=True, context_lens=((0, 3), (17, 16))),
    DecodeDiff(name="decode-mxfp4-narrow-output", context_lens=(10, 40), max_context_len=20),
    DecodeDiff(name="decode-mxfp4-nan-k", quick=True, context_lens=(5, 20), nan_token=(1, 3)),
    DecodeDiff(name="decode-fp8-nan-k", kv_dtype="fp8", context_lens=(5, 20), nan_token=(1, 3)),
    DecodeDiff(name="decode-mxfp4-unclean", context_lens=(3, 33), clean_logits=False, view_offset=48),
    TopKDiff(name="topk-hostile", quick=True, hostile=True, rows=8, width=200, k=48),
    TopKDiff(name="topk-hostile-k2048", hostile=True, rows=16, width=4096, k=2048),
]

LARGE_ADDRESS: list[DiffCase] = [
    LargeAddressDiff(name="large-mxfp4-P64-D128", quick=True),
    LargeAddressDiff(name="large-tiled-P64-D128", layout="mxfp4_tiled", heads=8, tokens_per_page=64),
    LargeAddressDiff(name="large-fp8-P64-D128", kv_dtype="fp8", heads=8, tokens_per_page=40),
]

ALL_CASES: list[DiffCase] = CORRECTNESS + CORNER + LARGE_ADDRESS
_CASES_BY_NAME = {c.name: c for c in ALL_CASES}


def select_cases(quick: bool, patterns: Sequence[str] = ()) -> list[DiffCase]:
    """The --quick subset (or every case), filtered by shell-style name patterns; ValueError if none match."""
    cases = [c for c in ALL_CASES if c.quick or not quick]
    if patterns:
        cases = [c for c in ALL_CASES if any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
        if not cases:
            raise ValueError(f"--case {' '.join(patterns)} matches no case; `mxidx diff --list` shows the names")
    return cases


# ------------------------------------------------------------------------------------------------ running


def run_case(case: DiffCase, env: Env) -> CaseResult:
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


def run_cases(cases: Sequence[DiffCase], env: Env, on_result: Callable[[int, CaseResult], None] | None = None,
              jobs: int = 1) -> list[CaseResult]:
    """Run `cases` -> their results in the order of `cases`; on_result(i, result) as the i-th (from 0) finishes.
    jobs > 1: that many worker processes (spawned: each builds its own env on env.device; kernel compilation is
    CPU-bound, so on a GPU host several processes finish sooner; job_batches: the large-address cases last, one at a
    time). The cases are then run by name from ALL_CASES."""
    if jobs <= 1:
        results = []
        for i, case in enumerate(cases):
            results.append(run_case(case, env))
            if on_result is not None:
                on_result(i, results[-1])
        return results
    unknown = [c.name for c in cases if _CASES_BY_NAME.get(c.name) is not c]
    if unknown:
        raise ValueError(f"jobs > 1 runs cases of ALL_CASES only; not among them: {', '.join(unknown)}")
    by_index: dict[int, CaseResult] = {}
    for indices, workers in job_batches(cases, jobs):
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_worker_init, initargs=(env.device,)) as pool:
            futures = {pool.submit(_worker_run, cases[i].name): i for i in indices}
            for future in as_completed(futures):
                i = futures[future]
                try:
                    by_index[i] = future.result()
                except BrokenProcessPool as e:   # a worker died (or could not start): the case fails, the run goes on
                    by_index[i] = CaseResult(cases[i].name, cases[i].kind, FAIL, f"worker process lost: {e}", None,
                                             0.0)
                if on_result is not None:
                    on_result(len(by_index) - 1, by_index[i])
    return [by_index[i] for i in range(len(cases))]


def job_batches(cases: Sequence[DiffCase], jobs: int) -> list[tuple[list[int], int]]:
    """How run_cases spreads `cases` over `jobs` worker processes: (indices into cases, workers) batches, run one
    after the other. The large-address cases come last, one at a time: each holds a pool of tens of GB on the device,
    and two at once outgrew an 80 GB H100."""
    alone = [i for i, c in enumerate(cases) if c.kind == LargeAddressDiff.kind]
    shared = [i for i, c in enumerate(cases) if c.kind != LargeAddressDiff.kind]
    return [(batch, min(n, len(batch))) for batch, n in ((shared, jobs), (alone, 1)) if batch]


_WORKER_ENV: list[Env] = []     # the env of a --jobs worker process, built once by _worker_init


def _worker_init(device: str) -> None:
    _WORKER_ENV.append(make_env(device))


def _worker_run(name: str) -> CaseResult:
    return run_case(_CASES_BY_NAME[name], _WORKER_ENV[0])


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
