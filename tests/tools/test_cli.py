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


def test_a_mistyped_command_gets_a_suggestion():
    result = CliRunner().invoke(main, ["dmeo"])
    assert result.exit_code == 2 and "No such command 'dmeo'. Did you mean 'demo'?" in result.output
    result = CliRunner().invoke(main, ["xyzzy"])
    assert result.exit_code == 2 and "Commands: demo, layout, diff, isa, bench, variants." in result.output


def test_help_states_the_limits_users_meet():
    """--top-k's help gives the hook's limit (a larger k is the hook's one-line error, test_cmd_demo); --num-pages
    says when it is required; the short scale_rule key the --attention-config error lists is in demo's help."""
    from hw.topk import MAX_K
    from tools.cmd_demo import MAX_TOP_K

    assert MAX_TOP_K == MAX_K
    demo_help = CliRunner().invoke(main, ["demo", "--help"], terminal_width=200).output
    assert f"at most {MAX_K}" in demo_help and "scale_rule)" in demo_help
    layout_help = CliRunner().invoke(main, ["layout", "--help"], terminal_width=200).output
    assert "required without --cache" in layout_help


def test_diff_full_on_the_cpu_says_it_is_meant_for_a_gpu(monkeypatch):
    from tools import cmd_diff

    monkeypatch.setattr(cmd_diff.difftest, "make_env", lambda device: type("Env", (), {"device": "cpu"})())
    monkeypatch.setattr(cmd_diff.difftest, "select_cases", lambda quick, patterns: [])
    monkeypatch.setattr(cmd_diff.difftest, "run_cases", lambda *a, **kw: [], raising=False)
    result = CliRunner().invoke(main, ["diff", "--full"])
    assert "--full is meant for a GPU" in result.output
