"""Seeded fuzzing of the kernels with hostile integer inputs (tests/hw/test_fuzz.py; python -m tools.sanitize runs
thousands of cases on a GPU, and a few under compute-sanitizer).

Case i of seed s (numpy's default_rng([s, i])) draws a small geometry -- layout fp8 / mxfp4 / mxfp4_tiled by
i % 3, head dim, page size, page stride padding, view offset, batch, next_n, heads, contexts among 0, 1, P - 1, P,
P + 1 and random ones -- puts the sequences on shuffled pages of a 0xFF-poisoned pool with out-of-range sentinels
in the unused block-table entries, and adds one hostile input, HOSTILE[(i // 3) % len(HOSTILE)]:

    none         nothing more
    page_id      a block-table entry a sequence needs is -1, num_pages, 2^30 or -2^31
    past_table   a context longer than its block-table row covers
    slot         writer slots past the cache (and a negative one)
    schedule     schedule_meta of another batch, of other contexts, or DeepGEMM's split (256-token segments):
                 harmless, since no decode kernel reads it (nothing to flag)
    range        prefill rows with ks < 0, ke > SK or ks > ke
    cu_seq_lens  gather: a decreasing cu_seq_lens, or num_tokens below cu_seq_lens[-1]

It then runs the K writer, the gather, every decode and prefill variant that runs on the device, and top-k, each
with an error flag, and checks them against sim/ under the documented policy (docs/design.md's clarifications):
writer pool and gather output byte for byte, scorers within DESIGN §4's bound with each variant's declared
precision (NaN where a page is bad), top-k exactly on the same fp32 logits, and the flag: set exactly when the case
is hostile for that kernel, with a kind the case explains.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

import hw
from hw.checks import ErrorKind, new_error_flag
from hw.logits import declared_precision, scorer_target
from hw.targets import NotCovered, Op
from hw.testing import host_to_device, pair_as_torch, to_numpy, torch_cache_view
from hw.variants import variants
from sim import layout as sim_layout
from sim import scorer as sim_scorer
from sim import topk as sim_topk
from sim.testing import make_geometry, quantized_queries, random_values, sim_quantize

HOSTILE = ("none", "page_id", "past_table", "slot", "schedule", "range", "cu_seq_lens")
LAYOUTS = ("fp8", "mxfp4", "mxfp4_tiled")
BAD_PAGE_IDS = (-1, None, 1 << 30, -(2 ** 31))          # None: num_pages
SENTINELS = (1 << 30, -1, -(2 ** 31), 2 ** 31 - 1)       # unused block-table entries (never read)
DEEPGEMM_SEGMENT_PAGES = 4                                # DeepGEMM's metadata counts segments of 4 pages
NAN_FP8_SCALE_BITS = 0x7FC00000


@dataclass
class FuzzCase:
    """One drawn case (the inputs; run_case checks every kernel on it)."""

    index: int
    hostile: str
    kv_dtype: str
    layout: str
    head_dim: int
    page_size: int
    heads: int
    next_n: int
    geom: sim_layout.PageGeometry
    contexts: np.ndarray        # int32 [B]: decode context_lens (past_table: one is longer than the table)
    stored: list                # tokens written per sequence
    table: np.ndarray           # int32 [B, max_pages]
    width: int                  # max_context_len
    k_rows: np.ndarray          # float32 [T, D]: the keys the writer quantizes
    slots: np.ndarray           # int64 [T]


@dataclass
class CaseResult:
    index: int
    hostile: str
    layout: str
    failures: list = field(default_factory=list)

    def describe(self) -> str:
        return f"case {self.index} ({self.layout}, {self.hostile}): " + "; ".join(self.failures)


def draw_case(seed: int, index: int, *, compact: bool = False) -> FuzzCase:
    """Case `index` of `seed` (module docstring). compact: head dim 64 (128 tiled), pages of 16 or 64 tokens and 2
    heads only, so that a compiled backend builds few kernel specializations (the GPU runs)."""
    rng = np.random.default_rng([seed, index])
    layout = LAYOUTS[index % len(LAYOUTS)]
    hostile = HOSTILE[(index // len(LAYOUTS)) % len(HOSTILE)]
    kv_dtype = "fp8" if layout == "fp8" else "mxfp4"
    D = 128 if layout == "mxfp4_tiled" else 64 if compact else int(rng.choice((32, 64, 128)))
    P = int(rng.choice((16, 64) if compact else (16, 32, 64)))
    B = int(rng.integers(1, 4))
    choices = (0, 1, P - 1, P, P + 1, int(rng.integers(2, 3 * P)))
    stored = [int(rng.choice(choices)) for _ in range(B)]
    if hostile in ("page_id", "past_table") and max(stored) <= P:
        stored[0] = P + 1 + int(rng.integers(0, P))      # at least two pages, so one can be bad
    pages = [-(-n // P) for n in stored]
    extra = 0 if hostile == "past_table" else int(rng.integers(0, 2))
    max_pages = max(max(pages) + extra, 1)
    num_pages = sum(pages) + int(rng.integers(1, 3))     # spare pages stay 0xFF
    geom = make_geometry(kv_dtype, None if layout == "fp8" else layout, P, D, num_pages,
                         stride_pad=16 * int(rng.integers(0, 3)), view_offset=16 * int(rng.integers(0, 3)))
    perm = rng.permutation(num_pages)
    table = np.array(SENTINELS, np.int64)[rng.integers(0, len(SENTINELS), (B, max_pages))]
    slots, used = [], 0
    for b, n in enumerate(stored):
        table[b, :pages[b]] = perm[used:used + pages[b]]
        used += pages[b]
        slots.append(table[b, np.arange(n) // P] * P + np.arange(n) % P)
    contexts = np.array(stored, np.int32)
    if hostile == "page_id":
        b = int(np.argmax(stored))
        bad = BAD_PAGE_IDS[int(rng.integers(0, len(BAD_PAGE_IDS)))]
        table[b, int(rng.integers(0, pages[b]))] = num_pages if bad is None else bad
    elif hostile == "past_table":
        b = int(np.argmax(stored))
        contexts[b] = max_pages * P + int(rng.integers(1, 2 * P))
    k_rows = random_values(rng, (sum(stored), D))
    slots = np.concatenate(slots).astype(np.int64) if slots else np.zeros(0, np.int64)
    if hostile == "slot":
        bad_slots = np.array([num_pages * P, 1 << 40, -1][: int(rng.integers(1, 4))], np.int64)
        k_rows = np.concatenate([k_rows, random_values(rng, (bad_slots.size, D))])
        slots = np.concatenate([slots, bad_slots])
    width = max(1, int(max(stored)) + int(rng.integers(-2, P)))
    heads = 2 if compact else int(rng.integers(1, 5))
    return FuzzCase(index, hostile, kv_dtype, layout, D, P, heads, int(rng.integers(1, 3)), geom, contexts, stored,
                    table.astype(np.int32), width, k_rows, slots)


def _flag_failure(what: str, flag: torch.Tensor, expected: set) -> str | None:
    """None when the flag is clear and nothing was expected, or set with an expected kind; else why not."""
    count, kind, row, value = to_numpy(flag).tolist()
    if not expected:
        return None if count == 0 else f"{what}: flag set ({ErrorKind(kind).name}, row {row}, value {value}) " \
                                       f"on valid input"
    if count == 0:
        return f"{what}: flag not set, expected one of {sorted(k.name for k in expected)}"
    if kind not in {k.value for k in expected}:
        return f"{what}: flag kind {kind}, expected one of {sorted(k.name for k in expected)}"
    return None


def _check(failures: list, what: str, fn) -> None:
    """Run one check; an exception (a crash, a wrong value) is recorded as a failure of `what`."""
    try:
        problem = fn()
    except Exception as e:                                # noqa: BLE001 -- every failure is reported, not raised
        problem = f"{type(e).__name__}: {e}"
    if problem:
        failures.append(f"{what}: {problem}")


def _writer(case: FuzzCase, device):
    """Run hw's writer into a fresh 0xFF pool; compare every pool byte with sim's writer of the valid slots."""
    geom = case.geom
    pool_t = host_to_device(sim_layout.new_pool(geom), device)
    flag = new_error_flag(device)
    k = host_to_device(case.k_rows, device)
    hw.indexer_k_quant_and_cache(k, torch_cache_view(pool_t, geom), host_to_device(case.slots, device),
                                 kv_dtype=case.kv_dtype, layout=case.layout, error_flag=flag)
    want = sim_layout.new_pool(geom)
    keep = case.slots < geom.num_pages * geom.page_size
    values, scales = sim_quantize(case.kv_dtype, case.k_rows[keep])
    sim_layout.write_tokens(want, geom, case.slots[keep], values, scales)
    got = to_numpy(pool_t)

    def check():
        if not np.array_equal(got, want):
            return f"{int((got != want).sum())} pool bytes differ from sim's writer"
        return _flag_failure("writer", flag, {ErrorKind.SLOT} if not keep.all() else set())
    return want, check


def _table_kinds(case: FuzzCase, lengths) -> set:
    """The flag kinds a kernel reading the first lengths[b] tokens of every sequence must report."""
    kinds = set()
    P, max_pages = case.page_size, case.table.shape[1]
    for b, seen in enumerate(lengths):
        if seen > max_pages * P:
            kinds.add(ErrorKind.CONTEXT_PAST_TABLE)
        used = case.table[b, :min(-(-int(seen) // P), max_pages)]
        if ((used < 0) | (used >= case.geom.num_pages)).any():
            kinds.add(ErrorKind.PAGE_ID)
    return kinds


def _schedule(case: FuzzCase, rng: np.random.Generator, device, num_sms: int) -> torch.Tensor:
    """The schedule_meta of the call: ours, or (hostile) another batch's, other contexts', or DeepGEMM's split."""
    ctx_t = host_to_device(case.contexts, device)
    if case.hostile != "schedule":
        return hw.get_paged_mqa_logits_metadata(ctx_t, case.page_size, num_sms)
    how = int(rng.integers(0, 3))
    if how == 0:
        return hw.get_paged_mqa_logits_metadata(torch.cat([ctx_t, ctx_t[:1] + 3 * case.page_size]), case.page_size,
                                                num_sms)
    if how == 1:
        return hw.get_paged_mqa_logits_metadata(ctx_t + case.page_size, case.page_size, num_sms)
    # DeepGEMM's get_paged_mqa_logits_metadata: segments of 4 pages, split q = total // n, r = total % n,
    # program p starts at segment p * q + min(p, r), entry (sequence, segment within it); the end is (B, 0)
    segs = -(-np.maximum(case.contexts.astype(np.int64), 0) // (DEEPGEMM_SEGMENT_PAGES * case.page_size))
    ends = np.cumsum(segs)
    total = int(ends[-1]) if ends.size else 0
    meta = []
    for p in range(num_sms + 1):
        start = p * (total // num_sms) + min(p, total % num_sms)
        seq = int(np.searchsorted(ends, start, side="right"))
        meta.append((seq, start - (int(ends[seq - 1]) if seq else 0)))
    return torch.tensor(meta, dtype=torch.int32, device=device)


def _decode(case: FuzzCase, pool: np.ndarray, rng: np.random.Generator, device, failures: list, all_variants: bool):
    """The case's default (variant=None), then every decode variant by name (or one, drawn), against
    sim.scorer.decode_logits; top-k on the default's result. A named variant that does not cover the case
    (hw.targets.NotCovered) is passed over."""
    B, N, H, D = len(case.contexts), case.next_n, case.heads, case.head_dim
    w_heads = rng.standard_normal((B, N, H)).astype(np.float32)
    q_v, q_s, q64, w = quantized_queries(rng, case.kv_dtype, (B, N, H, D), w_heads)
    q_t = pair_as_torch(case.kv_dtype, q_v, q_s, device)
    w = w.reshape(B * N, H)
    w_t = host_to_device(w, device)
    cache = torch_cache_view(host_to_device(pool, device), case.geom)
    ctx_t = host_to_device(case.contexts, device)
    table_t = host_to_device(case.table, device)
    num_sms = int(rng.integers(1, 6))
    meta = _schedule(case, rng, device, num_sms)
    args = (q64, pool, case.geom, w, case.contexts, case.table, case.width)
    ref = sim_scorer.decode_logits(*args)
    kinds = _table_kinds(case, np.minimum(np.maximum(case.contexts, 0), case.width))
    target = scorer_target(device)
    names = [v.name for v in variants(Op.DECODE, case.kv_dtype, target)]
    if not all_variants:
        names = [names[int(rng.integers(0, len(names)))]]
    layout = case.layout if case.layout == "mxfp4_tiled" else None
    for name in [None, *names]:     # None: the case's default (hw.variants.DEFAULTS), then variants by name
        flag = new_error_flag(device)

        def check(name=name, flag=flag, expected=kinds):
            try:
                out = hw.fp8_fp4_paged_mqa_logits(q_t, cache, w_t, ctx_t, table_t, meta, case.width,
                                                  clean_logits=True, layout=layout, variant=name, error_flag=flag)
            except NotCovered:
                if name is None:
                    raise
                return None         # a variant named for a case it does not cover refuses it: nothing ran
            n, u = declared_precision(Op.DECODE, case.kv_dtype, D, device, name)
            bound = sim_scorer.decode_error_bound(*args, n_roundings=n, u=u)
            result = sim_scorer.check_logits(to_numpy(out), ref, bound)
            if not result.ok:
                return result.describe()
            problem = _flag_failure("decode", flag, expected)
            if problem or name is not None:
                return problem
            lengths = sim_scorer.decode_columns(case.contexts, N, case.width).astype(np.int32)
            k = int(rng.integers(1, case.width + 3))
            got = to_numpy(hw.top_k_per_row(out, host_to_device(lengths, device), k))
            if not np.array_equal(got, sim_topk.top_k(to_numpy(out), k, ends=lengths)):
                return f"top-k (k = {k}) differs from sim.topk on the same logits"
            return None
        _check(failures, f"decode {name or 'default'}", check)


def _gather_expected(case: FuzzCase, pool: np.ndarray, cu: np.ndarray, num_tokens: int):
    """The gather's documented result: row i of sequence b = the number of cu_seq_lens[1..B] <= i, at position
    i - cu_seq_lens[b]: that token when its page is a page of the cache, the NaN token when it has none (bad id,
    past the table, a negative position), zeros past the sequences (padding)."""
    geom, P, B = case.geom, case.page_size, len(case.stored)
    nan_values, nan_scales = sim_quantize(case.kv_dtype, np.full((1, case.head_dim), np.nan, np.float32))
    value_shape = (num_tokens, case.head_dim if case.kv_dtype == "fp8" else case.head_dim // 2)
    values = np.zeros(value_shape, np.uint8)
    scales = np.zeros(num_tokens, np.uint32) if case.kv_dtype == "fp8" else \
        np.zeros((num_tokens, case.head_dim // 32), np.uint8)
    nan_token = (nan_values[0], nan_scales.view(np.uint32)[0] if case.kv_dtype == "fp8" else nan_scales[0])
    for i in range(num_tokens):
        b = int((cu[1:] <= i).sum())
        if b >= B:
            continue
        pos = i - int(cu[b])
        page = case.table[b, pos // P] if 0 <= pos and pos // P < case.table.shape[1] else -1
        if 0 <= page < geom.num_pages:
            v, s = sim_layout.read_tokens(pool, geom, np.array([page]), pos % P + 1)
            values[i], scales[i] = v[-1], (s.view(np.uint32) if case.kv_dtype == "fp8" else s)[-1]
        else:
            values[i], scales[i] = nan_token
    return values, scales


def _gather(case: FuzzCase, pool: np.ndarray, rng: np.random.Generator, device, failures: list):
    """The gather of the stored sequences (hostile: cu_seq_lens decreasing or num_tokens short); returns the
    gathered K (values, scales) numpy for the prefill check."""
    cu = np.concatenate([[0], np.cumsum(case.stored)]).astype(np.int32)
    num_tokens = int(cu[-1])
    kinds = set()
    if case.hostile == "cu_seq_lens" and len(cu) > 2 and rng.integers(0, 2):
        cu[1:-1] = cu[1:-1][::-1] + cu[-1]        # decreasing, past the total: rows at other sequences' positions
        if (np.diff(cu) < 0).any():
            kinds |= {ErrorKind.CU_SEQ_LENS, ErrorKind.PAGE_ID, ErrorKind.CONTEXT_PAST_TABLE}
    elif case.hostile == "cu_seq_lens" and num_tokens:
        num_tokens -= int(rng.integers(1, num_tokens + 1))
        kinds.add(ErrorKind.CU_SEQ_LENS)
    kinds |= _table_kinds(case, np.maximum(np.diff(cu), 0))
    flag = new_error_flag(device)
    values_t, scales_t = hw.cp_gather_indexer_k_quant_cache(
        torch_cache_view(host_to_device(pool, device), case.geom), host_to_device(case.table, device),
        host_to_device(cu, device), case.layout, num_tokens=num_tokens, error_flag=flag)
    values = to_numpy(values_t)
    scales = to_numpy(scales_t.view(torch.int32)).view(np.uint32) if case.kv_dtype == "fp8" else to_numpy(scales_t)

    def check():
        want_values, want_scales = _gather_expected(case, pool, cu, num_tokens)
        if not (np.array_equal(values, want_values) and np.array_equal(scales, want_scales)):
            return "gathered bytes differ from the documented result"
        return _flag_failure("gather", flag, kinds)
    _check(failures, "gather", check)
    return values, scales, values_t, scales_t


def _prefill(case: FuzzCase, gathered, rng: np.random.Generator, device, failures: list, all_variants: bool):
    """Every prefill variant (or the default and one other) on the gathered K, ranges possibly hostile."""
    values, scales, values_t, scales_t = gathered
    SK = values.shape[0]
    if SK == 0:
        return
    S, H, D = int(rng.integers(1, 5)), case.heads, case.head_dim
    ks = rng.integers(0, SK + 1, S)
    ke = np.maximum(ks, rng.integers(0, SK + 1, S))
    if case.hostile == "range":
        row = int(rng.integers(0, S))
        how = int(rng.integers(0, 3))
        ks[row], ke[row] = ((-3, ke[row]), (ks[row], SK + 5), (ke[row] + 1, ke[row]))[how]
    w_heads = rng.standard_normal((S, H)).astype(np.float32)
    q_v, q_s, q64, w = quantized_queries(rng, case.kv_dtype, (S, H, D), w_heads)
    k64 = sim_scorer.dequantize_kv(values, scales.view(np.float32) if case.kv_dtype == "fp8" else scales)
    cks = np.clip(ks, 0, SK)
    cke = np.clip(ke, 0, SK)
    cks = np.minimum(cks, cke)                              # ks >= ke: an empty row
    args = (q64, k64, w, cks, cke)
    ref = sim_scorer.prefill_logits(*args)
    expected = {ErrorKind.RANGE} if ((ks < 0) | (ke > SK) | (ks > ke)).any() else set()
    target = scorer_target(device)
    names = [v.name for v in variants(Op.PREFILL, case.kv_dtype, target)]
    if not all_variants:
        names = [hw.variants.select(Op.PREFILL, target, case.kv_dtype).name]
    kv = (values_t, scales_t)
    for name in names:
        flag = new_error_flag(device)

        def check(name=name, flag=flag):
            out = hw.fp8_fp4_mqa_logits(pair_as_torch(case.kv_dtype, q_v, q_s, device), kv, host_to_device(w, device),
                                        host_to_device(ks.astype(np.int32), device),
                                        host_to_device(ke.astype(np.int32), device), variant=name, error_flag=flag)
            n, u = declared_precision(Op.PREFILL, case.kv_dtype, D, device, name)
            result = sim_scorer.check_logits(to_numpy(out), ref,
                                             sim_scorer.prefill_error_bound(*args, n_roundings=n, u=u))
            return result.describe() if not result.ok else _flag_failure("prefill", flag, expected)
        _check(failures, f"prefill {name}", check)


def run_case(seed: int, index: int, device, *, all_variants: bool = True, compact: bool = False) -> CaseResult:
    """Draw case `index` of `seed` (draw_case) and check every kernel on it (all_variants=False: the default variant
    of each scorer and one decode variant by name, the CPU budget)."""
    case = draw_case(seed, index, compact=compact)
    rng = np.random.default_rng([seed, index, 1])
    result = CaseResult(index, case.hostile, case.layout)
    pool = None

    def write():
        nonlocal pool
        pool, check = _writer(case, device)
        return check()
    _check(result.failures, "writer", write)
    if pool is None:
        return result
    _decode(case, pool, rng, device, result.failures, all_variants)
    gathered = _gather(case, pool, rng, device, result.failures)
    _prefill(case, gathered, rng, device, result.failures, all_variants)
    return result


def run(seed: int, cases: int, device, *, all_variants: bool = True, compact: bool = False,
        progress=None) -> list[CaseResult]:
    """run_case for cases 0 .. cases - 1 of `seed`; progress(done, failed) after each case when given."""
    results, failed = [], 0
    for i in range(cases):
        results.append(run_case(seed, i, device, all_variants=all_variants, compact=compact))
        failed += bool(results[-1].failures)
        if progress is not None:
            progress(i + 1, failed)
    return results
