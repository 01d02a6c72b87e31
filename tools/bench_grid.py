"""`python -m tools.bench_grid`: the default decode scorers (FP8 vs MXFP4) over a grid of shapes on a CUDA GPU,
against the bandwidth floor (the bytes the scorer must move at the copy bandwidth measured in the same run).

Grid: B 1/8/64/256 x context 2K/8K/32K/128K x next_n 1/2 x H 32/64 (D 128, P 64), each shape timed like
`mxidx bench` times it (median of CUDA-graph replays; one input set when it is larger than the L2). Writes the rows
as JSON and a PNG of time against context per (B, next_n, H), with the floor, for docs/perf/.
"""
from __future__ import annotations

import itertools
import json
import sys

import click

from .cmd_bench import copy_GBps, decode_case
from .runtime import choose_device

BATCHES = (1, 8, 64, 256)
CONTEXTS = (2048, 8192, 32768, 131072)
NEXT_NS = (1, 2)
HEADS = (32, 64)
FIXED = dict(head_dim=128, page_size=64)
L2_BYTES = 60 << 20   # an input set larger than this is not re-read from the L2 between replays


def _rows(replays: int, formats: tuple[str, ...]):
    import torch

    for batch, context, next_n, heads, kv_dtype in itertools.product(BATCHES, CONTEXTS, NEXT_NS, HEADS, formats):
        shape = dict(batch=batch, next_n=next_n, heads=heads, context=context, **FIXED)
        small = batch * context * 132 < L2_BYTES
        row = decode_case(kv_dtype, layout=None, variant=None, inner=10 if small else 3, replays=replays,
                           input_sets=4 if small else 1, **shape)
        yield shape | row
        torch.cuda.empty_cache()


def _plot(rows: list[dict], copy_GBps: float, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["batch"], r["next_n"], r["heads"]) for r in rows})
    cols = 4
    fig, axes = plt.subplots(-(-len(panels) // cols), cols, figsize=(4 * cols, 3.2 * -(-len(panels) // cols)),
                             squeeze=False)
    for ax, (b, n, h) in zip(axes.flat, panels):
        for kv_dtype, style in (("fp8", "o-"), ("mxfp4", "s-")):
            sel = sorted((r for r in rows if (r["batch"], r["next_n"], r["heads"], r["format"]) == (b, n, h, kv_dtype)),
                         key=lambda r: r["context"])
            ctx = [r["context"] for r in sel]
            ax.plot(ctx, [r["time_us"] for r in sel], style, label=kv_dtype)
            ax.plot(ctx, [r["bytes_moved"] / copy_GBps / 1e3 for r in sel], ":", color=ax.lines[-1].get_color(),
                    label=f"{kv_dtype} floor")
        ax.set(xscale="log", yscale="log", title=f"B{b} N{n} H{h}", xlabel="context", ylabel="us")
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


@click.command()
@click.option("--replays", default=10, show_default=True, help="Timed graph replays per shape (median).")
@click.option("--json-out", type=click.Path(dir_okay=False), required=True, help="Rows are written here as measured.")
@click.option("--plot-out", type=click.Path(dir_okay=False), default=None, help="Also draw the PNG here.")
def bench_grid(replays, json_out, plot_out):
    """Time the default decode scorers over the shape grid against the bandwidth floor (GPU only)."""
    import torch

    if not torch.cuda.is_available():
        click.echo("tools.bench_grid times GPU kernels, but torch sees no GPU here", err=True)
        sys.exit(2)
    choose_device("cuda")
    copy = copy_GBps(inner=5, replays=replays)["copy_GBps"]
    rows = []
    for row in _rows(replays, ("fp8", "mxfp4")):
        row["floor_us"] = row["bytes_moved"] / copy / 1e3
        row["of_floor"] = row["floor_us"] / row["time_us"]
        rows.append(row)
        click.echo(f"B{row['batch']:>3} ctx {row['context']:>6} N{row['next_n']} H{row['heads']} {row['format']:>5}: "
                   f"{row['time_us']:8.1f} us, {row['of_floor']:.0%} of the copy floor", err=True)
        with open(json_out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "copy_GBps": copy, "rows": rows}, f, indent=1)
    if plot_out:
        _plot(rows, copy, plot_out)


if __name__ == "__main__":
    bench_grid()
