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
@click.option("--per-tile", is_flag=True,
              help="gfx950: only the scorers, with their key loop per tile of 64 keys x 32 query rows (matrix and "
                   "total instructions, global loads and LDS reads with their bytes per lane) beside their "
                   "resources; the variant column marks each target's defaults with *.")
def isa(target: str, kernel: str | None, as_json: bool, per_tile: bool):
    """Cross-compile hw/'s kernels for the --target GPU (no GPU needed) and report matrix instructions, registers,
    scratch, shared memory and occupancy. Prints one progress line per kernel to stderr (an empty Triton cache
    takes about a minute)."""
    from . import isa as isa_report

    if per_tile and target != "gfx950":
        raise click.BadParameter("the key loop is read from gfx950's AMDGCN only", param_hint="--per-tile")
    try:
        kernels, missing = isa_report.report(target, kernel, key_tile_only=per_tile,
                                             progress=lambda line: click.echo(line, err=True))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--kernel") from None
    ok = not any(k.failures for k in kernels)
    if as_json:
        click.echo(json.dumps({"target": target, "ok": ok, "kernels": [k.to_json() for k in kernels],
                               "without_specs": list(missing)}, indent=1))
    elif per_tile:
        click.echo(per_tile_table(kernels, isa_report.spec_variants(target)))
        click.echo(f"\n{len(kernels)} scorer kernels for {target}; per tile of {isa_report.TILE_KEYS} keys x "
                   f"{isa_report.TILE_ROWS} query rows, summed over a workgroup's waves; occupancy in waves/SIMD; "
                   f"{'all claims hold' if ok else 'CLAIMS FAILED'}")
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


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...] = _HEADER) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *map(line, rows)])


_TILE_HEADER = ("op", "kernel", "variant", "warps", "loop tile", "matrix instructions / tile", "instr / tile",
                "global loads / tile", "LDS reads / tile", "vgpr (agpr)", "scratch", "LDS", "waves/SIMD", "status")


def per_tile_table(kernels, variants: dict[str, tuple[str, str, bool]]) -> str:
    """The --per-tile table of `kernels` (gfx950 KernelIsa with key loops), rows ordered by op, then by the label
    after its family (one shape's kernels side by side); `variants`: tools.isa.spec_variants."""
    from . import isa as isa_report

    def order(k):
        op = variants.get(k.label, ("", "", False))[0]
        family, _, rest = k.label.partition("/")
        return op != "decode", rest.split("/")[0], rest, family

    rows = []
    for k in sorted(kernels, key=order):
        tile = isa_report.per_tile(k)
        op, name, default = variants.get(k.label, ("", "", False))
        regs = dict(k.registers)
        status = ("ok" if not k.failures else "FAIL: " + "; ".join(k.failures)) + "".join(f" ({n})" for n in k.notes)
        if tile is None:
            cells = ("-",) * 5
        else:
            cells = (f"{tile['tile'][0]} x {tile['tile'][1]}" + (f" ({tile['loops_with_matrix_ops']} loops)"
                                                                 if tile["loops_with_matrix_ops"] > 1 else ""),
                     ", ".join(f"{op_} x{_num(n)}" for op_, n in tile["matrix_ops"].items()),
                     _num(tile["instructions"]),
                     f"{_num(tile['global_loads'])} x {_num(tile['global_bytes_per_load'])} B",
                     f"{_num(tile['lds_reads'])} x {_num(tile['lds_bytes_per_read'])} B")
        rows.append((op, k.label, name + ("*" if default else ""), str(k.num_warps), *cells,
                     f"{regs['vgpr']} ({regs['agpr']})", f"{k.scratch_bytes} B", f"{k.shared_bytes} B",
                     f"{k.occupancy}/{k.occupancy_max} ({k.limited_by})", status))
    return _table(rows, _TILE_HEADER)


def _num(x: float) -> str:
    """A per-tile count: an integer as such, else one decimal."""
    return str(round(x)) if abs(x - round(x)) < 0.05 else f"{x:.1f}"
