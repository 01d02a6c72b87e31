"""The probes of tools/probes import at this commit: every name they take from hw and tools exists (their GPU runs
are not tested here), importing one runs nothing, and the CPU probe runs."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import tools.probes

PROBES = sorted(m.name for m in pkgutil.iter_modules(tools.probes.__path__))


def test_there_are_probes():
    assert len(PROBES) >= 10 and "topk_columns" in PROBES


@pytest.mark.parametrize("name", PROBES)
def test_a_probe_imports_and_has_a_main(name):
    module = importlib.import_module(f"tools.probes.{name}")
    assert callable(module.main), f"tools.probes.{name} has no main()"
    assert f"python3 -m tools.probes.{name}" in inspect.getdoc(module), "the docstring gives the command"


def test_the_cpu_probe_runs(monkeypatch, capsys):
    from tools.probes import topk_buckets_model as model

    monkeypatch.setattr(model, "B", 2)
    monkeypatch.setattr(model, "W", 4096)
    model.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" buckets")[0] for line in lines] == ["decode-step logits", "N(0,1)"]
    assert all("counting sort:" in line for line in lines)
