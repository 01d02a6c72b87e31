"""Test support on the torch side: numpy <-> torch adapters for the kernels' tests and the `mxidx diff` runner.

Imports torch, never sim/: the fixtures themselves are numpy arrays (sim.testing builds them); these functions move
them to a device in the layouts the launchers take (DESIGN §8) and bring results back as numpy. Importing this
module imports hw/, so choose the device (TRITON_INTERPRET) first.

    host_to_device, to_numpy          numpy -> torch copies on a device; torch -> numpy (float8 as uint8 bits)
    torch_cache_view                  the 4-D kv_cache view of a flat uint8 pool tensor
    pair_as_torch                     a (values, scales) pair from sim -> the launchers' torch pair
    as_input, sim_input, to_input     kernel inputs of bf16 / fp16 / fp32 and their exact numpy form
    zeros_pool, count_nonzero_bytes   multi-GB pools (lazily committed on the host) and a scan of them
    write_zeros_pool                  hw's writer into a fresh zeros_pool (sim.testing.build_large_pool's `write`)
"""
from __future__ import annotations

import numpy as np
import torch

import hw

#: Kernel input dtypes by the names fixtures use.
INPUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def host_to_device(a: np.ndarray, device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """numpy -> a torch *copy* on `device` (C-contiguous, torch-allocated, so aligned beyond the 16 bytes cache
    views need); `dtype` reinterprets the bytes (uint8 -> float8_e4m3fn).

    Always a copy: on the CPU a shared buffer would let the kernel write into the oracle's own arrays.
    """
    t = torch.from_numpy(np.ascontiguousarray(a)).clone()
    if dtype is not None:
        t = t.view(dtype)
    return t.to(device)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """torch -> numpy on the host; float8 tensors come back as their uint8 bit patterns."""
    t = t.detach()
    if t.dtype == torch.float8_e4m3fn:
        t = t.view(torch.uint8)
    return t.cpu().numpy()


def torch_cache_view(pool_t: torch.Tensor, geom) -> torch.Tensor:
    """The uint8[num_pages, P, 1, bytes_per_token] kv_cache view (DESIGN §8) of a flat uint8 pool tensor: page b at
    byte view_offset + b * page_stride, token t at + t * bytes_per_token (the page's bytes are planar/tiled inside;
    the 4-D shape only fixes its size and stride). `geom`: a page geometry (num_pages, page_size, page_stride,
    bytes_per_token, view_offset), e.g. sim.layout.PageGeometry."""
    bpt = geom.bytes_per_token
    return pool_t.as_strided((geom.num_pages, geom.page_size, 1, bpt), (geom.page_stride, bpt, bpt, 1),
                             geom.view_offset)


def pair_as_torch(kv_dtype: str, values: np.ndarray, scales: np.ndarray | None, device, *,
                  int32_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A quantized (values, scales) numpy pair -> the DESIGN §8 torch pair on `device` (host_to_device copies).

    FP8: e4m3 bit patterns uint8 -> float8_e4m3fn; scales float32, or None for q (its scale is folded into the
    weights). MXFP4: codes uint8 [..., D/2] and E8M0 scales uint8 [..., D/32]; int32_scales views each row's
    scale bytes as int32 words (DeepGEMM packing: [..., 1] int32 at D = 128).
    """
    if kv_dtype == "fp8":
        return (host_to_device(values, device, torch.float8_e4m3fn),
                None if scales is None else host_to_device(scales.astype(np.float32), device))
    return host_to_device(values, device), host_to_device(scales, device, torch.int32 if int32_scales else None)


def as_input(x: np.ndarray, dtype: str) -> torch.Tensor:
    """Float numpy values -> a CPU tensor of input dtype `dtype` ("bf16" | "fp16" | "fp32"), rounded to nearest."""
    return torch.from_numpy(np.ascontiguousarray(x)).to(INPUT_DTYPES[dtype])


def sim_input(x: torch.Tensor) -> np.ndarray:
    """The numpy form of a bf16 / fp16 / fp32 tensor that sim's quantizers take, same values
    (sim.formats.as_float32_input): bf16 as uint16 bit patterns, fp16 as float16, fp32 as float32; on the host."""
    x = x.detach().cpu()
    return x.view(torch.uint16).numpy() if x.dtype == torch.bfloat16 else x.numpy()


def to_input(x: np.ndarray, dtype: str, device) -> tuple[torch.Tensor, np.ndarray]:
    """Float numpy values -> (a tensor of input dtype `dtype` on `device`, its exact values in sim_input form)."""
    t = as_input(x, dtype)
    return t.to(device), sim_input(t)


def zeros_pool(num_bytes: int, device) -> torch.Tensor:
    """A flat uint8 pool of zeros; on the host np.zeros, whose pages are committed only when touched (a pool of
    several GB costs only the pages the kernels write)."""
    if torch.device(device).type == "cpu":
        return torch.from_numpy(np.zeros(num_bytes, np.uint8))
    return torch.zeros(num_bytes, dtype=torch.uint8, device=device)


def count_nonzero_bytes(pool_t: torch.Tensor) -> int:
    """Non-zero bytes of a flat uint8 pool; on the host in chunks, without a pool-sized temporary."""
    if pool_t.device.type != "cpu":
        return int(torch.count_nonzero(pool_t))
    a = pool_t.numpy()
    chunk = 1 << 26
    return sum(int(np.count_nonzero(a[i: i + chunk])) for i in range(0, a.size, chunk))


def write_zeros_pool(geom, slots: np.ndarray, x: np.ndarray, device, dtype: str = "bf16"
                     ) -> tuple[torch.Tensor, np.ndarray]:
    """hw.indexer_k_quant_and_cache of K rows x (float32 [T, D], rounded to input dtype `dtype` by to_input) at
    slots (int64 [T], -1: skipped) into a zeros_pool of geom.pool_bytes on `device`, through torch_cache_view, with
    geom's kv_dtype and layout and the rceil scale rule. `geom`: a page geometry as torch_cache_view's, with
    kv_dtype, layout and pool_bytes (sim.layout.PageGeometry).

    Returns (the flat uint8 pool tensor, x as the kernel read it in sim_input form). The launcher is looked up on
    the hw package at call time, so a replaced hw.indexer_k_quant_and_cache is the one that runs.
    """
    pool_t = zeros_pool(geom.pool_bytes, device)
    k_t, k_sim = to_input(x, dtype, device)
    hw.indexer_k_quant_and_cache(k_t, torch_cache_view(pool_t, geom), host_to_device(slots, device),
                                 kv_dtype=geom.kv_dtype, layout=geom.layout, scale_rule="rceil")
    return pool_t, k_sim
