"""The prefill scorer variants of prefill.py: query rows (tokens x heads) on the MMA's M axis, keys on N.

One kernel, three variants by the q.k path (scoring.py): "fp8", and for MXFP4 "mxfp4_dot_scaled" and
"mxfp4_unpack". Settings per target were chosen by `python -m tools.tune` (NVIDIA, the
H200: docs/perf/h200-bench.md); AMD takes the tiles that compile for gfx950 without scratch; the interpreter
takes tiles as large as memory comfortably allows, since it pays per Triton operation, not per element.
"""
from __future__ import annotations

import dataclasses

import triton

from ..isa_spec import CompileSpec
from ..targets import Op, Target, Variant
from .calls import PrefillCall
from .common import (
    ALL_TARGETS,
    FP8_PROMOTE_K,
    MMA_MIN_ROWS,
    block_sum_precision,
    dot_scaled_precision,
    dot_scaled_targets,
    fp8_precision,
    head_pad,
)
from .prefill import KV_FP8, KV_MXFP4, prefill_logits_kernel
from .scoring import MX_DOT_SCALED, MX_UNPACK

KEYS_PER_PROGRAM = 4096   # keys one program walks (a multiple of every block_n)
ISA_HEADS = 32            # the reference models' indexer head count, for the cross-compile specs


@dataclasses.dataclass(frozen=True)
class PrefillSettings:
    """Constexprs and launch options of prefill_logits_kernel."""

    h_pad: int                    # heads padded to a power of two
    block_s: int                  # query tokens per program (block_s * h_pad MMA rows)
    block_n: int                  # keys per step
    keys_per_program: int
    num_warps: int
    num_stages: int | None = None  # None: the backend's default


#: MMA rows (query tokens x padded heads) and key steps per target and q.k path. NVIDIA: 128 x 128 x 4 warps beat
#: the scratch-free 64 x 64 x 8 on the H200 although they compile with a stack frame (docs/perf/h200-tune.json);
#: the unpack path spills at 128 rows and takes 64.
_TILES = {  # target -> (rows per path, block_n, num_warps)
    Target.NVIDIA: ({"fp8": 128, "dot_scaled": 128, "unpack": 64}, 128, 4),
    Target.AMD: ({"fp8": 64, "dot_scaled": 64, "unpack": 64}, 64, 8),
    Target.INTERPRETER: ({"fp8": 1024, "dot_scaled": 1024, "unpack": 1024}, 256, 4),
}
_SCRATCH_OK = ("timed on the H200 (tools.tune): these tiles, stack frame and all, beat the scratch-free "
               "64 rows x 64 keys x 8 warps by 1.8x to 3.3x")


def _settings_for(path: str, target: Target, num_heads: int) -> PrefillSettings:
    rows, block_n, warps = _TILES[target]
    h_pad = head_pad(num_heads, 1, MMA_MIN_ROWS)
    # below 32-key steps Triton 3.6-3.9 cannot lower tl.dot_scaled on sm_90 with 8 warps (each warpgroup would own
    # fewer than 16 columns of a 64-row tile): at most 4 warps there
    return PrefillSettings(h_pad=h_pad, block_s=max(1, rows[path] // h_pad), block_n=block_n,
                           keys_per_program=KEYS_PER_PROGRAM, num_warps=warps if block_n >= 32 else min(warps, 4))


def _launcher(kv_dtype: str, mx_path):
    def launch(call: PrefillCall, s: PrefillSettings) -> None:
        grid = (triton.cdiv(call.num_q, s.block_s), triton.cdiv(call.num_k, s.keys_per_program))
        options = {"num_warps": s.num_warps} | ({} if s.num_stages is None else {"num_stages": s.num_stages})
        prefill_logits_kernel[grid](
            call.q_v, call.q_s, call.k_v, call.k_s, call.weights, call.ks, call.ke, call.out,
            call.out if call.error_flag is None else call.error_flag, call.num_q, call.num_k,
            call.q_v.stride(0), call.q_v.stride(1), call.q_s.stride(0), call.q_s.stride(1),
            call.k_v.stride(0), call.k_s.stride(0), call.weights.stride(0), call.out.stride(0),
            H=call.num_heads, H_PAD=s.h_pad, D=call.head_dim, BLOCK_S=s.block_s, BLOCK_N=s.block_n,
            KEYS_PER_PROGRAM=s.keys_per_program, KV_FORMAT=KV_MXFP4 if kv_dtype == "mxfp4" else KV_FP8,
            MX_PATH=mx_path, PROMOTE_K=FP8_PROMOTE_K, CLEAN=call.clean, HAS_FLAG=call.error_flag is not None,
            **options)
    return launch


def _spec(kv_dtype: str, path: str, mx_path, head_dim: int, target: Target) -> CompileSpec:
    mx = kv_dtype == "mxfp4"
    s = _settings_for(path, target, ISA_HEADS)
    return CompileSpec(
        label=f"prefill_logits/{kv_dtype}/{'mma' if not mx else path}/D{head_dim}", fn=prefill_logits_kernel,
        types={"q_v_ptr": "*u8", "q_s_ptr": "*u8", "k_v_ptr": "*u8", "k_s_ptr": "*u8" if mx else "*fp32",
               "w_ptr": "*fp32", "ks_ptr": "*i32", "ke_ptr": "*i32", "out_ptr": "*fp32", "flag_ptr": "*i32"},
        constexprs={"H": ISA_HEADS, "H_PAD": s.h_pad, "D": head_dim, "BLOCK_S": s.block_s, "BLOCK_N": s.block_n,
                    "KEYS_PER_PROGRAM": s.keys_per_program, "KV_FORMAT": (KV_MXFP4 if mx else KV_FP8).value,
                    "MX_PATH": mx_path.value, "PROMOTE_K": FP8_PROMOTE_K, "CLEAN": True,
                    "HAS_FLAG": False},
        num_warps=s.num_warps, targets=(target.isa_target,),
        scaled_mfma=mx and mx_path == MX_DOT_SCALED and head_dim >= 64,
        scratch_ok=_SCRATCH_OK if target is Target.NVIDIA else "", key_tile=(s.block_n, s.block_s * s.h_pad))


def _variant(name: str, kv_dtype: str, path: str, mx_path, targets, precision, head_dims, summary: str) -> Variant:
    compiled = [t for t in (Target.AMD, Target.NVIDIA) if t in targets]
    return Variant(
        name=name, op=Op.PREFILL, kv_dtype=kv_dtype, targets=frozenset(targets),
        settings=lambda target, call: _settings_for(path, target, call.num_heads),
        launch=_launcher(kv_dtype, mx_path), precision=precision,
        isa_specs=lambda: tuple(_spec(kv_dtype, path, mx_path, d, t) for d in head_dims for t in compiled),
        summary=summary)


#: the default nowhere (hw.variants.DEFAULTS)
FP8 = _variant("fp8", "fp8", "fp8", MX_DOT_SCALED, ALL_TARGETS, fp8_precision, (128,),
               "FP8 e4m3 q.k on the MMA, the key scale after it")
MXFP4_DOT_SCALED = _variant(
    "mxfp4_dot_scaled", "mxfp4", "dot_scaled", MX_DOT_SCALED, dot_scaled_targets(),
    dot_scaled_precision,
    (128, 64, 32), "tl.dot_scaled e2m1 x e2m1: native scaled MFMA on gfx950, Triton's bf16 decomposition on NVIDIA")
MXFP4_UNPACK = _variant(
    "mxfp4_unpack", "mxfp4", "unpack", MX_UNPACK, ALL_TARGETS, block_sum_precision, (),
    "exact e2m1 -> e4m3 unpack per 32-element block, K = 32 FP8 dots, E8M0 scales in fp32")
