"""Probes: the measurements recorded in docs/perf, one module each, run as `python3 -m tools.probes.<name> ARGS`
from the repository root (each module's docstring gives its arguments and what it measures).

A probe times the public launchers (hw's, with `variant=` and `launch_settings=` where it compares kernels or
settings) as `mxidx bench` does (tools.timing), on inputs built by tools.cmd_bench; importing a probe runs nothing.
Most need a CUDA GPU; topk_buckets_model runs on the CPU.
"""
from __future__ import annotations

import json


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
