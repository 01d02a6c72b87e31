"""hw._logits_details.paged_keys_m (paged decode scorer, keys on the MMA's M axis) against sim.scorer.decode_logits
and the bound of its declared (n, u).

Every case builds a hostile pool: 0xFF (NaN) everywhere that is not a visible token, shuffled physical pages, page
strides larger than a page, a non-zero view offset, partial last pages, and out-of-range sentinels in every
block-table entry past a sequence's visible span. The output is pre-filled with a marker: the kernel must write
every visible entry and nothing else. MXFP4 cases also plant keys (and query rows) whose block scales span more
than the fold's exact range, which the kernel must score through its exact fallback.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import sim.layout
from hw._logits_details import mxfp4_fold
from hw._logits_details import paged_keys_m as km
from hw._logits_details import paged_keys_m_wgmma as wgmma
from hw._logits_details.calls import DecodeCall
from hw.targets import Op, Target, target_of
from hw.testing import host_to_device, pair_as_torch, torch_cache_view, write_zeros_pool
from hw.variants import variants
from sim import fp8 as sim_fp8
from sim import scorer
from sim.formats import E2M1_VALUES, E4M3_NAN, E8M0_BIAS, E8M0_NAN
from sim.testing import build_large_pool, case_rng, make_geometry, sim_quantize, sim_quantize_q

pytestmark = pytest.mark.interp

SENTINELS = (-1, 2**31 - 1, 1 << 20)   # written into block-table entries no row may read
STRIDE_PAD = 48                        # page stride = page bytes rounded to 16, plus this
VIEW_OFFSET = 32
UNTOUCHED = 12345.0                    # the output's fill: invisible entries must keep it
WGMMA = "wgmma"                        # beside paged_keys_m's paths: the Hopper kernel (paged_keys_m_wgmma)


@dataclass(frozen=True)
class Case:
    layout: str                  # "fp8" | "mxfp4" | "mxfp4_tiled"
    head_dim: int
    page_size: int
    heads: int
    next_n: int
    contexts: tuple              # context_lens rows: ints (1-D) or next_n-tuples (2-D)
    max_context_len: int
    max_pages: int
    nan_token: tuple | None = None       # (b, token): that key is NaN as the writer leaves a non-finite row
    spans: tuple = ()                    # ((b, token), span): that key's block scales span `span` binades
    wide_query: bool = False             # query row (0, 0, 0) spans 20 binades (MXFP4)
    nan_query: bool = False              # query row (0, 0, 0) has a NaN block (MXFP4)
    tokens_per_program: int | None = None

    @property
    def kv_dtype(self) -> str:
        return "fp8" if self.layout == "fp8" else "mxfp4"

    def __str__(self):
        return (f"{self.layout}-D{self.head_dim}-P{self.page_size}-H{self.heads}-N{self.next_n}-"
                f"ctx{'2d' if isinstance(self.contexts[0], tuple) else ''}{list(self.contexts)}-W{self.max_context_len}"
                f"{'-nan' if self.nan_token else ''}{'-spans' if self.spans else ''}"
                f"{'-wideq' if self.wide_query else ''}{'-nanq' if self.nan_query else ''}"
                f"{f'-tpp{self.tokens_per_program}' if self.tokens_per_program else ''}")


CASES = [
    # context 0 and 1, a partial last page, 4 pages of 16 a tile; keys whose block scales span exactly 11 binades
    # (the fold's limit: sequence 1's tile) and 12 and 30 (the exact fallback: the tiles of sequences 2 and 3)
    Case("fp8", 128, 16, 3, 1, (0, 1, 33, 16), 48, 4, nan_token=(2, 17)),
    Case("mxfp4", 128, 16, 3, 1, (0, 1, 33, 16), 48, 4, nan_token=(2, 17),
         spans=(((1, 0), 11), ((2, 6), 12), ((3, 9), 30))),
    Case("fp8", 64, 64, 7, 2, ((65, 66), (3, 0)), 70, 2),                       # 2-D context_lens, next_n 2
    Case("fp8", 32, 16, 2, 1, (40,), 48, 2),                                    # past max_pages * P: NaN columns
    Case("mxfp4", 64, 16, 5, 2, (17, 2, 0), 40, 3, spans=(((0, 16), 13),)),       # next_n 2, 1-D
    Case("mxfp4", 32, 16, 1, 2, ((5, 9), (0, 0), (16, 1)), 20, 2, nan_token=(0, 3)),   # 2-D, D 32
    Case("mxfp4_tiled", 128, 16, 2, 1, (31, 20), 40, 2, spans=(((0, 3), 15),)),
    Case("mxfp4_tiled", 128, 64, 3, 2, (70, 1), 100, 2, nan_token=(0, 64)),
    Case("mxfp4", 128, 64, 4, 1, (100, 64), 80, 2, wide_query=True),           # max_context_len clips; wide query
    Case("mxfp4", 64, 32, 2, 3, (40, 7), 48, 2, nan_query=True),               # next_n 3 (a padded n); NaN query
    Case("mxfp4", 64, 32, 128, 1, (33, 5), 40, 2),                             # H 128
    # padding query columns in the exact pass: padded heads (64 columns) beside wide keys; 128 columns of padded
    # heads with a wide query, of 4 tokens (one padded) with a NaN query row and a wide key
    Case("mxfp4", 128, 64, 20, 2, (130, 70), 160, 3, spans=(((0, 66), 14), ((1, 3), 20))),
    Case("mxfp4", 128, 64, 100, 1, (70,), 80, 2, wide_query=True),
    Case("mxfp4", 64, 32, 24, 3, (40, 7), 48, 2, nan_query=True, spans=(((1, 2), 16),)),
    Case("fp8", 64, 16, 128, 1, (20,), 24, 2),
    Case("fp8", 128, 64, 40, 2, (130, 70), 160, 3, nan_token=(1, 5)),        # 128 columns: halves of whole tokens
    Case("fp8", 64, 16, 24, 3, ((40, 41, 42), (7, 0, 3)), 48, 3),
    Case("mxfp4", 256, 32, 2, 1, (40, 3), 48, 2, spans=(((0, 7), 25),)),      # D 256
    Case("fp8", 256, 32, 2, 2, (40,), 48, 2),
    # programs of one 64-key tile, and of three tiles with a wide key in the second (program 0) and last tile
    Case("mxfp4", 64, 16, 2, 1, (70, 33, 49), 80, 5, spans=(((0, 66), 20), ((2, 40), 14)), tokens_per_program=64),
    Case("mxfp4", 64, 16, 2, 1, (70, 33, 49), 80, 5, spans=(((0, 66), 20), ((2, 40), 14)), tokens_per_program=192),
    Case("fp8", 64, 16, 2, 1, (70, 33, 49), 80, 5, tokens_per_program=128),
]


def runs(case: Case, device) -> list[tuple[Target, str | None]]:
    """(target, path) pairs a case runs: the device's target on every path that runs there (FP8: one), and
    WGMMA where paged_keys_m_wgmma covers the case."""
    target = target_of(device, km.paged_keys_m_kernel)
    if case.kv_dtype == "fp8":
        return [(target, None)]
    pairs = [(target, path) for path in km.PATHS if target in km.PATH_TARGETS[path]]
    if target is Target.NVIDIA and wgmma.covers(case.head_dim, case.next_n, case.heads, case.layout == "mxfp4_tiled",
                                                device):
        pairs.append((target, WGMMA))
    return pairs


def launch(path: str | None, q_v, q_s, kv_cache, weights, ctx, block_table, out, *, target: Target,
           tokens_per_program: int | None = None, **shapes) -> None:
    """km.launch_paged_keys_m on `path` (tokens_per_program: its settings override), or with path WGMMA the Hopper
    kernel on the same arguments (tokens_per_program: its tiles, rounded up to the even count it takes)."""
    if path != WGMMA:
        settings = km.keys_m_settings(target, shapes["kv_dtype"], shapes["num_heads"], shapes["next_n"],
                                      shapes["page_size"], path=path, tokens_per_program=tokens_per_program)
        km.launch_paged_keys_m(q_v, q_s, kv_cache, weights, ctx, block_table, out, target=target, path=path,
                               settings=settings, **shapes)
        return
    call = DecodeCall(q_v=q_v, q_s=q_s, kv_cache=kv_cache, weights=weights, context_lens=ctx,
                      block_table=block_table, out=out, page_size=shapes["page_size"],
                      page_stride=shapes["page_stride"], tiled=shapes["tiled"], next_n=shapes["next_n"],
                      num_heads=shapes["num_heads"], head_dim=shapes["head_dim"], cap=shapes["cap"],
                      num_cache_pages=shapes["num_cache_pages"])
    settings = wgmma.gluon_settings(call)
    if tokens_per_program is not None:
        tiles = -(-tokens_per_program // wgmma.KEYS.value)
        settings = dataclasses.replace(settings, tiles=max(wgmma.MIN_TILES, tiles + tiles % 2))
    wgmma.launch(call, settings)


def wgmma_param():
    """The WGMMA path as a test parameter: GPU only, skipped where the device is not sm_90."""
    return pytest.param(WGMMA, marks=pytest.mark.gpu)


#: the MXFP4 layouts and fold kernels of the single-key tests
LAYOUT_PATHS = [("mxfp4", "fold"), ("mxfp4_tiled", "fold"), pytest.param("mxfp4", WGMMA, marks=pytest.mark.gpu),
                pytest.param("mxfp4_tiled", WGMMA, marks=pytest.mark.gpu)]


def skip_unless_covered(path: str, device, head_dim: int, next_n: int, heads: int, layout: str | None) -> None:
    if path == WGMMA and not wgmma.covers(head_dim, next_n, heads, layout == "mxfp4_tiled", device):
        pytest.skip(f"paged_keys_m_wgmma does not take {layout} D {head_dim} N {next_n} H {heads} on "
                    f"{torch.cuda.get_device_name(device)}")


def poison_key(kv_dtype: str, values: np.ndarray, scales: np.ndarray, token: int) -> None:
    """Make key `token` NaN in place, as the writer leaves a non-finite row (DESIGN §1): FP8 every byte 0x7F and
    the scale NaN; MXFP4 block 0's scale byte 255."""
    if kv_dtype == "fp8":
        values[token] = E4M3_NAN
        scales[token] = np.nan
    else:
        scales[token, 0] = E8M0_NAN


def _visible(case: Case) -> np.ndarray:
    return scorer.decode_visible(np.array(case.contexts, dtype=np.int32), case.next_n, case.max_context_len,
                                 case.max_pages, case.page_size)


def _set_span(scales: np.ndarray, token: int, span: int) -> None:
    """Key `token`'s block scales: its largest block keeps its byte, block 1 (or 0) lies `span` binades below."""
    top = int(scales[token].max())
    low = 1 if scales[token].argmax() != 1 else 0
    scales[token, low] = top - span


def build_cache(case: Case, rng: np.random.Generator):
    """(pool uint8 numpy, geometry, block_table int32 [B, max_pages]): visible tokens at shuffled pages of a 0xFF
    pool, sentinels past each sequence's span."""
    batch = len(case.contexts)
    tokens = _visible(case).reshape(batch, case.next_n).max(axis=1)
    pages = -(-tokens // case.page_size)
    num_pages = int(pages.sum()) + 2                   # two spare pages stay 0xFF
    geom = make_geometry(case.kv_dtype, None if case.layout == "fp8" else case.layout, case.page_size,
                         case.head_dim, num_pages, STRIDE_PAD, VIEW_OFFSET)
    pool = sim.layout.new_pool(geom)
    physical = rng.permutation(num_pages)
    block_table = np.array([SENTINELS[i % len(SENTINELS)] for i in range(batch * case.max_pages)],
                           dtype=np.int32).reshape(batch, case.max_pages)
    nxt = 0
    for b in range(batch):
        block_table[b, :pages[b]] = physical[nxt:nxt + pages[b]]
        nxt += pages[b]
        if tokens[b] == 0:
            continue
        values, scales = sim_quantize(case.kv_dtype, rng.standard_normal((tokens[b], case.head_dim))
                                      .astype(np.float32))
        for (sb, token), span in case.spans:
            if sb == b:
                _set_span(scales, token, span)
        if case.nan_token is not None and case.nan_token[0] == b:
            poison_key(case.kv_dtype, values, scales, case.nan_token[1])
        j = np.arange(tokens[b])
        slots = block_table[b, j // case.page_size].astype(np.int64) * case.page_size + j % case.page_size
        sim.layout.write_tokens(pool, geom, slots, values, scales)
    return pool, geom, block_table


def _queries(case: Case, rng: np.random.Generator, device):
    """(q values torch (uint8 view), q scales torch or None, weights torch [B*N, H], exact q float64, weights
    float32 numpy [B*N, H])."""
    batch, rows = len(case.contexts), len(case.contexts) * case.next_n
    q = rng.standard_normal((batch, case.next_n, case.heads, case.head_dim)).astype(np.float32)
    w = rng.standard_normal((batch, case.next_n, case.heads)).astype(np.float32)
    values, scales, q64, folded = sim_quantize_q(case.kv_dtype, q, w)
    if case.wide_query:
        _set_span(scales[0, 0], 0, 20)
    if case.nan_query:
        scales[0, 0, 0, 0] = E8M0_NAN
    if case.wide_query or case.nan_query:
        q64 = scorer.dequantize_q(values, scales)
    q_v, q_s = pair_as_torch(case.kv_dtype, values, scales, device)
    return (q_v.view(torch.uint8), q_s, torch.from_numpy(folded.reshape(rows, case.heads)).to(device), q64,
            folded.reshape(rows, case.heads))


def run_case(case: Case, target: Target, path: str | None, device):
    """(kernel output numpy, reference, bound, visible mask) of one case."""
    rng = case_rng(str(case))
    pool, geom, block_table = build_cache(case, rng)
    q_v, q_s, w_t, q64, w = _queries(case, rng, device)
    rows = len(case.contexts) * case.next_n
    ctx = torch.tensor(case.contexts, dtype=torch.int32, device=device)
    out = torch.full((rows, case.max_context_len), UNTOUCHED, dtype=torch.float32, device=device)
    launch(path, q_v, q_s, torch_cache_view(host_to_device(pool, device), geom), w_t, ctx,
           torch.from_numpy(block_table).to(device), out, target=target, tokens_per_program=case.tokens_per_program,
           cap=case.max_context_len, page_stride=geom.page_stride, num_cache_pages=geom.num_pages,
           next_n=case.next_n, num_heads=case.heads, head_dim=case.head_dim, page_size=case.page_size,
           kv_dtype=case.kv_dtype, tiled=case.layout == "mxfp4_tiled")
    args = (q64, pool, geom, w, np.array(case.contexts), block_table, case.max_context_len)
    n, u = km.declared_precision(case.kv_dtype, case.head_dim, target, "fold" if path == WGMMA else path)
    ref = scorer.decode_logits(*args, clean_logits=True)
    bound = scorer.decode_error_bound(*args, n_roundings=n, u=u)
    columns = scorer.decode_columns(np.array(case.contexts, dtype=np.int32), case.next_n, case.max_context_len)
    return out.cpu().numpy(), ref, bound, scorer.visible_mask(columns, case.max_context_len)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_reference(case: Case, device):
    for target, path in runs(case, device):
        out, ref, bound, visible = run_case(case, target, path, device)
        result = scorer.check_logits(out, ref, bound, visible=visible)
        assert result.ok, f"{path}: {result.describe()}"
        assert result.compared > 0 or not visible.any()
        assert (out[~visible] == UNTOUCHED).all(), f"{path}: an invisible entry was written"
        if case.nan_token is not None:
            b, t = case.nan_token
            seen = visible[b * case.next_n:(b + 1) * case.next_n, t]
            assert seen.any() and np.isnan(out[b * case.next_n:(b + 1) * case.next_n, t][seen]).all()
        if case.nan_query:
            assert np.isnan(out[0][visible[0]]).all()


#: the fold loop's wide-key handling: wide keys in the first tile and the last, a NaN key, planar D 128 (32-bit
#: scale loads) and tiled D 128 (byte scale loads); programs of 8 tiles (the Hopper kernel's groups of 4, the last
#: group partial) on pages of 64 and 128 keys (one page lookup per tile), planar and tiled
FOLD_LOOP_CASES = [Case("mxfp4", 128, 16, 2, 1, (70, 33), 80, 5, nan_token=(1, 3), spans=(((0, 66), 20), ((0, 5), 14)),
                        tokens_per_program=128),
                   Case("mxfp4_tiled", 128, 16, 2, 1, (40,), 48, 3, spans=(((0, 3), 15),), tokens_per_program=128),
                   Case("mxfp4", 128, 64, 2, 1, (300, 70), 320, 6, nan_token=(0, 200), spans=(((0, 250), 20),),
                        tokens_per_program=512),
                   Case("mxfp4", 128, 128, 3, 2, (300, 129), 320, 3, spans=(((1, 128), 14),), tokens_per_program=512),
                   Case("mxfp4_tiled", 128, 64, 2, 1, (260,), 320, 5, nan_token=(0, 259), tokens_per_program=512)]


@pytest.mark.parametrize("path", ["fold", wgmma_param()])
@pytest.mark.parametrize("case", FOLD_LOOP_CASES, ids=str)
def test_fold_loop_wide_keys_match_reference(case: Case, path, device):
    """The fold loop (split K order, per-column scale select, wide keys stored then overwritten by the exact pass)
    writes every visible entry within the declared bound, and nothing else."""
    skip_unless_covered(path, device, case.head_dim, case.next_n, case.heads, case.layout)
    target = target_of(device, km.paged_keys_m_kernel)
    out, ref, bound, visible = run_case(case, target, path, device)
    result = scorer.check_logits(out, ref, bound, visible=visible)
    assert result.ok, result.describe()
    assert (out[~visible] == UNTOUCHED).all()


def test_cases_exercise_the_fallback():
    """The span cases really contain keys / query rows outside the fold's exact range (and one exactly at it)."""
    spans = [s for c in CASES for _, s in c.spans]
    assert mxfp4_fold.FOLD_SPAN.value in spans and any(s > mxfp4_fold.FOLD_SPAN.value for s in spans)
    assert any(c.wide_query for c in CASES)


@pytest.mark.parametrize("layout,path", LAYOUT_PATHS)
def test_wide_key_is_scored_exactly(layout, path, device):
    """D = 128, H = 1, one key: q all 1.0; the key has 1.0 at element 0 (the rest of block 0 zero) and 2^-26 in
    all 96 elements of blocks 1..3 (block scales 26 binades apart): q.k = 1 + 96 * 2^-26. One fp32 sum of the D
    products would give 1.0; the exact fallback adds exact block sums and returns q.k exactly."""
    D, P, tiny = 128, 16, -26
    skip_unless_covered(path, device, D, 1, 1, layout)
    one_both_nibbles = 0x22                                       # e2m1 code 2 = 1.0 in the low and high nibble
    q_codes = np.full((1, 1, 1, D // 2), one_both_nibbles, np.uint8)
    q_scales = np.full((1, 1, 1, D // 32), E8M0_BIAS, np.uint8)
    k_codes = np.full((1, D // 2), one_both_nibbles, np.uint8)
    k_codes[0, :16] = 0
    k_codes[0, 0] = 0x02                                          # element 0 (low nibble) = 1.0
    k_scales = np.array([[E8M0_BIAS] + [E8M0_BIAS + tiny] * 3], np.uint8)
    geom = make_geometry("mxfp4", layout if layout == "mxfp4_tiled" else None, P, D, 2)
    pool = sim.layout.new_pool(geom, fill=0xFF)
    sim.layout.write_tokens(pool, geom, np.array([P]), k_codes, k_scales)     # page 1, slot 0
    out = torch.full((1, 1), UNTOUCHED, device=device)
    launch(path, torch.from_numpy(q_codes).to(device), torch.from_numpy(q_scales).to(device),
           torch_cache_view(host_to_device(pool, device), geom), torch.ones((1, 1), device=device),
           torch.ones(1, dtype=torch.int32, device=device),
           torch.tensor([[1, SENTINELS[0]]], dtype=torch.int32, device=device), out,
           cap=1, page_stride=geom.page_stride, num_cache_pages=geom.num_pages, next_n=1, num_heads=1, head_dim=D,
           page_size=P, kv_dtype="mxfp4", tiled=layout == "mxfp4_tiled",
           target=target_of(device, km.paged_keys_m_kernel))
    assert float(out[0, 0]) == 1 + 96 * 2.0 ** tiny


@pytest.mark.parametrize("layout,path", LAYOUT_PATHS)
def test_wide_key_leaves_its_tile_mates_alone(layout, path, device):
    """A key's logit depends on that key only, not on its tile-mates: with one key of a 64-key tile made wide
    (block scales 30 binades apart: the exact pass scores it), every other key's logit is bit-identical to the
    run without it (the context-parallel hook relies on it: a rank's tiles hold other keys than one GPU's)."""
    D, P, H, ctx = 128, 16, 4, 64
    skip_unless_covered(path, device, D, 1, H, layout)
    rng = np.random.default_rng(3)
    k_codes = rng.integers(0, 256, (ctx, D // 2), dtype=np.uint8)
    # block scales 11 binades apart (the widest the fold takes): one fp32 sum of the products rounds away low
    # bits that the exact pass keeps, so a tile-mate redone by the exact pass would change its logit
    k_scales = np.where(np.arange(D // 32) == 0, E8M0_BIAS + 6, E8M0_BIAS - 5).astype(np.uint8)[None, :].repeat(ctx, 0)
    k_codes[37] &= 0x77                                           # key 37 and q: no negative element, so
    q_codes = rng.integers(0, 256, (1, 1, H, D // 2), dtype=np.uint8) & 0x77   # q.k > 0 and its logit moves
    q_scales = np.where(np.arange(D // 32) == 0, E8M0_BIAS + 5, E8M0_BIAS - 5).astype(np.uint8)
    q_scales = np.broadcast_to(q_scales, (1, 1, H, D // 32)).copy()
    weights = torch.from_numpy(rng.standard_normal((1, H)).astype(np.float32)).to(device)
    geom = make_geometry("mxfp4", layout if layout == "mxfp4_tiled" else None, P, D, ctx // P)
    outs = []
    for wide in (False, True):
        scales = k_scales.copy()
        if wide:
            scales[37] = [E8M0_BIAS + 15, E8M0_BIAS - 15, E8M0_BIAS, E8M0_BIAS]
        pool = sim.layout.new_pool(geom, fill=0xFF)
        sim.layout.write_tokens(pool, geom, np.arange(ctx), k_codes, scales)
        out = torch.full((1, ctx), UNTOUCHED, device=device)
        launch(path, torch.from_numpy(q_codes).to(device), torch.from_numpy(q_scales).to(device),
               torch_cache_view(host_to_device(pool, device), geom), weights,
               torch.full((1,), ctx, dtype=torch.int32, device=device),
               torch.arange(ctx // P, dtype=torch.int32, device=device)[None, :], out,
               cap=ctx, page_stride=geom.page_stride, num_cache_pages=geom.num_pages, next_n=1, num_heads=H,
               head_dim=D, page_size=P, kv_dtype="mxfp4", tiled=layout == "mxfp4_tiled",
               target=target_of(device, km.paged_keys_m_kernel))
        outs.append(out.cpu().numpy())
    others = np.arange(ctx) != 37
    assert np.array_equal(outs[0][:, others].view(np.uint32), outs[1][:, others].view(np.uint32))
    assert outs[0][0, 37] != outs[1][0, 37]


@pytest.mark.parametrize("kv_dtype,layout,path", [("fp8", None, None), ("mxfp4", None, "fold"),
                                                  ("mxfp4", "mxfp4_tiled", "fold"),
                                                  pytest.param("mxfp4", None, WGMMA, marks=pytest.mark.gpu)])
def test_pages_past_4_6_gb(kv_dtype, layout, path, device):
    """Pages whose bytes lie past 2^31, 2^32 and 4,608,000,000 bytes of the view (DESIGN §3): the 64-bit rebase.
    On the CPU the pool is lazily committed np.zeros (hw.testing.zeros_pool)."""
    large = build_large_pool(functools.partial(write_zeros_pool, device=device), kv_dtype=kv_dtype, layout=layout,
                             tokens=5, seed=f"keys-m-{kv_dtype}-{layout}")
    rng = case_rng(f"keys-m-large-{kv_dtype}-{layout}")
    batch, heads, D, P = large.block_table.shape[0], 2, large.geom.head_dim, large.geom.page_size
    values, scales, q64, w = sim_quantize_q(kv_dtype, rng.standard_normal((batch, 1, heads, D)).astype(np.float32),
                                            rng.standard_normal((batch, 1, heads)).astype(np.float32))
    q_v, q_s = pair_as_torch(kv_dtype, values, scales, device)
    w = w.reshape(batch, heads)
    ctx = np.full(batch, large.tokens, np.int32)
    skip_unless_covered(path, device, D, 1, heads, layout)
    out = torch.full((batch, P), UNTOUCHED, device=device)
    target = target_of(device, km.paged_keys_m_kernel)
    launch(path, q_v.view(torch.uint8), q_s, torch_cache_view(large.kernel_pool, large.geom),
           torch.from_numpy(w).to(device), torch.from_numpy(ctx).to(device),
           torch.from_numpy(large.block_table).to(device), out, target=target, cap=P,
           page_stride=large.geom.page_stride, num_cache_pages=large.geom.num_pages, next_n=1, num_heads=heads,
           head_dim=D, page_size=P, kv_dtype=kv_dtype, tiled=layout == "mxfp4_tiled")
    args = (q64, large.sim_pool, large.geom, w, ctx, large.block_table, P)
    n, u = km.declared_precision(kv_dtype, D, target, "fold" if path == WGMMA else path)
    visible = scorer.visible_mask(ctx, P)
    result = scorer.assert_logits_within_bound(out.cpu().numpy(), scorer.decode_logits(*args),
                                               scorer.decode_error_bound(*args, n_roundings=n, u=u), visible=visible)
    assert result.compared == batch * large.tokens
    assert (out.cpu().numpy()[~visible] == UNTOUCHED).all()


# ============================================================================================ the conversion
@triton.jit
def _fold_probe(words_ptr, rel_ptr, out_ptr, R: tl.constexpr, W: tl.constexpr, MX_MODE: tl.constexpr):
    r = tl.arange(0, R)
    words = tl.load(words_ptr + r[:, None] * W + tl.arange(0, W)[None, :])
    rel = tl.load(rel_ptr + r[:, None] * (W // 4) + tl.arange(0, W // 4)[None, :])
    tl.store(out_ptr + r[:, None] * (8 * W) + tl.arange(0, 8 * W)[None, :], mxfp4_fold.fold_codes(words, rel, MX_MODE))


def _fold(words: np.ndarray, rel: np.ndarray, mode, device) -> np.ndarray:
    """mxfp4_fold.fold_codes on int32 words [R, W] and rel [R, W/4] -> uint8 [R, 8W]."""
    out = torch.empty((words.shape[0], 8 * words.shape[1]), dtype=torch.uint8, device=device)
    _fold_probe[(1,)](torch.from_numpy(words).to(device), torch.from_numpy(rel).to(device), out,
                      R=words.shape[0], W=words.shape[1], MX_MODE=mode)
    return out.cpu().numpy()


def _all_codes_and_rels():
    """int32 words [16, 8] and rel [16, 2]: row r has rel = -(r % 12) (0..-11) in both blocks; its 64 codes are
    every code 0..15 at every nibble position, 4 times over, in a shuffled order."""
    rows = 16
    rng = np.random.default_rng(0)
    codes = np.stack([rng.permutation(np.tile(np.arange(16), 4)) for _ in range(rows)])      # [16, 64]
    words = np.zeros((rows, 8), np.uint32)
    for i in range(8):
        words |= codes[:, i::8].astype(np.uint32) << (4 * i)
    rel = -np.repeat((np.arange(rows, dtype=np.int32) % 12)[:, None], 2, axis=1)
    return words.view(np.int32), rel, codes


def test_fold_is_exact_e2m1_times_scale(device):
    """Every code at every rel of the fold's range becomes the e4m3 byte of exactly e2m1 * 2^(rel + 6), in the
    natural element order; with the portable conversion and, on NVIDIA, the inline PTX."""
    words, rel, codes = _all_codes_and_rels()
    want = E2M1_VALUES[codes] * np.exp2(rel[:, :1] + 6.0)
    nvidia = target_of(device, km.paged_keys_m_kernel) is Target.NVIDIA
    modes = [mxfp4_fold.MX_FOLD_TL] + ([mxfp4_fold.MX_FOLD_PTX] if nvidia else [])
    for mode in modes:
        got = sim_fp8.decode_e4m3(_fold(words, rel, mode, device))
        np.testing.assert_array_equal(got, want)
        assert not np.signbit(got[codes == 0]).any() and np.signbit(got[codes == 8]).all()


def _emulate_ptx(asm: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the fold PTX bodies' instructions (mov, and, or, add.u32, shl, shr.u32, lop3, prmt.b32 in its default
    mode) on uint32 arrays."""
    regs = dict(inputs)

    def value(x):
        return regs[x] if x in regs else np.uint32(int(x, 0))

    for line in asm.splitlines():
        m = re.match(r"\s*([a-z0-9.]+)\s+(.*);", line)
        if not m or m.group(1) == ".reg":
            continue
        op, args = m.group(1), [a.strip() for a in m.group(2).split(",")]
        d, src = args[0], [value(a) for a in args[1:]]
        if op == "mov.b32":
            regs[d] = np.broadcast_to(np.uint32(src[0]), next(iter(inputs.values())).shape).astype(np.uint32)
        elif op == "and.b32":
            regs[d] = src[0] & src[1]
        elif op == "or.b32":
            regs[d] = src[0] | src[1]
        elif op == "shr.u32":
            regs[d] = src[0] >> src[1]
        elif op == "add.u32":
            regs[d] = src[0] + src[1]
        elif op == "shl.b32":
            regs[d] = src[0] << src[1]
        elif op == "lop3.b32":       # bit j of the result: bit (4a_j + 2b_j + c_j) of the truth table (a 0xF0, ...)
            a, b, c, lut = src
            out = np.zeros(np.shape(a), np.uint32)
            for bits in range(8):
                pick = ((a if bits & 4 else ~a) & (b if bits & 2 else ~b) & (c if bits & 1 else ~c)).astype(np.uint32)
                out |= pick if (int(lut) >> bits) & 1 else np.uint32(0)
            regs[d] = out
        elif op == "prmt.b32":       # bytes of {a, b} = 0..7; selector nibble bit 3 replicates the byte's sign
            a, b, c = (np.asarray(s, np.uint64) for s in src)
            pool, out = a | (b << np.uint64(32)), np.zeros(a.shape, np.uint64)
            for i in range(4):
                sel = (c >> np.uint64(4 * i)) & np.uint64(15)
                byte = (pool >> (np.uint64(8) * (sel & np.uint64(7)))) & np.uint64(0xFF)
                byte = np.where(sel & np.uint64(8), np.where(byte & np.uint64(0x80), 0xFF, 0), byte)
                out |= byte.astype(np.uint64) << np.uint64(8 * i)
            regs[d] = out.astype(np.uint32)
        else:
            raise AssertionError(f"the emulator does not know {op}")
    return regs


def test_fold_ptx_equals_the_portable_conversion(device):
    """FOLD_PTX, emulated instruction by instruction, gives the portable conversion's bytes (which the test above
    proves exact) for every code at every position and rel."""
    words, rel, _ = _all_codes_and_rels()
    d = ((rel[:, :1] + mxfp4_fold.FOLD_TABLE_BIAS.value) << 3).astype(np.uint32)
    lo = d * np.uint32(0x01010100) + np.uint32(0x0C080000)
    hi = d * np.uint32(0x01010101) + np.uint32(0x1C181410)
    regs = _emulate_ptx(mxfp4_fold.FOLD_PTX.value, {"$2": words.view(np.uint32), "$3": np.broadcast_to(lo, words.shape),
                                            "$4": np.broadcast_to(hi, words.shape)})
    out_words = np.stack([regs["$0"], regs["$1"]], axis=-1).reshape(words.shape[0], -1)   # natural order
    np.testing.assert_array_equal(out_words.view(np.uint8).reshape(words.shape[0], -1),
                                  _fold(words, rel, mxfp4_fold.MX_FOLD_TL, device))


def test_split_fold_ptx_equals_the_portable_conversion(device):
    """FOLD_BYTES_PTX, emulated, gives _fold_split's portable bytes (split K order) for every
    code at every position and rel; the portable split fold holds the natural fold's bytes, reordered."""
    words, rel, _ = _all_codes_and_rels()
    d = ((rel[:, :1] + mxfp4_fold.FOLD_TABLE_BIAS.value) << 3).astype(np.uint32)              # one block's d per row
    dx = np.broadcast_to(d * np.uint32(0x01010101), words.shape)
    natural = _fold(words, rel, mxfp4_fold.MX_FOLD_TL, device).reshape(words.shape[0], -1, 2, 4)   # [R, W, half, 4]
    want = [natural[:, :, 0].reshape(words.shape[0], -1), natural[:, :, 1].reshape(words.shape[0], -1)]
    byte_regs = _emulate_ptx(mxfp4_fold.FOLD_BYTES_PTX.value, {"$2": words.view(np.uint32), "$3": dx})
    got = _fold_split_probe(words, rel, device)
    for half, reg in enumerate(("$0", "$1")):
        np.testing.assert_array_equal(got[half], want[half])
        np.testing.assert_array_equal(byte_regs[reg].view(np.uint8).reshape(words.shape[0], -1), want[half])


@triton.jit
def _fold_split_probe_kernel(words_ptr, rel_ptr, out_ptr, R: tl.constexpr, W: tl.constexpr):
    r = tl.arange(0, R)
    codes = tl.load(words_ptr.to(tl.pointer_type(tl.uint8)) + r[:, None] * (4 * W) + tl.arange(0, 4 * W)[None, :])
    rel = tl.load(rel_ptr + r[:, None] * (W // 4) + tl.arange(0, W // 4)[None, :])
    first, second = mxfp4_fold.fold_split(codes, mxfp4_fold.d8_broadcast(rel, 4 * W), mxfp4_fold.MX_FOLD_TL)
    cols = r[:, None] * (4 * W) + tl.arange(0, 4 * W)[None, :]
    tl.store(out_ptr + cols, first)
    tl.store(out_ptr + R * 4 * W + cols, second)


def _fold_split_probe(words: np.ndarray, rel: np.ndarray, device) -> np.ndarray:
    """mxfp4_fold.fold_split (portable) on the codes of int32 words [R, W] with rel [R, W/4] -> uint8 [2, R, 4W]."""
    out = torch.empty((2, words.shape[0], 4 * words.shape[1]), dtype=torch.uint8, device=device)
    _fold_split_probe_kernel[(1,)](torch.from_numpy(words).to(device), torch.from_numpy(rel).to(device), out,
                                   R=words.shape[0], W=words.shape[1])
    return out.cpu().numpy()


# ============================================================================================ declarations, errors
def test_declared_precision():
    assert km.declared_precision("fp8", 128, Target.NVIDIA) == (128, 2.0 ** -12)   # no promotion
    assert km.declared_precision("mxfp4", 64, Target.NVIDIA) == (64, 2.0 ** -12)
    assert km.declared_precision("mxfp4", 64, Target.NVIDIA, "fold") == (64, 2.0 ** -12)
    assert km.declared_precision("mxfp4", 128, Target.AMD) == (128, 2.0 ** -24)
    for target in (Target.AMD, Target.INTERPRETER):
        assert km.declared_precision("fp8", 256, target) == (256, 2.0 ** -24)
        if target in km.PATH_TARGETS["dot_scaled"]:     # the interpreter from triton 3.8 on
            assert km.declared_precision("mxfp4", 32, target, "dot_scaled") == (32, 2.0 ** -24)
    assert km.declared_precision("mxfp4", 32, Target.INTERPRETER, "fold") == (32, 2.0 ** -24)
    for bad in (("fp4", 128, Target.NVIDIA), ("fp8", 128, "sm90"), ("fp8", 48, Target.NVIDIA),
                ("mxfp4", 128, Target.NVIDIA, "dot_scaled"), ("mxfp4", 128, Target.AMD, "fold"),
                ("fp8", 128, Target.AMD, "fold")):
        with pytest.raises(ValueError):
            km.declared_precision(*bad)


def test_settings_depend_on_shapes_only():
    """Tiles, and so the grid (B, programs per sequence), come from H, N, P and cap, never from context values."""
    s = km.keys_m_settings(Target.NVIDIA, "mxfp4", 32, 1, 64)
    assert (s.n_pad, s.h_pad, s.tile_pages, s.tiles, s.num_warps, s.mx_mode) == (1, 32, 1, 8, 4, mxfp4_fold.MX_FOLD_PTX)
    s = km.keys_m_settings(Target.INTERPRETER, "fp8", 3, 2, 16)     # the interpreter's tiles of 512 keys
    assert (s.n_pad, s.h_pad, s.tile_pages, s.tiles) == (2, 8, 32, 1)
    s = km.keys_m_settings(Target.AMD, "fp8", 3, 2, 16)
    assert (s.n_pad, s.h_pad, s.tile_pages, s.tiles) == (2, 8, 4, 4)
    s = km.keys_m_settings(Target.AMD, "mxfp4", 128, 1, 256, tokens_per_program=64)
    assert (s.h_pad, s.tile_pages, s.tiles, s.num_warps, s.mx_mode) == (128, 1, 1, 8, mxfp4_fold.MX_DOT_SCALED)
    # 128 query rows: 4 warps on NVIDIA (timed faster there), 8 on AMD (4 spill on gfx950)
    assert km.keys_m_settings(Target.NVIDIA, "mxfp4", 64, 2, 64).num_warps == 4
    assert km.keys_m_settings(Target.AMD, "fp8", 64, 2, 64).num_warps == 8
    # 32 query rows on AMD: 2 warps, one 32 x 32 MFMA block of the 64-key tile each (4 would repeat them)
    assert [km.keys_m_settings(Target.AMD, kv, 32, 1, 64).num_warps for kv in ("fp8", "mxfp4")] == [2, 2]
    assert km.keys_m_settings(Target.AMD, "fp8", 32, 2, 64).num_warps == 4
    assert km.keys_m_settings(Target.INTERPRETER, "fp8", 32, 1, 64).num_warps == 4
    # FP8 at 128 query columns of at least 2 tokens: two MMAs of whole tokens on NVIDIA and the interpreter
    halves = {(target, kv_dtype, heads, next_n): km.keys_m_settings(target, kv_dtype, heads, next_n, 64).fp8_halves
              for target in Target for kv_dtype in ("fp8", "mxfp4") for heads, next_n in ((64, 2), (24, 3), (128, 1),
                                                                                       (32, 2), (64, 4))}
    assert {key for key, on in halves.items() if on} == {
        (target, "fp8", heads, next_n) for target in (Target.NVIDIA, Target.INTERPRETER)
        for heads, next_n in ((64, 2), (24, 3))}
    # ... but one MMA on an NVIDIA grid of at most one program per SM (B1 / 32768: 128 programs of 4 tiles)
    for batch, cap, halves in ((1, 32768, False), (2, 32768, True), (8, 8192, True)):
        assert km.keys_m_settings(Target.NVIDIA, "fp8", 64, 2, 64, grid=(batch, cap, 132)).fp8_halves == halves


def test_tiles_follow_the_grid_on_nvidia():
    """With (batch, cap, SMs), NVIDIA's keys per program are the most of GRID_TOKENS_PER_PROGRAM whose grid keeps
    WAVE_PROGRAMS_PER_SM programs per SM (else the fewest), at any number of query columns; elsewhere, with
    tokens_per_program, or for a call of shapes only, the grid is ignored. The H200 winners (132 SMs, page 64):
    B64 / 8192 keys FP8 8 tiles, MXFP4 16; B8 / 32768 MXFP4 8; 128 query columns at B1 / 8192 4 tiles."""
    def tiles(kv_dtype, batch, cap, target=Target.NVIDIA, heads=32, next_n=1, page=64, **kw):
        return km.keys_m_settings(target, kv_dtype, heads, next_n, page, grid=(batch, cap, 132), **kw).tiles

    assert (tiles("fp8", 64, 8192), tiles("mxfp4", 64, 8192), tiles("mxfp4", 8, 32768)) == (8, 16, 8)
    for kv_dtype in ("fp8", "mxfp4"):
        wave = km.WAVE_PROGRAMS_PER_SM[Target.NVIDIA, kv_dtype] * 132
        for page in (16, 64, 256):
            keys = max(64, page)
            choices = sorted({t // keys for t in km.GRID_TOKENS_PER_PROGRAM})
            for batch in (1, 8, 64, 256, 4096):
                for cap in (1, 2048, 8192, 131072):
                    t = tiles(kv_dtype, batch, cap, page=page)
                    assert t in choices
                    programs = batch * -(-cap // (keys * t))
                    assert programs >= wave or t == choices[0]
                    bigger = [c for c in choices if c > t]
                    assert not bigger or batch * -(-cap // (keys * bigger[0])) < wave
                    assert tiles(kv_dtype, 2 * batch, cap, page=page) >= t      # more rows: never shorter programs
        default = km.keys_m_settings(Target.NVIDIA, kv_dtype, 32, 1, 64).tiles
        assert tiles(kv_dtype, 1, 2048) < default < tiles(kv_dtype, 4096, 131072)
        assert tiles(kv_dtype, 256, 131072, tokens_per_program=256) == 4
        for wide in ({"heads": 64}, {"next_n": 2}, {"heads": 64, "next_n": 2}):     # more query columns: same rule
            for batch, cap in ((1, 2048), (64, 8192), (4096, 131072)):
                assert tiles(kv_dtype, batch, cap, **wide) == tiles(kv_dtype, batch, cap)
        for target in (Target.AMD, Target.INTERPRETER):
            assert tiles(kv_dtype, 4096, 131072, target=target) == km.keys_m_settings(
                target, kv_dtype, 32, 1, 64).tiles
    assert tiles("fp8", 1, 8192, heads=64, next_n=2) == 4


def test_shape_only_calls_get_the_default_tiles():
    """tools.tune asks the variants for settings with a namespace of shapes (no tensors)."""
    shape = SimpleNamespace(num_heads=32, next_n=1, page_size=64)
    keys_m = [v for v in variants(Op.DECODE, target=Target.NVIDIA) if v.name.endswith("keys_m")]
    assert {v.kv_dtype for v in keys_m} == {"fp8", "mxfp4"}
    for v in keys_m:
        assert v.settings(Target.NVIDIA, shape).tiles == km.keys_m_settings(Target.NVIDIA, v.kv_dtype, 32, 1, 64).tiles


def test_wave_fits_the_compiled_occupancy():
    """WAVE_PROGRAMS_PER_SM never asks for more programs per SM than the cross-compiled sm90 kernel keeps
    resident (its occupancy under the installed triton, `mxidx isa`)."""
    from tools import isa

    for layout, kv_dtype in (("fp8", "fp8"), ("mxfp4", "mxfp4")):
        spec = km.isa_spec(layout, 128, 64, 1, 32, Target.NVIDIA)
        kernels, missing = isa.report("sm90", kernel=spec.label)
        assert missing == () and len(kernels) == 1, (kernels, missing)
        k = kernels[0]
        assert k.occupancy // k.num_warps >= km.WAVE_PROGRAMS_PER_SM[Target.NVIDIA, kv_dtype], k


def test_launcher_rejects_unknown_names():
    args = [torch.zeros(1, 1, 1, 16, dtype=torch.uint8), None, torch.zeros(64, dtype=torch.uint8),
            torch.zeros(1, 1), torch.zeros(1, dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int32),
            torch.zeros(1, 1)]
    kw = dict(cap=1, page_stride=16, num_cache_pages=1, next_n=1, num_heads=1, head_dim=32, page_size=16, tiled=False)
    with pytest.raises(ValueError, match="kv_dtype"):
        km.launch_paged_keys_m(*args, **kw, kv_dtype="fp4", target=Target.INTERPRETER)
    with pytest.raises(ValueError, match="target"):
        km.launch_paged_keys_m(*args, **kw, kv_dtype="fp8", target="sm90")
    with pytest.raises(ValueError, match="path"):
        km.launch_paged_keys_m(*args, **kw, kv_dtype="mxfp4", target=Target.NVIDIA, path="dot_scaled")


def test_wgmma_kernel_cross_compiles():
    """Under the installed triton the Gluon kernel compiles for sm_90 at every shape it reports (`mxidx isa`,
    the error flag and 2-D context lengths included): FP8 wgmma of N = N_PAD * H_PAD (two halves of 64 at 128
    columns), no failed claims (a stack frame only with the spec's reason), the programs per SM grid_choice counts
    at the launch's register cap (4 up to 64 columns, 3 at 128)."""
    from tools import isa

    kernels, missing = isa.report("sm90", kernel="paged_keys_m_wgmma")
    assert missing == () and len(kernels) == len(wgmma.ISA_SHAPES), (kernels, missing)
    for k, (_, _, next_n, heads, _) in zip(sorted(kernels, key=lambda k: k.label), sorted(
            wgmma.ISA_SHAPES, key=lambda s: wgmma.isa_spec(*s[:4], **s[4]).label)):
        columns = triton.next_power_of_2(next_n) * max(triton.next_power_of_2(heads), 16 // next_n)
        assert not k.failures, k
        n = min(columns, wgmma.MMA_COLUMNS.value)
        assert [op for op, _ in k.matrix_ops] == [f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3"], k
        assert k.occupancy // k.num_warps == wgmma.programs_per_sm(wgmma.maxnreg(columns)) == (
            4 if columns <= 64 else 3), k     # grid_choice's slots


def test_wgmma_takes_wide_grids_only_when_long():
    """Up to 64 query columns the Gluon kernel takes every grid it covers; at 128 only grids of at least
    WIDE_MIN_TILES_PER_SLOT tiles per resident program (3 per SM at WIDE_MAXNREG): on 132 SMs, 8 x 32768 keys
    (4096 tiles) and more, not 16 x 8192 (2048) nor 1 x 32768 (512)."""
    assert wgmma.takes_grid(1, 64, 32, 132) and wgmma.takes_grid(1, 64, 64, 132)
    assert wgmma.takes_grid(8, 32768, 128, 132) and wgmma.takes_grid(64, 8192, 128, 132)
    assert not wgmma.takes_grid(16, 8192, 128, 132) and not wgmma.takes_grid(1, 32768, 128, 132)
    limit = wgmma.WIDE_MIN_TILES_PER_SLOT * wgmma.programs_per_sm(wgmma.WIDE_MAXNREG) * 132
    assert wgmma.takes_grid(1, limit * 64, 128, 132) and not wgmma.takes_grid(1, limit * 64 - 64, 128, 132)


def test_wgmma_grid_choice():
    """grid_choice over batches 1..512 and contexts 64..256K on 132 SMs: a tile count of TILE_RANGE; one wave
    (every program resident) whenever a tile count gives one and it is the quickest by the model; never a grid of
    one to two waves while another choice avoids it; the least modelled time among the allowed choices."""
    sms = 132
    overhead = wgmma.PROGRAM_OVERHEAD_TILES
    for batch, context, cap in itertools.product((1, 3, 8, 17, 32, 64, 100, 128, 256, 512),
                                                 (64, 1000, 2048, 8192, 32768, 131072, 262144),
                                                 (wgmma.MAXNREG, wgmma.WIDE_MAXNREG)):
        slots = wgmma.programs_per_sm(cap) * sms
        tpr = triton.cdiv(context, 64)
        tiles = wgmma.grid_choice(batch, tpr, sms, cap)
        assert tiles in wgmma.TILE_RANGE

        def programs(t):
            return batch * triton.cdiv(tpr, t)

        def time(t):
            waves = programs(t) / slots
            return t + overhead if waves <= 1 else (batch * tpr + programs(t) * overhead) / slots

        allowed = [t for t in wgmma.TILE_RANGE if not 1 < programs(t) / slots < 2]
        assert tiles in (allowed or wgmma.TILE_RANGE), (batch, context, tiles)
        assert all(time(t) >= time(tiles) for t in (allowed or wgmma.TILE_RANGE)), (batch, context, tiles)
