"""Query/key fixtures shared by the hw scorer tests (test_logits_prefill.py, test_logits_decode.py).

The sim side (quantization, FP8 weight folding, exact float64 dequantization) is tools.difftest's; this module
adds what only these tests vary: the MXFP4 dot path, the int32 scale packing and the torch device.
"""
from __future__ import annotations

import numpy as np
import torch

from sim.formats import E4M3_NAN, E8M0_NAN
from tools.difftest import pair_as_torch, sim_quantize_q

#: MXFP4 dot paths each accuracy case runs (unpack_ptx: inline PTX, NVIDIA GPUs only).
MX_PATHS = ("dot_scaled", "unpack") + (("unpack_ptx",) if torch.cuda.is_available() and not torch.version.hip else ())


def case_paths(kv_format: str) -> list:
    """The dot paths a case of `kv_format` runs: FP8 has one (None: the launcher's default), MXFP4 each of MX_PATHS."""
    return [None] if kv_format == "fp8" else list(MX_PATHS)


def mx_path(monkeypatch, path: str | None) -> None:
    """Force the MXFP4 dot path of hw.logits (None: the launcher's default for the device)."""
    if path is None:
        monkeypatch.delenv("MXIDX_MXFP4_PATH", raising=False)
    else:
        monkeypatch.setenv("MXIDX_MXFP4_PATH", path)


def n_roundings(kv_format: str, head_dim: int, path: str | None) -> int:
    """Roundings in one q.k of the path that runs (DESIGN §4): the unpack path adds D/32 exact block sums in fp32;
    FP8 and dot_scaled (the interpreter multiplies out the scales; Hopper decomposes to bf16 MMA) sum D products."""
    return head_dim // 32 if kv_format != "fp8" and path in ("unpack", "unpack_ptx") else head_dim


def quantize_queries(kv_format: str, q: np.ndarray, weights: np.ndarray, device, *, int32_scales: bool = False):
    """q float32 [..., H, D], weights float32 [..., H] -> (torch q pair of DESIGN §8, torch weights (FP8: q scale
    folded in), exact float64 q for sim.scorer, the weights as float32 numpy)."""
    values, scales, q64, folded = sim_quantize_q(kv_format, q, weights)
    pair = pair_as_torch(kv_format, values, scales, device, int32_scales=int32_scales)
    return pair, torch.from_numpy(folded).to(device), q64, folded


def poison_key(kv_format: str, values: np.ndarray, scales: np.ndarray, token: int, block: int) -> None:
    """Make key `token` NaN in place, as the writer leaves a non-finite row (DESIGN §1). FP8: every byte 0x7F and
    the scale NaN (the interpreter's fp8 dot does not decode 0x7F as NaN; the scale carries it). MXFP4: scale
    block `block` = E8M0 NaN."""
    if kv_format == "fp8":
        values[token] = E4M3_NAN
        scales[token] = np.nan
    else:
        scales[token, block] = E8M0_NAN
