"""Quantizers and the paged K-cache writer (DESIGN §1, §2, §5): launchers; the kernels are in hw/_quant_details.

All outputs are byte-exact against sim/ (sim.mxfp4.quantize, sim.fp8.quantize, sim.layout.write_tokens) for the
canonical writer: E8M0 scales by the chosen rule with min scale byte 1, elements round-to-nearest-even, FP8
per-row scales 2^k. Launchers check arguments on the host only (no device sync: legal in CUDA-graph capture) and
raise ValueError naming the argument; the writer's opt-in validate mode (validate=True or MXIDX_VALIDATE=1) also
checks slot_mapping's values, with a device sync.
"""
from __future__ import annotations

import torch
import triton

from ._quant_details import (
    BLOCK_T,
    Q_MXFP4_WIDE_BLOCK_T,
    Q_MXFP4_WIDE_MAX_D,
    Q_MXFP4_WIDE_ROWS,
    QUANT_INTERPRETER_BLOCK_T,
    QUANT_WARPS,
    codecs,
)
from ._quant_details.kernels import (
    k_quant_cache_fp8_kernel,
    k_quant_cache_mxfp4_kernel,
    q_quant_fp8_kernel,
    q_quant_mxfp4_kernel,
)
from .checks import (
    FP8_DTYPE,
    MX_BLOCK,
    check_error_flag,
    check_int32_extent,
    check_kernel_device,
    check_same_device,
    check_tensor,
    kernels_interpreted,
    validate_requested,
)
from .layout import check_cache_view, check_head_dim
from .targets import Target, nvidia_capability, target_of

INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
HW_E4M3_MIN_CAPABILITY = (8, 9)     # the first NVIDIA GPUs with an E4M3 conversion instruction
SCALE_RULE_IDS = {  # DESIGN §1 scale rules -> the kernels' constexpr ids
    "floor": codecs.RULE_FLOOR.value,
    "rceil": codecs.RULE_RCEIL.value,
    "even": codecs.RULE_EVEN.value,
    "ceil": codecs.RULE_CEIL.value,
}
CANONICAL_SCALE_RULE = "rceil"
COLUMN_OFFSETS = "column offsets (element index * stride(-1))"   # the kernels' one 32-bit input offset



def _rows_per_program(q_mxfp4_rows: torch.Tensor | None = None) -> int:
    """BLOCK_T of these kernels: many more rows per program in the CPU interpreter (it pays per operation). For the
    MXFP4 q quantizer's rows `q_mxfp4_rows` (2-D, elements of a row `stride(1)` apart), Q_MXFP4_WIDE_BLOCK_T from
    Q_MXFP4_WIDE_ROWS rows of at most Q_MXFP4_WIDE_MAX_D unit-stride elements: the launches where it was measured
    faster; BLOCK_T otherwise."""
    if kernels_interpreted(q_quant_mxfp4_kernel):
        return QUANT_INTERPRETER_BLOCK_T
    wide = (q_mxfp4_rows is not None and q_mxfp4_rows.shape[0] >= Q_MXFP4_WIDE_ROWS
            and q_mxfp4_rows.shape[1] <= Q_MXFP4_WIDE_MAX_D and q_mxfp4_rows.stride(1) == 1)
    return Q_MXFP4_WIDE_BLOCK_T if wide else BLOCK_T


def _hw_e4m3(device: torch.device, kernel) -> bool:
    """HW_E4M3 of the FP8 kernels: the hardware E4M3 conversion on NVIDIA GPUs from HW_E4M3_MIN_CAPABILITY, the
    integer encoder elsewhere (the interpreter, AMD, older GPUs)."""
    return target_of(device, kernel) is Target.NVIDIA and nvidia_capability(device) >= HW_E4M3_MIN_CAPABILITY


def _scale_rule_id(scale_rule) -> int:
    rule = getattr(scale_rule, "value", scale_rule)  # accepts sim.formats.ScaleRule members too
    if not isinstance(rule, str) or rule not in SCALE_RULE_IDS:
        raise ValueError(f"scale_rule must be one of {tuple(SCALE_RULE_IDS)}, got {scale_rule!r}")
    return SCALE_RULE_IDS[rule]


def _rows_view(name: str, x: torch.Tensor) -> torch.Tensor:
    """[..., H, D] -> a [R, D] view (no copy). ValueError if the dtype is not bf16/fp16/fp32, the leading dims cannot
    be merged, D is not a DESIGN head dim, or the 32-bit column offsets (d * stride(-1)) would wrap."""
    check_tensor(name, x, dtypes=INPUT_DTYPES)
    if x.dim() < 2:
        raise ValueError(f"{name} must be [..., H, D] (at least 2-D), got shape {list(x.shape)}")
    try:
        rows = x.view(-1, x.shape[-1])
    except RuntimeError:
        raise ValueError(f"{name}: the leading dims of a [..., H, D] tensor must be mergeable into rows without a "
                         f"copy (call .contiguous()), got strides {x.stride()}") from None
    check_head_dim(f"{name} (last dim)", rows.shape[1], None)
    check_int32_extent(name, rows, (1,), COLUMN_OFFSETS)
    return rows


def _validate_slots(slot_mapping: torch.Tensor, num_slots: int) -> None:
    """Validate mode (device syncs): every slot is negative (skip) or below num_slots = num_pages * P."""
    past = slot_mapping >= num_slots
    if bool(past.any()):
        i = int(torch.nonzero(past)[0, 0])
        raise ValueError(f"slot_mapping[{i}] = {int(slot_mapping[i])} is past the cache's num_pages * P = "
                         f"{num_slots} slots; pass a slot below {num_slots}, or a negative one to skip the token")


def indexer_k_quant_and_cache(k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                              kv_dtype: str = "fp8", layout: str | None = None,
                              scale_rule: str = CANONICAL_SCALE_RULE, *, validate: bool = False,
                              error_flag: torch.Tensor | None = None) -> None:
    """Quantize K rows and write each into its cache slot, in place (vLLM's indexer_k_quant_and_cache).

    k:            [T, D] bf16/fp16/fp32, any strides ((D - 1) * stride(1) < 2^31: column offsets are 32-bit);
                  D a multiple of 32 in 32..256 (128 or 256 for mxfp4_tiled).
    kv_cache:     uint8 [num_pages, P, 1, bytes_per_token] view (hw/layout.py): stride(0) is the page stride S
                  (multiple of 16, >= P * bytes_per_token), any view offset that is a multiple of 16.
    slot_mapping: int64 [T], any stride. Token i goes to page slot // P, token slot % P. A negative slot skips the
                  token. A slot >= num_pages * P is invalid: validate mode rejects it; the hot path does not read
                  slot values on the host (that would need a device sync) and skips it (never written outside the
                  view). Slots should be distinct: when one repeats, which of its tokens lands is unspecified
                  (sim.layout.write_tokens keeps the last).
    kv_dtype:     "fp8" (bytes_per_token D + 4) or "mxfp4" (D/2 + D/32).
    layout:       None (the kv_dtype's planar layout), "fp8", "mxfp4" or "mxfp4_tiled" (DESIGN §2).
    scale_rule:   mxfp4 E8M0 rule "rceil" (canonical), "floor", "even" or "ceil"; fp8 takes only the default
                  (its scale is always the smallest 2^k with 448 * 2^k >= max(amax, 1e-4)).
    validate:     keyword-only. True (or MXIDX_VALIDATE=1) checks, with a device sync, that no slot is >= num_pages
                  * P (ValueError naming the first one); not allowed during CUDA-graph capture.
    error_flag:   keyword-only; None or an int32 [4] flag (hw.checks.new_error_flag): a slot >= num_pages * P is
                  reported there without a sync (ErrorKind.SLOT: the token and its slot, saturated to int32).

    Page bytes written per token (everything else in the pool is left untouched):
      fp8:          values e4m3fn at t*D + d; fp32 scale as 4 little-endian bytes at P*D + 4t.
                    A row with a NaN/Inf: values 0x7F, scale NaN.
      mxfp4:        code byte j (element 2j low nibble, 2j+1 high nibble) at t*D/2 + j; E8M0 byte g at
                    P*D/2 + t*D/32 + g. A block with a NaN/Inf: byte 255, codes 0; an all-zero block: byte 1.
      mxfp4_tiled:  code byte j at (j//16)*16P + 16t + j%16; scale byte g at P*D/2 + g*P + (t%(P/4))*4 + t//(P/4).
    """
    check_tensor("k", k, dtypes=INPUT_DTYPES, ndim=2)
    num_tokens, head_dim = k.shape
    view = check_cache_view("kv_cache", kv_cache, kv_dtype, head_dim, layout)
    check_tensor("slot_mapping", slot_mapping, dtypes=torch.int64, shape=(num_tokens,))
    device = check_same_device(k=k, kv_cache=kv_cache, slot_mapping=slot_mapping)
    check_int32_extent("k", k, (1,), COLUMN_OFFSETS)
    check_kernel_device("k", device, k_quant_cache_mxfp4_kernel)
    rule = _scale_rule_id(scale_rule)
    if view.kv_dtype == "fp8" and rule != SCALE_RULE_IDS[CANONICAL_SCALE_RULE]:
        raise ValueError(f"scale_rule applies to mxfp4 only; fp8 K scales have one definition (leave scale_rule "
                         f"at {CANONICAL_SCALE_RULE!r}), got {scale_rule!r}")
    num_slots = view.num_pages * view.page_size
    error_flag = check_error_flag(error_flag, device)
    if validate_requested(validate):
        _validate_slots(slot_mapping, num_slots)
    if num_tokens == 0:
        return
    block_t = _rows_per_program()
    grid = (triton.cdiv(num_tokens, block_t),)
    common = (k, kv_cache, slot_mapping, slot_mapping if error_flag is None else error_flag, num_tokens, num_slots,
              view.page_stride, *k.stride(), slot_mapping.stride(0))
    d_pad = triton.next_power_of_2(head_dim)
    if view.kv_dtype == "fp8":
        k_quant_cache_fp8_kernel[grid](*common, D=head_dim, D_PAD=d_pad, P=view.page_size, BLOCK_T=block_t,
                                       HAS_FLAG=error_flag is not None,
                                       HW_E4M3=_hw_e4m3(device, k_quant_cache_fp8_kernel), num_warps=QUANT_WARPS)
    else:
        k_quant_cache_mxfp4_kernel[grid](*common, D=head_dim, D_PAD=d_pad, P=view.page_size,
                                         TILED=view.layout == "mxfp4_tiled", RULE=rule, BLOCK_T=block_t,
                                         HAS_FLAG=error_flag is not None, num_warps=QUANT_WARPS)


def quantize_q_mxfp4(q: torch.Tensor, scale_rule: str = CANONICAL_SCALE_RULE) -> tuple[torch.Tensor, torch.Tensor]:
    """q [..., H, D] bf16/fp16/fp32 -> (codes uint8 [..., H, D/2], scales uint8 [..., H, D/32]), both contiguous.

    q: D a multiple of 32 in 32..256, any strides whose leading dims merge into rows without a copy. Code byte j of
    a row holds element 2j in its low nibble and 2j + 1 in its high nibble; scale byte g is the E8M0
    exponent (bias 127) of elements 32g .. 32g + 31 under `scale_rule` (see indexer_k_quant_and_cache).
    """
    rows = _rows_view("q", q)
    head_dim = rows.shape[1]
    rule = _scale_rule_id(scale_rule)
    check_kernel_device("q", q.device, q_quant_mxfp4_kernel)
    codes = torch.empty(*q.shape[:-1], head_dim // 2, dtype=torch.uint8, device=q.device)
    scales = torch.empty(*q.shape[:-1], head_dim // MX_BLOCK, dtype=torch.uint8, device=q.device)
    if rows.shape[0]:
        block_t = _rows_per_program(rows)
        q_quant_mxfp4_kernel[(triton.cdiv(rows.shape[0], block_t),)](
            rows, codes, scales, rows.shape[0], *rows.stride(),
            D=head_dim, D_PAD=triton.next_power_of_2(head_dim), RULE=rule, BLOCK_T=block_t,
            num_warps=QUANT_WARPS)
    return codes, scales


def quantize_q_fp8(q: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [..., H, D] bf16/fp16/fp32, weights [..., H] bf16/fp16/fp32 -> (values float8_e4m3fn [..., H, D],
    weights float32 [..., H]), both contiguous.

    q: D a multiple of 32 in 32..256, any strides whose leading dims merge into rows without a copy; weights: the
    same leading shape, mergeable likewise. Each (token, head) row gets scale 2^k, the smallest with
    448 * 2^k >= max(amax, 1e-4); values are q / 2^k rounded to nearest even and saturated to +-448, and the scale
    is folded into the returned weights (weights * 2^k), as the FP8 scorer expects (DESIGN §8). A row with a
    NaN/Inf: values 0x7F, weight NaN.
    """
    rows = _rows_view("q", q)
    head_dim = rows.shape[1]
    check_tensor("weights", weights, dtypes=INPUT_DTYPES, shape=tuple(q.shape[:-1]))
    check_same_device(q=q, weights=weights)
    try:
        w_rows = weights.view(-1)
    except RuntimeError:
        raise ValueError(f"weights must be viewable as one row per (token, head) without a copy (call "
                         f".contiguous()), got strides {weights.stride()}") from None
    check_kernel_device("q", q.device, q_quant_fp8_kernel)
    values = torch.empty(q.shape, dtype=torch.uint8, device=q.device)
    folded = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    if rows.shape[0]:
        block_t = _rows_per_program()
        q_quant_fp8_kernel[(triton.cdiv(rows.shape[0], block_t),)](
            rows, w_rows, values, folded, rows.shape[0], *rows.stride(), w_rows.stride(0),
            D=head_dim, D_PAD=triton.next_power_of_2(head_dim), BLOCK_T=block_t,
            HW_E4M3=_hw_e4m3(q.device, q_quant_fp8_kernel), num_warps=QUANT_WARPS)
    return values.view(FP8_DTYPE), folded
