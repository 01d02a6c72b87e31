"""Context-parallel indexing (integration.context_parallel) against one process, bit for bit.

The sharding maps and the argument checks run in this process. The hook and the merge run in spawned processes:
one torch.multiprocessing launch of 4 gloo processes (CPU, Triton interpreter) runs every job of _cp_scenarios
(4-rank jobs on the whole group, 2-rank jobs on its two 2-rank subgroups) while this process computes the
single-process references, and every rank's outputs must equal them exactly. The same jobs run under NCCL when
there are at least 2 GPUs.
"""
from __future__ import annotations

import os

import pytest
import torch

import hw
from integration.config import IndexerConfig
from integration.context_parallel import ContextParallelIndexer, ContextParallelSchedule, Sharding
from integration.gates import GateDecision
from integration.pool import IndexerPool, PoolLayout

from . import _cp_scenarios as cp
from ._cp_scenarios import MergeCase, Scenario

HAS_GPU = torch.cuda.is_available()
TIMEOUT_S = 300   # a collective that waits this long fails the run instead of hanging it

# next_n goes with the format (fp8: 2, mxfp4: 1), so two references serve all: the local lengths of next_n rows do
# not depend on the format
SCENARIOS = [
    Scenario("fp8", "interleaved", 1, 4, 2),
    Scenario("mxfp4", "contiguous", 16, 4, 1),     # Sharding.contiguous_for(64, 4)
    Scenario("mxfp4", "interleaved", 3, 2, 1),     # runs that straddle pages
    Scenario("fp8", "contiguous", 24, 2, 2),       # the last rank holds the tail past 24
    Scenario("fp8", "interleaved", 16, 2, 2),      # one page per run
    Scenario("mxfp4", "contiguous", 32, 2, 1),     # Sharding.contiguous_for(64, 2): rank 1 holds few keys
]
MERGE_CASES = [MergeCase("interleaved", 3, 4), MergeCase("contiguous", 16, 4), MergeCase("interleaved", 1, 2),
               MergeCase("contiguous", 17, 2)]
JOBS = SCENARIOS + MERGE_CASES


def _launch(tmp_path, backend: str, nprocs: int, jobs: list, device) -> tuple[dict, dict]:
    """Run the sharded side of `jobs` in `nprocs` spawned processes and, meanwhile, their references here.
    -> ({reference_key: outputs}, {job: [outputs of group rank 0, 1, ...]})."""
    import torch.multiprocessing as mp

    out_dir = tmp_path / backend
    out_dir.mkdir()
    context = mp.start_processes(cp.worker, args=(nprocs, backend, str(out_dir / "init"), str(out_dir), jobs,
                                                  TIMEOUT_S), nprocs=nprocs, join=False, start_method="spawn")
    try:
        references = {}
        for job in jobs:
            if job.reference_key not in references:
                references[job.reference_key] = job.run_reference(device)
    finally:
        while not context.join():
            pass
    return references, {job: [torch.load(cp.result_path(str(out_dir), job, r)) for r in range(job.world)]
                        for job in jobs}


def _assert_equal_to_reference(job, outputs, references) -> None:
    want = references[job.reference_key]
    for rank, got in enumerate(outputs):
        assert len(got) == len(want)
        for call, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), f"{job}, rank {rank}, call {call}:\nsharded\n{g}\none process\n{w}"


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    return _launch(tmp_path_factory.mktemp("cp"), "gloo", 4, JOBS, torch.device("cpu"))


@pytest.mark.interp
@pytest.mark.skipif(HAS_GPU, reason="the gloo processes run the kernels on the CPU interpreter; GPUs run the NCCL "
                                    "test")
@pytest.mark.parametrize("job", JOBS, ids=str)
def test_gloo_ranks_equal_one_process(job, gloo_run):
    references, results = gloo_run
    _assert_equal_to_reference(job, results[job], references)


@pytest.mark.interp
@pytest.mark.skipif(HAS_GPU, reason="see test_gloo_ranks_equal_one_process")
def test_scenarios_exercise_the_merge(gloo_run):
    """The references show what the scenarios claim to cover, so the equality above is not vacuous: padding,
    selected NaN keys, a tie group cut by top_k (the lowest positions win), and a rank without a key of a request."""
    references, _ = gloo_run
    seen = {"padding": False, "nan": False, "tie_cut": False}
    for scenario in SCENARIOS:
        for output, (_, _, tokens) in zip(references[scenario.reference_key], cp.steps(scenario.next_n)):
            for row, (_, position) in zip(output.tolist(), tokens):   # the row sees positions 0 .. position
                chosen = set(row) - {-1}
                ties = cp.tie_positions(position + 1)
                seen["padding"] |= -1 in row
                seen["nan"] |= bool(chosen & set(cp.nan_positions(position + 1)))
                if 0 < len(chosen & set(ties)) < len(ties):
                    seen["tie_cut"] = True
                    assert chosen & set(ties) == set(ties[:len(chosen & set(ties))]), (scenario, row)
        shortest = min(seq_len for seq_len, _ in cp.PREFILL_CHUNKS[0])   # the 3-token request's first prefill
        assert any(scenario.sharding.local_capacity(shortest, r) == 0 for r in range(scenario.world)), scenario
    assert all(seen.values()), seen


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_nccl_ranks_equal_one_gpu(tmp_path):
    """The same jobs under NCCL, one GPU per rank (4-rank jobs only with 4 GPUs), references on GPU 0."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # NVLink multicast off, as the machines require
    nprocs = 4 if torch.cuda.device_count() >= 4 else 2
    jobs = [job for job in JOBS if job.world <= nprocs]
    references, results = _launch(tmp_path, "nccl", nprocs, jobs, torch.device("cuda:0"))
    for job in jobs:
        _assert_equal_to_reference(job, results[job], references)


# ---- in this process: the sharding maps and the argument checks

@pytest.mark.parametrize("sharding", [Sharding("interleaved", 1, 3), Sharding("interleaved", 5, 2),
                                      Sharding("interleaved", 16, 4), Sharding("contiguous", 7, 3),
                                      Sharding.contiguous_for(50, 4), Sharding("contiguous", 40, 2)], ids=str)
def test_sharding_maps_agree_with_brute_force(sharding):
    length = 61
    positions = torch.arange(length)
    owner = sharding.owner(positions)
    local = sharding.local_position(positions)
    lengths = torch.arange(length + 1, dtype=torch.int32)
    for rank in range(sharding.world_size):
        mine = positions[owner == rank]
        # a rank's keys sit at local positions 0, 1, ... in global order, and global_position inverts local_position
        assert local[owner == rank].tolist() == list(range(len(mine)))
        assert sharding.global_position(local[owner == rank].to(torch.int32), rank).tolist() == mine.tolist()
        assert sharding.global_position(torch.tensor([-1], dtype=torch.int32), rank).tolist() == [-1]
        counts = sharding.local_count(lengths, rank)
        assert counts.dtype == torch.int32
        assert counts.tolist() == [int((mine < n).sum()) for n in range(length + 1)]
        assert sharding.local_capacity(length, rank) == len(mine)
    if sharding.scheme == "interleaved":
        assert owner.tolist() == [(p // sharding.size) % sharding.world_size for p in range(length)]
    else:
        assert owner.tolist() == [min(p // sharding.size, sharding.world_size - 1) for p in range(length)]


def test_slot_mapping_writes_only_own_tokens():
    sharding = Sharding("interleaved", 2, 2)
    block_table = torch.tensor([[7, 3], [5, 1]], dtype=torch.int32)   # this rank's pages, 4 tokens each
    positions = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 9])
    requests = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1])
    got = sharding.slot_mapping(positions, requests, block_table, 4, 1)
    # rank 1 holds positions 2, 3, 6, 7 (local 0, 1, 2, 3); position 9 is local 5 of rank 0
    assert got.dtype == torch.int64
    assert got.tolist() == [-1, -1, 7 * 4 + 0, 7 * 4 + 1, -1, -1, 5 * 4 + 2, 5 * 4 + 3, -1]


def test_schedule_local_lengths(device):
    sharding = Sharding("contiguous", 10, 3)
    schedule = ContextParallelSchedule(2, 2, 16, 40, device, sharding=sharding, rank=2, next_n=3, num_sms=2)
    schedule.update(torch.tensor([25, 2], dtype=torch.int32, device=device))
    # rows see 23, 24, 25 and 0, 1, 2 positions; rank 2 holds 20 ..
    assert schedule.local_context_lens.tolist() == [[3, 4, 5], [0, 0, 0]]
    assert schedule.local_row_lengths.tolist() == [3, 4, 5, 0, 0, 0]
    # the scorer's schedule covers the local pages (1 of request 0), not the global ones (2)
    local_meta = hw.get_paged_mqa_logits_metadata(schedule.local_context_lens, 16, 2)
    assert torch.equal(schedule.schedule_meta, local_meta)
    assert not torch.equal(local_meta, hw.get_paged_mqa_logits_metadata(schedule.context_lens, 16, 2))
    # int32's most negative length: its rows see nothing (the row offsets must not wrap it to a huge length)
    schedule.update(torch.tensor([25, -2 ** 31], dtype=torch.int32, device=device))
    assert schedule.local_row_lengths.tolist() == [3, 4, 5, 0, 0, 0]


@pytest.mark.parametrize("make, message", [
    (lambda: Sharding("blocked", 4, 2), "scheme must be one of"),
    (lambda: Sharding("interleaved", 0, 2), "size must be"),
    (lambda: Sharding("contiguous", 4, 2).local_count(torch.tensor([3]), 2), "rank must be below world_size 2"),
    (lambda: ContextParallelSchedule(1, 1, 16, 64, "cpu", sharding=Sharding("interleaved", 1, 2), rank=0),
     "pass max_pages >= 2"),
], ids=["scheme", "size", "rank", "pages"])
def test_bad_arguments_say_what_to_do(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_hook_needs_an_initialized_group(device):
    config = IndexerConfig("fp8")
    view = IndexerPool(PoolLayout("fp8", None, 1, 2, 16, 64), device).view(0)
    with pytest.raises(ValueError, match="init_process_group"):
        ContextParallelIndexer(GateDecision(config, config, None, "test"), view, top_k=4, max_context_len=32,
                               sharding=Sharding("interleaved", 1, 2))
