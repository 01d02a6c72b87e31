"""radix_fast's one-tile path at 64 x 8192, k = 2048 (the decode step's top-k) on the H200: where the selecting
kernel's time goes, forms of the kernel given as modules, and the counting sort against the sample sort by rows.
Times are medians of CUDA-graph replays over 4 input sets, as `mxidx bench` times the top-k.

    PYTHONPATH=. python3 docs/perf/h200-topk-slots.py OUT.json phases
    PYTHONPATH=.:DIR python3 docs/perf/h200-topk-slots.py OUT.json modules MODULE[:FIELD=VALUE,...] ...
    PYTHONPATH=. python3 docs/perf/h200-topk-slots.py OUT.json rows

phases   `_cut_kernel` (below) runs the selecting program of commit d2c9550 (two passes of atomic increments in
         `_count_sort`) up to a cut: 1 the row's load and keys, 2 the narrowing, 3 the largest key, 4 the counts
         (the first pass), 5 the slots and stores (the second pass); N(0, 1) and decode-like rows.
modules  each module's whole top-k (`whole`) and its selecting kernel alone (`select`, the ordering kernel left out),
         two rounds; FIELD=VALUE replaces a FastTiling field (e.g. order_warps=2). A module is a form of
         hw/_topk_details/radix_fast.py with absolute imports (see h200-topk-counting.py).
rows     the tree's one-tile launch on 132, 264 and 528 decode-like rows of 8192 columns, ordered from the counting
         sort (the launcher's choice) and with count_group patched to 0 (every row through _partition).
Rows: N(0, 1) ("normal") and sum_h w_h relu(q_h . k) ("decode", h200-topk-counting.py's).
"""
import dataclasses
import importlib
import json
import sys

import torch
import triton
import triton.language as tl

from hw._topk_details import radix_fast
from hw._topk_details.kernel import _order_key, _sort_composite
from hw._topk_details.radix_fast import _FINE, _FLT_MAX, _KEY_MAP_SPAN, _KEY_MAX, _SIGN_BIT, _key_value, _narrow
from hw.targets import sm_count
from tools.timing import graph_time_us

sys.path.insert(0, "docs/perf")
rows_of = importlib.import_module("h200-topk-counting")._logits
ROWS, WIDTH, K, INNER, REPLAYS = 64, 8192, 2048, 20, 30


@triton.jit
def _count_sort_cut(key, cols, lo, kmax, area_row, count_row, MAX_FINE: tl.constexpr, PASS2: tl.constexpr):
    """d2c9550's _count_sort, the second pass only with PASS2; returns a value that depends on every store."""
    take = key >= lo.to(tl.uint32)
    lo_u = lo.to(tl.uint32)
    span = kmax.to(tl.int64) - lo
    key_map = ((lo_u >= _SIGN_BIT) | (kmax < _SIGN_BIT)) & (span <= _KEY_MAP_SPAN)
    v_max = _key_value(kmax)
    v_span = v_max - _key_value(lo_u)
    stored = take.to(tl.int32) * 0
    if key_map | (v_span <= _FLT_MAX):
        if key_map:
            pre = span * 0
            for i in tl.static_range(32):
                pre += ((span >> i) >= _FINE).to(tl.int64)
            scale = (_FINE << 16) // ((span >> pre) + 1)
            b = ((((kmax - key) >> pre.to(tl.uint32)) * scale.to(tl.uint32)) >> 16).to(tl.int32)
        else:
            below_max = tl.where(take, v_max - _key_value(key), 0.0)
            b = tl.minimum(below_max * (_FINE / v_span), _FINE - 1).to(tl.int32)
        b = tl.where(take, b, 0)
        f = tl.arange(0, _FINE)
        tl.store(count_row + f, tl.zeros((_FINE,), tl.int32))
        tl.debug_barrier()
        before = tl.atomic_add(count_row + b, 1, mask=take, sem="relaxed")
        widest = tl.max(tl.where(take, before, 0), 0) + 1
        stored = take.to(tl.int32) * 0 + widest
        if PASS2:
            if widest <= MAX_FINE:
                tl.debug_barrier()
                counts = tl.load(count_row + f, cache_modifier=".cg")
                tl.debug_barrier()
                tl.store(count_row + f, tl.cumsum(counts, 0) - counts)
                tl.debug_barrier()
                slot = tl.atomic_add(count_row + b, 1, mask=take, sem="relaxed")
                tl.store(area_row + slot, _sort_composite(key, cols), mask=take)
                stored = take.to(tl.int32) * 0 + 1
    return tl.max(stored, 0)


@triton.jit
def _cut_kernel(logits_ptr, count_ptr, bucket_ptr, sink_ptr, width, k, CUT: tl.constexpr, TILE: tl.constexpr,
                CAP: tl.constexpr, MAX_FINE: tl.constexpr, AREA: tl.constexpr, COUNT_W: tl.constexpr):
    """The one-tile selecting program on full rows up to phase CUT; stores a value that depends on its work."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, TILE)
    visible = cols < width
    key = _order_key(tl.load(logits_ptr + row * width + cols, mask=visible, other=0.0), visible)
    k_eff = tl.minimum(width, k)
    lo = (k_eff * 0 + 1).to(tl.int64)
    hi = lo * 0 + _KEY_MAX
    ge_lo = k_eff * 0 + width
    above = k_eff * 0
    if CUT >= 2:
        while (ge_lo != k_eff) & (lo < hi) & (ge_lo - above > CAP):
            lo, hi, ge_lo, above = _narrow(key, 0, lo, hi, ge_lo, above, k_eff, 1)
    sink = lo + ge_lo + above
    if CUT == 1:
        sink += tl.sum(key.to(tl.int64), 0)
    if CUT >= 3:
        kmax = tl.max(key, 0)
        sink += kmax
        if CUT >= 4:
            sink += _count_sort_cut(key, cols, lo, kmax, bucket_ptr + row * AREA, count_ptr + row * COUNT_W,
                                    MAX_FINE, CUT >= 5)
    tl.store(sink_ptr + row, sink)


def _time(fns) -> float:
    return graph_time_us(fns, inner=INNER, replays=REPLAYS)


def _without_ordering(module, fn) -> float:
    """The time of fn with the module's ordering kernel left out."""
    class Skipped:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None
    real, module._order_kernel = module._order_kernel, Skipped()
    try:
        return _time(fn)
    finally:
        module._order_kernel = real


def phases(gen) -> dict:
    order = radix_fast.ordering(K, radix_fast.fast_tiling(WIDTH, K))
    area, count_w = order.segments * 2 * order.seg_cap, radix_fast.FINE_BUCKETS + 32
    bucket = torch.empty((ROWS, area), dtype=torch.int64, device="cuda")
    count = torch.empty((ROWS, count_w), dtype=torch.int32, device="cuda")
    sink = torch.empty((ROWS,), dtype=torch.int64, device="cuda")
    results = {}
    for kind in ("normal", "decode"):
        sets = [rows_of(kind, ROWS, WIDTH, gen) for _ in range(4)]
        for cut in range(1, 6):
            results[f"{kind}/cut{cut}"] = _time([
                lambda x=x, c=cut: _cut_kernel[(ROWS,)](x, count, bucket, sink, WIDTH, K, CUT=c, TILE=WIDTH,
                                                        CAP=radix_fast.ROW_CAP, MAX_FINE=3 * order.seg_cap // 2,
                                                        AREA=area, COUNT_W=count_w, num_warps=8) for x in sets])
            print(kind, cut, round(results[f"{kind}/cut{cut}"], 2), flush=True)
    return results


def modules(gen, names) -> dict:
    sms = sm_count(torch.device("cuda"))
    forms = []
    for name in names:
        module, _, fields = name.partition(":")
        forms.append((name, importlib.import_module(module),
                      {f: int(v) for f, v in (item.split("=") for item in fields.split(",") if item)}))
    lengths = torch.full((ROWS,), WIDTH, dtype=torch.int32, device="cuda")
    out = torch.empty((ROWS, K), dtype=torch.int32, device="cuda")
    results = {}
    for kind in ("normal", "decode"):
        sets = [rows_of(kind, ROWS, WIDTH, gen) for _ in range(4)]
        for round_ in range(2):
            for name, module, fields in forms:
                tiling = dataclasses.replace(module.fast_tiling(WIDTH, K, pdl=True, rows=ROWS, sms=sms), **fields)
                fn = [lambda x=x, m=module, t=tiling: m._launch(x, lengths, None, out, t) for x in sets]
                whole, select = _time(fn), _without_ordering(module, fn)
                results.setdefault(f"{kind}/{name}/whole", []).append(whole)
                results.setdefault(f"{kind}/{name}/select", []).append(select)
                print(kind, round_, name, round(whole, 2), round(select, 2), flush=True)
    return results


def rows(gen) -> dict:
    sms = sm_count(torch.device("cuda"))
    results = {}
    for n in (132, 264, 528):
        sets = [rows_of("decode", n, WIDTH, gen) for _ in range(4)]
        lengths = torch.full((n,), WIDTH, dtype=torch.int32, device="cuda")
        out = torch.empty((n, K), dtype=torch.int32, device="cuda")
        tiling = radix_fast.fast_tiling(WIDTH, K, pdl=True, rows=n, sms=sms)
        for round_ in range(2):
            for label, group in (("count_sort", radix_fast.count_group), ("partition", lambda order, one_tile: 0)):
                real, radix_fast.count_group = radix_fast.count_group, group
                try:
                    us = _time([lambda x=x: radix_fast._launch(x, lengths, None, out, tiling) for x in sets])
                finally:
                    radix_fast.count_group = real
                results.setdefault(f"{n}/{label}", []).append(us)
                print(n, round_, label, round(us, 2), flush=True)
    return results


def main(out_path: str, mode: str, *names: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(1)
    results = {"phases": lambda: phases(gen), "modules": lambda: modules(gen, names), "rows": lambda: rows(gen)}[mode]()
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
