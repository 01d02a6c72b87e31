"""The probes of tools/probes import at this commit: every name they take from hw and tools exists (their GPU runs
are not tested here), importing one runs nothing, and the CPU probe runs."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import tools.probes

#: the probes (a module whose name starts with "_" is a probe's part: a kernel imported after the device is chosen)
PROBES = sorted(m.name for m in pkgutil.iter_modules(tools.probes.__path__) if not m.name.startswith("_"))


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


def test_the_fused_gate_keeps_every_top_k(device, monkeypatch, capsys):
    import os

    from tools.probes import prefill_fused_gate as probe

    # check() chooses the device, which sets or removes TRITON_INTERPRET: restored after the test
    if "TRITON_INTERPRET" in os.environ:
        monkeypatch.setenv("TRITON_INTERPRET", os.environ["TRITON_INTERPRET"])
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    probe.check(device.type)   # asserts the candidates hold each row's top k and their top-k is the logits'
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 9 and all(line.endswith("top-k equal") for line in lines)


def test_the_gate_model_is_looser_than_an_exact_running_threshold():
    import heapq

    import numpy as np

    from tools.probes import prefill_fused_gate as probe

    row = np.random.default_rng(3).standard_normal(8192).astype(np.float32)
    heap, exact = [], 0              # entries in the running top k when they arrive
    for x in row:
        if len(heap) < probe.K or x >= heap[0]:
            exact += 1
            heapq.heappush(heap, x)
            if len(heap) > probe.K:
                heapq.heappop(heap)
    assert abs(exact / (probe.K * (1 + np.log(len(row) / probe.K))) - 1) < 0.03
    for nb, refresh in ((4096, 1), (256, 8)):
        kept = probe.admitted(row, nb, refresh)
        assert exact <= kept <= 1.1 * exact, (nb, refresh, kept, exact)
