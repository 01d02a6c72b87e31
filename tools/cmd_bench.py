"""`mxidx bench`: GPU timings of the scorers against the machine's measured ceilings, FP8 vs MXFP4, in one run.

Every figure is the median over CUDA-graph replays (each replay runs the kernel `--inner` times back to back, so
launch gaps are amortised the way a captured decode step amortises them). The copy bandwidth and the matmul rates
used as ceilings are measured in the same run, on the same device.
"""
from __future__ import annotations

import json
import sys

import click

from .runtime import choose_device
from .timing import eager_time_us, graph_time_us, queued_time_us

COPY_BYTES = 1 << 30   # 1 GiB, far past the 60 MB L2
MATMUL_N = 8192
SPIN_CYCLES = 200_000  # the clock probe's spin: 0.1 ms at 2 GHz
#: a run whose measured SM clock is below this fraction of the card's maximum is flagged as throttled
THROTTLED_BELOW = 0.75


def copy_GBps(inner: int, replays: int) -> dict:
    """Device-to-device copy bandwidth, bytes read + written, three ways: cudaMemcpyAsync eagerly, the same
    captured in a graph (a memcpy node, which the driver may hand to a copy engine rather than the SMs), and an
    elementwise kernel (int32 negation) in a graph. Returns {"copy_GBps": the fastest of the three (the ceiling),
    "copy_ways_GBps": {way: GB/s}}."""
    import torch

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    src32, dst32 = src.view(torch.int32), dst.view(torch.int32)
    moved_kB = 2 * COPY_BYTES / 1e3
    ways = {"memcpy_eager": moved_kB / eager_time_us(lambda: dst.copy_(src), iters=inner * 4),
            "memcpy_graph": moved_kB / graph_time_us([lambda: dst.copy_(src)], inner=inner, replays=replays),
            "kernel_graph": moved_kB / graph_time_us([lambda: torch.neg(src32, out=dst32)], inner=inner,
                                                     replays=replays)}
    return {"copy_GBps": max(ways.values()), "copy_ways_GBps": ways}


def _bf16_TFLOPs(replays: int) -> float:
    """bf16 matmul rate on MATMUL_N^3 random operands."""
    import torch

    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    return 2 * MATMUL_N**3 / graph_time_us([lambda: a @ b], inner=2, replays=replays) / 1e6


def sm_clock_MHz() -> float | None:
    """The SM clock an NVIDIA GPU runs at now, measured: SPIN_CYCLES cycles of `torch.cuda._sleep` (a kernel
    spinning on the SM's cycle counter) timed back to back with the GPU kept busy. None on AMD, whose counter the
    spin reads is not known to tick at the shader clock."""
    import torch

    if torch.version.hip:
        return None
    return SPIN_CYCLES / eager_time_us(lambda: torch.cuda._sleep(SPIN_CYCLES), iters=20)


def max_sm_clock_MHz() -> float | None:
    """The card's maximum SM clock as NVML reports it; None where NVML (nvidia-ml-py) is not installed or does
    not answer (AMD, no driver library)."""
    import torch

    try:
        import pynvml
    except ImportError:
        return None
    try:
        # torch's NVML handle of the current device: NVML's index after CUDA_VISIBLE_DEVICES (the GPU tests check
        # that it answers wherever nvidia-ml-py is installed)
        handle = torch.cuda._get_pynvml_handler(torch.cuda.current_device())
        return float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except (ImportError, AttributeError, RuntimeError, pynvml.NVMLError):
        return None


def throttle_warning(clocks_MHz: list[float | None], max_MHz: float | None,
                     when: str = "start / end of the run") -> str | None:
    """A warning when a measured SM clock (taken at `when`) is below THROTTLED_BELOW of the card's maximum (a power
    or heat limit, a clock cap): such a run's timings do not represent the card. None when the clocks are fine or
    a clock or the maximum is not known."""
    if not max_MHz or None in clocks_MHz or min(clocks_MHz) >= THROTTLED_BELOW * max_MHz:
        return None
    return (f"warning: the SM clock measured {' / '.join(f'{c:.0f}' for c in clocks_MHz)} MHz ({when}), "
            f"{min(clocks_MHz) / max_MHz:.0%} of this card's {max_MHz:.0f} MHz: the GPU is throttled (power, heat "
            "or a clock cap; `nvidia-smi -q -d PERFORMANCE` says which), so these timings do not represent it")


def _ceilings(inner: int, replays: int) -> dict:
    """The machine's ceilings measured in this run: copy bandwidth, the bf16 matmul rate, the SM clock it ran at
    (measured between them) and the card's maximum SM clock (None where NVML does not say)."""
    import torch

    out = copy_GBps(inner, replays)
    # the start clock after the copy's load (past the idle ramp) and before the matmul, which leaves it low for tens
    # of ms (docs/perf/h200-bench.md, "The checks beside the benchmarks")
    start_MHz = sm_clock_MHz()
    out |= {"bf16_TFLOPs": _bf16_TFLOPs(replays)}
    torch.cuda.empty_cache()   # the operands are gone with the helpers' frames
    return out | {"sm_clock_start_MHz": start_MHz, "sm_clock_max_MHz": max_sm_clock_MHz()}


def decode_inputs(kv_dtype: str, device: str, *, batch, next_n, heads, head_dim, context, page_size, layout,
                  seed: int = 0, variant: str | None = None, launch_settings: dict | None = None):
    """One input set of the decode benchmark: a paged cache on shuffled physical pages filled by the hw writer from
    random bf16 keys, quantized queries and weights. Returns (call, bytes_moved): call() runs
    hw.fp8_fp4_paged_mqa_logits (clean_logits=False, as a decode step does; `variant` and `launch_settings` as
    that launcher takes them) and returns the logits; bytes_moved counts the K cache bytes read once, q, the
    weights and the logits written; schedule_meta is the hook's (integration.schedule.default_num_sms programs),
    which the decode variants do not read."""
    import torch

    import hw
    from hw.layout import bytes_per_token
    from integration.schedule import default_num_sms

    gen = torch.Generator(device=device).manual_seed(seed)
    pages_per_seq = -(-context // page_size)
    num_pages = batch * pages_per_seq
    bpt = bytes_per_token(kv_dtype, head_dim)
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
                                           clean_logits=False, layout=layout, variant=variant,
                                           launch_settings=launch_settings)

    q_bytes = sum(t.numel() * t.element_size() for t in q if t is not None)
    moved = batch * context * bpt + q_bytes + weights.numel() * 4 + batch * next_n * context * 4
    return call, moved


INPUT_SETS = 4  # 4 x 35.7 MB (MXFP4, the default shape) > the H200's 60 MB L2


def decode_step(call, *, batch, next_n, context, topk_k, sorted_top_k=False, **_):
    """call (decode_inputs') followed by the hook's top-k of every row over its visible columns: the decode step
    of one indexer layer, as integration's hook runs it (sorted_top_k: the hook's option of that name)."""
    import torch

    import hw

    rows = torch.arange(next_n, device="cuda", dtype=torch.int32).repeat(batch)
    lengths = (context - next_n + 1 + rows).clamp_min(0)
    return lambda: hw.top_k_per_row(call(), lengths, topk_k, sorted=sorted_top_k)


def prefill_step_inputs(kv_dtype: str, device: str, *, prompt, heads, head_dim, page_size, topk_k, seed: int = 0):
    """The hook's prefill of one `prompt`-token request (integration.indexer.SparseIndexer, as a model calls it):
    K quantized and written to a paged cache on shuffled pages, q quantized, K gathered back, the causal prefill
    scorer, the top-k of every row. Returns call() (eager: the prefill path takes host lengths)."""
    import torch

    from integration.config import IndexerConfig
    from integration.gates import GateDecision
    from integration.indexer import PrefillMetadata, SparseIndexer
    from integration.pool import IndexerPool, PoolLayout

    gen = torch.Generator(device=device).manual_seed(seed)
    pages = -(-prompt // page_size)
    pool = IndexerPool(PoolLayout(kv_dtype, None, 1, pages, page_size, head_dim), device)
    config = IndexerConfig(kv_dtype)
    hook = SparseIndexer(GateDecision(config, config, None, "bench"), pool.view(0), top_k=topk_k,
                         max_context_len=prompt)
    block_table = torch.randperm(pages, device=device, generator=gen).to(torch.int32)[None, :]
    slots = (block_table[0].to(torch.int64)[:, None] * page_size
             + torch.arange(page_size, device=device)).reshape(-1)[:prompt]
    meta = PrefillMetadata(slots, block_table, (prompt,), (prompt,))
    q = torch.randn(prompt, heads, head_dim, device=device, generator=gen).to(torch.bfloat16)
    k = torch.randn(prompt, head_dim, device=device, generator=gen).to(torch.bfloat16)
    weights = torch.randn(prompt, heads, device=device, generator=gen)
    return lambda: hook(q, k, weights, meta)


def _hook_prefill_case(kv_dtype: str, *, replays, **shape):
    """{"format", "time_us": the eager mean (the host's time when it is the longer), "device_us": the calls queued
    behind a wait (the device's time a call), "host_us": the host's time a call}."""
    call = prefill_step_inputs(kv_dtype, "cuda", **shape)
    device_us, host_us = queued_time_us(call, iters=replays)
    return {"format": kv_dtype, "time_us": eager_time_us(call, iters=replays), "device_us": device_us,
            "host_us": host_us}


def decode_case(kv_dtype: str, *, layout, variant, inner, replays, topk_k: int = 0, input_sets: int = INPUT_SETS,
                sorted_top_k: bool = False, **shape):
    """Time hw.fp8_fp4_paged_mqa_logits on one shape (decode_inputs' keywords) over `input_sets` input sets
    (with topk_k: the whole decode step, decode_step); return {"format", "layout", "time_us", "bytes_moved",
    "MB_moved", "GBps"}."""
    sets = [decode_inputs(kv_dtype, "cuda", layout=layout, seed=i, variant=variant, **shape)
            for i in range(input_sets)]
    calls = [call if not topk_k else decode_step(call, topk_k=topk_k, sorted_top_k=sorted_top_k, **shape)
             for call, _ in sets]
    us = graph_time_us(calls, inner=inner, replays=replays)
    moved = sets[0][1]
    return {"format": kv_dtype, "layout": layout or kv_dtype, "time_us": us, "bytes_moved": moved,
            "MB_moved": moved / 1e6, "GBps": moved / us / 1e3}


def prefill_inputs(kv_dtype: str, device: str, *, queries, keys, heads, head_dim, causal, seed: int = 0,
                   variant: str | None = None, launch_settings: dict | None = None):
    """One input set of the prefill benchmark (contiguous K, as after the gather). Returns (call, flops): call()
    runs hw.fp8_fp4_mqa_logits (`variant` and `launch_settings` as that launcher takes them); flops =
    2 * H * D * (visible (query, key) pairs)."""
    import torch

    import hw

    gen = torch.Generator(device=device).manual_seed(seed)
    q_bf16 = torch.randn(queries, heads, head_dim, device=device, generator=gen).to(torch.bfloat16)
    k_bf16 = torch.randn(keys, 1, head_dim, device=device, generator=gen).to(torch.bfloat16)
    weights = torch.randn(queries, heads, device=device, generator=gen)
    if kv_dtype == "fp8":
        q_vals, weights = hw.quantize_q_fp8(q_bf16, weights)
        q = (q_vals, None)
        k_vals, k_scales = hw.quantize_q_fp8(k_bf16, torch.ones(keys, 1, device=device))  # per-token 2^k scales
        kv = (k_vals[:, 0], k_scales[:, 0].contiguous())
    else:
        q = hw.quantize_q_mxfp4(q_bf16)
        codes, scales = hw.quantize_q_mxfp4(k_bf16)
        kv = (codes[:, 0], scales[:, 0])
    rows = torch.arange(queries, device=device, dtype=torch.int32)
    ks = torch.zeros(queries, dtype=torch.int32, device=device)
    ke = (rows + 1 + keys - queries).clamp(min=0) if causal else torch.full_like(ks, keys)
    pairs = int(ke.sum()) - int(ks.sum())

    def call():
        return hw.fp8_fp4_mqa_logits(q, kv, weights, ks, ke, clean_logits=True, variant=variant,
                                     launch_settings=launch_settings)

    return call, 2 * heads * head_dim * pairs


def _prefill_case(kv_dtype, *, variant, inner, replays, **shape):
    call, flops = prefill_inputs(kv_dtype, "cuda", variant=variant, **shape)
    us = graph_time_us([call], inner=inner, replays=replays)
    return {"format": kv_dtype, "causal": shape["causal"], "time_us": us, "TFLOPs": flops / us / 1e6}


def _topk_case(*, variant, rows, width, k, inner, replays, causal: bool = False, sorted: bool = True,
               input_sets: int = INPUT_SETS):
    """Top-k of `rows` N(0, 1) rows of `width` columns, every column visible, or with causal row i seeing its first
    i + 1 + width - rows (the rows of the hook's prefill of one prompt), sorted or in column order; torch.topk of
    the same rows (-inf past the visible columns) in the same run, sorted (the ratio's reference) and not. The calls
    cycle over `input_sets` input sets (seeds 0, 1, ...): one launch lasts as long as its slowest row, and one set
    would time a single draw of it (docs/perf/h200-topk.md, "The bench's top-k rows over four input sets")."""
    import torch

    import hw

    sets = []
    for seed in range(input_sets):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        sets.append(torch.randn(rows, width, device="cuda", generator=gen))
    if causal:
        lengths = torch.arange(width - rows + 1, width + 1, dtype=torch.int32, device="cuda").clamp(min=0)
        hidden = torch.arange(width, device="cuda") >= lengths[:, None]
        padded = [logits.masked_fill(hidden, float("-inf")) for logits in sets]
    else:
        lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
        padded = sets
    ours = graph_time_us([lambda x=x: hw.top_k_per_row(x, lengths, k, sorted=sorted, variant=variant) for x in sets],
                         inner=inner, replays=replays)
    ref = graph_time_us([lambda x=x: torch.topk(x, k, dim=1) for x in padded], inner=inner, replays=replays)
    ref_unsorted = graph_time_us([lambda x=x: torch.topk(x, k, dim=1, sorted=False) for x in padded], inner=inner,
                                 replays=replays)
    return {"variant": variant, "rows": rows, "width": width, "k": k, "causal": causal,
            "order": "value" if sorted else "column", "input_sets": input_sets, "time_us": ours,
            "torch_topk_us": ref, "torch_unsorted_us": ref_unsorted, "vs_torch": ours / ref}


def _table(rows, columns):
    """Plain-text table: columns = [(header, key, format)]."""
    lines = ["  ".join(f"{h:>12}" for h, _, _ in columns)]
    lines += ["  ".join(f"{format(r[key], fmt) if key in r else '-':>12}" for _, key, fmt in columns) for r in rows]
    return "\n".join(lines)


@click.command()
@click.option("--batch", default=64, show_default=True, help="Decode: sequences B.")
@click.option("--next-n", default=1, show_default=True, help="Decode: query tokens per sequence (next_n).")
@click.option("--heads", default=32, show_default=True, help="Indexer heads H (decode and prefill).")
@click.option("--head-dim", default=128, show_default=True, help="Head dim D (decode and prefill).")
@click.option("--context", default=8192, show_default=True, help="Decode: context length of every sequence.")
@click.option("--page-size", default=64, show_default=True, help="Decode: tokens per cache page P.")
@click.option("--prefill-queries", default=4096, show_default=True,
              help="Prefill: queries (= keys) of the every-variant comparison; 0 skips.")
@click.option("--prefill-large", default=8192, show_default=True,
              help="Prefill: queries (= keys) of the defaults' run at DeepGEMM's shape; 0 skips.")
@click.option("--topk-k", default=2048, show_default=True, help="Top-k over the decode rows' width; 0 skips.")
@click.option("--topk-long", default=131072, show_default=True,
              help="Top-k: also rows this wide (decode batch rows); 0 skips.")
@click.option("--prefill-step", default=8192, show_default=True,
              help="The hook's whole prefill (writer, q quantizer, gather, causal scorer, top-k) of a prompt this "
                   "long; 0 skips.")
@click.option("--inner", default=20, show_default=True, help="Kernel calls per CUDA-graph replay.")
@click.option("--replays", default=30, show_default=True, help="Timed graph replays per measurement (median).")
@click.option("--json-out", type=click.Path(dir_okay=False), help="Also write the results as JSON here.")
def bench(batch, next_n, heads, head_dim, context, page_size, prefill_queries, prefill_large, topk_k, topk_long,
          prefill_step, inner, replays, json_out):
    """Time the kernels on a CUDA GPU (needs one; on a CPU, `mxidx diff --quick` checks the kernels instead):
    every decode, prefill and top-k variant of hw.variants that runs there (MXFP4 also on the tiled pages, prefill
    also causal), against the copy bandwidth and the bf16 matmul rate measured in the same run."""
    import torch

    if not torch.cuda.is_available():
        click.echo("mxidx bench times GPU kernels, but torch sees no GPU here; `mxidx diff --quick` checks the kernels "
                   "on the CPU", err=True)
        sys.exit(2)
    choose_device("cuda")
    from hw.logits import scorer_target
    from hw.targets import NotCovered, Op
    from hw.variants import select, variants

    shape = dict(batch=batch, next_n=next_n, heads=heads, head_dim=head_dim, context=context, page_size=page_size)
    name = torch.cuda.get_device_name(0)
    click.echo(f"device: {name}; decode shape {shape}", err=True)
    click.echo("measuring ceilings ...", err=True)
    ceil = _ceilings(inner=5, replays=replays)
    early = throttle_warning([ceil["sm_clock_start_MHz"]], ceil["sm_clock_max_MHz"], "at the start")
    if early:   # said now, not only in the report at the end
        click.echo(early + "; the run goes on", err=True)
    target = scorer_target("cuda")
    # every decode variant that runs here on its format's planar pages, and the MXFP4 default on the tiled pages
    runs = [(v.kv_dtype, None, v.name) for v in variants(Op.DECODE, target=target)]
    if head_dim % 128 == 0:
        runs.append(("mxfp4", "mxfp4_tiled", select(Op.DECODE, target, "mxfp4").name))
    decode = []
    for kv_dtype, layout, variant in runs:
        label = variant + ("" if layout is None else f" ({layout})")
        click.echo(f"decode {label} ...", err=True)
        try:
            row = decode_case(kv_dtype, layout=layout, variant=variant, inner=inner, replays=replays, **shape)
        except NotCovered as e:      # a variant that does not run this shape here: not timed
            click.echo(f"decode {label}: not timed: {e}", err=True)
            continue
        row.update(variant=label, frac_copy=row["GBps"] / ceil["copy_GBps"])
        decode.append(row)
    fp8_us = next(r["time_us"] for r in decode if r["format"] == "fp8")
    for row in decode:
        row["speedup_vs_fp8"] = fp8_us / row["time_us"]
    prefill = []
    defaults = tuple(select(Op.PREFILL, target, f) for f in ("fp8", "mxfp4"))
    # every variant on the full problem of prefill_queries; the defaults causal, and both ways at prefill_large
    prefill_runs = [(prefill_queries, False, variants(Op.PREFILL, target=target)), (prefill_queries, True, defaults),
                    (prefill_large, False, defaults), (prefill_large, True, defaults)]
    for size, causal, chosen in ((n, c, vs) for n, c, vs in prefill_runs if n):
        for v in chosen:
            label = f"{v.name} {size} {'causal' if causal else 'full'}"
            click.echo(f"prefill {label} ...", err=True)
            row = _prefill_case(v.kv_dtype, variant=v.name, queries=size, keys=size, heads=heads,
                                head_dim=head_dim, causal=causal, inner=3, replays=replays)
            row.update(variant=label, queries=size, frac_bf16_mm=row["TFLOPs"] / ceil["bf16_TFLOPs"])
            prefill.append(row)
    step = []
    for kv_dtype, by_value in ((f, s) for f in (("fp8", "mxfp4") if topk_k else ()) for s in (False, True)):
        order = "sorted" if by_value else "column-order"
        click.echo(f"decode step {kv_dtype} (scorer + {order} top-k) ...", err=True)
        row = decode_case(kv_dtype, layout=None, variant=None, inner=inner, replays=replays, topk_k=topk_k,
                           sorted_top_k=by_value, **shape)
        scorer = [r["time_us"] for r in decode if r["variant"] == select(Op.DECODE, target, kv_dtype).name]
        step.append(row | {"variant": f"{kv_dtype} scorer + {order} top-k {topk_k}"}
                    | ({"scorer_us": scorer[0], "vs_scorer": row["time_us"] / scorer[0]} if scorer else {}))
    hook_prefill = []
    for kv_dtype in (("fp8", "mxfp4") if prefill_step and topk_k else ()):
        click.echo(f"hook prefill {kv_dtype} {prefill_step} ...", err=True)
        row = _hook_prefill_case(kv_dtype, replays=replays, prompt=prefill_step, heads=heads, head_dim=head_dim,
                                 page_size=page_size, topk_k=topk_k)
        causal = [r["time_us"] for r in prefill if r["variant"] == f"{defaults[0].name} {prefill_step} causal"]
        hook_prefill.append(row | {"variant": f"{kv_dtype} hook prefill {prefill_step}", "prompt": prefill_step}
                            | ({"vs_fp8_causal_scorer": row["time_us"] / causal[0],
                                 "device_vs_fp8_causal_scorer": row["device_us"] / causal[0]} if causal else {}))
    topk = []
    widths = [w for w in (context, topk_long) if w and topk_k]
    for width, v in ((w, v) for w in widths for v in variants(Op.TOPK, target=target)):
        click.echo(f"top-k {v.name} {width} ...", err=True)
        topk.append(_topk_case(variant=v.name, rows=batch * next_n, width=width, k=topk_k, inner=inner,
                               replays=replays))
    default = select(Op.TOPK, target)
    for width in widths:   # the hook's form: the default variant in column order
        click.echo(f"top-k {default.name} {width} column order ...", err=True)
        topk.append(_topk_case(variant=default.name, rows=batch * next_n, width=width, k=topk_k, inner=inner,
                               replays=replays, sorted=False))
    for by_value in ((True, False) if prefill_step and topk_k else ()):   # the rows of the hook's prefill
        click.echo(f"top-k {default.name} {prefill_step} causal rows ({'sorted' if by_value else 'columns'}) ...",
                   err=True)
        topk.append(_topk_case(variant=default.name, rows=prefill_step, width=prefill_step, k=topk_k,
                               inner=INPUT_SETS, replays=replays, causal=True, sorted=by_value))
    ceil["sm_clock_end_MHz"] = sm_clock_MHz()
    clocks = [ceil["sm_clock_start_MHz"], ceil["sm_clock_end_MHz"]]
    ways = ", ".join(f"{k} {v:.0f}" for k, v in ceil["copy_ways_GBps"].items())
    top = "" if ceil["sm_clock_max_MHz"] is None else f" of {ceil['sm_clock_max_MHz']:.0f}"
    measured = "" if None in clocks else f", SM clock {clocks[0]:.0f} / {clocks[1]:.0f}{top} MHz (start / end)"
    click.echo(f"{name}: copy (read+write) {ceil['copy_GBps']:.0f} GB/s ({ways}), "
               f"bf16 matmul {ceil['bf16_TFLOPs']:.0f} TFLOP/s{measured}")
    warning = throttle_warning(clocks, ceil["sm_clock_max_MHz"])
    if warning:
        click.echo(warning)
    click.echo(f"decode B{batch}/N{next_n}/H{heads}/D{head_dim}/ctx {context}/page {page_size}:")
    click.echo(_table(decode, [("variant", "variant", ""), ("time us", "time_us", ".1f"),
                               ("MB moved", "MB_moved", ".2f"), ("GB/s", "GBps", ".0f"),
                               ("of copy", "frac_copy", ".0%"), ("vs fp8", "speedup_vs_fp8", ".2f")]))
    if step:
        click.echo(f"decode step (default scorer + default top-k, k = {topk_k}); the hook runs the column-order one:")
        click.echo(_table(step, [("variant", "variant", ""), ("time us", "time_us", ".1f"),
                                 ("scorer us", "scorer_us", ".1f"), ("vs scorer", "vs_scorer", ".2f")]))
    if hook_prefill:
        click.echo(f"the hook's prefill of one prompt (K write, q quantize, gather, causal scorer, top-k {topk_k}; "
                   f"means of {replays} calls: eager, and on the device with the calls queued ahead):")
        click.echo(_table(hook_prefill, [("variant", "variant", ""), ("eager us", "time_us", ".1f"),
                                         ("vs fp8 causal scorer", "vs_fp8_causal_scorer", ".2f"),
                                         ("device us", "device_us", ".1f"),
                                         ("device vs scorer", "device_vs_fp8_causal_scorer", ".2f"),
                                         ("host us a call", "host_us", ".1f")]))
    if prefill:
        click.echo(f"prefill, queries = keys, H{heads}/D{head_dim}:")
        click.echo(_table(prefill, [("variant", "variant", ""), ("time us", "time_us", ".1f"),
                                    ("TFLOP/s", "TFLOPs", ".0f"), ("of bf16 mm", "frac_bf16_mm", ".0%")]))
    if topk:
        click.echo("top-k (exact, ours) vs torch.topk:")
        click.echo(_table(topk, [("variant", "variant", ""), ("rows", "rows", "d"), ("width", "width", "d"),
                                 ("causal", "causal", ""), ("k", "k", "d"), ("order", "order", ""),
                                 ("ours us", "time_us", ".1f"), ("torch us", "torch_topk_us", ".1f"),
                                 ("torch unsorted", "torch_unsorted_us", ".1f"), ("vs torch", "vs_torch", ".2f")]))
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"device": name, "shape": shape, "ceilings": ceil, "decode": decode, "decode_step": step,
                       "prefill": prefill, "hook_prefill": hook_prefill, "topk": topk, "throttle_warning": warning,
                       "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__}},
                      f, indent=2)
