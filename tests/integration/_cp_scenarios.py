"""The scenarios of the context-parallel tests, and the code both sides run.

A scenario is a short life of three requests on one indexer layer: two prefill chunks (the second sees the first
through the cache; two requests get no new token in it) and a decode step of next_n tokens per request, top_k = 8 at a
maximum context of 64. The same token inputs (q, k, weights per request and position) go through

    run_reference(scenario, device)        one process: SparseIndexer over one pool holding every key
    run_sharded(scenario, device, group)   a rank of `group`: ContextParallelIndexer over the rank's own pool

and each returns the hook's outputs of the three calls (on a GPU also the decode call captured in a CUDA graph
and replayed); the tests require them equal, bit for bit.

The keys are built to exercise the merge: context lengths not divisible by the ranks, a 3-token request of which
most ranks hold no key, NaN keys (positions p % 11 == 2), one key vector repeated at the other p % 4 == 1 (its logits
tie, on every rank: the top-k often cuts through the tie group, and the tie rule must pick the lowest positions),
and rows with fewer than top_k visible keys (padding).

`MergeCase` checks merge_top_k alone on rows of special values. `worker` runs the sharded side of several of
either in one process of a torch.multiprocessing group (gloo on the CPU, NCCL on GPUs) and saves the outputs for
the test to compare with the references.
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch

import hw
from integration.config import IndexerConfig
from integration.context_parallel import ContextParallelIndexer, ContextParallelSchedule, Sharding, merge_top_k
from integration.gates import GateDecision
from integration.indexer import DecodeMetadata, PrefillMetadata, SparseIndexer
from integration.pool import IndexerPool, PoolLayout
from integration.schedule import DecodeSchedule

HEADS, DIM, PAGE, TOP_K, MAX_CONTEXT = 2, 64, 16, 8, 64
BATCH = 3
PREFILL_CHUNKS = (((24, 24), (21, 21), (3, 3)), ((35, 11), (21, 0), (3, 0)))   # (seq_len, query_len) per request
DECODE_STEPS = 1
NAN_PERIOD, NAN_AT = 11, 2      # NaN keys at positions p % 11 == 2
TIE_PERIOD, TIE_AT = 4, 1       # the repeated key at positions p % 4 == 1
NUM_PROGRAMS = 4
MERGE_ROWS, MERGE_WIDTH, MERGE_KS = 6, 40, (5, 16)
MERGE_LENGTHS = (40, 40, 37, 11, 3, 0)
MERGE_SEED = 3


@dataclass(frozen=True)
class Scenario:
    """The hook's life above on `world` ranks sharded by (scheme, size), next_n tokens per decode step."""

    kv_dtype: str
    scheme: str
    size: int
    world: int
    next_n: int

    def __str__(self):
        return f"{self.kv_dtype}-{self.scheme}{self.size}-R{self.world}-N{self.next_n}"

    @property
    def sharding(self) -> Sharding:
        return Sharding(self.scheme, self.size, self.world)

    @property
    def reference_key(self):
        """Scenarios with equal keys have the same single-device outputs (the sharding does not enter)."""
        return ("hook", self.kv_dtype, self.next_n)

    def run_reference(self, device) -> list[torch.Tensor]:
        return run_reference(self, device)

    def run_sharded(self, device, group) -> list[torch.Tensor]:
        return run_sharded(self, device, group)


@dataclass(frozen=True)
class MergeCase:
    """merge_top_k alone on fp32 rows full of ties and special values (+-inf, NaN, -0.0 and +0.0), which the
    scorer does not produce at will: the ranks' top-k of their columns (sharded like key positions), merged, must
    equal hw.top_k_per_row over the whole rows."""

    scheme: str
    size: int
    world: int

    def __str__(self):
        return f"merge-{self.scheme}{self.size}-R{self.world}"

    def _rows(self, device):
        gen = torch.Generator().manual_seed(MERGE_SEED)
        palette = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1.0, -1.0, 2.5, -2.5, 3e38])
        logits = palette[torch.randint(len(palette), (MERGE_ROWS, MERGE_WIDTH), generator=gen)]
        logits[0] = torch.randn(MERGE_WIDTH, generator=gen)   # distinct values
        return logits.to(device), torch.tensor(MERGE_LENGTHS, dtype=torch.int32, device=device)

    @property
    def reference_key(self):
        return ("merge",)

    def run_reference(self, device) -> list[torch.Tensor]:
        logits, lengths = self._rows(device)
        return [hw.top_k_per_row(logits, lengths, k).cpu() for k in MERGE_KS]

    def run_sharded(self, device, group) -> list[torch.Tensor]:
        import torch.distributed as dist

        rank = dist.get_rank(group)
        sharding = Sharding(self.scheme, self.size, self.world)
        logits, lengths = self._rows(device)
        columns = torch.arange(MERGE_WIDTH, device=device)
        local_logits = logits[:, columns[sharding.owner(columns) == rank]].contiguous()   # in local order
        local_lengths = sharding.local_count(lengths, rank)
        outputs = []
        for k in MERGE_KS:
            top = hw.top_k_per_row(local_logits, local_lengths, k)
            values = (local_logits.gather(1, top.clamp(min=0).long()) if local_logits.shape[1]
                      else torch.zeros(top.shape, device=device))   # a rank without columns: padding only
            outputs.append(merge_top_k(values, sharding.global_position(top, rank), group).cpu())
        return outputs


def nan_positions(length: int) -> list[int]:
    return [p for p in range(length) if p % NAN_PERIOD == NAN_AT]


def tie_positions(length: int) -> list[int]:
    """Positions below `length` that hold the repeated key (NaN keys overwrite it)."""
    return [p for p in range(length) if p % TIE_PERIOD == TIE_AT and p % NAN_PERIOD != NAN_AT]


def _decision(kv_dtype: str) -> GateDecision:
    config = IndexerConfig(kv_dtype)
    return GateDecision(config, config, None, "test")


def _token_tables():
    """q bf16 [B, MAX_CONTEXT, H, D], k bf16 [B, MAX_CONTEXT, D], weights fp32 [B, MAX_CONTEXT, H] of the token at
    each (request, position)."""
    gen = torch.Generator().manual_seed(14)
    q = torch.randn(BATCH, MAX_CONTEXT, HEADS, DIM, generator=gen)
    k = torch.randn(BATCH, MAX_CONTEXT, DIM, generator=gen)
    k[:, TIE_AT::TIE_PERIOD] = 2 * torch.randn(DIM, generator=gen)
    k[:, NAN_AT::NAN_PERIOD] = float("nan")
    weights = torch.randn(BATCH, MAX_CONTEXT, HEADS, generator=gen)
    return q.to(torch.bfloat16), k.to(torch.bfloat16), weights


def steps(next_n: int):
    """Per hook call: (seq_lens, query_lens) of a prefill chunk or None for decode, the global context lengths
    after the call, and the new tokens' (requests, positions), request-major."""
    for chunk in PREFILL_CHUNKS:
        seq_lens, query_lens = zip(*chunk)
        yield chunk, seq_lens, [(b, p) for b, (s, n) in enumerate(chunk) for p in range(s - n, s)]
    context = [s for s, _ in PREFILL_CHUNKS[-1]]
    for _ in range(DECODE_STEPS):
        context = [c + next_n for c in context]
        yield None, tuple(context), [(b, p) for b, c in enumerate(context) for p in range(c - next_n, c)]


def _run(scenario: Scenario, device: torch.device, hook, block_table: torch.Tensor, slot_mapping, schedule):
    """Drive `hook` through the scenario's calls; slot_mapping(positions, requests) -> int64 slots."""
    q_all, k_all, w_all = _token_tables()
    outputs = []
    for chunk, context, tokens in steps(scenario.next_n):
        requests = torch.tensor([b for b, _ in tokens])
        positions = torch.tensor([p for _, p in tokens])
        q, k, w = (t[requests, positions].to(device) for t in (q_all, k_all, w_all))
        slots = slot_mapping(positions.to(device), requests.to(device))
        if chunk is not None:
            seq_lens, query_lens = zip(*chunk)
            meta = PrefillMetadata(slots, block_table, seq_lens, query_lens)
        else:
            schedule.update(torch.tensor(context, dtype=torch.int32, device=device))
            meta = DecodeMetadata(slots, block_table, schedule)
        outputs.append(hook(q, k, w, meta).cpu())
        if chunk is None and device.type == "cuda":
            outputs.append(_replayed(lambda: hook(q, k, w, meta)).cpu())
    return outputs


def _replayed(call) -> torch.Tensor:
    """The output of `call` captured in a CUDA graph (collectives included) and replayed once."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    graph.replay()
    torch.cuda.synchronize()
    return out


def _block_table(pages_per_request: int, seed: int, device) -> torch.Tensor:
    """Shuffled distinct physical pages, int32 [BATCH, pages_per_request]."""
    gen = torch.Generator().manual_seed(seed)
    pages = torch.randperm(BATCH * pages_per_request + 1, generator=gen)[:BATCH * pages_per_request]
    return pages.view(BATCH, pages_per_request).to(torch.int32).to(device)


def _pool_view(kv_dtype: str, max_pages: int, device) -> torch.Tensor:
    return IndexerPool(PoolLayout(kv_dtype, None, 1, BATCH * max_pages + 1, PAGE, DIM), device).view(0)


def run_reference(scenario: Scenario, device) -> list[torch.Tensor]:
    """The single-device outputs: int32 [T, TOP_K] per call."""
    max_pages = MAX_CONTEXT // PAGE
    block_table = _block_table(max_pages, 0, device)
    hook = SparseIndexer(_decision(scenario.kv_dtype), _pool_view(scenario.kv_dtype, max_pages, device),
                         top_k=TOP_K, max_context_len=MAX_CONTEXT)
    schedule = DecodeSchedule(BATCH, max_pages, PAGE, MAX_CONTEXT, device, next_n=scenario.next_n,
                              num_sms=NUM_PROGRAMS)

    def slot_mapping(positions, requests):
        return block_table[requests, positions // PAGE].long() * PAGE + positions % PAGE
    return _run(scenario, device, hook, block_table, slot_mapping, schedule)


def run_sharded(scenario: Scenario, device, group) -> list[torch.Tensor]:
    """This rank's outputs of the scenario over its shard (every rank of `group` calls it together)."""
    import torch.distributed as dist

    rank = dist.get_rank(group)
    sharding = scenario.sharding
    max_pages = max(1, -(-sharding.local_capacity(MAX_CONTEXT, rank) // PAGE))
    block_table = _block_table(max_pages, 1 + rank, device)
    hook = ContextParallelIndexer(_decision(scenario.kv_dtype), _pool_view(scenario.kv_dtype, max_pages, device),
                                  top_k=TOP_K, max_context_len=MAX_CONTEXT, sharding=sharding, group=group)
    schedule = ContextParallelSchedule(BATCH, max_pages, PAGE, MAX_CONTEXT, device, sharding=sharding, rank=rank,
                                       next_n=scenario.next_n, num_sms=NUM_PROGRAMS)

    def slot_mapping(positions, requests):
        return sharding.slot_mapping(positions, requests, block_table, PAGE, rank)
    return _run(scenario, device, hook, block_table, slot_mapping, schedule)


def result_path(out_dir: str, scenario: Scenario, rank: int) -> str:
    return os.path.join(out_dir, f"{scenario}.rank{rank}.pt")


def worker(rank: int, world: int, backend: str, init_file: str, out_dir: str, scenarios: list,
           timeout_s: float) -> None:
    """One process of a torch.multiprocessing.spawn group of `world` processes: runs the sharded side of
    `scenarios` (Scenario and MergeCase objects).

    A scenario of `world` ranks runs on the whole group; smaller ones are dealt round-robin over the group's
    consecutive subgroups of their size (so that a rank of a subgroup has a group rank other than its global
    rank). Saves each scenario's outputs to result_path(out_dir, scenario, group rank).
    """
    import torch.distributed as dist

    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        sizes = sorted({s.world for s in scenarios})
        subgroups = {size: [dist.new_group(list(range(start, start + size))) for start in range(0, world, size)]
                     for size in sizes if size < world}
        dealt = {size: 0 for size in sizes}
        for scenario in scenarios:
            size = scenario.world
            if size == world:
                group = None
            else:
                group = subgroups[size][dealt[size] % len(subgroups[size])]
                dealt[size] += 1
                if dist.get_rank(group) < 0:   # another subgroup's scenario
                    continue
            torch.save(scenario.run_sharded(device, group), result_path(out_dir, scenario, dist.get_rank(group)))
        dist.barrier()
    finally:
        dist.destroy_process_group()
