"""Test-session setup: without a GPU, Triton kernels run through the CPU interpreter.

TRITON_INTERPRET is read when a @triton.jit function is defined, so it is set here, before any test module
imports hw/. MXIDX_TEST_SHARD=i/n keeps every n-th collected test from the i-th (0 <= i < n) and deselects the
rest, so that one long test file can run in n processes (.ci/gpu splits the top-k tests so).
"""
import os

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    # set, not setdefault: an inherited TRITON_INTERPRET=0 would break every kernel test
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The device kernels run on: the GPU when present, else the CPU (Triton interpreter)."""
    return torch.device("cuda" if HAS_GPU else "cpu")


def shard_of(spec: str) -> tuple[int, int] | None:
    """(i, n) of MXIDX_TEST_SHARD=i/n, or None when it is empty."""
    if not spec:
        return None
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"MXIDX_TEST_SHARD={spec!r}: want i/n, e.g. 0/2") from None
    if not 0 <= i < n:
        raise pytest.UsageError(f"MXIDX_TEST_SHARD={spec!r}: want i/n with 0 <= i < n")
    return i, n


def pytest_collection_modifyitems(config, items):
    shard = shard_of(os.environ.get("MXIDX_TEST_SHARD", ""))
    if shard is not None:
        i, n = shard
        config.hook.pytest_deselected(items=[item for j, item in enumerate(items) if j % n != i])
        items[:] = items[i::n]
    if HAS_GPU:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
