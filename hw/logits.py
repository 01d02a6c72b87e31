"""Indexer scorer launchers (DESIGN §4, §5, §8): ragged prefill logits, the decode schedule, paged decode logits.

    logits[r, j] = sum_h weights[r, h] * relu(q[r, h, :] . k[j, :])      (relu keeps NaN)

q is a (values, scales) pair:
  FP8    (float8_e4m3fn [..., H, D], None); the per-(token, head) q scale is folded into `weights`.
  MXFP4  (uint8 [..., H, D/2] codes, even element d in the low nibble, uint8 [..., H, D/32] E8M0 scales); with
         D = 128 the scales may be int32 [..., H, 1] (the same 4 bytes, little-endian: block g in byte g).
The K format follows q's: FP8 keys carry one fp32 scale per token, MXFP4 keys one E8M0 byte per 32 elements.

Each launcher checks its arguments on the host, then runs a kernel variant of hw.variants: `variant="name"`
picks one (ValueError if it does not run here or does not cover the call: it never hands the call to another
kernel), else the target's default for the call. declared_precision() gives the (n, u) of DESIGN §4's bound,
gamma = (n + H + 2) u, for the variant a launch takes.

Validate mode (validate=True or MXIDX_VALIDATE=1, hw.checks.validate_requested): both scorers then check, with
device syncs, the values their hot paths bound and raise ValueError; not allowed during CUDA-graph capture.
Without it, the kernels bound every device-provided index themselves (nothing is read outside the tensors given)
and report what they met to an optional `error_flag=` (hw.checks.new_error_flag; read it with
hw.checks.raise_if_flagged where you sync anyway): the same cases validate mode raises on.
"""
from __future__ import annotations

import torch

from . import checks as _checks
from ._logits_details.calls import DecodeCall, PrefillCall
from ._logits_details.common import INTERPRETER_DOT_SCALED_TRITON
from ._logits_details.paged_keys_m import paged_keys_m_kernel
from ._logits_details.prefill_keys_m import fp8_tile_scores as fp8_tile_scores  # pieces of the prefill key loop
from ._logits_details.prefill_keys_m import key_span as key_span  # for kernels built on it outside hw (probes)
from ._logits_details.prefill_keys_m import prefill_keys_m_kernel
from ._logits_details.schedule import paged_schedule
from .checks import (
    FP8_DTYPE,
    INT32_MAX,
    MX_BLOCK,
    check_error_flag,
    check_flag,
    check_int,
    check_int32_extent,
    check_kernel_device,
    check_tensor,
    validate_requested,
)
from .layout import KV_DTYPES, check_cache_view, check_pages_in_span, check_scorer_head_dim, check_scorer_heads
from .targets import Op, Target, target_of
from .variants import select

__all__ = ["INTERPRETER_DOT_SCALED_TRITON", "declared_precision", "fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits",
           "get_paged_mqa_logits_metadata", "kernels_interpreted", "scorer_target"]

DEEPGEMM_PACKED_HEAD_DIM = 128        # int32-packed MXFP4 scales: one int32 holds the 4 scale bytes of D = 128
SCORER_OPS = (Op.PREFILL, Op.DECODE)


def scorer_target(device) -> Target:
    """The hw.targets.Target the scorers run on for tensors on `device`."""
    return target_of(device, prefill_keys_m_kernel)


def declared_precision(op: Op, kv_dtype: str, head_dim: int, device, variant: str | None = None) -> tuple[int, float]:
    """(n, u) of DESIGN §4's bound for a launch of scorer `op` (Op.PREFILL | Op.DECODE) with `kv_dtype` inputs of
    head dim D on `device`, by the variant the launch takes (`variant`, else the default). ValueError for an
    unknown op, format or variant, or a head dim that is not a multiple of 32."""
    if op not in SCORER_OPS:
        raise ValueError(f"op must be one of {[o.name for o in SCORER_OPS]}, got {op!r}")
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")
    check_int("head_dim", head_dim, 32)
    if head_dim % 32:
        raise ValueError(f"head_dim must be a multiple of 32, got {head_dim}")
    target = scorer_target(device)
    return select(op, target, kv_dtype, variant).precision(head_dim, target)


def kernels_interpreted() -> bool:
    """True when this module's kernels were defined under TRITON_INTERPRET=1 (they then run on CPU tensors),
    whatever the environment says now."""
    return _checks.kernels_interpreted(prefill_keys_m_kernel)


# ============================================================================================ argument parsing
def _check_logits_dtype(logits_dtype) -> None:
    if logits_dtype is not torch.float32:
        raise ValueError(f"logits_dtype must be torch.float32 (the only output dtype supported), got {logits_dtype!r}")


def _split_pair(name: str, pair, ndim: int, device=None):
    """Parse a DESIGN §8 (values, scales) query pair whose values are `ndim`-D.

    Returns (kv_dtype, values uint8 [..., D or D/2], scales uint8 [..., D/32] or None, D, leading shape)."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise ValueError(f"{name} must be a (values, scales) pair, got {type(pair).__name__}")
    values, scales = pair
    check_tensor(f"{name}[0]", values, dtypes=(FP8_DTYPE, torch.uint8), ndim=ndim, device=device, contiguous=True)
    device = values.device      # the scales follow the values (q's values define the call's device)
    lead_shape = tuple(values.shape[:-1])
    check_scorer_heads(f"{name}[0]", lead_shape[-1])
    if values.dtype == FP8_DTYPE:
        if scales is not None:
            raise ValueError(f"{name}: an FP8 query carries its scale in the weights; pass (values, None)")
        head_dim = values.shape[-1]
        check_scorer_head_dim(f"{name}[0]", head_dim, "fp8")
        return "fp8", values.view(torch.uint8), None, head_dim, lead_shape
    head_dim = 2 * values.shape[-1]
    check_scorer_head_dim(f"{name}[0]", head_dim, "mxfp4")
    return "mxfp4", values, _mx_scales(f"{name}[1]", scales, lead_shape, head_dim, device), head_dim, lead_shape


def _mx_scales(name: str, scales, lead_shape: tuple, head_dim: int, device) -> torch.Tensor:
    """uint8 [*lead, D/32] E8M0 scales, or (D = 128) int32 [*lead, 1] -> viewed as its 4 bytes."""
    check_tensor(name, scales, dtypes=(torch.uint8, torch.int32), device=device, contiguous=True)
    if scales.dtype == torch.int32:
        if head_dim != DEEPGEMM_PACKED_HEAD_DIM:
            raise ValueError(f"{name}: int32-packed MXFP4 scales need D = {DEEPGEMM_PACKED_HEAD_DIM}, got D = "
                             f"{head_dim}; pass uint8 [..., D/32] scales")
        check_tensor(name, scales, shape=(*lead_shape, 1))
        return scales.view(torch.uint8)
    check_tensor(name, scales, shape=(*lead_shape, head_dim // MX_BLOCK))
    return scales


def _split_kv(kv, kv_dtype: str, head_dim: int, device):
    """Parse the prefill (values, scales) keys: FP8 (e4m3 [SK, D], fp32 [SK]) or MXFP4 (uint8 [SK, D/2],
    uint8 [SK, D/32] or int32 [SK, 1] at D = 128). Returns (values uint8, scales) with the scales' bytes."""
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise ValueError(f"kv must be a (values, scales) pair, got {type(kv).__name__}")
    values, scales = kv
    if isinstance(values, torch.Tensor) and values.dtype in (FP8_DTYPE, torch.uint8) and \
            (values.dtype == FP8_DTYPE) != (kv_dtype == "fp8"):
        raise ValueError(f"kv[0] is {values.dtype} but q is {kv_dtype}: q and kv must share a format "
                         "(FP8: float8_e4m3fn values; MXFP4: uint8 codes)")
    if kv_dtype == "fp8":
        check_tensor("kv[0]", values, dtypes=FP8_DTYPE, shape=(None, head_dim), device=device, contiguous=True)
        check_tensor("kv[1]", scales, dtypes=torch.float32, shape=(values.shape[0],), device=device,
                     contiguous=True)
        return values.view(torch.uint8), scales
    check_tensor("kv[0]", values, dtypes=torch.uint8, shape=(None, head_dim // 2), device=device, contiguous=True)
    return values, _mx_scales("kv[1]", scales, (values.shape[0],), head_dim, device)


# ============================================================================================ prefill
def _validate_ranges(ks: torch.Tensor, ke: torch.Tensor, num_k: int) -> None:
    """Validate mode of the prefill scorer: 0 <= ks[i] <= ke[i] <= SK for every row (a device sync).
    ValueError naming the argument and the first bad row with its values."""
    bad = (ks < 0) | (ks > ke) | (ke > num_k)
    if not bool(bad.any()):
        return
    i = int(torch.nonzero(bad)[0, 0])
    start, end = int(ks[i]), int(ke[i])
    what = ("cu_seq_len_k_start" if start < 0 else "cu_seq_len_k_end" if end > num_k
            else "cu_seq_len_k_start > cu_seq_len_k_end")
    raise ValueError(f"{what}: row {i} has cu_seq_len_k_start = {start}, cu_seq_len_k_end = {end}; every row needs "
                     f"0 <= cu_seq_len_k_start <= cu_seq_len_k_end <= SK = {num_k} (kv's token count)")


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                       logits_dtype=torch.float32, *, validate=False, variant: str | None = None,
                       launch_settings: dict | None = None, error_flag: torch.Tensor | None = None) -> torch.Tensor:
    """Ragged prefill logits, fp32 [S, SK].

    q: (values, scales) [S, H, ...] as in the module docstring; kv: FP8 (e4m3 [SK, D], fp32 [SK]) or MXFP4
    (uint8 [SK, D/2], uint8 [SK, D/32] or int32 [SK, 1] at D = 128), same format as q; weights fp32 [S, H];
    cu_seq_len_k_start / cu_seq_len_k_end int32 [S]: row i sees keys ks[i] <= j < ke[i] (absolute columns).
    Entries outside are -inf when clean_logits, else left unwritten. All tensors contiguous, on one device.
    max_seqlen_k > 0 (DeepGEMM's compressed output) is not supported.
    The ranges are not checked on the host (a sync); the kernels clamp them: ks < 0 acts as 0, ke > SK as SK, and
    ks >= ke is an empty row. validate=True (keyword-only; or MXIDX_VALIDATE=1) instead checks
    0 <= ks[i] <= ke[i] <= SK with a device sync and raises ValueError on the first bad row (not allowed during
    CUDA-graph capture). error_flag (keyword-only): None or an int32 [4] flag (hw.checks.new_error_flag); a row
    outside 0 <= ks <= ke <= SK is reported there (ErrorKind.RANGE) without a sync. variant (keyword-only): a
    hw.variants name of Op.PREFILL for q's format, else the target's default; launch_settings: fields of the
    variant's settings to replace (tuning, tests). Besides the output, the MXFP4 keys-on-M variant allocates
    D + 4 bytes per key of scratch (its keys folded once) for the call.
    """
    check_flag("clean_logits", clean_logits)
    validate = validate_requested(validate)
    _check_logits_dtype(logits_dtype)
    if check_int("max_seqlen_k", max_seqlen_k, 0) != 0:
        raise ValueError(f"max_seqlen_k = {max_seqlen_k!r} is not supported (only 0: the full [S, SK] output)")
    kv_dtype, q_v, q_s, head_dim, (num_q, num_heads) = _split_pair("q", q, 3)
    device = q_v.device
    k_v, k_s = _split_kv(kv, kv_dtype, head_dim, device)
    num_k = k_v.shape[0]
    check_tensor("weights", weights, dtypes=torch.float32, shape=(num_q, num_heads), device=device,
                 contiguous=True)
    for name, t in (("cu_seq_len_k_start", cu_seq_len_k_start), ("cu_seq_len_k_end", cu_seq_len_k_end)):
        check_tensor(name, t, dtypes=torch.int32, shape=(num_q,), device=device, contiguous=True)
    # The kernel forms key offsets as (int32 column) * stride; query and output rows are 64-bit.
    check_int32_extent("kv[0]", k_v, (0, 1), "key byte offsets")
    check_int32_extent("kv[1]", k_s, tuple(range(k_s.dim())), "key scale offsets")
    check_kernel_device("q[0]", device, prefill_keys_m_kernel)
    error_flag = check_error_flag(error_flag, device)
    named = None if variant is None else select(Op.PREFILL, scorer_target(device), kv_dtype, variant)  # fails early
    if validate:
        _validate_ranges(cu_seq_len_k_start, cu_seq_len_k_end, num_k)

    out = torch.empty((num_q, num_k), dtype=torch.float32, device=device)   # the grid covers every entry
    if num_q == 0 or num_k == 0:
        return out
    call = PrefillCall(q_v, q_v if q_s is None else q_s, k_v, k_s, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                       out, num_heads, head_dim, clean_logits, error_flag)    # FP8: the scale pointer is unused
    chosen = named or select(Op.PREFILL, scorer_target(device), kv_dtype, call=call)   # hw.variants.DEFAULTS
    chosen.run(call, scorer_target(device), launch_settings)
    return out


# ============================================================================================ decode
def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms) -> torch.Tensor:
    """Persistent-grid schedule of fp8_fp4_paged_mqa_logits: int32 [num_sms + 1, 2], computed on context_lens'
    device with no host sync (compute it once per decode step, reuse it in every layer; graph-capturable).

    A work item is (b, c): sequence b = a row of block_table (*not* an output row b*N + n), page c of it;
    it scores all next_n query rows of b against that page. Sequence b has cdiv(L_b, block_kv) items with
    L_b = max(0, context_lens[b]) for context_lens int32 [B] (the next_n rows of b end at position
    context_lens[b]) and L_b = max(0, max_n context_lens[b, n]) for context_lens int32 [B, next_n]; next_n itself
    does not enter. The items in (b, c) order are split evenly into num_sms runs: entry p = (b, c) of the first
    item of program p, entry num_sms = (B, 0). Empty runs (e.g. all contexts 0: every entry (B, 0)) do nothing.

    block_kv must be the page size P of the cache the scorer reads (one item = one page). num_sms is the number of
    persistent programs, not necessarily the SM count: programs run their items one after another, so several per
    SM hide the latency (integration.schedule.default_num_sms). No decode variant of hw reads the schedule (they
    size their grid from the shapes): fp8_fp4_paged_mqa_logits takes it for DeepGEMM's call form, checks its
    shape, and in validate mode its values.
    """
    check_tensor("context_lens", context_lens, dtypes=torch.int32, contiguous=True)
    if context_lens.dim() not in (1, 2) or (context_lens.dim() == 2 and context_lens.shape[1] < 1):
        raise ValueError(f"context_lens must be int32 [B] or [B, next_n] (next_n >= 1), got shape "
                         f"{list(context_lens.shape)}")
    check_int("block_kv", block_kv, 1)
    check_int("num_sms", num_sms, 1)
    return paged_schedule(context_lens, block_kv, num_sms)


def _validate_paged(kv_view, context_lens, block_table, schedule_meta, width: int) -> None:
    """Validate mode: value checks that need the data (device syncs), the cases the kernels report to an error
    flag. ValueError on the first bad entry."""
    if bool((context_lens < 0).any()):
        bad = tuple(int(i) for i in torch.nonzero(context_lens < 0)[0])
        raise ValueError(f"context_lens must be >= 0; entry {bad} is {int(context_lens[bad])}")
    expected = paged_schedule(context_lens, kv_view.page_size, schedule_meta.shape[0] - 1)
    if not torch.equal(expected, schedule_meta):
        raise ValueError("schedule_meta does not match these context_lens with block_kv = page size "
                         f"{kv_view.page_size}; recompute it with get_paged_mqa_logits_metadata(context_lens, "
                         f"{kv_view.page_size}, num_sms)")
    lengths = (context_lens if context_lens.dim() == 1 else context_lens.amax(dim=1)).to(torch.int64).clamp(0, width)
    covered = block_table.shape[1] * kv_view.page_size
    if bool((lengths > covered).any()):
        b = int(torch.nonzero(lengths > covered)[0, 0])
        raise ValueError(f"context_lens: sequence {b} sees {int(lengths[b])} columns but block_table's "
                         f"{block_table.shape[1]} pages of {kv_view.page_size} tokens cover only {covered}; widen "
                         f"block_table (the hot path returns NaN for the columns past it)")
    check_pages_in_span(block_table, lengths, kv_view)


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=torch.float32, layout=None,
                             validate=False, *, indices=None, variant: str | None = None,
                             launch_settings: dict | None = None,
                             error_flag: torch.Tensor | None = None) -> torch.Tensor:
    """Paged decode logits, fp32 [B*N, max_context_len]; row r = b*N + n.

    q: (values, scales) [B, N, H, ...] (module docstring; N = next_n >= 1); kv_cache: uint8
    [num_pages, P, 1, bytes_per_token] view (DESIGN §2, §8; its format follows q: fp8 or mxfp4, D from q;
    layout None or "mxfp4_tiled" for MXFP4); weights fp32 [B*N, H]; context_lens int32 [B] or [B, N] (DESIGN §4:
    row b*N + n sees columns j < ctx(b, n), clamped to max_context_len); block_table int32 [B, max_pages]
    (innermost stride 1); schedule_meta from get_paged_mqa_logits_metadata(context_lens, P, num_sms);
    max_context_len: Python int, the output width. Invisible entries are -inf when clean_logits, else unwritten.
    The format of kv_cache is not in its bytes: it is q's (68 bytes a token is both MXFP4 D = 128 and FP8 D = 64),
    so q must be of the cache's format.
    Hot path, without a sync: a visible column whose page has no valid block-table entry (an id outside
    [0, num_pages), or past the table: ctx > max_pages * P) is NaN and its page is never read; schedule_meta is
    checked for its shape only (the kernels do not read it; a foreign one changes nothing). error_flag
    (keyword-only): None or an int32 [4] flag (hw.checks.new_error_flag) where these cases are reported
    (ErrorKind PAGE_ID, CONTEXT_PAST_TABLE). validate=True (or MXIDX_VALIDATE=1) checks the same cases,
    context_lens >= 0 and that schedule_meta is get_paged_mqa_logits_metadata(context_lens, P, num_sms) with
    device syncs and raises ValueError instead (not allowed during CUDA-graph capture).
    indices (DeepGEMM's, keyword-only here) is not supported: anything but None is a ValueError.
    variant (keyword-only): a hw.variants name of Op.DECODE for q's format, else the target's default (a named
    variant that does not cover the call raises hw.targets.NotCovered, a ValueError, before any kernel runs);
    launch_settings: fields of the variant's settings to replace (tuning, tests).
    """
    check_flag("clean_logits", clean_logits)
    validate = validate_requested(validate)
    _check_logits_dtype(logits_dtype)
    if indices is not None:
        raise ValueError("indices is not supported (the scorer always covers every visible column); pass None")
    width = check_int("max_context_len", max_context_len, 0)
    if width > INT32_MAX:
        raise ValueError(f"max_context_len = {width} is past the int32 column indices the scorers and the top-k use "
                         f"(at most {INT32_MAX})")
    kv_dtype, q_v, q_s, head_dim, (batch, next_n, num_heads) = _split_pair("q", q, 4)
    device = q_v.device
    if next_n < 1:
        raise ValueError(f"q must have next_n = q[0].shape[1] >= 1, got {next_n}")
    view = check_cache_view("kv_cache", kv_cache, kv_dtype, head_dim, layout, device)
    check_tensor("weights", weights, dtypes=torch.float32, shape=(batch * next_n, num_heads), device=device,
                 contiguous=True)
    check_tensor("context_lens", context_lens, dtypes=torch.int32, device=device, contiguous=True)
    if context_lens.shape not in ((batch,), (batch, next_n)):
        raise ValueError(f"context_lens must be int32 [B] = [{batch}] or [B, next_n] = [{batch}, {next_n}], got "
                         f"{list(context_lens.shape)}")
    check_tensor("block_table", block_table, dtypes=torch.int32, ndim=2, shape=(batch, None), device=device)
    if block_table.stride(1) != 1:
        raise ValueError(f"block_table must have stride(1) == 1, got strides {block_table.stride()}")
    check_tensor("schedule_meta", schedule_meta, dtypes=torch.int32, ndim=2, shape=(None, 2), device=device,
                 contiguous=True)
    num_programs = schedule_meta.shape[0] - 1
    if num_programs < 1:
        raise ValueError(f"schedule_meta must be [num_sms + 1, 2] with num_sms >= 1, got "
                         f"{list(schedule_meta.shape)}")
    check_kernel_device("q[0]", device, paged_keys_m_kernel)
    error_flag = check_error_flag(error_flag, device)
    named = None if variant is None else select(Op.DECODE, scorer_target(device), kv_dtype, variant)  # fails early
    if validate:
        _validate_paged(view, context_lens, block_table, schedule_meta, width)

    out = torch.empty((batch * next_n, width), dtype=torch.float32, device=device)
    if batch == 0 or width == 0:
        return out      # no entries
    call = DecodeCall(q_v, q_v if q_s is None else q_s, kv_cache, weights, context_lens, block_table, out,
                      view.page_size, view.page_stride, view.layout == "mxfp4_tiled", next_n, num_heads, head_dim,
                      width, view.num_pages, error_flag)    # FP8: the scale pointer is unused
    chosen = named or select(Op.DECODE, scorer_target(device), kv_dtype, call=call)   # hw.variants.DEFAULTS
    # a call the named variant does not cover raises here (hw.targets.NotCovered), before any kernel runs
    settings = chosen.settings_for(call, scorer_target(device), launch_settings)
    if clean_logits:
        out.fill_(float("-inf"))
    chosen.launch(call, settings)
    return out
