"""sim/-side views of the integration objects, shared by the integration tests.

    sim_geometry(pool_layout, layer)      the sim.layout.PageGeometry of one layer's view of an IndexerPool
    sim_k(k, kv_dtype, rule)              sim's quantized K rows (what the cache writer must store)
    sim_q(q, weights, kv_dtype, rule)     float64 q and the weights the scorer sees (FP8: q scale folded in),
                                          computed by sim from the bf16 inputs, independently of hw
    assert_topk_within_bound(...)         a hook's top-k against float64 reference logits and their fp32 bound
"""
from __future__ import annotations

import numpy as np
import torch

from integration.pool import PoolLayout
from sim import fp8 as sim_fp8
from sim import mxfp4 as sim_mxfp4
from sim.layout import PageGeometry


def sim_geometry(pool_layout: PoolLayout, layer: int) -> PageGeometry:
    return PageGeometry(pool_layout.kv_dtype, pool_layout.page_size, pool_layout.head_dim, pool_layout.num_pages,
                        page_stride=pool_layout.page_stride, layout=pool_layout.layout,
                        view_offset=pool_layout.view_offset(layer))


def bf16_bits(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().view(torch.uint16).numpy()


def sim_k(k: torch.Tensor, kv_dtype: str, scale_rule: str = "rceil"):
    """sim's (values, scales) of bf16 K rows [T, D], as sim.layout.write_tokens takes them."""
    if kv_dtype == "fp8":
        return sim_fp8.quantize(bf16_bits(k))
    return sim_mxfp4.quantize(bf16_bits(k), scale_rule=scale_rule)


def sim_q(q: torch.Tensor, weights: torch.Tensor, kv_dtype: str, scale_rule: str = "rceil"):
    """(q64 float64 [T, H, D], weights64 float64 [T, H]) that the hook's scorer must reproduce."""
    w = weights.detach().cpu().numpy().astype(np.float64)
    if kv_dtype == "fp8":
        values, scales = sim_fp8.quantize(bf16_bits(q))
        return sim_fp8.dequantize(values, np.ones_like(scales), dtype=np.float64), w * scales
    codes, scales = sim_mxfp4.quantize(bf16_bits(q), scale_rule=scale_rule)
    return sim_mxfp4.dequantize(codes, scales, dtype=np.float64), w


def assert_topk_within_bound(got: torch.Tensor, ref: np.ndarray, bound: np.ndarray, visible: np.ndarray, k: int,
                             what: str, by_value: bool = False) -> None:
    """got int32 [R, k] from the hook; ref / bound float64 [R, W] (reference logits and the fp32 error bound);
    visible int [R] (row r sees columns 0 .. visible[r] - 1); by_value: the hook's sorted_top_k.

    Exact structure: min(k, visible) distinct visible indices, then -1 padding; ascending unless by_value. Values:
    the choice (and with by_value the order) may differ from the reference only between near-ties: a selected
    column may not lose to an unselected one, and an earlier entry may not lose to a later one, by more than the
    two bounds.
    """
    got = got.cpu().numpy()
    for r in range(got.shape[0]):
        n = min(k, int(visible[r]))
        row, pad = got[r, :n], got[r, n:]
        assert (pad == -1).all(), f"{what} row {r}: entries past {n} must be -1, got {pad.tolist()}"
        assert ((row >= 0) & (row < visible[r])).all(), \
            f"{what} row {r}: indices must be visible (0..{visible[r] - 1}), got {row.tolist()}"
        assert len(set(row.tolist())) == n, f"{what} row {r}: duplicate indices {row.tolist()}"
        v, b = ref[r, :visible[r]], bound[r, :visible[r]]
        if not by_value:
            assert (np.diff(row) > 0).all(), f"{what} row {r}: indices must ascend, got {row.tolist()}"
        for a in range(n - 1 if by_value else 0):
            i, j = row[a], row[a + 1]
            assert v[i] >= v[j] - b[i] - b[j], \
                f"{what} row {r}: column {i} (ref {v[i]!r}) ranked before {j} (ref {v[j]!r}) beyond the bound"
        unselected = np.setdiff1d(np.arange(visible[r]), row)
        if n and unselected.size:
            weakest = row[np.argmin(v[row] + b[row])]
            strongest = unselected[np.argmax(v[unselected] - b[unselected])]
            assert v[weakest] + b[weakest] >= v[strongest] - b[strongest], \
                (f"{what} row {r}: selected column {weakest} (ref {v[weakest]!r}) loses to unselected column "
                 f"{strongest} (ref {v[strongest]!r}) beyond the bound")


def capture(fn):
    """(graph, result): fn run once on a side stream (compilation and warm-up stay out of the capture), then
    captured into a CUDA graph; result is what the captured call returned (its buffers are the graph's)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    return graph, result
