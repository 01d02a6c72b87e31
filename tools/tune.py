"""`python -m tools.tune`: GPU sweeps of the scorers' launch configuration (hw/_logits_details/launch_config.py;
the prefill sweep sets the NVIDIA tiles, launch_config.PREFILL["nvidia"]).

Each configuration is timed like `mxidx bench` times it (median of CUDA-graph replays, decode over rotating input
sets), on the bench's default shapes: decode B64/N1/H32/D128/ctx 8192/P64, prefill 4096 x 4096 x H32/D128 full.
Rows are written to the JSON file as they are measured, so a run cut short keeps what it measured; a configuration
that fails to compile or launch is recorded with its error and the sweep goes on.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import sys

import click

from .cmd_bench import INPUT_SETS, _graph_time_us, _mxfp4_path, decode_inputs, launch_settings, prefill_inputs
from .runtime import choose_device

#: prefill settings swept per (format, MXFP4 path): launch_config.PrefillTiles field -> values (tile_rows is set
#: for every dot variant at once)
PREFILL_GRID = {"tile_rows": (64, 128), "block_n": (64, 128), "num_warps": (4, 8), "num_stages": (2, 3)}
PREFILL_VARIANTS = (("fp8", None), ("mxfp4", "dot_scaled"), ("mxfp4", "unpack_ptx"))
#: decode: persistent programs per SM (schedule), warps, tokens a step
DECODE_PROGRAMS_PER_SM = (4, 8)
DECODE_WARPS = (4, 8)
DECODE_TOKENS_PER_STEP = (128, 256, 512)
DECODE_MAXNREG = (None,)       # register caps to try (ptxas .maxnreg); --maxnreg adds more
DECODE_VARIANTS = (("fp8", None), ("mxfp4", "unpack_ptx"), ("mxfp4", "dot_scaled"))
DECODE_SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
PREFILL_SHAPE = dict(queries=4096, keys=4096, heads=32, head_dim=128, causal=False)


def _timed(fns, *, inner, replays) -> dict:
    """{"time_us": ...} or {"error": ...} (a configuration the compiler or the launcher refuses)."""
    try:
        return {"time_us": _graph_time_us(fns, inner=inner, replays=replays)}
    except Exception as e:   # noqa: BLE001 -- recorded and reported; the sweep goes on
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}


def _prefill_rows(replays):
    from hw._logits_details import launch_config as cfg

    for kv_dtype, path in PREFILL_VARIANTS:
        with _mxfp4_path(path):
            call, flops = prefill_inputs(kv_dtype, "cuda", **PREFILL_SHAPE)
            for values in itertools.product(*PREFILL_GRID.values()):
                setting = dict(zip(PREFILL_GRID, values))
                nvidia = cfg.PREFILL["nvidia"]
                tiles = dataclasses.replace(nvidia, **setting | {"tile_rows": dict.fromkeys(nvidia.tile_rows,
                                                                                         setting["tile_rows"])})
                with launch_settings(PREFILL=cfg.PREFILL | {"nvidia": tiles}):
                    row = _timed([call], inner=3, replays=replays)
                if "time_us" in row:
                    row["TFLOPs"] = flops / row["time_us"] / 1e6
                yield {"kernel": "prefill", "format": kv_dtype, "path": path, **setting, **row}


def _decode_rows(replays, *, warps_options, tokens_options, maxnregs):
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for (kv_dtype, path), per_sm in itertools.product(DECODE_VARIANTS, DECODE_PROGRAMS_PER_SM):
        with _mxfp4_path(path):
            sets = [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, num_programs=per_sm * sms, **DECODE_SHAPE)
                    for i in range(INPUT_SETS)]
            moved = sets[0][1]
            for warps, tokens, maxnreg in itertools.product(warps_options, tokens_options, maxnregs):
                with launch_settings(PAGED_NUM_WARPS=warps, PAGED_TOKENS_PER_STEP={"fp8": tokens, "mxfp4": tokens},
                             PAGED_MAXNREG={"fp8": maxnreg, "mxfp4": maxnreg}):
                    row = _timed([call for call, _ in sets], inner=20, replays=replays)
                if "time_us" in row:
                    row["GBps"] = moved / row["time_us"] / 1e3
                yield {"kernel": "decode", "format": kv_dtype, "path": path, "programs_per_sm": per_sm,
                       "PAGED_NUM_WARPS": warps, "tokens_per_step": tokens, "maxnreg": maxnreg, **row}
            del sets
            torch.cuda.empty_cache()


def _best(rows, kernel):
    """The fastest row per (format, path) of `kernel`."""
    best = {}
    for row in rows:
        key = (row["format"], row["path"])
        if row["kernel"] == kernel and "time_us" in row and (key not in best or row["time_us"] < best[key]["time_us"]):
            best[key] = row
    return list(best.values())


@click.command()
@click.option("--only", type=click.Choice(["prefill", "decode"]), help="sweep one kernel (default: both)")
@click.option("--replays", default=20, show_default=True)
@click.option("--maxnreg", "maxnregs", type=int, multiple=True,
              help="decode: also try this register cap (repeatable); default: the compiler's choice only")
@click.option("--decode-warps", type=int, multiple=True, help="decode: warps to try (default 4 and 8)")
@click.option("--decode-tokens", type=int, multiple=True, help="decode: tokens a step to try (default 128 256 512)")
@click.option("--json-out", type=click.Path(dir_okay=False), required=True, help="rows are written here as measured")
def tune(only, replays, maxnregs, decode_warps, decode_tokens, json_out):
    """Sweep the prefill and decode launch settings on the GPU; print the fastest setting per format and path."""
    import torch

    if not torch.cuda.is_available():
        click.echo("tools.tune times GPU kernels, but torch sees no GPU here", err=True)
        sys.exit(2)
    choose_device("cuda")
    kernels = [only] if only else ["prefill", "decode"]
    rows = []
    sweeps = {"prefill": lambda: _prefill_rows(replays),
              "decode": lambda: _decode_rows(replays, warps_options=decode_warps or DECODE_WARPS,
                                             tokens_options=decode_tokens or DECODE_TOKENS_PER_STEP,
                                             maxnregs=DECODE_MAXNREG + maxnregs)}
    for kernel in kernels:
        for row in sweeps[kernel]():
            rows.append(row)
            click.echo(json.dumps(row), err=True)
            with open(json_out, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(0), "decode_shape": DECODE_SHAPE,
                           "prefill_shape": PREFILL_SHAPE, "rows": rows}, f, indent=1)
    for kernel in kernels:
        click.echo(f"fastest {kernel} settings:")
        for row in _best(rows, kernel):
            click.echo("  " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in row.items()))


if __name__ == "__main__":
    tune()
