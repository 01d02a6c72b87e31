"""`mxidx isa`: cross-compile every kernel of hw/ for gfx950 or sm_90 and report its ISA (DESIGN §5, §7).

No GPU needed. Exit status 1 when a claim fails: scratch / spills in any kernel (unless its spec gives the measured
reason they are accepted, shown in the status), a kernel that does not fit on a CU/SM, or an MXFP4 scorer for
D >= 64 without v_mfma_scale_f32_*_f8f6f4 on gfx950.
"""
from __future__ import annotations

import json

import click

from hw.isa_spec import TARGETS

_HEADER = ("kernel", "warps", "matrix instructions", "registers", "scratch", "shared", "occupancy", "status")


@click.command()
@click.option("--target", type=click.Choice(TARGETS), default=TARGETS[0], show_default=True,
              help="gfx950: AMD CDNA4 (waves per SIMD); sm90: NVIDIA Hopper (warps per SM).")
@click.option("--kernel", default=None, metavar="NAME",
              help="Only specs whose label is NAME or starts with NAME/ (e.g. topk), or whose function is NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
def isa(target: str, kernel: str | None, as_json: bool):
    """Cross-compile hw/'s kernels for the --target GPU (no GPU needed) and report matrix instructions, registers,
    scratch, shared memory and occupancy. Prints one progress line per kernel to stderr (an empty Triton cache
    takes about a minute)."""
    from . import isa as isa_report

    try:
        kernels, missing = isa_report.report(target, kernel, progress=lambda line: click.echo(line, err=True))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--kernel") from None
    ok = not any(k.failures for k in kernels)
    if as_json:
        click.echo(json.dumps({"target": target, "ok": ok, "kernels": [k.to_json() for k in kernels],
                               "without_specs": list(missing)}, indent=1))
    else:
        click.echo(_table([_row(k) for k in kernels]))
        unit = "waves/SIMD" if target == "gfx950" else "warps/SM"
        click.echo(f"\n{len(kernels)} kernels for {target}; occupancy in {unit}; "
                   f"{'all claims hold' if ok else 'CLAIMS FAILED'}")
        for name in missing:
            click.echo(f"note: {name} exports no ISA_SPECS (not checked)", err=True)
    if not ok:
        raise SystemExit(1)


def _row(k) -> tuple[str, ...]:
    ops = ", ".join(f"{op} x{n}" for op, n in k.matrix_ops) or "-"
    regs = " ".join(f"{name}={n}" for name, n in k.registers)
    scratch = f"{k.scratch_bytes} B" + (f" ({k.spills} spills)" if k.spills else "")
    occupancy = f"{k.occupancy}/{k.occupancy_max} ({k.limited_by})"
    status = ("ok" if not k.failures else "FAIL: " + "; ".join(k.failures)) + "".join(f" ({n})" for n in k.notes)
    return k.label, str(k.num_warps), ops, regs, scratch, f"{k.shared_bytes} B", occupancy, status


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [_HEADER, *rows]) for i in range(len(_HEADER))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(_HEADER), line(tuple("-" * w for w in widths)), *map(line, rows)])
