"""Probes: the measurements recorded in docs/perf, one module each, run as `python3 -m tools.probes.<name> ARGS`
from the repository root (each module's docstring gives its arguments and what it measures).

A probe times the public launchers (hw's, with `variant=` and `launch_settings=` where it compares kernels or
settings) as `mxidx bench` does (tools.timing), on inputs built by tools.cmd_bench; importing a probe runs nothing.
Most need a CUDA GPU; topk_buckets_model runs on the CPU.
"""
from __future__ import annotations

import json

from tools.cmd_bench import decode_case


def json_recorder(out_path: str):
    """log(key, value) for a probe's results: prints each and rewrites out_path as JSON with every result so far
    (the device and the torch / triton versions first), so that a run cut short keeps them."""
    from pathlib import Path

    import torch
    import triton

    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}

    def log(key: str, value) -> None:
        results[key] = value
        print(key, value, flush=True)
        Path(out_path).write_text(json.dumps(results, indent=1))
    return log


def decode_settings_row(variant: str, setting: dict, copy: float, *, replays: int, **shape) -> dict:
    """The decode scorer `variant` (a keys-on-M variant name, its format first: "fp8_..." / "mxfp4_...") with the
    launch settings `setting` on `shape` (decode_inputs' keywords), timed by tools.cmd_bench.decode_case (20 calls a
    replay): {"time_us", "frac_copy" (of `copy` GB/s)}, or {"error": ...} for a setting that fails to compile or
    launch."""
    try:
        case = decode_case(variant.split("_")[0], layout=None, variant=variant, inner=20, replays=replays,
                           launch_settings=setting or None, **shape)
    except Exception as e:  # noqa: BLE001 -- a setting that fails to compile or launch is a result
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"time_us": case["time_us"], "frac_copy": case["GBps"] / copy}
