"""`mxidx diff`: run the kernel-vs-oracle case matrix (tools/difftest.py) and print a table.

Exit status 0 only when every selected case passes; a kernel that raises fails its case (the detail names the
exception).
"""
from __future__ import annotations

import json

import click

from tools import difftest


@click.command()
@click.option("--quick", "mode", flag_value="quick", default=True,
              help="The CI subset, sized for the CPU interpreter (default).")
@click.option("--full", "mode", flag_value="full", help="Every case, bigger shapes (meant for the GPU).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="Where kernels run; auto = the GPU when present, else the CPU interpreter.")
@click.option("--case", "patterns", multiple=True, metavar="NAME",
              help="Run only cases whose name matches NAME (shell wildcards; repeatable). Ignores --quick/--full.")
@click.option("--list", "list_only", is_flag=True, help="List the selected cases and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of the table.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes running cases side by side (kernel compilation is CPU-bound: on a GPU host "
                   "with many cores, e.g. 4).")
def diff(mode: str, device: str, patterns: tuple[str, ...], list_only: bool, as_json: bool, jobs: int) -> None:
    """Differential test: kernels against the sim/ oracle (writers/quantizers/gather byte-equal, scorers within
    the DESIGN §4 bound, top-k exactly equal, large-address pools)."""
    try:
        cases = difftest.select_cases(quick=mode == "quick", patterns=patterns)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if list_only:
        for c in cases:
            click.echo(f"{c.name:45s} {c.kind:14s} {c.describe()}")
        return
    try:
        env = difftest.make_env(device)
    except RuntimeError as e:
        raise click.UsageError(str(e)) from None
    click.echo(f"mxidx diff: {len(cases)} cases on {env.device}"
               f"{' (Triton interpreter)' if env.device == 'cpu' else ''}"
               f"{f' in {jobs} processes' if jobs > 1 else ''}", err=True)
    if mode == "full" and not patterns and env.device == "cpu":
        click.echo("note: --full is meant for a GPU; through the CPU interpreter it runs for many minutes "
                   "(--quick covers every kernel and variant in a few)", err=True)

    def progress(i: int, r: difftest.CaseResult) -> None:
        ratio = f" err/bound {difftest.format_ratio(r.worst_ratio)}" if r.worst_ratio is not None else ""
        click.echo(f"[{i + 1}/{len(cases)}] {r.name}: {r.status}{ratio} ({r.seconds:.1f} s)", err=True)

    results = difftest.run_cases(cases, env, on_result=progress, jobs=jobs)
    if as_json:
        click.echo(json.dumps(difftest.results_json(results), indent=1))
    else:
        click.echo(difftest.format_table(results))
    if not all(r.ok for r in results):
        raise SystemExit(1)
