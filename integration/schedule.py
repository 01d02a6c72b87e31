"""The decode schedule: computed once per step, reused by every indexer layer, CUDA-graph stable (DESIGN §6).

Every buffer has a fixed capacity chosen at construction and is updated in place (`copy_`), so a CUDA graph
captured with short contexts reads the current values when replayed with longer ones. Nothing here turns a
device value into a host value (no `.item()`, no `.tolist()`, no shape that depends on a context length), which
is the host-side shortcut that makes a replay silently use the capture-time contexts.

Buffers (B = batch size, N = next_n tokens per request and step):

    context_lens  int32[B]             tokens in each request's cache, including this step's N new tokens
    row_lengths   int32[B * N]         columns visible to row r = b*N + n (DESIGN §4): clamp(context_lens[b] - N
                                       + n + 1, 0, min(max_context_len, max_pages * P)); top-k masks by these
    schedule_meta int32[num_sms + 1, 2]  hw.get_paged_mqa_logits_metadata(context_lens, P, num_sms)
"""
from __future__ import annotations

import torch

import hw
from hw.checks import check_tensor
from hw.targets import sm_count

CPU_NUM_PROGRAMS = 4   # the interpreter runs programs one after another: a few programs keep the grid cheap
# Programs per SM/CU of the persistent decode grid that schedule_meta describes (DeepGEMM's call form; hw's decode
# kernels size their own grid and do not read it; the heads-on-M kernel of commit 38a6a4d did:
# docs/perf/h200-first-numbers.md)
PROGRAMS_PER_SM = 4


def default_num_sms(device: torch.device) -> int:
    """Programs of the persistent decode grid (the `num_sms` of hw.get_paged_mqa_logits_metadata):
    PROGRAMS_PER_SM x the SM/CU count on a GPU, CPU_NUM_PROGRAMS on the CPU."""
    if device.type == "cuda":
        return PROGRAMS_PER_SM * sm_count(device)
    return CPU_NUM_PROGRAMS


class DecodeSchedule:
    """Fixed-capacity decode metadata shared by the indexer layers of one step.

    update(context_lens) once per step (eagerly, or inside a captured graph: it only launches device work on
    the fixed buffers), then every layer passes `context_lens`, `schedule_meta` and `row_lengths` to its hook.
    `num_updates` counts the metadata computations (tests check it is one per step, not one per layer).
    """

    def __init__(self, batch_size: int, max_pages: int, page_size: int, max_context_len: int,
                 device: torch.device | str, *, next_n: int = 1, num_sms: int | None = None):
        for name, value in (("batch_size", batch_size), ("max_pages", max_pages), ("page_size", page_size),
                            ("max_context_len", max_context_len), ("next_n", next_n)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        device = torch.device(device)
        self.batch_size = batch_size
        self.next_n = next_n
        self.max_pages = max_pages
        self.page_size = page_size
        self.max_context_len = max_context_len
        self.visible_limit = min(max_context_len, max_pages * page_size)
        self.num_sms = num_sms if num_sms is not None else default_num_sms(device)
        self.context_lens = torch.zeros(batch_size, dtype=torch.int32, device=device)
        self.row_lengths = torch.zeros(batch_size * next_n, dtype=torch.int32, device=device)
        self.schedule_meta = torch.zeros(self.num_sms + 1, 2, dtype=torch.int32, device=device)
        # row n of a request sees N - 1 - n fewer tokens than the request's last row
        self._row_offset = torch.arange(next_n - 1, -1, -1, dtype=torch.int32, device=device)
        self.num_updates = 0

    def update(self, context_lens: torch.Tensor | None = None) -> None:
        """Copy this step's context lengths (int32 [batch_size], on the schedule's device) into the buffer, if
        given, and recompute the metadata from the buffer. ValueError on a wrong dtype, shape or device."""
        if context_lens is not None:
            # host-side checks only (legal in capture): int32 [batch_size] on the schedule's device
            check_tensor("context_lens", context_lens, dtypes=torch.int32, shape=(self.batch_size,),
                         device=self.context_lens.device)
            self.context_lens.copy_(context_lens)
        self.schedule_meta.copy_(
            hw.get_paged_mqa_logits_metadata(self.context_lens, self.page_size, self.num_sms))
        rows = self.context_lens[:, None].long() - self._row_offset[None, :]     # int64: no int32 wrap
        self.row_lengths.copy_(rows.clamp_(0, self.visible_limit).reshape(-1))
        self.num_updates += 1
