"""hw._l2_prefetch: the L2 prefetch is asked for on NVIDIA sm_90+ only, and only for what fits a share of the L2."""
from __future__ import annotations

import torch

from hw import _l2_prefetch
from hw._l2_prefetch import L2_SHARE, prefetch_launch


def test_never_without_an_nvidia_gpu():
    assert prefetch_launch(True, torch.device("cpu"), 1) == {"PREFETCH": False}
    assert prefetch_launch(False, torch.device("cpu"), 1) == {"PREFETCH": False}
    assert prefetch_launch(False, "cuda", 1) == {"PREFETCH": False}     # not wanted: no device query at all


def test_only_what_fits_the_l2(monkeypatch):
    l2 = 50 * 2 ** 20
    monkeypatch.setattr(_l2_prefetch, "_l2_bytes", lambda index: l2)
    monkeypatch.setattr(_l2_prefetch.torch.cuda, "current_device", lambda: 0)
    for capability, nbytes, want in (((9, 0), int(L2_SHARE * l2), True), ((9, 0), int(L2_SHARE * l2) + 1, False),
                                     ((10, 0), 4096, True), ((8, 0), 4096, False), (None, 4096, False)):
        monkeypatch.setattr(_l2_prefetch, "nvidia_capability", lambda device, c=capability: c)
        assert prefetch_launch(True, "cuda", nbytes) == {"PREFETCH": want}, (capability, nbytes)
        assert prefetch_launch(False, "cuda:0", nbytes) == {"PREFETCH": False}
