"""`mxidx variants`: what each op runs without `variant=` (hw.variants.DEFAULTS) on this machine's target under
this triton, or on every target with --all, then every registered variant and the targets it runs on."""
from __future__ import annotations

import click

from .runtime import choose_device

_COLUMNS = "{:8s} {:12s} {:6s} {:26s} {}"


@click.command()
@click.option("--all", "every_target", is_flag=True, help="Every target's defaults, not only this machine's.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="The device whose target is shown (auto: the GPU when torch sees one, else the interpreter).")
def variants(every_target: bool, device: str):
    """Print the defaults table (op, target, format, condition -> variant, and why) and the registered variants."""
    try:
        device = choose_device(device)
    except RuntimeError as e:
        raise click.BadParameter(str(e), param_hint="--device") from None
    import triton

    import hw.variants as hv
    from hw.logits import scorer_target
    from hw.targets import Target

    def runs(row) -> bool:
        return any(v.name == row.variant and v.runs_on(row.target) for v in hv.REGISTRY[row.op])

    here = scorer_target(device)
    if device == "cpu" and here is not Target.INTERPRETER:   # hw was imported (in this process) before the choice
        raise click.BadParameter("this process already imported hw's compiled kernels, so the CPU cannot run them: "
                                 "run `mxidx variants --device cpu` in a fresh process", param_hint="--device")
    rows = hv.DEFAULTS if every_target else tuple(d for d in hv.DEFAULTS if d.target is here)
    scope = "every target" if every_target else f"this machine: {here.value}"
    click.echo(f"defaults ({scope}; triton {triton.__version__}): the first row that applies wins")
    click.echo(_COLUMNS.format("op", "target", "format", "variant", "when"))
    for d in rows:
        conditional = any(r.condition for r in hv.defaults(d.op, d.target, d.kv_dtype))
        when = d.condition or ("otherwise" if conditional else "always")
        skipped = "" if runs(d) else " (this triton does not build it there: the next row applies)"
        click.echo(_COLUMNS.format(d.op.value, d.target.value, d.kv_dtype or "-", d.variant, when + skipped))
        click.echo(_COLUMNS.format("", "", "", "", f"why: {d.why}"))
    click.echo("\nregistered variants (the targets they run on under this triton; * marks a default there):")
    for op, registered in hv.REGISTRY.items():
        for v in registered:
            where = ", ".join(t.value + ("*" if any(d.variant == v.name for d in hv.defaults(op, t, v.kv_dtype))
                                         else "") for t in Target if v.runs_on(t))
            click.echo(f"  {op.value:8s} {v.name:26s} {where or 'nowhere'}: {v.summary}")
