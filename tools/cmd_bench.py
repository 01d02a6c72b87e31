"""`mxidx bench`: GPU timings of the scorers against the machine's measured ceilings, FP8 vs MXFP4, in one run.

Every figure is the median over CUDA-graph replays (each replay runs the kernel `--inner` times back to back, so
launch gaps are amortised the way a captured decode step amortises them). The copy bandwidth and the matmul rates
used as ceilings are measured in the same run, on the same device.
"""
from __future__ import annotations

import json
import statistics
import sys

import click

from .runtime import choose_device


def _graph_time_us(fns, *, inner: int, replays: int) -> float:
    """Median time of one call in microseconds, from `replays` replays of a graph holding `inner` calls that cycle
    through `fns` (several input sets, so that repeated calls do not just re-read the L2: the H200's is 60 MB)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up (compiles) outside capture
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(inner):
            fns[i % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / inner)
    return statistics.median(times)


def _ceilings(inner: int, replays: int) -> dict:
    """Device-to-device copy bandwidth (bytes read + written) and bf16 / fp8 matmul rates on 8192^3."""
    import torch

    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    copy_us = _graph_time_us([lambda: dst.copy_(src)], inner=inner, replays=replays)
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    bf16_us = _graph_time_us([lambda: a @ b], inner=2, replays=replays)
    out = {"copy_GBps": 2 * n / copy_us / 1e3, "bf16_TFLOPs": 2 * m**3 / bf16_us / 1e6}
    del src, dst, a, b
    torch.cuda.empty_cache()
    return out


def decode_inputs(kv_dtype: str, device: str, *, batch, next_n, heads, head_dim, context, page_size, layout,
                  seed: int = 0):
    """One input set of the decode benchmark: a paged cache on shuffled physical pages filled by the hw writer from
    random bf16 keys, quantized queries and weights. Returns (call, bytes_moved): call() runs
    hw.fp8_fp4_paged_mqa_logits (clean_logits=False, as a decode step does) and returns the logits; bytes_moved
    counts the K cache bytes read once, q, the weights and the logits written."""
    import torch

    import hw
    from integration.schedule import default_num_sms

    gen = torch.Generator(device=device).manual_seed(seed)
    pages_per_seq = -(-context // page_size)
    num_pages = batch * pages_per_seq
    bpt = head_dim + 4 if kv_dtype == "fp8" else head_dim // 2 + head_dim // 32
    page_stride = -(-page_size * bpt // 16) * 16
    pool = torch.zeros(num_pages * page_stride, dtype=torch.uint8, device=device)
    kv_cache = pool.as_strided((num_pages, page_size, 1, bpt), (page_stride, bpt, bpt, 1))
    perm = torch.randperm(num_pages, device=device, generator=gen).to(torch.int32)
    block_table = perm.view(batch, pages_per_seq).contiguous()
    slots = (block_table.to(torch.int64)[:, :, None] * page_size
             + torch.arange(page_size, device=device)).reshape(batch, -1)[:, :context].reshape(-1)
    k = torch.randn(batch * context, head_dim, device=device, generator=gen).to(torch.bfloat16)
    hw.indexer_k_quant_and_cache(k, kv_cache, slots, kv_dtype=kv_dtype, layout=layout)
    q_bf16 = torch.randn(batch, next_n, heads, head_dim, device=device, generator=gen).to(torch.bfloat16)
    weights = torch.randn(batch, next_n, heads, device=device, generator=gen)
    if kv_dtype == "fp8":
        q_vals, weights = hw.quantize_q_fp8(q_bf16, weights)
        q = (q_vals, None)
    else:
        q = hw.quantize_q_mxfp4(q_bf16)
    weights = weights.reshape(batch * next_n, heads).contiguous()
    context_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    meta = hw.get_paged_mqa_logits_metadata(context_lens, page_size, default_num_sms(torch.device(device)))

    def call():
        return hw.fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, meta, context,
                                           clean_logits=False, layout=layout)

    q_bytes = sum(t.numel() * t.element_size() for t in q if t is not None)
    moved = batch * context * bpt + q_bytes + weights.numel() * 4 + batch * next_n * context * 4
    return call, moved


INPUT_SETS = 4  # 4 x 35.7 MB (MXFP4, the default shape) > the H200's 60 MB L2


def _decode_case(kv_dtype: str, *, layout, inner, replays, **shape):
    """Time hw.fp8_fp4_paged_mqa_logits on one shape over INPUT_SETS input sets; return time and bytes moved."""
    sets = [decode_inputs(kv_dtype, "cuda", layout=layout, seed=i, **shape) for i in range(INPUT_SETS)]
    us = _graph_time_us([call for call, _ in sets], inner=inner, replays=replays)
    moved = sets[0][1]
    return {"format": kv_dtype, "layout": layout or kv_dtype, "time_us": us, "bytes_moved": moved,
            "GBps": moved / us / 1e3}


@click.command()
@click.option("--batch", default=64, show_default=True)
@click.option("--next-n", default=1, show_default=True)
@click.option("--heads", default=32, show_default=True)
@click.option("--head-dim", default=128, show_default=True)
@click.option("--context", default=8192, show_default=True)
@click.option("--page-size", default=64, show_default=True)
@click.option("--inner", default=20, show_default=True, help="kernel calls per graph replay")
@click.option("--replays", default=30, show_default=True)
@click.option("--json-out", type=click.Path(dir_okay=False), help="also write the results as JSON here")
def bench(batch, next_n, heads, head_dim, context, page_size, inner, replays, json_out):
    """Decode scorer timings (FP8, MXFP4, MXFP4 tiled) against the copy bandwidth measured in the same run."""
    try:
        choose_device("cuda")
    except RuntimeError as err:
        click.echo(f"mxidx bench: {err} (bench times GPU kernels; `mxidx diff --quick` checks them on the CPU)",
                   err=True)
        sys.exit(2)
    import torch

    shape = dict(batch=batch, next_n=next_n, heads=heads, head_dim=head_dim, context=context, page_size=page_size)
    click.echo(f"device: {torch.cuda.get_device_name(0)}; shape {shape}", err=True)
    click.echo("measuring ceilings ...", err=True)
    ceil = _ceilings(inner=5, replays=replays)
    rows = []
    variants = [("fp8", None), ("mxfp4", None)] + ([("mxfp4", "mxfp4_tiled")] if head_dim % 128 == 0 else [])
    for kv_dtype, layout in variants:
        click.echo(f"decode {layout or kv_dtype} ...", err=True)
        rows.append(_decode_case(kv_dtype, layout=layout, inner=inner, replays=replays, **shape))
    base = rows[0]["time_us"]
    click.echo(f"copy bandwidth (read+write): {ceil['copy_GBps']:.0f} GB/s; bf16 matmul: {ceil['bf16_TFLOPs']:.0f} "
               "TFLOP/s")
    click.echo(f"{'variant':<14}{'time us':>10}{'MB moved':>10}{'GB/s':>8}{'% copy':>8}{'vs fp8':>8}")
    for r in rows:
        r["frac_copy"] = r["GBps"] / ceil["copy_GBps"]
        r["speedup_vs_fp8"] = base / r["time_us"]
        click.echo(f"{r['layout']:<14}{r['time_us']:>10.1f}{r['bytes_moved'] / 1e6:>10.2f}{r['GBps']:>8.0f}"
                   f"{100 * r['frac_copy']:>7.0f}%{r['speedup_vs_fp8']:>7.2f}x")
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "shape": shape, "ceilings": ceil, "decode": rows,
                       "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__}},
                      f, indent=2)
