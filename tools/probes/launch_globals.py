"""Triton's per-launch check of the constexpr globals a kernel reads, for the kernels of the hook's prefill.

At every launch Triton's JITFunction.run compares each module-level constexpr that the kernel, or any function it
calls, read when it was compiled with that name's value now (so that a changed global is not silently ignored). A
comparison of two tl.constexpr builds a third and asks its truth, a few Python calls each: host time on every
launch, in proportion to the named constants a kernel uses. This probe cross-compiles the kernels of one hook
prefill (sm_90, no GPU), counts their globals, and times that comparison loop on this machine's CPU.

    python3 -m tools.probes.launch_globals

prints one line per kernel (globals, microseconds a launch) and the totals of an FP8 and an MXFP4 prefill call.
"""
import time

from hw.variants import load_specs
from tools.isa import compile_spec

#: the kernels one prefill call of the hook launches on the H200 (spec labels of `mxidx isa`), one entry a launch:
#: the K writer, the q quantizer, the gather, the causal scorer (MXFP4: the keys' fold, the scoring and the exact
#: pass) and its -inf columns, the top-k of the rows
PREFILL_LAUNCHES = {
    "fp8": ("k_quant_cache/fp8/D128/P64/hw_e4m3", "q_quant/fp8/D128/hw_e4m3", "gather/fp8/D128/P64",
            "prefill_keys_m/fp8/mma/D128/H32", "prefill_keys_m/clean_outside",
            "topk_fast/W8192/k2048/many_rows/columns"),
    "mxfp4": ("k_quant_cache/mxfp4/D128/P64", "q_quant/mxfp4/D128", "gather/mxfp4/D128/P64",
              "prefill_keys_m/mxfp4/fold_keys/D128", "prefill_keys_m/mxfp4/fold/D128/H32",
              "prefill_keys_m/mxfp4/exact/D128/H32", "prefill_keys_m/clean_outside",
              "topk_fast/W8192/k2048/many_rows/columns"),
}
REPEATS = 2000


def _check_us(fn) -> float:
    """Microseconds of one pass over fn's recorded globals, each compared with its value now."""
    missing = object()
    start = time.perf_counter()
    for _ in range(REPEATS):
        for (name, _), (value, scope) in fn.used_global_vals.items():
            if scope.get(name, missing) != value:
                raise RuntimeError(f"{name} changed since compilation")
    return (time.perf_counter() - start) / REPEATS * 1e6


def main() -> None:
    specs = {s.label: s for s in load_specs()[0] if "sm90" in s.targets}
    per_launch = {}
    for label in sorted({label for launches in PREFILL_LAUNCHES.values() for label in launches}):
        spec = specs[label]
        compile_spec(spec, "sm90")   # records the kernel's globals
        per_launch[label] = (len(spec.fn.used_global_vals), _check_us(spec.fn))
        print(f"{label:45s} {per_launch[label][0]:3d} globals {per_launch[label][1]:7.1f} us a launch", flush=True)
    for fmt, launches in PREFILL_LAUNCHES.items():
        count = sum(per_launch[label][0] for label in launches)
        us = sum(per_launch[label][1] for label in launches)
        print(f"{fmt} prefill call: {len(launches)} launches, {count} global comparisons, {us:.1f} us")


if __name__ == "__main__":
    main()
