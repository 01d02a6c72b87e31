"""tools.runtime.choose_device: the device decision and the TRITON_INTERPRET it leaves for hw/'s import."""
from __future__ import annotations

import os

import pytest
import torch

from tools.runtime import choose_device


def test_cpu_sets_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert choose_device("cpu") == "cpu"
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_cuda_clears_a_stale_interpreter_setting(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert choose_device("cuda") == "cuda"
    assert "TRITON_INTERPRET" not in os.environ


def test_auto_follows_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_device("auto") == "cpu" and choose_device(None) == "cpu"


@pytest.mark.parametrize("requested, message", [("cuda", "sees no GPU"), ("tpu", "must be auto, cuda or cpu")])
def test_bad_requests(requested, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=message):
        choose_device(requested)
