"""@triton.jit bodies of the quantizers and the paged K-cache writer (launchers: hw/quant.py), and their
cross-compile specs (tools/isa.py).

codecs.py        exact integer encoders: E8M0 block scale, E2M1 element, E4M3FN element, fp8 per-row scale
page_offsets.py  page-local byte offsets of the three page layouts (DESIGN §2); also used by hw/_gather_details
kernels.py       the kernels: K quantize + paged insert (fp8, mxfp4 planar/tiled), Q quantize (mxfp4, fp8)
"""
from __future__ import annotations

import triton

from ..isa_spec import CompileSpec
from .codecs import RULE_RCEIL
from .kernels import k_quant_cache_fp8_kernel, k_quant_cache_mxfp4_kernel, q_quant_fp8_kernel, q_quant_mxfp4_kernel

BLOCK_T = 16     # rows (tokens, or (token, head) pairs) per program on a GPU
#: the MXFP4 q quantizer takes Q_MXFP4_WIDE_BLOCK_T rows a program from Q_MXFP4_WIDE_ROWS rows (a prefill's
#: (token, head) pairs) of at most Q_MXFP4_WIDE_MAX_D unit-stride elements: fewer, longer programs there; BLOCK_T
#: below (a decode step's rows), where more programs win, and for wider or strided rows, not measured
#: (docs/perf/h200-prefill-ablation.md, "Rows per program of the q quantizers")
Q_MXFP4_WIDE_BLOCK_T = 32
Q_MXFP4_WIDE_ROWS = 32768
Q_MXFP4_WIDE_MAX_D = 128
QUANT_INTERPRETER_BLOCK_T = 1024   # in the CPU interpreter, which pays per Triton operation rather than per row
QUANT_WARPS = 4

# the pointer types of both K-cache writers (hw.isa_spec.kernel_signature)
_WRITER_TYPES = {"k_ptr": "*bf16", "cache_ptr": "*u8", "slot_ptr": "*i64", "flag_ptr": "*i32"}


def _fp8_targets(label: str, hw_e4m3: bool) -> dict:
    """The FP8 kernels' E4M3 encoder per target, as the launchers choose it (hw/quant.py): the hardware conversion
    on sm90, the integer encoder on gfx950."""
    return {"label": label + ("/hw_e4m3" if hw_e4m3 else ""), "targets": ("sm90",) if hw_e4m3 else ("gfx950",)}


def _writer_spec(layout: str, head_dim: int, page_size: int, hw_e4m3: bool = False) -> CompileSpec:
    mx = layout != "fp8"
    constexprs = {"D": head_dim, "D_PAD": triton.next_power_of_2(head_dim), "P": page_size, "BLOCK_T": BLOCK_T,
                  "HAS_FLAG": False}
    label = f"k_quant_cache/{layout}/D{head_dim}/P{page_size}"
    if mx:
        constexprs |= {"TILED": layout == "mxfp4_tiled", "RULE": RULE_RCEIL.value}
        where = {"label": label}
    else:
        constexprs |= {"HW_E4M3": hw_e4m3}
        where = _fp8_targets(label, hw_e4m3)
    return CompileSpec(**where, fn=k_quant_cache_mxfp4_kernel if mx else k_quant_cache_fp8_kernel,
                       types=_WRITER_TYPES, constexprs=constexprs, num_warps=QUANT_WARPS,
                       aligned=("cache_ptr", "page_stride"))


def _q_spec(kv_dtype: str, head_dim: int, hw_e4m3: bool = False, block_t: int = BLOCK_T) -> CompileSpec:
    d = {"D": head_dim, "D_PAD": triton.next_power_of_2(head_dim), "BLOCK_T": block_t}
    if kv_dtype == "mxfp4":
        label = f"q_quant/mxfp4/D{head_dim}" + ("" if block_t == BLOCK_T else f"/rows{block_t}")
        return CompileSpec(label=label, fn=q_quant_mxfp4_kernel,
                           types={"q_ptr": "*bf16", "codes_ptr": "*u8", "scales_ptr": "*u8"},
                           constexprs=d | {"RULE": RULE_RCEIL.value}, num_warps=QUANT_WARPS,
                           aligned=("codes_ptr", "scales_ptr"))
    return CompileSpec(**_fp8_targets(f"q_quant/fp8/D{head_dim}", hw_e4m3), fn=q_quant_fp8_kernel,
                       types={"q_ptr": "*bf16", "w_ptr": "*fp32", "values_ptr": "*u8", "w_out_ptr": "*fp32"},
                       constexprs=d | {"HW_E4M3": hw_e4m3}, num_warps=QUANT_WARPS, aligned=("values_ptr", "w_out_ptr"))


# Every layout at the serving shape (D = 128, P = 64; the MXFP4 q quantizer also with a prefill's rows per program),
# the small head dims that exercise other tile widths, and a non-power-of-two D (padded tiles); the FP8 kernels with
# each target's E4M3 encoder.
ISA_SPECS = (
    *(_writer_spec("fp8", d, p, hw) for d, p in ((128, 64), (32, 16)) for hw in (False, True)),
    _writer_spec("mxfp4", 128, 64), _writer_spec("mxfp4", 64, 16), _writer_spec("mxfp4", 32, 64),
    _writer_spec("mxfp4", 96, 32), _writer_spec("mxfp4_tiled", 128, 64), _writer_spec("mxfp4_tiled", 256, 16),
    _q_spec("mxfp4", 128), _q_spec("mxfp4", 128, block_t=Q_MXFP4_WIDE_BLOCK_T), _q_spec("mxfp4", 32),
    *(_q_spec("fp8", d, hw) for d in (128, 64) for hw in (False, True)),
)
