"""hw.get_paged_mqa_logits_metadata: the persistent decode schedule of DeepGEMM's call form (no hw kernel reads it).

The schedule is checked by replaying in Python the walk a persistent kernel makes over it (program p from entry p
up to entry p + 1, a sequence's pages in order; the walk of the heads-on-M kernel, in git history): every
(sequence, page) work item must be visited exactly once, runs must be balanced, and the walk must never look at a
sequence b >= B (the production bug: all-zero contexts at batch sizes that are multiples of 32).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import hw
from sim.testing import case_rng


def expected_items(context_lens: np.ndarray, block_kv: int) -> list[tuple[int, int]]:
    """All (b, c) work items in order: c < cdiv(L_b, block_kv), L_b the longest next_n row (negatives -> 0)."""
    lengths = context_lens if context_lens.ndim == 1 else context_lens.max(axis=1, initial=0)
    return [(b, c) for b, n in enumerate(np.maximum(lengths, 0)) for c in range(-(-int(n) // block_kv))]


def walk(schedule: np.ndarray, context_lens: np.ndarray, block_kv: int) -> list[list[tuple[int, int]]]:
    """The items each program visits, walking as a persistent kernel does; asserts it only reads sequences
    b < B."""
    batch = context_lens.shape[0]
    lengths = context_lens if context_lens.ndim == 1 else context_lens.max(axis=1, initial=0)
    runs = []
    for p in range(schedule.shape[0] - 1):
        (r, c), (r_end, c_end) = schedule[p], schedule[p + 1]
        items = []
        for _ in range(len(expected_items(context_lens, block_kv)) + batch + 1):   # the walk must end
            if not (r < r_end or (r == r_end and c < c_end)):
                break
            assert 0 <= r < batch, f"program {p} reads context_lens[{r}] with B = {batch}"
            chunks = -(-max(int(lengths[r]), 0) // block_kv)
            if c < chunks:
                items.append((int(r), int(c)))
            c += 1
            if c >= chunks:
                r, c = r + 1, 0
        else:
            raise AssertionError(f"program {p} does not reach its end {schedule[p + 1]}")
        runs.append(items)
    return runs


@dataclass(frozen=True)
class ScheduleCase:
    contexts: str            # "zeros" | "random" | "random2d" | "mixed"
    batch: int
    block_kv: int
    num_sms: int

    def __str__(self):
        return f"{self.contexts}-B{self.batch}-bkv{self.block_kv}-sms{self.num_sms}"


def make_contexts(case: ScheduleCase, rng) -> np.ndarray:
    if case.contexts == "zeros":
        return np.zeros(case.batch, dtype=np.int32)
    if case.contexts == "random2d":
        return rng.integers(0, 300, size=(case.batch, 2), dtype=np.int32)
    lens = rng.integers(0, 300, size=case.batch, dtype=np.int32)
    if case.contexts == "mixed":       # zeros (leading, trailing, runs), a negative, exact page multiples
        lens[::3] = 0
        lens[0] = lens[-1] = 0
        lens[1] = -5
        lens[2] = 2 * case.block_kv
    return lens


CASES = [ScheduleCase(kind, b, bkv, sms)
         for kind in ("zeros", "random", "random2d", "mixed")
         for b in (31, 32, 33, 64)
         for bkv, sms in ((64, 132), (16, 7))] + [ScheduleCase("random", 1, 64, 1), ScheduleCase("zeros", 1, 16, 1)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_schedule_covers_every_item_once(case: ScheduleCase, device):
    rng = case_rng(str(case))
    lens = make_contexts(case, rng)
    schedule = hw.get_paged_mqa_logits_metadata(torch.from_numpy(lens).to(device), case.block_kv, case.num_sms)
    assert schedule.dtype == torch.int32 and schedule.shape == (case.num_sms + 1, 2)
    assert schedule.device.type == device.type
    schedule = schedule.cpu().numpy()
    assert tuple(schedule[-1]) == (case.batch, 0), f"end entry {schedule[-1]} != (B, 0)"
    runs = walk(schedule, lens, case.block_kv)
    visited = [item for run in runs for item in run]
    want = expected_items(lens, case.block_kv)
    assert visited == want, f"visited {len(visited)} items, expected {len(want)}; first difference at " \
        f"{next((i for i, (a, b) in enumerate(zip(visited, want)) if a != b), min(len(visited), len(want)))}"
    sizes = [len(run) for run in runs]
    assert max(sizes) - min(sizes) <= 1, f"unbalanced runs: {sizes}"
    if not want:
        assert (schedule == [case.batch, 0]).all(), "no work: every entry must be (B, 0)"


def test_empty_batch(device):
    schedule = hw.get_paged_mqa_logits_metadata(torch.zeros(0, dtype=torch.int32, device=device), 64, 4)
    assert schedule.cpu().tolist() == [[0, 0]] * 5


BAD = {
    "dtype": (dict(context_lens=torch.zeros(4, dtype=torch.int64)), "context_lens must have dtype"),
    "3-D": (dict(context_lens=torch.zeros(2, 2, 2, dtype=torch.int32)), "context_lens must be int32 [B] or"),
    "2-D without columns": (dict(context_lens=torch.zeros(2, 0, dtype=torch.int32)), "next_n >= 1"),
    "block_kv 0": (dict(block_kv=0), "block_kv must be a Python int >= 1"),
    "block_kv float": (dict(block_kv=64.0), "block_kv"),
    "num_sms bool": (dict(num_sms=True), "num_sms"),
    "num_sms 0": (dict(num_sms=0), "num_sms must be a Python int >= 1"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_schedule_rejects_bad_input(name):
    change, message = BAD[name]
    args = dict(context_lens=torch.zeros(4, dtype=torch.int32), block_kv=64, num_sms=8)
    with pytest.raises(ValueError, match=re.escape(message)):
        hw.get_paged_mqa_logits_metadata(**{**args, **change})


@pytest.mark.gpu
def test_schedule_is_graph_capturable():
    """Captured with short dummy contexts, replayed after the contexts grow in place: matches a fresh schedule
    (no host-side shortcut; a host sync would fail the capture)."""
    lens = torch.ones(32, dtype=torch.int32, device="cuda")
    hw.get_paged_mqa_logits_metadata(lens, 64, 132)            # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = hw.get_paged_mqa_logits_metadata(lens, 64, 132)
    lens.copy_(torch.arange(32, dtype=torch.int32, device="cuda") * 300)
    graph.replay()
    assert torch.equal(captured, hw.get_paged_mqa_logits_metadata(lens, 64, 132))
