"""Private kernels of hw.logits: the @triton.jit scorer bodies, the decode schedule, and their cross-compile specs
(hw/isa.py).

scoring.py        shared tile helpers (E8M0 / E2M1 decoding, MXFP4 and FP8 q.k tiles, NaN-keeping relu, head sum)
prefill.py        the ragged prefill kernel (contiguous K)
paged.py          the persistent paged decode kernel
schedule.py       the on-device (sequence, page) work split of the decode kernel (torch ops, no host sync)
launch_config.py  tile sizes, warps, MXFP4 path defaults
"""
from __future__ import annotations

from .._isa_spec import CompileSpec
from . import launch_config as cfg
from .paged import paged_logits_kernel
from .prefill import KV_FP8, KV_MXFP4, prefill_logits_kernel
from .scoring import MX_DOT_SCALED, MX_UNPACK_PTX

_MX_PATH_NAMES = {MX_DOT_SCALED.value: "dot_scaled", MX_UNPACK_PTX.value: "unpack_ptx"}
_HEADS = 32      # the reference models' indexer head count (H_PAD 32)
_TARGETS = {MX_DOT_SCALED.value: ("gfx950", "sm90"), MX_UNPACK_PTX.value: ("sm90",)}   # inline PTX: NVIDIA only


#: why the NVIDIA prefill tiles may compile with a stack frame on sm_90 (see launch_config.PREFILL)
_PREFILL_SCRATCH_OK = ("timed on the H200 (tools.tune): these tiles, stack frame and all, beat the scratch-free "
                       "64 rows x 64 keys x 8 warps by 1.8x to 3.3x")


def _prefill_spec(kv_format: str, head_dim: int, target: str, mx_path: int = MX_DOT_SCALED.value) -> CompileSpec:
    """The prefill kernel as launched on `target`: sm90 with launch_config.PREFILL["nvidia"], gfx950 with "amd"."""
    mx = kv_format == "mxfp4"
    nvidia = target == "sm90"
    backend = "nvidia" if nvidia else "amd"
    path = _MX_PATH_NAMES[mx_path] if mx else "mma"
    h_pad, block_s = cfg.prefill_tiles(_HEADS, path if mx else "fp8", backend)
    return CompileSpec(
        label=f"prefill_logits/{kv_format}/{path}/D{head_dim}", fn=prefill_logits_kernel,
        signature={"q_v_ptr": "*u8", "q_s_ptr": "*u8", "k_v_ptr": "*u8", "k_s_ptr": "*u8" if mx else "*fp32",
                   "w_ptr": "*fp32", "ks_ptr": "*i32", "ke_ptr": "*i32", "out_ptr": "*fp32", "S": "i32", "SK": "i32",
                   **{name: "i32" for name in ("stride_qv_s", "stride_qv_h", "stride_qs_s", "stride_qs_h",
                                               "stride_kv_t", "stride_ks_t", "stride_w_s", "stride_out_s")}},
        constexprs={"H": _HEADS, "H_PAD": h_pad, "D": head_dim, "BLOCK_S": block_s,
                    "BLOCK_N": cfg.prefill_settings(backend).block_n, "KEYS_PER_PROGRAM": cfg.PREFILL_KEYS_PER_PROGRAM,
                    "KV_FORMAT": (KV_MXFP4 if mx else KV_FP8).value, "MX_PATH": mx_path,
                    "PROMOTE_K": cfg.FP8_PROMOTE_K, "CLEAN": True},
        **cfg.prefill_launch_options(backend), targets=(target,),
        scaled_mfma=mx and mx_path == MX_DOT_SCALED.value and head_dim >= 64,
        scratch_ok=_PREFILL_SCRATCH_OK if nvidia else "")


def _prefill_specs(kv_format: str, head_dim: int, mx_path: int = MX_DOT_SCALED.value) -> tuple[CompileSpec, ...]:
    """One _prefill_spec per target the path runs on."""
    targets = _TARGETS[mx_path] if kv_format == "mxfp4" else ("gfx950", "sm90")
    return tuple(_prefill_spec(kv_format, head_dim, target, mx_path) for target in targets)


def _paged_spec(layout: str, head_dim: int, page_size: int, next_n: int = 1,
                mx_path: int = MX_DOT_SCALED.value, wgmma_rows: bool = False) -> CompileSpec:
    """wgmma_rows: the PAGED_MMA_MIN_ROWS = 64 variant at one page a step (see launch_config)."""
    kv_format = "fp8" if layout == "fp8" else "mxfp4"
    mx = kv_format == "mxfp4"
    n_pad, h_pad, pages_per_step = cfg.paged_tiles(_HEADS, next_n, page_size, kv_format)
    if wgmma_rows:
        h_pad, pages_per_step = cfg.head_pad(_HEADS, n_pad, 64), 1
    path = (_MX_PATH_NAMES[mx_path] if mx else "mma") + ("/M64" if wgmma_rows else "")
    pointers = ("q_v_ptr", "q_s_ptr", "cache_ptr", "w_ptr", "ctx_ptr", "bt_ptr", "sched_ptr", "out_ptr")
    return CompileSpec(
        label=f"paged_logits/{layout}/{path}/D{head_dim}/P{page_size}/N{next_n}", fn=paged_logits_kernel,
        signature={"q_v_ptr": "*u8", "q_s_ptr": "*u8", "cache_ptr": "*u8", "w_ptr": "*fp32", "ctx_ptr": "*i32",
                   "bt_ptr": "*i32", "sched_ptr": "*i32", "out_ptr": "*fp32", "cap": "i32", "page_stride": "i32",
                   **{name: "i32" for name in ("stride_qv_b", "stride_qv_n", "stride_qv_h", "stride_qs_b",
                                               "stride_qs_n", "stride_qs_h", "stride_w_r", "stride_ctx_b",
                                               "stride_bt_b", "stride_out_r")}},
        constexprs={"N": next_n, "N_PAD": n_pad, "H": _HEADS, "H_PAD": h_pad, "D": head_dim, "P": page_size,
                    "PAGES_PER_STEP": pages_per_step, "KV_FORMAT": (KV_MXFP4 if mx else KV_FP8).value,
                    "TILED": layout == "mxfp4_tiled", "CTX_2D": False, "MX_PATH": mx_path,
                    "PROMOTE_K": cfg.FP8_PROMOTE_K},
        num_warps=cfg.PAGED_NUM_WARPS, aligned=pointers + ("page_stride",),
        targets=_TARGETS[mx_path] if mx else ("gfx950", "sm90"),
        scaled_mfma=mx and mx_path == MX_DOT_SCALED.value and head_dim >= 64)


# The serving shape (D 128, P 64) of every layout and path, the small head dims (tile widths 16 / 32 bytes), a
# small page (several pages a step) and next_n = 2 (N * H MMA rows).
ISA_SPECS = (
    _paged_spec("mxfp4", 128, 64), _paged_spec("mxfp4_tiled", 128, 64), _paged_spec("mxfp4", 64, 16),
    _paged_spec("mxfp4", 32, 64), _paged_spec("mxfp4", 128, 64, next_n=2), _paged_spec("fp8", 128, 64),
    _paged_spec("fp8", 64, 16), _paged_spec("mxfp4", 128, 64, mx_path=MX_UNPACK_PTX.value),
    _paged_spec("mxfp4_tiled", 128, 64, mx_path=MX_UNPACK_PTX.value),
    *_prefill_specs("mxfp4", 128), *_prefill_specs("mxfp4", 64), *_prefill_specs("mxfp4", 32),
    *_prefill_specs("fp8", 128), *_prefill_specs("mxfp4", 128, mx_path=MX_UNPACK_PTX.value),
    _paged_spec("fp8", 128, 64, wgmma_rows=True), _paged_spec("mxfp4", 128, 64, mx_path=MX_UNPACK_PTX.value,
                                                              wgmma_rows=True),
)
