"""The one-time self-check of the MXFP4 kernels against sim/ (the last gate; the only place integration imports sim).

On a tiny case of the model's own geometry (H, D, P) and the configured layout and scale rule, on the device that
will run the model:

    K writer   hw.indexer_k_quant_and_cache into a pool view (view offset 16, page stride > page, shuffled pages,
               a partial last page, unused pages 0xFF)        == sim.layout.write_tokens(sim.mxfp4.quantize(k)), byte
                                                                 for byte over the whole pool
    Q          hw.quantize_q_mxfp4                            == sim.mxfp4.quantize, byte for byte
    decode     hw.get_paged_mqa_logits_metadata + hw.fp8_fp4_paged_mqa_logits (next_n = 2, an out-of-range
               sentinel past the last used block-table entry)  within sim.scorer's fp32 bound of decode_logits (n and
                                                                 u as hw.logits declares them for the path)
    prefill    hw.cp_gather_indexer_k_quant_cache             == sim.layout.read_tokens, byte for byte
               hw.fp8_fp4_mqa_logits (ragged ranges)          within the bound of sim.scorer.prefill_logits

run_self_check returns None when everything agrees, else the first disagreement (or the error a kernel raised).
Results are cached per (layout, scale rule, geometry, device) -- the device with its index, so "cuda" and
"cuda:0" share one entry: the check runs once per process. A kernel that raises fails the check (its reason
names the exception), it never propagates.
"""
from __future__ import annotations

import traceback

import numpy as np
import torch

import hw
from hw.layout import bytes_per_token
from hw.targets import Op
from sim import layout as sim_layout
from sim import mxfp4 as sim_mxfp4
from sim import scorer as sim_scorer

from .config import IndexerConfig
from .geometry import IndexerGeometry
from .pool import IndexerPool, PoolLayout
from .schedule import default_num_sms

SEED = 20261130
VIEW_OFFSET = 16            # a nonzero view offset (other per-page data in front of the indexer page)
EXTRA_STRIDE = 32           # page stride larger than the page
NUM_PAGES = 4
BLOCK_TABLE = (3, 1)        # shuffled physical pages; pages 0 and 2 stay 0xFF
SENTINEL_PAGE = 1 << 30     # out-of-range block-table entry past the last used page: must never be read
PARTIAL_TAIL = 3            # tokens on the last page (a partial page)
NEXT_N = 2

_results: dict[tuple, str | None] = {}


def run_self_check(config: IndexerConfig, geometry: IndexerGeometry, device: torch.device | str) -> str | None:
    """None if the MXFP4 kernels agree with sim/ on the tiny case, else the reason (cached per process)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())   # "cuda" and "cuda:0" are one device
    key = (config.resolved_layout, config.scale_rule, geometry, device)
    if key not in _results:
        try:
            _results[key] = _check(config, geometry, device)
        except Exception as e:   # a kernel that raises (or is missing) fails the gate; the reason names it
            where = traceback.extract_tb(e.__traceback__)[-1]
            _results[key] = (f"{type(e).__name__} in {where.name} ({where.filename}:{where.lineno}) while running "
                             f"the MXFP4 kernels: {e}")
    return _results[key]


def _bf16_bits(x: torch.Tensor) -> np.ndarray:
    """bf16 tensor -> its uint16 bit patterns (sim's bf16 input)."""
    return x.cpu().view(torch.uint16).numpy()


def _first_difference(name: str, got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, sim's {want.shape}"
    diff = np.argwhere(got != want)
    if diff.size == 0:
        return None
    at = tuple(int(i) for i in diff[0])
    return f"{name}: first difference from sim at {at}: kernel 0x{int(got[at]):02x}, sim 0x{int(want[at]):02x}"


def _check(config: IndexerConfig, geometry: IndexerGeometry, device: torch.device) -> str | None:
    rng = np.random.default_rng(SEED)
    heads, head_dim, page = geometry.num_heads, geometry.head_dim, geometry.page_size
    layout = config.resolved_layout
    rule = config.scale_rule
    ctx = (len(BLOCK_TABLE) - 1) * page + PARTIAL_TAIL

    page_stride = VIEW_OFFSET + page * bytes_per_token("mxfp4", head_dim) + EXTRA_STRIDE
    pool_layout = PoolLayout("mxfp4", layout, 1, NUM_PAGES, page, head_dim, extra_bytes_per_page=VIEW_OFFSET,
                             page_stride=page_stride)
    pool = IndexerPool(pool_layout, device)
    geom = sim_layout.PageGeometry("mxfp4", page, head_dim, NUM_PAGES, page_stride=pool_layout.page_stride,
                                   layout=layout, view_offset=VIEW_OFFSET)

    # K with a few outlier channels, so blocks get different scales
    k = rng.standard_normal((ctx, head_dim)).astype(np.float32)
    k[:, rng.choice(head_dim, 2, replace=False)] *= 16
    k = torch.from_numpy(k).to(torch.bfloat16)
    positions = np.arange(ctx)
    slots = np.array(BLOCK_TABLE)[positions // page] * page + positions % page
    hw.indexer_k_quant_and_cache(k.to(device), pool.view(0), torch.from_numpy(slots).to(device), kv_dtype="mxfp4",
                                 layout=layout, scale_rule=rule)
    sim_pool = sim_layout.new_pool(geom)
    sim_layout.write_tokens(sim_pool, geom, slots, *sim_mxfp4.quantize(_bf16_bits(k), scale_rule=rule))
    got_pool = pool.pool.cpu().numpy()
    reason = (_first_difference("K cache pool bytes", got_pool[:geom.pool_bytes], sim_pool)
              or _first_difference("K cache pool bytes past the last page", got_pool[geom.pool_bytes:],
                                   np.full(got_pool.size - geom.pool_bytes, 0xFF, np.uint8)))
    if reason:
        return f"hw.indexer_k_quant_and_cache: {reason}"

    q = torch.from_numpy(rng.standard_normal((NEXT_N, heads, head_dim)).astype(np.float32)).to(torch.bfloat16)
    q_codes, q_scales = hw.quantize_q_mxfp4(q.to(device), scale_rule=rule)
    want_codes, want_scales = sim_mxfp4.quantize(_bf16_bits(q), scale_rule=rule)
    reason = (_first_difference("q codes", q_codes.cpu().numpy(), want_codes)
              or _first_difference("q scales", q_scales.cpu().numpy(), want_scales))
    if reason:
        return f"hw.quantize_q_mxfp4: {reason}"
    q64 = sim_scorer.dequantize_q(want_codes, want_scales)
    weights = rng.standard_normal((NEXT_N, heads)).astype(np.float32)

    return (_check_decode(pool, geom, sim_pool, (q_codes, q_scales), q64, weights, ctx, layout, device)
            or _check_prefill(pool, geom, sim_pool, (q_codes, q_scales), q64, weights, ctx, layout, device))


def _bound(bound_fn, args, geom, device, op) -> np.ndarray:
    """sim.scorer's fp32 bound (DESIGN §4) with the n and u hw declares for scorer `op` (the default variant)
    on `device`."""
    n, u = hw.logits.declared_precision(op, "mxfp4", geom.head_dim, device)
    return bound_fn(*args, n_roundings=n, u=u)


def _check_decode(pool, geom, sim_pool, q_pair, q64, weights, ctx, layout, device) -> str | None:
    heads, page = q64.shape[1], geom.page_size
    block_table = np.array([[*BLOCK_TABLE, SENTINEL_PAGE]], dtype=np.int32)
    context_lens = np.array([ctx], dtype=np.int32)
    width = block_table.shape[1] * page
    ctx_t = torch.from_numpy(context_lens).to(device)
    meta = hw.get_paged_mqa_logits_metadata(ctx_t, page, default_num_sms(device))
    q4 = tuple(x.view(1, NEXT_N, heads, -1) for x in q_pair)
    logits = hw.fp8_fp4_paged_mqa_logits(q4, pool.view(0), torch.from_numpy(weights).to(device), ctx_t,
                                         torch.from_numpy(block_table).to(device), meta, width, clean_logits=True,
                                         layout=layout)
    args = (q64.reshape(1, NEXT_N, heads, -1), sim_pool, geom, weights, context_lens, block_table, width)
    check = sim_scorer.check_logits(logits.cpu().numpy(), sim_scorer.decode_logits(*args),
                                    _bound(sim_scorer.decode_error_bound, args, geom, device, Op.DECODE))
    return None if check.ok else f"hw.fp8_fp4_paged_mqa_logits outside the fp32 bound: {check.describe()}"


def _check_prefill(pool, geom, sim_pool, q_pair, q64, weights, ctx, layout, device) -> str | None:
    block_table = np.array([BLOCK_TABLE], dtype=np.int32)
    cu_seq_lens = torch.tensor([0, ctx], dtype=torch.int32, device=device)
    values, scales = hw.cp_gather_indexer_k_quant_cache(pool.view(0), torch.from_numpy(block_table).to(device),
                                                        cu_seq_lens, layout=layout, num_tokens=ctx)
    want_values, want_scales = sim_layout.read_tokens(sim_pool, geom, block_table[0], ctx)
    reason = (_first_difference("gathered codes", values.cpu().numpy(), want_values)
              or _first_difference("gathered scales", scales.cpu().numpy(), want_scales))
    if reason:
        return f"hw.cp_gather_indexer_k_quant_cache: {reason}"
    ks = np.array([0, ctx // 2], dtype=np.int32)        # ragged ranges: a row that starts late, rows that end early
    ke = np.array([ctx - 1, ctx], dtype=np.int32)
    logits = hw.fp8_fp4_mqa_logits(q_pair, (values, scales), torch.from_numpy(weights).to(device),
                                   torch.from_numpy(ks).to(device), torch.from_numpy(ke).to(device),
                                   clean_logits=True)
    k64 = sim_scorer.dequantize_kv(want_values, want_scales)
    args = (q64, k64, weights, ks, ke)
    check = sim_scorer.check_logits(logits.cpu().numpy(), sim_scorer.prefill_logits(*args),
                                    _bound(sim_scorer.prefill_error_bound, args, geom, device, Op.PREFILL))
    return None if check.ok else f"hw.fp8_fp4_mqa_logits outside the fp32 bound: {check.describe()}"
