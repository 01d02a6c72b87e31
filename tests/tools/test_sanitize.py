"""tools.sanitize's reporting, without a GPU: the sanitizer's absence is an explicit UNAVAILABLE (exit 3), and its
summary lines (memcheck's ERROR SUMMARY, racecheck's RACECHECK SUMMARY) are parsed into the counts .ci/gpu
records."""
from __future__ import annotations

import json
import stat

import pytest

from tools import sanitize

FAKE_REPORT = {"cases": 3, "seed": 0, "compact": True, "failed": 0, "failures": [], "seconds": 0.0}


@pytest.fixture
def no_gpu_needed(monkeypatch):
    monkeypatch.setattr(sanitize, "choose_device", lambda device: device)
    monkeypatch.setattr(sanitize, "_run_fuzz", lambda seed, cases, compact: dict(FAKE_REPORT, cases=cases))


def test_missing_sanitizer_is_reported_not_passed(tmp_path, monkeypatch, capsys, no_gpu_needed):
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: None)
    assert sanitize.main([str(tmp_path), "--cases", "3"]) == sanitize.EXIT_UNAVAILABLE
    report = json.loads((tmp_path / "sanitizer.json").read_text())
    assert {t["status"] for t in report["tools"].values()} == {"UNAVAILABLE"}
    assert "memcheck: UNAVAILABLE" in capsys.readouterr().out
    assert json.loads((tmp_path / "fuzz.json").read_text())["cases"] == 3


@pytest.mark.parametrize("summary,status,rc", [("ERROR SUMMARY: 0 errors", "ok", 0),
                                               ("ERROR SUMMARY: 2 errors", "FAILED", 1),
                                               ("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)",
                                                "ok", 0),
                                               ("RACECHECK SUMMARY: 3 hazards displayed (1 error, 2 warnings)",
                                                "FAILED", 1),
                                               ("the kernel cannot be instrumented", "UNAVAILABLE", 3)])
def test_sanitizer_summary_is_counted(summary, status, rc, tmp_path, monkeypatch, no_gpu_needed):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(f"#!/bin/sh\necho '========= {summary}'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: str(fake))
    assert sanitize.main([str(tmp_path / "out")]) == rc
    tools = json.loads((tmp_path / "out" / "sanitizer.json").read_text())["tools"]
    assert [t["status"] for t in tools.values()] == [status, status]
    assert (tmp_path / "out" / "memcheck.log").read_text().strip().endswith(summary)


def test_fuzz_progress_is_shown(monkeypatch, capsys):
    """A long fuzz run prints where it is to stderr every PROGRESS_EVERY cases and at its end."""
    from tools import fuzz

    def fake_run(seed, cases, device, *, compact, progress):
        for done in range(1, cases + 1):
            progress(done, int(done > 30))
        return []
    monkeypatch.setattr(fuzz, "run", fake_run)
    assert sanitize._run_fuzz(0, 60, True)["failed"] == 0
    lines = [line.split(",")[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == ["fuzz [25/60] 0 failed", "fuzz [50/60] 1 failed", "fuzz [60/60] 1 failed"]
