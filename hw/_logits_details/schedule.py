"""get_paged_mqa_logits_metadata's decode work split (DeepGEMM's call form; no hw kernel reads it): device-side
torch ops only (no host sync, graph-capturable).

Work items are (b, c): sequence b (a row of block_table; *not* an output row b*N + n), page c of that sequence.
Sequence b has cdiv(L_b, block_kv) items, L_b = max(0, context_lens[b]) for 1-D context_lens and
max(0, max_n context_lens[b, n]) for 2-D ones: the longest of its next_n query rows (DESIGN §4), so one item
serves all next_n rows. The items, in lexicographic order, are split into num_sms contiguous runs of
floor(p * total / num_sms) .. floor((p + 1) * total / num_sms); entry p is the first item of run p and entry
num_sms is (B, 0), the end. With no items every entry is (B, 0): every run is empty.
"""
import torch


def paged_schedule(context_lens: torch.Tensor, block_kv: int, num_sms: int) -> torch.Tensor:
    """int32 [num_sms + 1, 2] schedule; context_lens int32 [B] or [B, N] (checked by the caller)."""
    lengths = context_lens if context_lens.dim() == 1 else context_lens.amax(dim=1)
    chunks = (lengths.to(torch.int64).clamp_min(0) + (block_kv - 1)) // block_kv
    ends = torch.cumsum(chunks, dim=0)                                   # inclusive prefix sums, [B]
    firsts = torch.cat([ends.new_zeros(1), ends])                        # exclusive prefix sums, [B + 1]
    total = firsts[-1:]                                                  # [1]: stays on the device
    starts = torch.arange(num_sms + 1, device=context_lens.device, dtype=torch.int64) * total // num_sms
    rows = torch.searchsorted(ends, starts, right=True)                  # first b with ends[b] > start; B at the end
    chunk = starts - firsts[rows]                                        # rows <= B indexes firsts[B + 1] safely
    return torch.stack([rows, chunk], dim=1).to(torch.int32)
