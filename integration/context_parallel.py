"""Context-parallel indexing: every sequence's keys sharded over the ranks of a torch.distributed group, each rank
scoring its own keys, one all-gather merging the ranks' top-k into the exact single-device top-k.

Sharding (`Sharding`): the token positions p = 0, 1, ... of every sequence are split over the R ranks of the group,
by one of two schemes (owner(p) is the rank that holds position p, local(p) its position in that rank's cache):

    interleaved, size I   runs of I positions dealt round-robin    owner(p) = (p // I) % R
                                                                   local(p) = (p // (I * R)) * I + p % I
    contiguous,  size C   rank r holds [r * C, (r + 1) * C); the   owner(p) = min(p // C, R - 1)
                          last rank also holds everything past it  local(p) = p - owner(p) * C

On every rank, local(p) grows with p, so a rank's local order of keys is their global order.

Each rank keeps the keys it owns in its own pool (integration.pool), at local positions, with its own block
tables; q, k and weights of the new tokens are the same on every rank (the writer skips the tokens another rank
owns: their slots are -1, `Sharding.slot_mapping`).

Scoring: decode runs hw.fp8_fp4_paged_mqa_logits over the rank's pages with local context lengths
(`ContextParallelSchedule`), prefill gathers the rank's keys of each request and runs hw.fp8_fp4_mqa_logits over
local causal ranges. A logit depends only on q, the weights and that key's bytes, so a rank's logits are bit for bit
the ones one device computes for the same keys (provided the scorer's arithmetic for a key does not depend on the
keys scored alongside it; docs/context_parallel.md names the one variant where it can). Each rank takes its local
top-k (hw.top_k_per_row), maps it to global positions, and `merge_top_k` all-gathers the k candidates of every row
(fp32 values and int32 positions: the one collective of a call) and selects the global top-k among them with
hw.top_k_per_row, over the candidates ordered by global position. That is exactly the single-device result, in the
single-device order: the rule of DESIGN §4, (value desc, position asc) with +inf > finite > -inf > NaN, -0.0 ==
+0.0 and all NaNs equal, is a total order on (value, position), each rank's local top-k holds every key of the
global top-k that the rank owns (a key beaten by fewer than k keys globally is beaten by fewer than k of its
rank's), and the final selection compares the same fp32 values with the same kernel, ties broken by column = by
global position. Rows with fewer than k visible keys are padded with -1.

Cost of the merge per call: the all-gather's output on every rank is R x rows x k x 8 bytes (rows = T query rows;
4 bytes of value and 4 of position per candidate), (R - 1) x rows x k x 8 of them from the other ranks; then every
rank sorts R * k int32 positions and runs one top-k of width R * k per row.

Decode stays CUDA-graph capturable: fixed shapes (the local logits are [B*N, local width], the candidates
[R * B*N, 2k]), no host sync; NCCL's all-gather is captured like any kernel. Prefill is eager, like the
single-device hook's.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

import hw
from hw.checks import INT32_MAX, check_int, check_tensor

from . import ops
from .gates import GateDecision
from .indexer import DecodeMetadata, PrefillMetadata, SparseIndexer
from .schedule import default_num_sms

SCHEMES = ("interleaved", "contiguous")
PAD_INDEX = -1   # a top-k slot with no key


@dataclass(frozen=True)
class Sharding:
    """How every sequence's token positions are split over the `world_size` ranks of a group (module docstring).

    scheme "interleaved" (runs of `size` positions dealt round-robin) or "contiguous" (blocks of `size` positions,
    the last rank also holding the tail; `Sharding.contiguous_for` splits a maximum context evenly).
    The tensor methods are graph-capturable device ops; positions and lengths are int32 or int64 tensors >= 0.
    """

    scheme: str
    size: int
    world_size: int

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
        check_int("size", self.size, 1)
        check_int("world_size", self.world_size, 1)

    @classmethod
    def contiguous_for(cls, max_context_len: int, world_size: int) -> Sharding:
        """Contiguous blocks of ceil(max_context_len / world_size) positions: a sequence of the maximum context is
        split evenly."""
        check_int("max_context_len", max_context_len, 1)
        check_int("world_size", world_size, 1)
        return cls("contiguous", -(-max_context_len // world_size), world_size)

    def _check_rank(self, rank: int) -> None:
        check_int("rank", rank, 0)
        if rank >= self.world_size:
            raise ValueError(f"rank must be below world_size {self.world_size}, got {rank}")

    def owner(self, positions: torch.Tensor) -> torch.Tensor:
        """int64 tensor of the rank that holds each position."""
        p = positions.long()
        if self.scheme == "interleaved":
            return (p // self.size) % self.world_size
        return (p // self.size).clamp(max=self.world_size - 1)

    def local_position(self, positions: torch.Tensor) -> torch.Tensor:
        """int64 tensor: each position's index in its owner's cache."""
        p = positions.long()
        if self.scheme == "interleaved":
            return (p // (self.size * self.world_size)) * self.size + p % self.size
        return p - self.owner(p) * self.size

    def global_position(self, local: torch.Tensor, rank: int) -> torch.Tensor:
        """int32 tensor: the global position of rank `rank`'s local positions; entries < 0 (padding) give -1."""
        self._check_rank(rank)
        lp = local.long()
        if self.scheme == "interleaved":
            glob = (lp // self.size) * (self.size * self.world_size) + rank * self.size + lp % self.size
        else:
            glob = lp + rank * self.size
        return torch.where(local < 0, PAD_INDEX, glob).to(torch.int32)

    def local_count(self, lengths: torch.Tensor, rank: int) -> torch.Tensor:
        """int32 tensor: how many of the positions 0 .. lengths - 1 rank `rank` holds (negative lengths: 0)."""
        self._check_rank(rank)
        n = lengths.long().clamp(min=0)
        if self.scheme == "interleaved":
            period = self.size * self.world_size
            count = (n // period) * self.size + (n % period - rank * self.size).clamp(0, self.size)
        else:
            count = (n - rank * self.size).clamp(min=0)
            if rank < self.world_size - 1:
                count = count.clamp(max=self.size)
        return count.to(torch.int32)

    def local_capacity(self, length: int, rank: int) -> int:
        """Python int: how many positions of a sequence of `length` tokens rank `rank` holds."""
        check_int("length", length, 0)
        return int(self.local_count(torch.tensor([length]), rank)[0])

    def slot_mapping(self, positions: torch.Tensor, requests: torch.Tensor, block_table: torch.Tensor,
                     page_size: int, rank: int) -> torch.Tensor:
        """Rank `rank`'s cache slots of new tokens: int64 [T], -1 for the tokens another rank holds.

        positions int [T]: the tokens' global positions; requests int [T]: their rows of block_table;
        block_table int32 [B, max_pages]: the rank's own pages of each request (covering its local positions).
        """
        self._check_rank(rank)
        check_tensor("block_table", block_table, dtypes=torch.int32, ndim=2)
        local = self.local_position(positions)
        page_index = (local // page_size).clamp(max=block_table.shape[1] - 1)   # in range for others' tokens too
        slots = block_table[requests.long(), page_index].long() * page_size + local % page_size
        return torch.where(self.owner(positions) == rank, slots, PAD_INDEX)


def _all_gather(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    """dist.all_gather_single where torch has it (the newer name), else dist.all_gather_into_tensor."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, inp, group=group)


def merge_top_k(values: torch.Tensor, positions: torch.Tensor, group=None, sorted: bool = True) -> torch.Tensor:
    """The global top-k of every row from the ranks' local top-k: one all-gather, then one selection.

    Called by every rank of `group` (None: the default group) with the same number of rows:
    values     float32 [rows, k]: the logits of this rank's local top-k, in any order (entries of padding slots are
               never read)
    positions  int32 [rows, k]: their global positions, -1 for padding (a rank's positions are distinct from
               every other rank's)
    Returns    int32 [rows, k], the same on every rank: the k best candidates of all ranks ordered by (value desc,
               position asc) with +inf > finite > -inf > NaN, -0.0 == +0.0 and all NaNs equal (the order of
               hw.top_k_per_row, which makes the selection), -1 padded; sorted=False: the same selection in
               ascending position order, -1 last.

    Each rank contributes rows x k x 8 bytes and gathers R times that. No host sync (graph-capturable under
    NCCL).
    """
    check_tensor("values", values, dtypes=torch.float32, ndim=2, contiguous=True)
    rows, k = values.shape
    check_tensor("positions", positions, dtypes=torch.int32, shape=(rows, k), device=values.device,
                 contiguous=True)
    world = dist.get_world_size(group)
    send = torch.cat((values.view(torch.int32), positions), dim=1)          # [rows, 2k]: values' bits, positions
    received = send.new_empty(world * rows, 2 * k)
    _all_gather(received, send, group)
    candidates = received.view(world, rows, 2, k).permute(1, 2, 0, 3).reshape(rows, 2, world * k)
    cand_values, cand_positions = candidates[:, 0].view(torch.float32), candidates[:, 1]
    # columns in global position order (padding last), so that the kernel's index tie rule is the position rule
    by_position, order = torch.sort(torch.where(cand_positions < 0, INT32_MAX, cand_positions), dim=1)
    count = (cand_positions >= 0).sum(dim=1, dtype=torch.int32)
    best = ops.top_k_per_row(cand_values.gather(1, order).contiguous(), count, k, None, sorted)
    return torch.where(best >= 0, by_position.gather(1, best.clamp(min=0).long()), PAD_INDEX)


class ContextParallelSchedule:
    """One rank's decode metadata of a step, shared by its indexer layers: DecodeSchedule's counterpart, with the
    same contract (fixed buffers updated in place by `update`, once per step, graph-capturable).

    context_lens        int32 [B]           tokens of each request over all ranks, this step's N new ones included
    local_context_lens  int32 [B, N]        keys row b*N + n sees on this rank: sharding.local_count(clamp(
                                            context_lens[b] - N + n + 1, 0, max_context_len), rank)
    local_row_lengths   int32 [B * N]       the same, flat (a view): the local top-k's lengths
    schedule_meta       int32 [num_sms + 1, 2]  hw.get_paged_mqa_logits_metadata(local_context_lens, P, num_sms)

    max_pages is the width of this rank's block tables; they must cover the rank's share of a max_context_len
    sequence (ValueError otherwise), so that every key the rank owns is visible, as on one device whose block table
    covers max_context_len.
    """

    def __init__(self, batch_size: int, max_pages: int, page_size: int, max_context_len: int,
                 device: torch.device | str, *, sharding: Sharding, rank: int, next_n: int = 1,
                 num_sms: int | None = None):
        for name, value in (("batch_size", batch_size), ("max_pages", max_pages), ("page_size", page_size),
                            ("max_context_len", max_context_len), ("next_n", next_n)):
            check_int(name, value, 1)
        if not isinstance(sharding, Sharding):
            raise ValueError(f"sharding must be a Sharding, got {type(sharding).__name__}")
        capacity = sharding.local_capacity(max_context_len, rank)
        if max_pages * page_size < capacity:
            raise ValueError(f"rank {rank} holds up to {capacity} keys of a sequence of max_context_len "
                             f"{max_context_len}, but block tables of {max_pages} pages of {page_size} tokens cover "
                             f"{max_pages * page_size}; pass max_pages >= {-(-capacity // page_size)}")
        device = torch.device(device)
        self.batch_size, self.next_n, self.max_pages = batch_size, next_n, max_pages
        self.page_size, self.max_context_len = page_size, max_context_len
        self.sharding, self.rank = sharding, rank
        self.num_sms = num_sms if num_sms is not None else default_num_sms(device)
        self.context_lens = torch.zeros(batch_size, dtype=torch.int32, device=device)
        self.local_context_lens = torch.zeros(batch_size, next_n, dtype=torch.int32, device=device)
        self.schedule_meta = torch.zeros(self.num_sms + 1, 2, dtype=torch.int32, device=device)
        self._row_offset = torch.arange(next_n - 1, -1, -1, dtype=torch.int32, device=device)

    @property
    def local_row_lengths(self) -> torch.Tensor:
        return self.local_context_lens.view(-1)

    def update(self, context_lens: torch.Tensor | None = None) -> None:
        """Copy this step's global context lengths (int32 [batch_size], on the schedule's device) into the buffer,
        if given, and recompute the local lengths and the scorer's schedule from it."""
        if context_lens is not None:
            check_tensor("context_lens", context_lens, dtypes=torch.int32, shape=(self.batch_size,),
                         device=self.context_lens.device)
            self.context_lens.copy_(context_lens)
        # in int64: int32's most negative length minus the row offset would wrap
        visible = (self.context_lens[:, None].long() - self._row_offset[None, :]).clamp_(0, self.max_context_len)
        self.local_context_lens.copy_(self.sharding.local_count(visible, self.rank))
        self.schedule_meta.copy_(
            hw.get_paged_mqa_logits_metadata(self.local_context_lens, self.page_size, self.num_sms))


class ContextParallelIndexer(SparseIndexer):
    """The hook of one indexer layer on one rank of a context-parallel group: SparseIndexer's call and result,
    over the keys this rank holds, merged with the other ranks' (module docstring).

    decision, top_k, validate, pool_layout, error_flag: as SparseIndexer's
    kv_cache         this rank's view of the layer, uint8[num_pages, P, 1, bytes_per_token]: the keys it owns
    max_context_len  the model's maximum context (global positions)
    sharding         the group's Sharding (its world_size must be the group's size)
    group            the torch.distributed process group (None: the default one, which must be initialized)

    Call: hook(q, k, weights, metadata) with q, k, weights of all T new tokens (the same on every rank) and this
    rank's slot_mapping (Sharding.slot_mapping: -1 where another rank owns the token) and block_table; decode
    metadata takes a ContextParallelSchedule of this rank as its schedule. Returns int32 [T, top_k], the same on
    every rank and equal to SparseIndexer's on one device holding every key: global positions (ascending, or best
    first with sorted_top_k), -1 padded. Every rank of the group must make the same calls (each runs one collective
    per call).
    """

    def __init__(self, decision: GateDecision, kv_cache: torch.Tensor, *, top_k: int, max_context_len: int,
                 sharding: Sharding, group=None, validate: bool = False, pool_layout=None, error_flag=None,
                 sorted_top_k: bool = False):
        super().__init__(decision, kv_cache, top_k=top_k, max_context_len=max_context_len, validate=validate,
                         pool_layout=pool_layout, error_flag=error_flag, sorted_top_k=sorted_top_k)
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("context-parallel indexing needs torch.distributed: call "
                             "torch.distributed.init_process_group first")
        if not isinstance(sharding, Sharding):
            raise ValueError(f"sharding must be a Sharding, got {type(sharding).__name__}")
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise ValueError("this process is not a member of `group`; build the hook on the group's ranks only")
        if sharding.world_size != world:
            raise ValueError(f"sharding is for {sharding.world_size} ranks, but the group has {world}")
        self.sharding, self.group, self.rank = sharding, group, rank
        # the local decode logits' width: this rank's share of a max_context_len sequence (at least one column)
        self.local_width = max(1, sharding.local_capacity(max_context_len, rank))

    def _check_schedule(self, sched, block_table: torch.Tensor) -> None:
        """The schedule must be this rank's ContextParallelSchedule for this layer's geometry."""
        if not isinstance(sched, ContextParallelSchedule):
            raise ValueError(f"a context-parallel hook's DecodeMetadata needs a ContextParallelSchedule (local "
                             f"context lengths), got {type(sched).__name__}")
        if (sched.sharding, sched.rank) != (self.sharding, self.rank):
            raise ValueError(f"the schedule is for rank {sched.rank} of {sched.sharding}; this hook is rank "
                             f"{self.rank} of {self.sharding}")
        super()._check_schedule(sched, block_table)

    def _merge(self, values: torch.Tensor, local_top: torch.Tensor) -> torch.Tensor:
        return merge_top_k(values, self.sharding.global_position(local_top, self.rank), self.group,
                           self.sorted_top_k)

    def _keys_held(self, seq_len: int) -> int:
        return self.sharding.local_capacity(seq_len, self.rank)

    def _keys_before(self, ends: torch.Tensor) -> torch.Tensor:
        return self.sharding.local_count(ends, self.rank)

    def _prefill(self, q_pair, weights: torch.Tensor, meta: PrefillMetadata, validate: bool) -> torch.Tensor:
        device = weights.device
        values = torch.zeros((meta.num_tokens, self.top_k), dtype=torch.float32, device=device)
        local_top = torch.full((meta.num_tokens, self.top_k), PAD_INDEX, dtype=torch.int32, device=device)
        for rows, logits, ends in self._prefill_logits(q_pair, weights, meta, validate):
            top = ops.top_k_per_row(logits, ends, self.top_k, None, False)
            local_top[rows] = top
            values[rows] = logits.gather(1, top.clamp(min=0).long())
        return self._merge(values, local_top)

    def _decode(self, q_pair, weights: torch.Tensor, meta: DecodeMetadata, validate: bool) -> torch.Tensor:
        sched = meta.schedule
        batch, next_n = sched.batch_size, sched.next_n
        q_values, q_scales = q_pair
        q_4d = (q_values.view(batch, next_n, *q_values.shape[1:]),
                None if q_scales is None else q_scales.view(batch, next_n, *q_scales.shape[1:]))
        logits = ops.fp8_fp4_paged_mqa_logits(*q_4d, self.kv_cache, weights, sched.local_context_lens,
                                              meta.block_table, sched.schedule_meta, self.local_width, False,
                                              self.layout, validate, self.error_flag)
        local_top = ops.top_k_per_row(logits, sched.local_row_lengths, self.top_k, None, False)
        return self._merge(logits.gather(1, local_top.clamp(min=0).long()), local_top)
