"""Test-session setup: without a GPU, Triton kernels run through the CPU interpreter.

TRITON_INTERPRET is read when a @triton.jit function is defined, so it is set here, before any test module
imports hw/.
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


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
