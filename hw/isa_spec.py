"""What the cross-compilation report (tools/isa.py, `mxidx isa`) compiles: public, for tools/.

A kernel variant (hw.variants) lists its CompileSpecs through its record's `isa_specs()`; a kernel package without
variants (`hw/_<name>_details/`: the quantizers, the gather) defines a module-level

    ISA_SPECS: tuple[CompileSpec, ...]

Either way: a few *representative* instantiations of each @triton.jit kernel (the shapes and constexprs the
launchers really use: e.g. every head dim for a scorer, since a kernel verified only at D = 128 is a known failure),
cheap to build (no compilation, no tensors, no GPU). hw.variants.load_specs() collects both. The report compiles
the functions the specs name, so they must be real @triton.jit functions: under TRITON_INTERPRET=1 the report runs
in a child process without it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

TARGETS = ("gfx950", "sm90")


@dataclass(frozen=True)
class CompileSpec:
    """One kernel instantiation to cross-compile.

    label        unique over hw/, "<family>/<variant>", e.g. "topk/k2048" or "paged_logits/mxfp4/D128/P64".
    fn           the @triton.jit function object.
    signature    every *runtime* parameter of fn -> Triton type string: "*fp32", "*u8", "*i32", "*fp8e4nv", "i32",
                 "i64", "fp32", ... (pointer element type after "*"). Constexpr parameters are not listed here.
    constexprs   every tl.constexpr parameter of fn -> its value.
    num_warps    launch option, as the launcher passes it.
    num_stages   software-pipelining depth (Triton's default is 3 on NVIDIA, 2 on AMD when None).
    maxnreg      NVIDIA: the register cap per thread the launcher passes (None: ptxas chooses).
    aligned      runtime parameters the launcher guarantees to be multiples of 16 (bytes for pointers, value for
                 ints), as Triton specialises them at launch; None means "every pointer parameter".
    targets      which of TARGETS this instantiation is meant for (a Hopper-only unpack path lists ("sm90",)).
    scaled_mfma  a claim checked by the report: on gfx950 the AMDGCN must contain v_mfma_scale_f32_*_f8f6f4
                 (set it for every MXFP4 scorer instantiation with D >= 64; DESIGN §5).
    scratch_ok   empty: a stack frame or spilled registers fail the report. Otherwise the measured reason this
                 instantiation may have them (its tiles were timed faster than scratch-free ones); the report
                 still lists the bytes.
    key_tile     scorers: (keys, query rows) that one iteration of the kernel's key loop (the loop of its matrix
                 instructions) scores, so that the report can put loops of different tiles on one scale
                 (tools.isa's per-tile table); None for kernels without a key loop.
    """

    label: str
    fn: Any
    signature: Mapping[str, str]
    constexprs: Mapping[str, Any] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int | None = None
    maxnreg: int | None = None
    aligned: tuple[str, ...] | None = None
    targets: tuple[str, ...] = TARGETS
    scaled_mfma: bool = False
    scratch_ok: str = ""
    key_tile: tuple[int, int] | None = None

    def __post_init__(self):
        unknown = set(self.targets) - set(TARGETS)
        if unknown or not self.targets:
            raise ValueError(f"CompileSpec {self.label!r}: targets must be a non-empty subset of {TARGETS}, "
                             f"got {self.targets}")
        names = list(getattr(self.fn, "arg_names", None) or [])
        given = list(self.signature) + list(self.constexprs)
        if sorted(given) != sorted(names) or len(set(given)) != len(given):
            raise ValueError(f"CompileSpec {self.label!r}: signature + constexprs must name every parameter of "
                             f"{getattr(self.fn, '__name__', self.fn)} exactly once; parameters {names}, "
                             f"given {given}")
        if self.key_tile is not None and (len(self.key_tile) != 2 or min(self.key_tile) < 1):
            raise ValueError(f"CompileSpec {self.label!r}: key_tile must be (keys, query rows) >= 1, "
                             f"got {self.key_tile}")
        for name in self.aligned or ():
            if name not in self.signature:
                raise ValueError(f"CompileSpec {self.label!r}: aligned names {name!r}, not a runtime parameter")
