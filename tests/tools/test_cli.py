"""The `mxidx` group: --version, and help text for every option of every command."""
from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from tools import __version__
from tools.cli import main


def test_version():
    """From the package's one version string, installed or run from a checkout (python -m tools)."""
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output == f"mxidx {__version__}\n", result.output


@pytest.mark.parametrize("name", ["demo", "layout", "diff", "isa", "bench"])
def test_every_option_has_help(name):
    command = main.get_command(click.Context(main), name)
    missing = [p.name for p in command.params if isinstance(p, click.Option) and not p.help]
    assert not missing, f"mxidx {name}: options without help text: {missing}"
    assert command.help and "TARGET" not in command.help


def test_bench_help_says_it_needs_a_gpu():
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0 and "on a CUDA GPU (needs one" in result.output
