"""`python -m tools.bench_cp --out DIR`: one indexer layer's decode step and prefill chunk on 1 GPU vs a context-
parallel group of R GPUs (integration.context_parallel), at long contexts (default 128K and 1M tokens).

    python -m tools.bench_cp --out DIR                            # spawns R = --gpus processes (default 2)
    torchrun --nproc_per_node 2 -m tools.bench_cp --out DIR       # or under torchrun (R = its world size)

Per case (format x context x batch for decode; format x context for a prefill chunk of --prefill-queries tokens at
the end of a request): rank 0 runs SparseIndexer over a cache holding every key, then every rank runs
ContextParallelIndexer over its shard (the same keys, written by each rank for the positions it owns). Recorded:
the time of one hook call (decode: median of CUDA-graph replays, the way a captured step runs; prefill: mean of
eager calls), the time of merge_top_k alone on the same rows and its share of the sharded call, the cache bytes and
the peak memory per GPU, the all-gather bytes each rank receives (R x rows x top_k x 8), and whether the sharded
result equals the 1-GPU result exactly (graph replays included). Writes cp-bench.json and cp-bench.md into DIR
after every case; exits 1 if any result differs, 2 when fewer than 2 GPUs are present.

NCCL's NVLink multicast (NVLS) is switched off (NCCL_NVLS_ENABLE=0) unless the environment sets it.
"""
from __future__ import annotations

import datetime
import itertools
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass

import click

from .runtime import choose_device
from .timing import eager_time_us, graph_time_us

DEVICE = "cuda"
FILL_CHUNK = 1 << 16   # positions written per cache-fill call (per request)
GiB = 1 << 30
TIMEOUT = datetime.timedelta(minutes=30)


@dataclass(frozen=True)
class Options:
    out: str
    contexts: tuple[int, ...]
    batches: tuple[int, ...]
    formats: tuple[str, ...]
    next_n: int
    heads: int
    head_dim: int
    page_size: int
    top_k: int
    prefill_queries: int
    scheme: str
    interleave: int
    timing: str
    inner: int
    replays: int


@dataclass(frozen=True)
class Case:
    kind: str         # "decode" | "prefill"
    kv_dtype: str
    context: int
    batch: int

    @property
    def label(self) -> str:
        return f"{self.kind} {self.kv_dtype} ctx {self.context} B{self.batch}"


def _cases(opts: Options) -> list[Case]:
    cases = [Case("decode", f, c, b) for f, c, b in itertools.product(opts.formats, opts.contexts, opts.batches)]
    if opts.prefill_queries:
        cases += [Case("prefill", f, c, 1) for f, c in itertools.product(opts.formats, opts.contexts)]
    return cases


def _decision(kv_dtype: str):
    from integration.config import IndexerConfig
    from integration.gates import GateDecision

    config = IndexerConfig(kv_dtype)
    return GateDecision(config, config, None, "tools.bench_cp: the format asked for")


def _rows_of(case: Case, opts: Options) -> int:
    return case.batch * _new_per_request(case, opts)


def _new_per_request(case: Case, opts: Options) -> int:
    return opts.next_n if case.kind == "decode" else opts.prefill_queries


def _new_tokens(case: Case, opts: Options):
    """(requests, positions) int64 of the call's new tokens, request-major, on the current GPU."""
    import torch

    n = _new_per_request(case, opts)
    positions = torch.arange(case.context - n, case.context, device=DEVICE).repeat(case.batch)
    requests = torch.arange(case.batch, device=DEVICE).repeat_interleave(n)
    return requests, positions


def _fill(kv_cache, kv_dtype: str, slot_mapping, case: Case, opts: Options, upto: int) -> None:
    """Write the keys of positions 0 .. upto - 1 of every request (the same keys on every rank and run: seeded by
    chunk); slot_mapping(positions, requests) -> int64 slots (-1: not this cache's)."""
    import torch

    import hw

    for start in range(0, upto, FILL_CHUNK):
        end = min(upto, start + FILL_CHUNK)
        gen = torch.Generator(device=DEVICE).manual_seed(start)
        keys = torch.randn(case.batch * (end - start), opts.head_dim, device=DEVICE, generator=gen)
        positions = torch.arange(start, end, device=DEVICE).repeat(case.batch)
        requests = torch.arange(case.batch, device=DEVICE).repeat_interleave(end - start)
        hw.indexer_k_quant_and_cache(keys.to(torch.bfloat16), kv_cache, slot_mapping(positions, requests),
                                     kv_dtype=kv_dtype)


def _step_inputs(case: Case, opts: Options):
    """q bf16 [T, H, D], k bf16 [T, D], weights fp32 [T, H] of the call's new tokens (seeded)."""
    import torch

    rows = _rows_of(case, opts)
    gen = torch.Generator(device=DEVICE).manual_seed(1 << 40)
    q = torch.randn(rows, opts.heads, opts.head_dim, device=DEVICE, generator=gen).to(torch.bfloat16)
    k = torch.randn(rows, opts.head_dim, device=DEVICE, generator=gen).to(torch.bfloat16)
    w = torch.randn(rows, opts.heads, device=DEVICE, generator=gen) / opts.heads ** 0.5
    return q, k, w


def _run_case(case: Case, opts: Options, sharded: bool, sharding, group):
    """Build one side of a case, run it once eagerly, time it. -> (eager result, replayed result, stats dict)."""
    import torch
    import torch.distributed as dist

    from integration.context_parallel import ContextParallelIndexer, ContextParallelSchedule, merge_top_k
    from integration.indexer import DecodeMetadata, PrefillMetadata, SparseIndexer
    from integration.pool import IndexerPool, PoolLayout
    from integration.schedule import DecodeSchedule

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    rank = dist.get_rank(group) if sharded else 0
    held = sharding.local_capacity(case.context, rank) if sharded else case.context
    max_pages = max(1, -(-held // opts.page_size))
    pool = IndexerPool(PoolLayout(case.kv_dtype, None, 1, case.batch * max_pages, opts.page_size, opts.head_dim),
                       DEVICE)
    kv_cache = pool.view(0)
    block_table = torch.arange(case.batch * max_pages, dtype=torch.int32, device=DEVICE).view(case.batch, max_pages)

    def slot_mapping(positions, requests):
        if sharded:
            return sharding.slot_mapping(positions, requests, block_table, opts.page_size, rank)
        return block_table[requests, positions // opts.page_size].long() * opts.page_size + positions % opts.page_size

    requests, positions = _new_tokens(case, opts)
    _fill(kv_cache, case.kv_dtype, slot_mapping, case, opts, case.context - _new_per_request(case, opts))
    q, k, w = _step_inputs(case, opts)
    slots = slot_mapping(positions, requests)
    common = dict(top_k=opts.top_k, max_context_len=case.context)
    if sharded:
        hook = ContextParallelIndexer(_decision(case.kv_dtype), kv_cache, sharding=sharding, group=group, **common)
    else:
        hook = SparseIndexer(_decision(case.kv_dtype), kv_cache, **common)
    if case.kind == "decode":
        if sharded:
            schedule = ContextParallelSchedule(case.batch, max_pages, opts.page_size, case.context, DEVICE,
                                               sharding=sharding, rank=rank, next_n=opts.next_n)
        else:
            schedule = DecodeSchedule(case.batch, max_pages, opts.page_size, case.context, DEVICE,
                                      next_n=opts.next_n)
        schedule.update(torch.full((case.batch,), case.context, dtype=torch.int32, device=DEVICE))
        meta = DecodeMetadata(slots, block_table, schedule)
    else:
        meta = PrefillMetadata(slots, block_table, (case.context,), (opts.prefill_queries,))
    eager = hook(q, k, w, meta)
    result = torch.empty_like(eager)

    def step():
        result.copy_(hook(q, k, w, meta))

    graphed = case.kind == "decode" and opts.timing == "graph"
    time_us = (graph_time_us([step], inner=opts.inner, replays=opts.replays) if graphed
               else eager_time_us(step, iters=opts.replays))
    stats = {"time_us": time_us, "cache_bytes": pool.layout.pool_bytes,
             "peak_bytes": torch.cuda.max_memory_allocated(), "graph": graphed}
    if sharded:
        gen = torch.Generator(device=DEVICE).manual_seed(rank)
        rows = _rows_of(case, opts)
        values = torch.randn(rows, opts.top_k, device=DEVICE, generator=gen)
        local = torch.arange(opts.top_k, dtype=torch.int32, device=DEVICE).repeat(rows, 1)
        glob = sharding.global_position(local, rank)

        def merge():
            merge_top_k(values, glob, group)
        stats["merge_us"] = (graph_time_us([merge], inner=opts.inner, replays=opts.replays) if graphed
                             else eager_time_us(merge, iters=opts.replays))
    return eager, result, stats


def _max_over_ranks(value: float, group) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64, device=DEVICE)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t[0])


def _table(rows: list[dict], world: int) -> str:
    head = (f"| step | format | context | B | rows | 1 GPU us | {world} GPUs us | speedup | merge us (share) | "
            f"cache GiB/GPU 1 -> {world} | peak GiB/GPU 1 -> {world} | all-gather MiB | exact |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['format']} | {r['context']} | {r['batch']} | {r['rows']} | {r['single_us']:.1f} | "
            f"{r['sharded_us']:.1f} | {r['single_us'] / r['sharded_us']:.2f}x | {r['merge_us']:.1f} "
            f"({r['merge_share']:.0%}) | {r['single_cache_bytes'] / GiB:.3f} -> {r['sharded_cache_bytes'] / GiB:.3f} "
            f"| {r['single_peak_bytes'] / GiB:.2f} -> {r['sharded_peak_bytes'] / GiB:.2f} | "
            f"{r['allgather_bytes'] / 2**20:.2f} | {'yes' if r['exact'] else '**NO**'} |")
    return "\n".join(lines) + "\n"


def _write(opts: Options, rows: list[dict], world: int, device: str) -> None:
    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "cp-bench.json"), "w") as f:
        json.dump({"device": device, "gpus": world, "options": asdict(opts), "rows": rows}, f, indent=1)
    sharding = opts.scheme + (f" (interleave {opts.interleave})" if opts.scheme == "interleaved" else "")
    decode_timing = "median of CUDA-graph replays" if opts.timing == "graph" else "mean of eager calls"
    with open(os.path.join(opts.out, "cp-bench.md"), "w") as f:
        f.write(f"# Context-parallel indexing: 1 vs {world} GPUs\n\n"
                f"{world} x {device}; H {opts.heads}, D {opts.head_dim}, P {opts.page_size}, top_k {opts.top_k}, "
                f"next_n {opts.next_n}, prefill chunk {opts.prefill_queries} queries; sharding {sharding}. "
                f"Decode: one layer's hook call, {decode_timing}; prefill: mean of eager calls. Time per GPU group "
                f"is the slowest rank's. All-gather: its output on each rank per call ({world} x rows x top_k x 8 "
                f"bytes, {world - 1}/{world} of it over the links). Command: `python -m tools.bench_cp` with the "
                f"options recorded in cp-bench.json.\n\n")
        f.write(_table(rows, world))


def _bench(rank: int, world: int, opts: Options) -> bool:
    """Every case on this rank; rank 0 writes the results. -> whether every sharded result was exact."""
    import torch
    import torch.distributed as dist

    from integration.context_parallel import Sharding

    all_exact, rows = True, []
    for case in _cases(opts):
        sharding = (Sharding("interleaved", opts.interleave, world) if opts.scheme == "interleaved"
                    else Sharding.contiguous_for(case.context, world))
        single = None
        if rank == 0:
            click.echo(f"{case.label}: 1 GPU", err=True)
            single, _, single_stats = _run_case(case, opts, False, None, None)
            single = single.cpu()
        dist.barrier()
        if rank == 0:
            click.echo(f"{case.label}: {world} GPUs", err=True)
        eager, replayed, stats = _run_case(case, opts, True, sharding, None)
        sharded_us = _max_over_ranks(stats["time_us"], None)
        merge_us = _max_over_ranks(stats["merge_us"], None)
        peak = _max_over_ranks(stats["peak_bytes"], None)
        cache = _max_over_ranks(stats["cache_bytes"], None)
        if rank == 0:
            exact = torch.equal(eager.cpu(), single) and torch.equal(replayed.cpu(), single)
            all_exact &= exact
            rows_n = _rows_of(case, opts)
            row = {"kind": case.kind, "format": case.kv_dtype, "context": case.context, "batch": case.batch,
                   "rows": rows_n, "single_us": single_stats["time_us"], "sharded_us": sharded_us,
                   "merge_us": merge_us, "merge_share": merge_us / sharded_us,
                   "single_cache_bytes": single_stats["cache_bytes"], "sharded_cache_bytes": int(cache),
                   "single_peak_bytes": single_stats["peak_bytes"], "sharded_peak_bytes": int(peak),
                   "allgather_bytes": world * rows_n * opts.top_k * 8, "graph": stats["graph"], "exact": exact}
            rows.append(row)
            click.echo(f"  1 GPU {row['single_us']:.1f} us, {world} GPUs {sharded_us:.1f} us (merge {merge_us:.1f} "
                       f"us), exact: {exact}", err=True)
            _write(opts, rows, world, torch.cuda.get_device_name(0))
        del eager, replayed
    return all_exact


def _worker(rank: int, world: int, opts: Options, init_method: str | None) -> bool:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank if init_method else int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", init_method=init_method or "env://", rank=rank, world_size=world,
                            timeout=TIMEOUT)
    try:
        exact = _bench(rank, world, opts)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if not exact:
        raise SystemExit(f"rank {rank}: a sharded result differs from the 1-GPU result (see cp-bench.md)")
    return exact


def _spawned(rank: int, world: int, opts: Options, init_method: str) -> None:
    choose_device(DEVICE)
    _worker(rank, world, opts, init_method)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


@click.command()
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Folder for cp-bench.json / .md.")
@click.option("--gpus", default=2, show_default=True, help="Ranks to spawn (ignored under torchrun).")
@click.option("--contexts", default="131072,1048576", show_default=True, help="Context lengths, comma-separated.")
@click.option("--batches", default="1,8", show_default=True, help="Decode batch sizes, comma-separated.")
@click.option("--formats", default="fp8,mxfp4", show_default=True, help="Indexer cache formats, comma-separated.")
@click.option("--next-n", default=1, show_default=True, help="Decode tokens per request and step.")
@click.option("--heads", default=64, show_default=True, help="Indexer heads H.")
@click.option("--head-dim", default=128, show_default=True, help="Indexer head dim D.")
@click.option("--page-size", default=64, show_default=True, help="Tokens per cache page P.")
@click.option("--top-k", default=2048, show_default=True, help="Keys selected per query row.")
@click.option("--prefill-queries", default=1024, show_default=True, help="Prefill chunk length (0: no prefill).")
@click.option("--scheme", type=click.Choice(["interleaved", "contiguous"]), default="interleaved", show_default=True,
              help="Sharding (contiguous: blocks of ceil(context / R)).")
@click.option("--interleave", default=1, show_default=True, help="Interleave size of --scheme interleaved.")
@click.option("--timing", type=click.Choice(["graph", "eager"]), default="graph", show_default=True,
              help="Decode timing: CUDA-graph replays, or eager calls.")
@click.option("--inner", default=3, show_default=True, help="Calls per graph replay.")
@click.option("--replays", default=10, show_default=True, help="Graph replays (median) or eager calls (mean).")
def bench_cp(out, gpus, contexts, batches, formats, next_n, heads, head_dim, page_size, top_k, prefill_queries,
             scheme, interleave, timing, inner, replays):
    """Time one indexer layer on 1 GPU vs a context-parallel group (NCCL), and check the results are equal."""
    import torch

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    opts = Options(out, _ints(contexts), _ints(batches), tuple(formats.split(",")), next_n, heads, head_dim,
                   page_size, top_k, prefill_queries, scheme, interleave, timing, inner, replays)
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    world = int(os.environ["WORLD_SIZE"]) if torchrun else gpus
    if world < 2 or torch.cuda.device_count() < world:
        click.echo(f"tools.bench_cp compares 1 GPU with a group of at least 2, one GPU per rank: asked for {world} "
                   f"ranks, torch sees {torch.cuda.device_count()} GPU(s)", err=True)
        sys.exit(2)
    if torchrun:
        choose_device(DEVICE)
        _worker(int(os.environ["RANK"]), world, opts, None)
    else:
        import torch.multiprocessing as mp

        mp.spawn(_spawned, args=(world, opts, f"tcp://127.0.0.1:{_free_port()}"), nprocs=world)
    click.echo(f"wrote {os.path.join(out, 'cp-bench.md')}", err=True)


if __name__ == "__main__":
    bench_cp()
