"""The registry of kernel variants: every way hw can compute an op, in one list per op.

Dispatch (the launchers), the tests, `mxidx diff`, `mxidx bench`, `tools.tune` and `mxidx isa` all iterate this
registry, so a variant exists in one place. Adding one (docs/kernels.md, "Adding a kernel variant"): write its
module (kernel, settings, launch, precision, ISA specs, ending in a `Variant` record, see hw.targets.Variant) and add
that record to REGISTRY below.

The default of an (op, kv_dtype) on a target is the first variant in REGISTRY order that lists the target in
`default_on` and runs there; `variant="name"` on a launcher picks one explicitly.
"""
from __future__ import annotations

import importlib
import os
import pkgutil

from ._logits_details import paged_keys_m, paged_keys_m_wgmma, prefill_keys_m
from ._topk_details import fast as topk_fast
from ._topk_details import variants as topk_variants
from .isa_spec import CompileSpec
from .targets import Op, Target, Variant

REGISTRY: dict[Op, tuple[Variant, ...]] = {
    Op.PREFILL: (prefill_keys_m.FP8_VARIANT, prefill_keys_m.MXFP4_FOLD_VARIANT,
                 prefill_keys_m.MXFP4_DOT_SCALED_VARIANT),
    Op.DECODE: (paged_keys_m.FP8_VARIANT, paged_keys_m_wgmma.VARIANT, paged_keys_m.MXFP4_FOLD_VARIANT,
                paged_keys_m.MXFP4_DOT_SCALED_VARIANT),
    Op.TOPK: (topk_fast.VARIANT, topk_variants.PER_ROW, topk_variants.ROWS_TILE),
}


def variants(op: Op, kv_dtype: str | None = None, target: Target | None = None) -> tuple[Variant, ...]:
    """The variants of `op` (of `kv_dtype`, running on `target`, when given), in registry order."""
    return tuple(v for v in REGISTRY[op] if (kv_dtype is None or v.kv_dtype == kv_dtype)
                 and (target is None or v.runs_on(target)))


def select(op: Op, target: Target, kv_dtype: str | None = None, name: str | None = None) -> Variant:
    """The variant a launch of `op` takes on `target`: `name` when given (ValueError if it is not a variant of
    this op and format, or does not run on the target), else the default (module docstring)."""
    if name is not None:
        found = [v for v in REGISTRY[op] if v.name == name]
        if not found or (kv_dtype is not None and found[0].kv_dtype != kv_dtype):
            names = [v.name for v in variants(op, kv_dtype)]
            raise ValueError(f"variant must be one of {names} for {op.value}"
                             + (f" with {kv_dtype} inputs" if kv_dtype else "") + f", got {name!r}")
        if not found[0].runs_on(target):
            where = sorted(t.value for t in found[0].targets)
            raise ValueError(f"variant {name!r} does not run on {target.value} (it runs on {where}); "
                             f"variants that do: {[v.name for v in variants(op, kv_dtype, target)]}")
        return found[0]
    for v in variants(op, kv_dtype, target):
        if target in v.default_on:
            return v
    raise AssertionError(f"no default {op.value} variant for {kv_dtype} on {target.value}")   # registry bug


def isa_specs() -> tuple:
    """Every variant's cross-compile specs (the scorers' and top-k's; other kernel packages export their own)."""
    return tuple(spec for op_variants in REGISTRY.values() for v in op_variants for spec in v.isa_specs())


def kernel_packages() -> tuple[str, ...]:
    """Every hw/_<name>_details package, by module name (found on disk, so a new package is never forgotten)."""
    here = os.path.dirname(__file__)
    return tuple(sorted(f"{__package__}.{m.name}" for m in pkgutil.iter_modules([here])
                        if m.ispkg and m.name.startswith("_") and m.name.endswith("_details")))


def load_specs(modules: tuple[str, ...] | None = None) -> tuple[tuple[CompileSpec, ...], tuple[str, ...]]:
    """(the ISA_SPECS of `modules` (default: every kernel package of hw/, plus every registered variant's specs),
    the modules that export none).

    ValueError when a (label, target) pair repeats."""
    specs, missing = [], []
    if modules is None:   # the kernel variants' specs (scorers, top-k) come with their records
        specs.extend(isa_specs())
    for name in kernel_packages() if modules is None else modules:
        module_specs = getattr(importlib.import_module(name), "ISA_SPECS", None)
        if module_specs is None:
            missing.append(name)
            continue
        specs.extend(module_specs)
    keys = [(s.label, t) for s in specs for t in s.targets]
    duplicated = sorted({x for x in keys if keys.count(x) > 1})
    if duplicated:
        raise ValueError(f"ISA_SPECS labels must be unique per target; repeated (label, target): {duplicated}")
    return tuple(specs), tuple(missing)
