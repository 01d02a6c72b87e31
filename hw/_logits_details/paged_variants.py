"""The decode scorer variants of paged.py: the persistent paged kernel with query rows (next_n x heads) on the
MMA's M axis and a step of pages on N.

One kernel, three variants by the q.k path (scoring.py): "fp8", and for MXFP4 "mxfp4_dot_scaled" and
"mxfp4_unpack". The grid is the schedule's program count (get_paged_mqa_logits_metadata).
"""
from __future__ import annotations

import dataclasses

from ..isa_spec import CompileSpec
from ..targets import Op, Target, Variant
from .calls import DecodeCall
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
from .paged import paged_logits_kernel
from .prefill import KV_FP8, KV_MXFP4
from .scoring import MX_DOT_SCALED, MX_UNPACK

NUM_WARPS = 4
#: tokens a step scores (max(1, this // P) pages of one sequence), chosen by `python -m tools.tune` on the H200
#: (docs/perf/h200-bench.md)
TOKENS_PER_STEP = {"fp8": 128, "mxfp4": 256}
ISA_HEADS = 32


@dataclasses.dataclass(frozen=True)
class PagedSettings:
    """Constexprs and launch options of paged_logits_kernel."""

    n_pad: int             # next_n padded to a power of two
    h_pad: int             # heads padded to a power of two (n_pad * h_pad >= MMA_MIN_ROWS)
    pages_per_step: int
    num_warps: int


def paged_settings(kv_dtype: str, num_heads: int, next_n: int, page_size: int) -> PagedSettings:
    n_pad = 1 << (next_n - 1).bit_length()
    return PagedSettings(n_pad=n_pad, h_pad=head_pad(num_heads, n_pad, MMA_MIN_ROWS),
                         pages_per_step=max(1, TOKENS_PER_STEP[kv_dtype] // page_size), num_warps=NUM_WARPS)


def _launcher(kv_dtype: str, mx_path):
    def launch(call: DecodeCall, s: PagedSettings) -> None:
        c = call
        paged_logits_kernel[(c.num_programs,)](
            c.q_v, c.q_s, c.kv_cache, c.weights, c.context_lens, c.block_table, c.schedule, c.out,
            c.out if c.error_flag is None else c.error_flag,
            c.cap, c.page_stride, c.context_lens.shape[0], c.block_table.shape[1], c.num_cache_pages,
            c.q_v.stride(0), c.q_v.stride(1), c.q_v.stride(2), c.q_s.stride(0), c.q_s.stride(1), c.q_s.stride(2),
            c.weights.stride(0), c.context_lens.stride(0), c.block_table.stride(0), c.out.stride(0),
            N=c.next_n, N_PAD=s.n_pad, H=c.num_heads, H_PAD=s.h_pad, D=c.head_dim, P=c.page_size,
            PAGES_PER_STEP=s.pages_per_step, KV_FORMAT=KV_MXFP4 if kv_dtype == "mxfp4" else KV_FP8,
            TILED=c.tiled, CTX_2D=c.context_lens.dim() == 2, MX_PATH=mx_path, PROMOTE_K=FP8_PROMOTE_K,
            HAS_FLAG=c.error_flag is not None, num_warps=s.num_warps)
    return launch


def _spec(layout: str, path: str, mx_path, head_dim: int, page_size: int, next_n: int, target: Target,
          default: bool):
    """The instantiation's CompileSpec for `target`; `default`: the variant is that target's default, whose stack
    frame would fail the report (elsewhere it is listed: docs/perf/isa-sm90-triton3.6.md)."""
    kv_dtype = "fp8" if layout == "fp8" else "mxfp4"
    s = paged_settings(kv_dtype, ISA_HEADS, next_n, page_size)
    pointers = {"q_v_ptr": "*u8", "q_s_ptr": "*u8", "cache_ptr": "*u8", "w_ptr": "*fp32", "ctx_ptr": "*i32",
                "bt_ptr": "*i32", "sched_ptr": "*i32", "out_ptr": "*fp32", "flag_ptr": "*i32"}
    return CompileSpec(
        label=f"paged_logits/{layout}/{'mma' if kv_dtype == 'fp8' else path}/D{head_dim}/P{page_size}/N{next_n}",
        fn=paged_logits_kernel, types=pointers,
        constexprs={"N": next_n, "N_PAD": s.n_pad, "H": ISA_HEADS, "H_PAD": s.h_pad, "D": head_dim, "P": page_size,
                    "PAGES_PER_STEP": s.pages_per_step, "KV_FORMAT": (KV_MXFP4 if kv_dtype == "mxfp4"
                                                                      else KV_FP8).value,
                    "TILED": layout == "mxfp4_tiled", "CTX_2D": False, "MX_PATH": mx_path.value,
                    "PROMOTE_K": FP8_PROMOTE_K, "HAS_FLAG": False},
        num_warps=s.num_warps, aligned=(*pointers, "page_stride"), targets=(target.isa_target,),
        scaled_mfma=kv_dtype == "mxfp4" and mx_path == MX_DOT_SCALED and head_dim >= 64,
        scratch_ok="" if default else f"not the default variant on {target.isa_target}",
        key_tile=(s.pages_per_step * page_size, s.n_pad * s.h_pad))


def _variant(name: str, kv_dtype: str, path: str, mx_path, targets, precision, shapes, summary: str) -> Variant:
    """shapes: the (layout, D, P, next_n) instantiations the cross-compile report checks on each GPU target."""
    compiled = [t for t in (Target.AMD, Target.NVIDIA) if t in targets]
    return Variant(
        name=name, op=Op.DECODE, kv_dtype=kv_dtype, targets=frozenset(targets),
        settings=lambda target, call: paged_settings(kv_dtype, call.num_heads, call.next_n, call.page_size),
        launch=_launcher(kv_dtype, mx_path), precision=precision,
        isa_specs=lambda: tuple(_spec(lay, path, mx_path, d, p, n, t, False) for lay, d, p, n in shapes
                                for t in compiled),
        summary=summary)


#: the default nowhere (hw.variants.DEFAULTS)
FP8 = _variant("fp8", "fp8", "fp8", MX_DOT_SCALED, ALL_TARGETS, fp8_precision,
               (("fp8", 128, 64, 1), ("fp8", 64, 16, 1)), "FP8 e4m3 q.k on the MMA, the key scale after it")
MXFP4_DOT_SCALED = _variant(
    "mxfp4_dot_scaled", "mxfp4", "dot_scaled", MX_DOT_SCALED, dot_scaled_targets(), dot_scaled_precision,
    (("mxfp4", 128, 64, 1), ("mxfp4_tiled", 128, 64, 1), ("mxfp4", 64, 16, 1), ("mxfp4", 32, 64, 1),
     ("mxfp4", 128, 64, 2)),
    "tl.dot_scaled e2m1 x e2m1: native scaled MFMA on gfx950, Triton's bf16 decomposition on NVIDIA")
MXFP4_UNPACK = _variant(
    "mxfp4_unpack", "mxfp4", "unpack", MX_UNPACK, ALL_TARGETS, block_sum_precision, (),
    "exact e2m1 -> e4m3 unpack per 32-element block, K = 32 FP8 dots, E8M0 scales in fp32")
