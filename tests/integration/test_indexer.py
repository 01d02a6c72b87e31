"""The SparseIndexer hook: one call for FP8 and MXFP4, prefill (chunked) and decode, against sim/.

Each case runs a batch of two requests through a two-layer pool (the hook writes layer 1, whose view starts past
other per-page bytes and layer 0's page), with shuffled physical pages, out-of-range sentinels past each request's
last page, a chunked prefill (the second chunk sees the first through the cache), a request with no new tokens in
a chunk, and decode steps. Checks: the whole pool equals sim's writer byte for byte (so layer 0 and the other
per-page bytes are untouched), and every top-k row agrees with the float64 reference up to near-ties (the fp32
bound of DESIGN §4 with n = D, which covers every MXFP4 path including the interpreter's).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

import hw
from integration.config import IndexerConfig
from integration.gates import GateDecision
from integration.indexer import DecodeMetadata, PrefillMetadata, SparseIndexer
from integration.pool import IndexerPool, PoolLayout
from integration.schedule import DecodeSchedule
from sim import layout as sim_layout
from sim import scorer as sim_scorer

from ._reference import assert_topk_within_bound, sim_geometry, sim_k, sim_q

pytestmark = pytest.mark.interp

TOP_K = 8
SENTINEL = 1 << 30
BLOCK_TABLE = ((5, 2, SENTINEL), (7, SENTINEL, SENTINEL))   # request 0 spans 2 pages, request 1 one
NUM_PAGES = 8
CHUNKS = (((12, 12), (7, 7)), ((20, 8), (7, 0)))            # per prefill call: (seq_len, query_len) per request
DECODE_STEPS = 2


@dataclass(frozen=True)
class HookCase:
    kv_dtype: str
    layout: str | None
    head_dim: int
    page_size: int
    heads: int
    scale_rule: str = "rceil"

    def __str__(self):
        return f"{self.layout or self.kv_dtype}-D{self.head_dim}-P{self.page_size}-H{self.heads}-{self.scale_rule}"


CASES = [
    HookCase("fp8", None, 64, 16, 3),                      # 68 bytes/token: the same as mxfp4 at D = 128
    HookCase("mxfp4", None, 128, 16, 3),
    HookCase("mxfp4", "mxfp4_tiled", 128, 16, 4, "even"),
    HookCase("mxfp4", None, 32, 32, 1),
]


def _decision(case: HookCase) -> GateDecision:
    config = IndexerConfig(case.kv_dtype, case.layout, case.scale_rule)
    return GateDecision(config, config, None, "test")


def _slots(block_table: np.ndarray, page: int, request: int, positions: np.ndarray) -> np.ndarray:
    return block_table[request, positions // page].astype(np.int64) * page + positions % page


#: the hook with the top-k GPUs launch (radix_fast) in place of the interpreter's default (rows_tile), both forms
GPU_TOPK_CASES = [(CASES[0], "radix_fast"), (CASES[1], "radix_fast")]


@pytest.mark.parametrize("case, topk_variant", [(c, None) for c in CASES] + GPU_TOPK_CASES,
                         ids=lambda p: str(p) if isinstance(p, HookCase) else p or "default_topk")
def test_hook_prefill_and_decode_match_sim(case: HookCase, topk_variant: str | None, device, monkeypatch):
    """topk_variant: every top-k the hook launches takes this hw.variants name instead of the target's default
    (GPU_TOPK_CASES: so that CPU runs check the hook's top-k as NVIDIA and AMD launch it)."""
    launched = []
    if topk_variant is not None:
        select, run = hw.topk.select, hw.variants.Variant.run

        def select_named(op, target, kv_dtype=None, name=None, call=None):
            return select(op, target, kv_dtype, name or topk_variant, call)

        def run_recorded(variant, *args):
            launched.append(variant)
            return run(variant, *args)

        monkeypatch.setattr(hw.topk, "select", select_named)
        monkeypatch.setattr(hw.variants.Variant, "run", run_recorded)
    rng = np.random.default_rng(7)
    page, dim, heads = case.page_size, case.head_dim, case.heads
    pool_layout = PoolLayout(case.kv_dtype, case.layout, 2, NUM_PAGES, page, dim, extra_bytes_per_page=32)
    pool = IndexerPool(pool_layout, device)
    geom = sim_geometry(pool_layout, 1)
    max_context = len(BLOCK_TABLE[0]) * page
    by_value = CASES.index(case) % 2 == 1   # both forms of the hook's output, on alternate cases
    hook = SparseIndexer(_decision(case), pool.view(1), top_k=TOP_K, max_context_len=max_context,
                         sorted_top_k=by_value)
    block_table = np.array(BLOCK_TABLE, dtype=np.int32)
    bt_dev = torch.from_numpy(block_table).to(device)
    expected_pool = np.full(pool_layout.pool_bytes, 0xFF, dtype=np.uint8)

    def inputs(n):
        q = torch.from_numpy(rng.standard_normal((n, heads, dim), dtype=np.float32)).to(torch.bfloat16)
        k = torch.from_numpy(rng.standard_normal((n, dim), dtype=np.float32)).to(torch.bfloat16)
        w = torch.from_numpy(rng.standard_normal((n, heads), dtype=np.float32))
        return q, k, w

    def write_expected(k, slots):
        sim_layout.write_tokens(expected_pool, geom, slots, *sim_k(k, case.kv_dtype, case.scale_rule))

    def pool_bytes():
        return pool.pool.cpu().numpy()

    for chunk in CHUNKS:
        seq_lens, query_lens = zip(*chunk)
        positions = [np.arange(s - n, s) for s, n in chunk]
        slots = np.concatenate([_slots(block_table, page, b, p) for b, p in enumerate(positions)])
        q, k, w = inputs(len(slots))
        meta = PrefillMetadata(torch.from_numpy(slots).to(device), bt_dev, seq_lens, query_lens)
        got = hook(q.to(device), k.to(device), w.to(device), meta)
        write_expected(k, slots)
        np.testing.assert_array_equal(pool_bytes(), expected_pool, err_msg="pool after a prefill chunk")
        q64, w64 = sim_q(q, w, case.kv_dtype, case.scale_rule)
        row = 0
        for b, (seq_len, query_len) in enumerate(chunk):
            rows = slice(row, row + query_len)
            k64 = sim_scorer.read_keys(expected_pool, geom, block_table[b], seq_len)
            ends = positions[b] + 1
            args = (q64[rows], k64, w64[rows], np.zeros_like(ends), ends)
            assert_topk_within_bound(got[rows], sim_scorer.prefill_logits(*args),
                                     sim_scorer.prefill_error_bound(*args, n_roundings=dim), ends, TOP_K,
                                     f"prefill request {b}", by_value)
            row += query_len

    schedule = DecodeSchedule(2, block_table.shape[1], page, max_context, device)
    context = np.array([s for s, _ in CHUNKS[-1]], dtype=np.int32)
    for _ in range(DECODE_STEPS):
        slots = np.array([_slots(block_table, page, b, np.array([context[b]]))[0] for b in range(2)])
        context += 1
        schedule.update(torch.from_numpy(context).to(device))
        q, k, w = inputs(2)
        got = hook(q.to(device), k.to(device), w.to(device),
                   DecodeMetadata(torch.from_numpy(slots).to(device), bt_dev, schedule))
        write_expected(k, slots)
        np.testing.assert_array_equal(pool_bytes(), expected_pool, err_msg="pool after a decode step")
        q64, w64 = sim_q(q, w, case.kv_dtype, case.scale_rule)
        args = (q64.reshape(2, 1, heads, dim), expected_pool, geom, w64, context, block_table, max_context)
        visible = sim_scorer.decode_visible(context, 1, max_context, block_table.shape[1], page)
        assert_topk_within_bound(got, sim_scorer.decode_logits(*args),
                                 sim_scorer.decode_error_bound(*args, n_roundings=dim), visible, TOP_K, "decode",
                                 by_value)
    if topk_variant is not None:   # every top-k of the hook took it: one a request with new tokens, one a step
        prefill_top_ks = sum(query_len > 0 for chunk in CHUNKS for _, query_len in chunk)
        top_ks = [v.name for v in launched if v.op is hw.targets.Op.TOPK]
        assert top_ks == [topk_variant] * (prefill_top_ks + DECODE_STEPS), top_ks


def test_hook_rejects_bad_inputs(device):
    case = CASES[1]
    pool_layout = PoolLayout(case.kv_dtype, None, 1, NUM_PAGES, case.page_size, case.head_dim)
    hook = SparseIndexer(_decision(case), IndexerPool(pool_layout, device).view(0), top_k=4, max_context_len=32)
    q = torch.zeros(3, case.heads, case.head_dim, dtype=torch.bfloat16, device=device)
    k = torch.zeros(3, case.head_dim, dtype=torch.bfloat16, device=device)
    w = torch.zeros(3, case.heads, device=device)
    bt = torch.zeros(1, 2, dtype=torch.int32, device=device)
    slots = torch.arange(3, device=device)
    meta = PrefillMetadata(slots, bt, (3,), (3,))
    with pytest.raises(ValueError, match="q must have dtype"):
        hook(q.float(), k, w, meta)
    with pytest.raises(ValueError, match="k must have shape"):
        hook(q, k[:2], w, meta)
    with pytest.raises(ValueError, match="weights must have dtype"):
        hook(q, k, w.double(), meta)
    with pytest.raises(ValueError, match="slot_mapping must have dtype"):
        hook(q, k, w, PrefillMetadata(slots.int(), bt, (3,), (3,)))
    with pytest.raises(ValueError, match="prefill metadata counts 2"):
        hook(q, k, w, PrefillMetadata(slots, bt, (3,), (2,)))
    with pytest.raises(ValueError, match="metadata must be PrefillMetadata or DecodeMetadata"):
        hook(q, k, w, object())
    with pytest.raises(ValueError, match="query_lens <= seq_lens"):
        PrefillMetadata(slots, bt, (2,), (3,))
    with pytest.raises(ValueError, match="must all count the requests"):
        PrefillMetadata(slots, bt, (3, 1), (3, 1))
    schedule = DecodeSchedule(1, 2, case.page_size, 32, device)
    with pytest.raises(ValueError, match="next_n 1 needs 1"):
        hook(q, k, w, DecodeMetadata(slots, bt, schedule))
    with pytest.raises(ValueError, match=r"block_table must have shape \[1, 2\]"):
        hook(q[:1], k[:1], w[:1], DecodeMetadata(slots[:1], bt[:, :1], schedule))
    with pytest.raises(ValueError, match="built for page size 16 and max_context_len 64; this layer has 16 and 32"):
        hook(q[:1], k[:1], w[:1], DecodeMetadata(slots[:1], bt, DecodeSchedule(1, 2, case.page_size, 64, device)))
    with pytest.raises(ValueError, match="top_k must be an int in 1..2048, got 0"):
        SparseIndexer(_decision(case), hook.kv_cache, top_k=0, max_context_len=32)
    with pytest.raises(ValueError, match="top_k must be an int in 1..2048, got 2049"):
        SparseIndexer(_decision(case), hook.kv_cache, top_k=2049, max_context_len=4096)
    with pytest.raises(ValueError, match="max_context_len must be a positive int, got 0"):
        SparseIndexer(_decision(case), hook.kv_cache, top_k=4, max_context_len=0)


@dataclass(frozen=True)
class Rejection:
    """One bad prefill or decode input; the hook must raise before it writes the cache."""

    name: str
    message: str
    q: object = None            # callables (q, k, w, slots, bt) -> the replaced argument; None keeps it
    k: object = None
    w: object = None
    slots: object = None
    bt: object = None
    decode: bool = False

    def __str__(self):
        return self.name


REJECTIONS = [
    Rejection("q-on-another-device", "q is on meta, expected", q=lambda t: t.to("meta")),
    Rejection("k-on-another-device", "k is on meta, expected", k=lambda t: t.to("meta")),
    Rejection("weights-on-another-device", "weights is on meta, expected", w=lambda t: t.to("meta")),
    Rejection("slots-on-another-device", "slot_mapping is on meta, expected", slots=lambda t: t.to("meta")),
    Rejection("block-table-int64", "block_table must have dtype torch.int32", bt=lambda t: t.long()),
    Rejection("block-table-1d", "block_table must be 2-D", bt=lambda t: t[0]),
    Rejection("block-table-on-another-device", "block_table is on meta, expected", bt=lambda t: t.to("meta")),
    Rejection("block-table-too-short", r"request 0 has 40 tokens but block_table's 2 pages of 16 tokens cover "
              r"only 32; widen block_table", bt=lambda t: t[:, :2]),
    Rejection("decode-block-table-on-another-device", "block_table is on meta, expected",
              bt=lambda t: t.to("meta"), decode=True),
    Rejection("decode-slots-on-another-device", "slot_mapping is on meta, expected",
              slots=lambda t: t.to("meta"), decode=True),
]


@pytest.mark.parametrize("case", REJECTIONS, ids=str)
def test_hook_rejects_before_writing_the_cache(case: Rejection, device):
    hook_case = CASES[1]
    page, dim, heads = hook_case.page_size, hook_case.head_dim, hook_case.heads
    pool = IndexerPool(PoolLayout("mxfp4", None, 1, NUM_PAGES, page, dim), device)
    hook = SparseIndexer(_decision(hook_case), pool.view(0), top_k=4, max_context_len=3 * page)
    rows = 1 if case.decode else 40
    gen = torch.Generator().manual_seed(5)
    args = dict(q=torch.randn(rows, heads, dim, generator=gen).to(torch.bfloat16).to(device),
                k=torch.randn(rows, dim, generator=gen).to(torch.bfloat16).to(device),
                w=torch.randn(rows, heads, generator=gen).to(device),
                slots=torch.arange(rows, device=device),
                bt=torch.tensor([[0, 1, 2]], dtype=torch.int32, device=device))
    args = {name: getattr(case, name)(value) if getattr(case, name) else value for name, value in args.items()}
    schedule = DecodeSchedule(1, 3, page, 3 * page, device)
    schedule.update(torch.tensor([rows], dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match=case.message):     # from the metadata or from the hook
        meta = (DecodeMetadata(args["slots"], args["bt"], schedule) if case.decode
                else PrefillMetadata(args["slots"], args["bt"], (rows,), (rows,)))
        hook(args["q"], args["k"], args["w"], meta)
    assert bool((pool.pool == 0xFF).all()), "the hook wrote the cache before rejecting its input"


def test_prefill_refuses_graph_capture(device, monkeypatch):
    """The prefill path takes host lengths (copied through pinned memory): captured in a CUDA graph, a replay would
    reuse them. Inside capture (simulated here) the hook refuses a prefill, saying what to do, before it writes the
    cache."""
    import integration.indexer as indexer
    monkeypatch.setattr(indexer, "stream_capturing", lambda: True)
    case = CASES[1]
    page, dim, heads = case.page_size, case.head_dim, case.heads
    pool = IndexerPool(PoolLayout("mxfp4", None, 1, NUM_PAGES, page, dim), device)
    hook = SparseIndexer(_decision(case), pool.view(0), top_k=4, max_context_len=3 * page)
    rows = 20
    meta = PrefillMetadata(torch.arange(rows, device=device), torch.tensor([[0, 1, 2]], dtype=torch.int32,
                                                                           device=device), (rows,), (rows,))
    q = torch.zeros(rows, heads, dim, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="call it eagerly, not while capturing a CUDA graph"):
        hook(q, torch.zeros(rows, dim, dtype=torch.bfloat16, device=device),
             torch.ones(rows, heads, device=device), meta)
    assert bool((pool.pool == 0xFF).all()), "the hook wrote the cache before refusing the prefill"


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_validate_mode_rejects_slots_past_the_cache(how, device, monkeypatch):
    """Slots past the cache are skipped by the writer in the hot path (checking needs a sync); validate mode
    (validate=True or MXIDX_VALIDATE=1) reports them, naming the first one, before anything is written."""
    case = CASES[1]
    pool = IndexerPool(PoolLayout("mxfp4", None, 1, NUM_PAGES, case.page_size, case.head_dim), device)
    if how == "environment":
        monkeypatch.setenv("MXIDX_VALIDATE", "1")
    hook = SparseIndexer(_decision(case), pool.view(0), top_k=4, max_context_len=32, validate=how == "argument")
    q = torch.zeros(3, case.heads, case.head_dim, dtype=torch.bfloat16, device=device)
    k = torch.zeros(3, case.head_dim, dtype=torch.bfloat16, device=device)
    w = torch.zeros(3, case.heads, device=device)
    bt = torch.tensor([[0, 1]], dtype=torch.int32, device=device)
    capacity = NUM_PAGES * case.page_size
    slots = torch.tensor([0, capacity, -1], device=device)
    past = rf"slot_mapping\[1\] = {capacity} is past the cache's num_pages \* P = {capacity} slots"
    with pytest.raises(ValueError, match=past):
        hook(q, k, w, PrefillMetadata(slots, bt, (3,), (3,)))
    assert bool((pool.pool == 0xFF).all())
    schedule = DecodeSchedule(1, 2, case.page_size, 32, device)
    schedule.update(torch.tensor([1], dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match=rf"slot_mapping\[0\] = {capacity + 5} is past"):
        hook(q[:1], k[:1], w[:1], DecodeMetadata(slots[1:2] + 5, bt, schedule))
    # validate mode also checks the page ids the scorer reads (hw's validate mode)
    with pytest.raises(ValueError, match=r"block_table\[0, 0\] = 99 is inside sequence 0's visible span"):
        hook(q[:1], k[:1], w[:1], DecodeMetadata(slots[2:], torch.tensor([[99, 1]], dtype=torch.int32,
                                                                          device=device), schedule))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync debug mode watches a CUDA device")
@pytest.mark.parametrize("kv_dtype", ["fp8", "mxfp4"])
def test_hook_prefill_queues_without_a_sync(kv_dtype, monkeypatch):
    """The hook's prefill never waits for the device (validation off): under torch's sync debug mode, which raises
    on a synchronizing call, a prefill of two requests and one of a single request run. The gather's request
    offsets come from host lengths: they are copied from pinned memory, not from pageable memory, which would
    wait for every kernel queued before the copy."""
    monkeypatch.delenv("MXIDX_VALIDATE", raising=False)
    device, page, dim, heads = torch.device("cuda"), 16, 128, 4
    case = HookCase(kv_dtype, None, dim, page, heads)
    pool = IndexerPool(PoolLayout(kv_dtype, None, 1, NUM_PAGES, page, dim), device)
    hook = SparseIndexer(_decision(case), pool.view(0), top_k=TOP_K, max_context_len=3 * page)
    block_table = np.array([[5, 2, 7], [1, 3, SENTINEL]], dtype=np.int32)
    bt_dev = torch.from_numpy(block_table).to(device)
    gen = torch.Generator(device=device).manual_seed(0)

    def prefill(seq_lens):
        slots = np.concatenate([_slots(block_table, page, b, np.arange(n)) for b, n in enumerate(seq_lens)])
        n = len(slots)
        meta = PrefillMetadata(torch.from_numpy(slots).to(device), bt_dev[:len(seq_lens)], seq_lens, seq_lens)
        q = torch.randn(n, heads, dim, device=device, generator=gen).to(torch.bfloat16)
        k = torch.randn(n, dim, device=device, generator=gen).to(torch.bfloat16)
        w = torch.randn(n, heads, device=device, generator=gen)
        return lambda: hook(q, k, w, meta)

    calls = [prefill((40, 20)), prefill((33,))]
    for call in calls:   # the first calls compile the kernels
        call()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for call in calls:
            call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids=str)
def test_hook_decode_with_next_n_2(case: HookCase, device):
    """Two new tokens per request and step (MTP drafts): row b*2 + n sees context_lens[b] - 1 + n tokens."""
    rng = np.random.default_rng(11)
    page, dim, heads, next_n = case.page_size, case.head_dim, case.heads, 2
    pool_layout = PoolLayout(case.kv_dtype, case.layout, 1, NUM_PAGES, page, dim, extra_bytes_per_page=16)
    pool = IndexerPool(pool_layout, device)
    geom = sim_geometry(pool_layout, 0)
    block_table = np.array(BLOCK_TABLE, dtype=np.int32)
    max_context = block_table.shape[1] * page
    hook = SparseIndexer(_decision(case), pool.view(0), top_k=TOP_K, max_context_len=max_context)
    context = np.array([page + 5, next_n], dtype=np.int32)       # request 1: only this step's two tokens
    expected_pool = np.full(pool_layout.pool_bytes, 0xFF, dtype=np.uint8)

    def write(positions_per_request, k):
        """Expect k at these positions; returns their slots (on the device) for the kernel write."""
        slots = np.concatenate([_slots(block_table, page, b, p) for b, p in enumerate(positions_per_request)])
        sim_layout.write_tokens(expected_pool, geom, slots, *sim_k(k, case.kv_dtype, case.scale_rule))
        return torch.from_numpy(slots).to(device)

    def randn(*shape):
        return torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))

    history = [np.arange(c - next_n) for c in context]
    k_history = randn(sum(h.size for h in history), dim).to(torch.bfloat16)
    hw.indexer_k_quant_and_cache(k_history.to(device), pool.view(0), write(history, k_history),
                                 kv_dtype=case.kv_dtype, layout=pool_layout.layout, scale_rule=case.scale_rule)
    schedule = DecodeSchedule(2, block_table.shape[1], page, max_context, device, next_n=next_n)
    schedule.update(torch.from_numpy(context).to(device))
    q, k, w = randn(4, heads, dim).to(torch.bfloat16), randn(4, dim).to(torch.bfloat16), randn(4, heads)
    step_slots = write([np.arange(c - next_n, c) for c in context], k)
    meta = DecodeMetadata(step_slots, torch.from_numpy(block_table).to(device), schedule)
    got = hook(q.to(device), k.to(device), w.to(device), meta)
    np.testing.assert_array_equal(pool.pool.cpu().numpy(), expected_pool, err_msg="pool after the step")
    q64, w64 = sim_q(q, w, case.kv_dtype, case.scale_rule)
    args = (q64.reshape(2, next_n, heads, dim), expected_pool, geom, w64, context, block_table, max_context)
    visible = sim_scorer.decode_visible(context, next_n, max_context, block_table.shape[1], page)
    assert visible.tolist() == [page + 4, page + 5, 1, 2]
    assert_topk_within_bound(got, sim_scorer.decode_logits(*args),
                             sim_scorer.decode_error_bound(*args, n_roundings=dim), visible, TOP_K, "decode N=2")


@pytest.mark.parametrize("kv_dtype, head_dim, bytes_per_token, message", [
    ("fp8", 96, 100, "power-of-two head dim"),        # a cache the writer could fill but no scorer can read
    ("mxfp4", 128, 132, "bytes_per_token|must have shape"),   # an FP8-sized cache handed to an MXFP4 hook
])
def test_a_call_the_scorers_refuse_never_writes_the_cache(kv_dtype, head_dim, bytes_per_token, message, device):
    page, pages = 16, 4
    pool = torch.full((pages * page * bytes_per_token,), 0xFF, dtype=torch.uint8, device=device)
    view = pool.as_strided((pages, page, 1, bytes_per_token), (page * bytes_per_token, bytes_per_token,
                                                               bytes_per_token, 1))
    config = IndexerConfig(kv_dtype)
    hook = SparseIndexer(GateDecision(config, config, None, "test"), view, top_k=4, max_context_len=32)
    q = torch.ones(3, 2, head_dim, dtype=torch.bfloat16, device=device)
    k = torch.ones(3, head_dim, dtype=torch.bfloat16, device=device)
    w = torch.ones(3, 2, device=device)
    bt = torch.tensor([[0, 1]], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=message):
        hook(q, k, w, PrefillMetadata(torch.arange(3, device=device), bt, (3,), (3,)))
    assert bool((pool == 0xFF).all())


def test_the_pool_format_closes_the_68_byte_ambiguity(device):
    """FP8 D = 64 and MXFP4 D = 128 pages both hold 68 bytes a token: given the pool's layout, the hook refuses a
    decision of the other format and a q of the other head dim before touching the cache."""
    fp8_pool = IndexerPool(PoolLayout("fp8", None, 1, 4, 16, 64), device)
    mx = IndexerConfig("mxfp4")
    assert fp8_pool.view(0).shape[3] == 68
    with pytest.raises(ValueError, match="the pool holds fp8 pages"):
        SparseIndexer(GateDecision(mx, mx, None, "test"), fp8_pool.view(0), top_k=4, max_context_len=32,
                      pool_layout=fp8_pool.layout)
    mx_pool = IndexerPool(PoolLayout("mxfp4", None, 1, 4, 16, 128), device)
    fp8 = IndexerConfig("fp8")
    with pytest.raises(ValueError, match="the pool holds mxfp4"):
        SparseIndexer(GateDecision(fp8, fp8, None, "test"), mx_pool.view(0), top_k=4, max_context_len=32,
                      pool_layout=mx_pool.layout)
    hook = SparseIndexer(GateDecision(mx, mx, None, "test"), mx_pool.view(0), top_k=4, max_context_len=32,
                         pool_layout=mx_pool.layout, error_flag=mx_pool.error_flag)
    bt = torch.tensor([[0, 1]], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="head dim 64"):
        hook(torch.ones(3, 2, 64, dtype=torch.bfloat16, device=device),
             torch.ones(3, 64, dtype=torch.bfloat16, device=device), torch.ones(3, 2, device=device),
             PrefillMetadata(torch.arange(3, device=device), bt, (3,), (3,)))
    assert bool((mx_pool.pool == 0xFF).all())


def test_the_hook_reports_out_of_range_page_ids_through_the_pool_flag(device):
    """A block-table entry that is no page: no crash, and check_errors (hook or pool: one flag) names it."""
    pool = IndexerPool(PoolLayout("fp8", None, 2, 4, 16, 64), device)
    config = IndexerConfig("fp8")
    hooks = [SparseIndexer(GateDecision(config, config, None, "test"), view, top_k=4, max_context_len=32,
                           pool_layout=pool.layout, error_flag=pool.error_flag) for view in pool.views]
    q = torch.ones(3, 2, 64, dtype=torch.bfloat16, device=device)
    k = torch.ones(3, 64, dtype=torch.bfloat16, device=device)
    meta = PrefillMetadata(torch.arange(3, device=device), torch.tensor([[0, 1]], dtype=torch.int32, device=device),
                           (3,), (3,))
    hooks[0](q, k, torch.ones(3, 2, device=device), meta)
    pool.check_errors()                                   # valid so far
    bad = PrefillMetadata(torch.arange(3, device=device) + 16,
                          torch.tensor([[1 << 30, 1]], dtype=torch.int32, device=device), (19,), (3,))
    hooks[1](q, k, torch.ones(3, 2, device=device), bad)
    with pytest.raises(ValueError, match="page id 1073741824"):
        hooks[0].check_errors()
    pool.clear_errors()
    pool.check_errors()
