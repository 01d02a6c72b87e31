"""MXIDX_TEST_SHARD=i/n (tests/conftest.py): the shards of a test file partition its tests, and a malformed value
is a usage error."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests/hw/test_tile_scan.py"


def _collected(shard: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("MXIDX_TEST_SHARD", None)
    if shard is not None:
        env["MXIDX_TEST_SHARD"] = shard
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", TARGET],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _ids(run: subprocess.CompletedProcess) -> list[str]:
    assert run.returncode == 0, run.stdout + run.stderr
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_shards_partition_the_tests():
    whole = _ids(_collected(None))
    shards = [_ids(_collected(f"{i}/3")) for i in range(3)]
    assert len(whole) > 3
    assert sorted(sum(shards, [])) == sorted(whole)
    assert all(abs(len(s) - len(whole) / 3) < 1 for s in shards)


@pytest.mark.parametrize("spec", ["3/3", "-1/2", "1", "a/b"])
def test_a_bad_shard_is_a_usage_error(spec):
    run = _collected(spec)
    assert run.returncode != 0
    assert "MXIDX_TEST_SHARD" in run.stdout + run.stderr
