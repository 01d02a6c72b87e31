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

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping

from triton.runtime.jit import KernelParam

TARGETS = ("gfx950", "sm90")
POINTER_SUFFIX = "_ptr"   # how every kernel of hw/ names its pointer parameters (kernel_signature checks it)
DEFAULT_SCALAR = "i32"    # Triton's type of a Python int in int32 range: how the launchers pass sizes and strides


def _parameters(fn) -> list[KernelParam]:
    """fn's parameters as Triton reads them (name, is_constexpr), also for an interpreter function (no `params`)."""
    params = getattr(fn, "params", None)
    if params is not None:
        return list(params)
    python_fn = getattr(fn, "fn", None)
    if python_fn is None or not hasattr(fn, "arg_names"):
        raise TypeError(f"{fn!r} is not a @triton.jit function")
    return [KernelParam(i, p, False, False) for i, p in enumerate(inspect.signature(python_fn).parameters.values())]


def kernel_signature(fn, types: Mapping[str, str], constexprs: Mapping[str, Any]) -> dict[str, str]:
    """Triton's compile signature of the @triton.jit (or Gluon) kernel `fn`, derived from its own parameter list:
    every parameter in fn's order -> its type string, "constexpr" for a `tl.constexpr` one.

    `types` gives what the parameter list cannot: the type of every pointer parameter ("*fp32", "*u8", "*i64",
    ...; a pointer parameter is named `<name>_ptr`, and only a pointer is), and of a scalar parameter that is not
    DEFAULT_SCALAR ("i64", "fp32", ...). `constexprs` gives every constexpr parameter's value.
    ValueError, naming the kernel and the parameter, when `types` names a parameter fn lacks or a constexpr one,
    types a `_ptr` parameter as a scalar or another as a pointer, or misses a `_ptr` parameter; or when
    `constexprs` misses a constexpr parameter or names anything else. A parameter added, removed or renamed in
    the kernel thus fails here unless it is a DEFAULT_SCALAR one, whose type follows the kernel.
    """
    kernel = getattr(fn, "__name__", repr(fn))
    params = _parameters(fn)
    constexpr = {p.name for p in params if p.is_constexpr}
    runtime = [p.name for p in params if not p.is_constexpr]
    for name in types:
        if name in constexpr:
            raise ValueError(f"{kernel}: parameter {name!r} is a constexpr; give its value, not a type")
        if name not in runtime:
            raise ValueError(f"{kernel} has no parameter {name!r} (types names it)")
    for name in constexprs:
        if name not in constexpr:
            raise ValueError(f"{kernel} has no constexpr parameter {name!r} (constexprs names it)")
    signature = {}
    for p in params:
        if p.is_constexpr:
            if p.name not in constexprs:
                raise ValueError(f"{kernel}: constexpr parameter {p.name!r} has no value")
            signature[p.name] = "constexpr"
            continue
        ty = types.get(p.name, DEFAULT_SCALAR)
        if p.name.endswith(POINTER_SUFFIX) and not ty.startswith("*"):
            raise ValueError(f"{kernel}: pointer parameter {p.name!r} " + (
                f"is typed {ty!r}" if p.name in types else "has no type (e.g. '*fp32') in types"))
        if ty.startswith("*") and not p.name.endswith(POINTER_SUFFIX):
            raise ValueError(f"{kernel}: parameter {p.name!r} is typed {ty!r} but not named *{POINTER_SUFFIX}")
        signature[p.name] = ty
    return signature


@dataclass(frozen=True)
class CompileSpec:
    """One kernel instantiation to cross-compile.

    label        unique over hw/, "<family>/<variant>", e.g. "topk/k2048" or "paged_keys_m/mxfp4/fold/D128/P64/N1/H32".
    fn           the @triton.jit function object.
    types        the types fn's parameter list cannot give, as kernel_signature takes them: every pointer
                 parameter's ("*fp32", "*u8", "*i32", "*fp8e4nv", ...: the element type after "*") and a scalar's
                 that is not DEFAULT_SCALAR.
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
    signature    derived: kernel_signature(fn, types, constexprs), what triton.compile takes.
    """

    label: str
    fn: Any
    types: Mapping[str, str]
    constexprs: Mapping[str, Any] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int | None = None
    maxnreg: int | None = None
    aligned: tuple[str, ...] | None = None
    targets: tuple[str, ...] = TARGETS
    scaled_mfma: bool = False
    scratch_ok: str = ""
    key_tile: tuple[int, int] | None = None
    signature: Mapping[str, str] = field(init=False)

    def __post_init__(self):
        unknown = set(self.targets) - set(TARGETS)
        if unknown or not self.targets:
            raise ValueError(f"CompileSpec {self.label!r}: targets must be a non-empty subset of {TARGETS}, "
                             f"got {self.targets}")
        try:
            object.__setattr__(self, "signature", kernel_signature(self.fn, self.types, self.constexprs))
        except ValueError as e:
            raise ValueError(f"CompileSpec {self.label!r}: {e}") from None
        if self.key_tile is not None and (len(self.key_tile) != 2 or min(self.key_tile) < 1):
            raise ValueError(f"CompileSpec {self.label!r}: key_tile must be (keys, query rows) >= 1, "
                             f"got {self.key_tile}")
        for name in self.aligned or ():
            if self.signature.get(name, "constexpr") == "constexpr":
                raise ValueError(f"CompileSpec {self.label!r}: aligned names {name!r}, not a runtime parameter")
