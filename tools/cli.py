"""Entry point of the `mxidx` command. Each subcommand lives in its own module and is imported on use, so
`mxidx layout` never imports torch and `mxidx demo` can pick the device before hw/ is imported."""
from __future__ import annotations

import difflib
import importlib

import click

from . import __version__

# name -> (module, attribute, one-line help)
_COMMANDS = {
    "demo": ("tools.cmd_demo", "demo", "Run a small DeepSeek-style model through prefill + decode with the hook."),
    "layout": ("tools.cmd_layout", "layout", "Describe a cache geometry, its boundary report; verify a saved cache."),
    "diff": ("tools.cmd_diff", "diff", "Differential test: kernels against the sim/ oracle."),
    "isa": ("tools.cmd_isa", "isa", "Cross-compile every kernel for gfx950 / sm90 and report the ISA."),
    "bench": ("tools.cmd_bench", "bench", "GPU timings vs the measured roofline, FP8 vs MXFP4."),
    "variants": ("tools.cmd_variants", "variants", "Which kernel variant each op runs by default, and why."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(_COMMANDS)

    def resolve_command(self, ctx, args):
        name = args[0] if args else None
        if name is not None and name not in _COMMANDS and not name.startswith("-"):
            close = difflib.get_close_matches(name, _COMMANDS, n=1)
            ctx.fail(f"No such command '{name}'." + (f" Did you mean '{close[0]}'?" if close else
                                                     f" Commands: {', '.join(_COMMANDS)}."))
        return super().resolve_command(ctx, args)

    def get_command(self, ctx, name):
        if name not in _COMMANDS:
            return None
        module, attr, _ = _COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        with formatter.section("Commands"):
            formatter.write_dl([(n, h) for n, (_, _, h) in _COMMANDS.items()])


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mxidx", message="%(prog)s %(version)s")
def main():
    """mxidx: MXFP4 paged sparse indexing (simulator, kernels, serving hook)."""
