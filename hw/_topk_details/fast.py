"""The `radix_fast` top-k variant (NVIDIA's and AMD's default): radix_fast's kernels for the sorted top-k,
column_order's for `sorted=False`, one record for both (hw.variants' registry)."""
from __future__ import annotations

import dataclasses
import functools

from ..targets import Op, Target, Variant, sm_count
from . import column_order, radix_fast
from .radix_fast import ISA_SHAPES, ISA_TARGETS, MANY_ROWS_PER_SM, FastTiling
from .variants import TopKCall

#: the on-chip column-order kernel's candidate tile: since the secant rounds on the row, 128 is faster than 512 and
#: 256 at every shape measured on the H200, 64 level (docs/perf/h200-topk.md, "Smaller candidate tiles")
COLUMNS_ROW_CAP = 128
#: the on-chip column-order kernel with more rows than SMs (CUs on AMD): each row in the narrower of 2 tiles and, on
#: NVIDIA, as many programs of 8 warps per SM as there are rows per SM, up to 3 for row tiles of 8192 columns and 4
#: for narrower ones, under the register cap that fits them; at most one row per SM, one uncapped program per SM and
#: one tile (docs/perf/h200-topk.md, "Adjacent columns per thread")
COLUMNS_MAXNREG = {2: 128, 3: 80, 4: 64}
COLUMNS_SHARED_TIERS = 2
#: NVIDIA, the on-chip column-order kernel at COLUMNS_RANK_PER_SM programs per SM on row tiles wider than 4096
#: columns: a candidate tile of COLUMNS_RANK_CAP keys, finished by ranks instead of rounds of probes; faster there
#: on the 8192 causal rows, slower for one program a row and level or slower on 4096-column tiles and at two programs
#: per SM (docs/perf/h200-topk.md, "The candidate tile finished by ranks")
COLUMNS_RANK_PER_SM = 3
COLUMNS_RANK_CAP = 64
#: NVIDIA, the on-chip column-order kernel with at most one row per SM: COLUMNS_WIDE_TILE_WARPS warps a program on
#: row tiles of COLUMNS_WIDE_TILE columns, faster than 8 at k = 2048 on the H200; slower on 4096-column tiles (which
#: keep radix_fast's), at k = 64 and on ReLU-degenerate rows (docs/perf/h200-topk.md, "Sixteen warps for one program
#: a row")
COLUMNS_WIDE_TILE = 8192
COLUMNS_WIDE_TILE_WARPS = 16
#: NVIDIA, the long path's finishing kernel (both forms) under this register cap when a candidate chunk holds several
#: groups (rows of up to 2^23 columns): ptxas otherwise takes 64 registers and spills 8-56 bytes a thread at such
#: widths (column order: triton 3.8's PTX; the sorted form's, with its branch for a sampled tau above the k_eff-th
#: key: 3.6's and 3.7's); with the cap it takes 70-128 and none under triton 3.6-3.9. With one group a chunk (the
#: widest rows) the cap makes it spill instead (docs/perf/isa-sm90-triton3.8.md)
LONG_FINISH_MAXNREG = 128
#: NVIDIA, the long path's sweep (column_order._sweep_kernel, 4 warps; both forms) in programs of SWEEP_BLOCK columns
#: (one chunk each) under SWEEP_MAXNREG: twelve programs an SM, against 2048 columns at five (under maxnreg 88) before;
#: 1024 columns are faster at every shape measured, 512 slower, and the cap of 40 faster than 48 (ten an SM) except at
#: 64 x 16384 (docs/perf/h200-topk.md, "Smaller sweep programs", "The sweep's keys by their bits"). Without the cap
#: ptxas takes 38-48 registers and no stack under triton 3.6-3.9; with it 40, and 8 bytes of stack for the sorted
#: form's under 3.9 (column_order.SWEEP_STACK). The finish's streaming chunk stays FastTiling.block
SWEEP_BLOCK = 1024
SWEEP_MAXNREG = 40
#: NVIDIA, the long path's sample kernel (column_order._sample_tau_kernel, both forms) in SAMPLE_WARPS warps instead
#: of the finish's 16, and the column order's finish after the sweep in COLUMNS_SWEEP_FINISH_WARPS: faster at every
#: width the sweep takes; 4 warps for the sample, 8 for the sorted form's finish or after group maxima are slower
#: (docs/perf/h200-topk.md, "Fewer warps for the sample and the finish")
SAMPLE_WARPS = 8
COLUMNS_SWEEP_FINISH_WARPS = 8
#: NVIDIA, the column order's finish after the sweep for at most a row per SM: its rounds end once at most
#: COLUMNS_SWEEP_RANK_CAP keys lie in [tau, the largest candidate] and ranks finish them (column_order._finish_ranked),
#: under COLUMNS_SWEEP_FINISH_MAXNREG registers (ptxas takes 132-142 and no stack under triton 3.6-3.9; under
#: LONG_FINISH_MAXNREG, 8 bytes of stack with 3.9); and it is launched with PDL, the sweep letting it be scheduled
#: only after its stores (FastTiling.sweep_late_dependents): faster together from 16 rows to one per SM at every
#: width the sweep takes, 0.2 us slower at 8 rows (docs/perf/h200-topk.md, "Ranks and a late trigger for the long
#: finish"). With more rows than SMs the finish keeps its rounds under LONG_FINISH_MAXNREG, two programs an SM where
#: COLUMNS_SWEEP_FINISH_MAXNREG leaves one; the sorted form's sweep keeps its early trigger (the late one is slower)
COLUMNS_SWEEP_RANK_CAP = 64
COLUMNS_SWEEP_FINISH_MAXNREG = 160


def _launch(call: TopKCall, tiling: FastTiling) -> None:
    if call.sorted:
        radix_fast._launch(call.logits, call.lengths, call.starts, call.out, tiling, sweep=column_order.launch_sweep)
    else:
        column_order.launch_columns(call.logits, call.lengths, call.starts, call.out, tiling)


def _long_path(tiling: FastTiling, width: int, k: int, rows: int, sms: int, nvidia: bool,
               by_value: bool) -> FastTiling:
    """The launch constants for rows wider than tiling.tile_w, sorted (`by_value`) or in column order: on NVIDIA the
    finish under LONG_FINISH_MAXNREG while a candidate chunk holds several groups; the candidates by a threshold from
    sampled keys and one sweep where the sample is large enough for the width (column_order.sweep_samples; on NVIDIA
    in programs of SWEEP_BLOCK columns under SWEEP_MAXNREG, the sample in SAMPLE_WARPS warps, the column order's
    finish in COLUMNS_SWEEP_FINISH_WARPS; for at most a row per SM by ranks from COLUMNS_SWEEP_RANK_CAP keys under
    COLUMNS_SWEEP_FINISH_MAXNREG, scheduled after the sweep's stores), else by group maxima and tau. rows, sms: as
    _tiling's."""
    several = tiling.block // radix_fast.group_size(width, tiling.tile_w) > 1   # groups a candidate chunk
    samples = column_order.sweep_samples(width, k, tiling.cap)
    columns_sweep = nvidia and samples > 0 and not by_value
    ranked = columns_sweep and not rows > sms > 0
    finish_cap = COLUMNS_SWEEP_FINISH_MAXNREG if ranked else LONG_FINISH_MAXNREG
    return dataclasses.replace(tiling, finish_maxnreg=finish_cap if nvidia and several else None,
                               sweep_samples=samples,
                               sweep_block=SWEEP_BLOCK if nvidia else 0,
                               sweep_maxnreg=SWEEP_MAXNREG if nvidia else None,
                               sample_warps=SAMPLE_WARPS if nvidia else 0,
                               finish_warps=COLUMNS_SWEEP_FINISH_WARPS if columns_sweep else 0,
                               finish_rank_cap=COLUMNS_SWEEP_RANK_CAP if ranked else 0,
                               sweep_late_dependents=ranked)


def _in_columns(tiling: FastTiling, width: int, k: int, rows: int, sms: int, nvidia: bool) -> FastTiling:
    """The column-order launch constants of the on-chip path (width <= tiling.tile_w): the sorted form's with
    COLUMNS_ROW_CAP and, when the GPU's SMs are known (sms > 0), COLUMNS_SHARED_TIERS above one row per SM (on NVIDIA
    under the register cap of COLUMNS_MAXNREG for its programs per SM, and at COLUMNS_RANK_PER_SM on wide tiles the
    rank finish), else one tile (on NVIDIA in COLUMNS_WIDE_TILE_WARPS on wide tiles)."""
    tiling = dataclasses.replace(tiling, cap=COLUMNS_ROW_CAP)
    if sms <= 0:
        return tiling
    tile = radix_fast.row_tile(width)
    per_sm = min(-(-rows // sms), 3 if tile > 4096 else 4)
    if per_sm <= 1:
        wide = nvidia and tile >= COLUMNS_WIDE_TILE
        return dataclasses.replace(tiling, maxnreg=None, tiers=1,
                                   num_warps=COLUMNS_WIDE_TILE_WARPS if wide else tiling.num_warps)
    if nvidia and per_sm == COLUMNS_RANK_PER_SM and tile > 4096:
        tiling = dataclasses.replace(tiling, cap=COLUMNS_RANK_CAP, rank_finish=True)
    return dataclasses.replace(tiling, maxnreg=COLUMNS_MAXNREG[per_sm] if nvidia else None,
                               tiers=COLUMNS_SHARED_TIERS)


def _settings(target: Target, call) -> FastTiling:
    """The launch constants of `call` on `target`, its many-rows constants from the GPU's SMs (CUs on AMD; none
    under the interpreter); NotCovered for rows wider than FAST_MAX_WIDTH (radix_fast.check_width)."""
    rows, width = call.logits.shape
    radix_fast.check_width(width)
    gpu = call.logits.is_cuda and target is not Target.INTERPRETER
    return _tiling(target, width, call.k, rows, sm_count(call.logits.device) if gpu else 0, call.sorted)


@functools.lru_cache(maxsize=1024)   # a pure function of a few ints, asked on every launch (host time)
def _tiling(target: Target, width: int, k: int, rows: int, sms: int, by_value: bool) -> FastTiling:
    """The launch constants on `target` (NVIDIA, AMD or the interpreter) for `rows` rows on `sms` SMs (0: not
    known), sorted (`by_value`) or in column order."""
    tiling = radix_fast.target_tiling(target, width, k, rows=rows, sms=sms)
    nvidia = target is Target.NVIDIA
    if width > tiling.tile_w:
        return _long_path(tiling, width, k, rows, sms, nvidia, by_value)
    return tiling if by_value else _in_columns(tiling, width, k, rows, sms, nvidia)


def _column_specs(width: int, k: int, has_starts: bool, many_rows: bool, target: str) -> tuple:
    """The column-order kernels a launch on `target` ("sm90" or "gfx950") takes for rows of `width` columns at k,
    with the launch constants _tiling gives there (many_rows: MANY_ROWS_PER_SM rows per SM, else one)."""
    label = radix_fast.isa_label(width, k, has_starts, many_rows)
    tiling = _tiling(Target.of_isa(target), width, k, MANY_ROWS_PER_SM if many_rows else 0, 1, False)
    return column_order.isa_specs(tiling, width, k, has_starts, label, (target,))


def _isa_specs() -> tuple:
    """Both forms' kernels for each of ISA_SHAPES on each of ISA_TARGETS."""
    specs = []
    for width, k, has_starts, *many in ISA_SHAPES:
        many_rows = bool(many and many[0])
        for target in ISA_TARGETS:
            tiling = _tiling(Target.of_isa(target), width, k, MANY_ROWS_PER_SM if many_rows else 0, 1, True)
            specs += radix_fast.isa_specs(width, k, has_starts, many_rows, target, tiling)
            if tiling.sweep_samples:
                label = radix_fast.isa_label(width, k, has_starts, many_rows)
                specs += column_order.sweep_specs(tiling, width, has_starts, label, (target,), column_order=False)
            specs += _column_specs(width, k, has_starts, many_rows, target)
    return tuple(specs)


#: every target, both forms (the kernels compile for gfx950 without scratch: docs/perf/isa-gfx950.md); rows of at
#: most FAST_MAX_WIDTH columns (wider ones: NotCovered; hw.variants.DEFAULTS gives them to per_row)
VARIANT = Variant(
    name="radix_fast", op=Op.TOPK, kv_dtype=None, targets=frozenset(Target),
    settings=_settings, launch=_launch, precision=None, isa_specs=_isa_specs,
    summary="interval narrowing on chip, candidates compacted, the k selected ordered by segments over all SMs "
            "(sorted=False: stored in column order, no ordering)")
