"""`python -m tools.tune`: GPU sweeps of the scorer variants' launch settings (each variant's settings record in
hw.variants, replaced field by field through the launchers' `launch_settings`).

Each configuration is timed like `mxidx bench` times it (median of CUDA-graph replays, decode over rotating input
sets), on the bench's default shapes: decode B64/N1/H32/D128/ctx 8192/P64, prefill 4096 x 4096 x H32/D128 full.
Rows are written to the JSON file as they are measured, so a run cut short keeps what it measured; a configuration
that fails to compile or launch is recorded with its error and the sweep goes on.
"""
from __future__ import annotations

import itertools
import json
import sys
from types import SimpleNamespace

import click

from .cmd_bench import INPUT_SETS, decode_inputs, prefill_inputs
from .runtime import choose_device
from .timing import graph_time_us

#: prefill: settings field -> values to sweep; a variant sweeps the fields its own settings record has
#: (block_q query tokens, block_k keys a step)
PREFILL_SWEEP = {"block_q": (2, 4, 8), "block_k": (64, 128), "num_warps": (4, 8), "num_stages": (2, 3)}
#: decode: likewise, the fields of the variant's settings record
DECODE_WARPS = (4, 8)
DECODE_TILES = (2, 4, 8)          # tiles of 64 keys per program (even: the Gluon variant's)
DECODE_STAGES = (2, 3, 4)         # software-pipeline depth
DECODE_SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
PREFILL_SHAPE = dict(queries=4096, keys=4096, heads=32, head_dim=128, causal=False)


def _timed(fns, *, inner, replays) -> dict:
    """{"time_us": ...} or {"error": ...} (a configuration the compiler or the launcher refuses)."""
    try:
        return {"time_us": graph_time_us(fns, inner=inner, replays=replays)}
    except Exception as e:   # noqa: BLE001 -- recorded and reported; the sweep goes on
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}


def _product(grid: dict) -> list[dict]:
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def _parse_grid(specs: tuple[str, ...]) -> dict:
    """("field=v1,v2", ...) -> {field: (v1, v2)}; values are ints where they parse as ints."""
    grid = {}
    for spec in specs:
        field, sep, values = spec.partition("=")
        if not sep or not field or not values:
            raise click.BadParameter(f"expected FIELD=V1,V2,..., got {spec!r}", param_hint="--grid")
        grid[field] = tuple(int(v) if v.lstrip("-").isdigit() else v for v in values.split(","))
    return grid


def _prefill_grid(settings) -> list[dict]:
    """The settings to try for a prefill variant whose default settings record is `settings`: PREFILL_SWEEP's
    fields that the record has."""
    return _product({field: values for field, values in PREFILL_SWEEP.items() if field in settings.field_names()})


def _prefill_rows(replays, names, grid, size):
    from hw.logits import scorer_target
    from hw.targets import Op
    from hw.variants import variants

    shape = PREFILL_SHAPE | ({"queries": size, "keys": size} if size else {})
    target = scorer_target("cuda")
    geometry = SimpleNamespace(num_heads=shape["heads"], head_dim=shape["head_dim"])
    for v in (v for v in variants(Op.PREFILL, target=target) if not names or v.name in names):
        for setting in _product(grid) if grid else _prefill_grid(v.settings(target, geometry)):
            call, flops = prefill_inputs(v.kv_dtype, "cuda", variant=v.name, launch_settings=setting, **shape)
            row = _timed([call], inner=3, replays=replays)
            if "time_us" in row:
                row["TFLOPs"] = flops / row["time_us"] / 1e6
            yield {"kernel": "prefill", "format": v.kv_dtype, "variant": v.name, "size": shape["queries"], **setting,
                   **row}


def _decode_grid(settings, warps_options) -> list[dict]:
    """The settings to try for a decode variant whose default settings record is `settings`, the fields it has of:
    warps, tiles per program and pipeline stages."""
    sweep = {"num_warps": warps_options, "tiles": DECODE_TILES, "num_stages": DECODE_STAGES}
    return _product({field: values for field, values in sweep.items() if field in settings.field_names()})


def _decode_rows(replays, *, warps_options, names, grid):
    import torch

    from hw.logits import scorer_target
    from hw.targets import Op
    from hw.variants import variants

    target = scorer_target("cuda")
    shape = SimpleNamespace(num_heads=DECODE_SHAPE["heads"], next_n=DECODE_SHAPE["next_n"],
                            page_size=DECODE_SHAPE["page_size"], head_dim=DECODE_SHAPE["head_dim"])
    for v in (v for v in variants(Op.DECODE, target=target) if not names or v.name in names):
        for setting in _product(grid) if grid else _decode_grid(v.settings(target, shape), warps_options):
            sets = [decode_inputs(v.kv_dtype, "cuda", layout=None, seed=i, variant=v.name, launch_settings=setting,
                                  **DECODE_SHAPE)
                    for i in range(INPUT_SETS)]
            row = _timed([call for call, _ in sets], inner=20, replays=replays)
            if "time_us" in row:
                row["GBps"] = sets[0][1] / row["time_us"] / 1e3
            yield {"kernel": "decode", "format": v.kv_dtype, "variant": v.name, **setting, **row}
            del sets
            torch.cuda.empty_cache()


def _best(rows, kernel):
    """The fastest row per variant of `kernel`."""
    best = {}
    for row in rows:
        key = row["variant"]
        if row["kernel"] == kernel and "time_us" in row and (key not in best or row["time_us"] < best[key]["time_us"]):
            best[key] = row
    return list(best.values())


@click.command()
@click.option("--only", type=click.Choice(["prefill", "decode"]), help="sweep one kernel (default: both)")
@click.option("--replays", default=20, show_default=True, help="Timed graph replays per setting (median).")
@click.option("--decode-warps", type=int, multiple=True, help="decode: warps to try (default 4 and 8)")
@click.option("--variant", "names", multiple=True, help="only these variants (repeatable; default: all)")
@click.option("--grid", "grid_specs", multiple=True, metavar="FIELD=V1,V2",
              help="sweep these settings fields instead of the default grid (repeatable)")
@click.option("--prefill-size", type=int, default=0, help="prefill: queries = keys (default 4096)")
@click.option("--json-out", type=click.Path(dir_okay=False), required=True, help="rows are written here as measured")
def tune(only, replays, decode_warps, names, grid_specs, prefill_size, json_out):
    """Sweep the prefill and decode launch settings of every scorer variant on the GPU; print the fastest setting
    per variant."""
    import torch

    if not torch.cuda.is_available():
        click.echo("tools.tune times GPU kernels, but torch sees no GPU here", err=True)
        sys.exit(2)
    choose_device("cuda")
    kernels = [only] if only else ["prefill", "decode"]
    rows = []
    grid = _parse_grid(grid_specs)
    sweeps = {"prefill": lambda: _prefill_rows(replays, names, grid, prefill_size),
              "decode": lambda: _decode_rows(replays, warps_options=decode_warps or DECODE_WARPS, names=names,
                                             grid=grid)}
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
