"""What each part of the keys-on-M prefill scorer costs on the H200, and the top-k of the hook's prefill rows.

    PYTHONPATH=. python3 docs/perf/h200-prefill-ablation.py OUT.json [levers|tiles|stores|timeline]

Every row is timed like `mxidx bench` times prefill (median of CUDA-graph replays), in one process, one run.
GRID `levers` (the default):

- prefill 8192 x 8192 x H32/D128, full and causal, FP8: the shipped kernel; copies of it with one choice
  undone (patched source, loaded as a module of its own; timing probes, not kernels: the last two compute wrong
  logits on purpose): `forward_order` (programs in grid order instead of the last query block first),
  `masked_loads` (every key tile loaded and stored as the tile past SK is: masked), `plain_store` (logits stored
  unmasked, no -inf), `plain_relu` (max without NaN propagation); and `floor`, a kernel with only the structure
  (keys on M, the same tiles, no ranges, masks or NaN rules).
- the same for MXFP4: the shipped path (keys folded once by fold_keys_kernel) with the MXFP4 and the FP8 tiles
  and stages; fold_keys_kernel alone.
- top-k of 8192 causal rows (row i sees i + 1 columns), k = 2048, as the hook's prefill calls it: each variant
  and on-chip warp count, and torch.topk of the -inf padded rows.

GRID `tiles`: FP8 at 128 and 256 MMA columns (block_q 4 and 8 tokens of 32 heads) and 3 or 4 pipeline stages,
full and causal, 8192 and 4096 queries = keys; both on 128 keys and 8 warps (full); the floor at both sizes.
GRID `stores`: the shipped kernel against its output stores with the L2 evict_first hint (`store_evict_first`; the
streaming cache modifier .cs compiles to the same PTX under triton 3.6), alternating twice, FP8 and MXFP4, full and
causal, 8192 and 4096.
GRID `timeline`: per-program timelines of the FP8 kernel (probe `trace`: SM and globaltimer at a program's start,
before its query load, after its key loops and at its end), summarised by `timeline`.
"""
import dataclasses
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl

import hw
import hw.variants as registry
from hw._logits_details import prefill_keys_m as pk
from hw.targets import Op, Target
from tools.cmd_bench import json_recorder, prefill_inputs
from tools.timing import graph_time_us

INNER, REPLAYS = 3, 10
SIZE, HEADS, HEAD_DIM, TOP_K = 8192, 32, 128, 2048
SOURCE = Path(pk.__file__).read_text()

#: the output stores of the kernel (_clean_columns' and _store_tile's), as the store probes patch them
STORES = ("""mask=row_in[:, None] & (cols[None, :] < end))""",
          """tl.where(visible, logits, float("-inf")), mask=row_in[None, :])""",
          """mask=row_in[None, :] & (stored & (cols < SK))[:, None])""",
          """tl.store(out_cols + cols[:, None], logits, mask=visible & stored[:, None])""")

#: probe -> (old, new) source replacements that make it: the shipped kernel with one of its choices undone
PROBES = {
    "forward_order": [("pid = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)",
                       "pid = tl.program_id(0).to(tl.int64)")],
    "masked_loads": [("PROMOTE_K, CLEAN, False)", "PROMOTE_K, CLEAN, True)")],
    "plain_store": [("""    if CLEAN and WHOLE:
        tl.store(out_cols + cols[:, None], tl.where(visible, logits, float("-inf")), mask=row_in[None, :])
    elif CLEAN:
        tl.store(out_cols + cols[:, None], tl.where(visible, logits, float("-inf")),
                 mask=row_in[None, :] & (stored & (cols < SK))[:, None])
    else:
        tl.store(out_cols + cols[:, None], logits, mask=visible & stored[:, None])""",
                     """    tl.store(out_cols + cols[:, None], logits)""")],
    "store_evict_first": [(s, s.replace("])", "], eviction_policy=\"evict_first\")").replace(
        "end))", "end), eviction_policy=\"evict_first\")")) for s in STORES],
    "plain_relu": [("from .paged_keys_m import (", """@triton.jit
def _plain_head_sum(s, w, N_PAD: tl.constexpr, H_PAD: tl.constexpr):
    KEYS: tl.constexpr = s.shape[0]
    return tl.sum(tl.reshape(tl.maximum(s, 0.0) * w[None, :], (KEYS, N_PAD, H_PAD)), axis=2)


from .paged_keys_m import ("""),
                   ("logits = _head_sum(", "logits = _plain_head_sum(")],
}

FP8_LOOPS_END = """                      BLOCK_Q, H_PAD, PROMOTE_K, CLEAN, True)
"""

PROBES |= {
    # FP8 timeline: per program int32 [8] = SM, globaltimer_lo at its start, before the query load, after the key
    # loops and at its end, into the module's TRACE (the launcher passes it as `wide`)
    "trace": [
        ("FOLD_KEYS_BLOCK = 64 ", "TRACE = None\nFOLD_KEYS_BLOCK = 64 "),
        ("if mx else call.ks\n", "if mx else TRACE\n"),
        ("@triton.jit\ndef _clean_columns(", '''@triton.jit
def _now(x):
    return tl.inline_asm_elementwise("mov.u32 $0, %globaltimer_lo;", "=r,r", [x], dtype=tl.int32, is_pure=False,
                                     pack=1)


@triton.jit
def _smid(x):
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _clean_columns('''),
        ("pid = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)\n",
         "pid = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)\n    t_start = _now(tl.program_id(0))\n"),
        ("    NQ: tl.constexpr = BLOCK_Q * H_PAD\n",
         "    t_query = _now(tl.program_id(0))\n    NQ: tl.constexpr = BLOCK_Q * H_PAD\n"),
        (FP8_LOOPS_END, FP8_LOOPS_END + "        t_loop = _now(tl.program_id(0))\n"),
        ("    elif not EXACT_PASS:\n", """        t_end = _now(tl.program_id(0))
        i8 = tl.arange(0, 8)
        tl.store(wide_ptr + pid * 8 + i8, tl.where(i8 == 0, _smid(tl.program_id(0)), tl.where(
            i8 == 1, t_start, tl.where(i8 == 2, t_query, tl.where(i8 == 3, t_loop, tl.where(i8 == 4, t_end, 0))))))
    elif not EXACT_PASS:
"""),
    ],
}


MODULES = {}   # variant name -> its patched module


def patched_variant(feature: str, kv_dtype: str):
    """The shipped variant of kv_dtype patched into probe `feature`, registered as 'ablate_<feature>_<kv_dtype>'."""
    text = SOURCE
    for old, new in (r for f in feature.split("+") for r in PROBES[f]):
        if old not in text:
            raise SystemExit(f"probe {feature}: {old[:60]!r} not found in {pk.__file__}")
        text = text.replace(old, new)
    stem = feature.replace("+", "_")
    path = Path(tempfile.mkdtemp()) / f"_ablate_{stem}.py"
    path.write_text(text)
    name = f"hw._logits_details._ablate_{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    record = module.FP8_VARIANT if kv_dtype == "fp8" else module.MXFP4_FOLD_VARIANT
    variant = dataclasses.replace(record, name=f"ablate_{stem}_{kv_dtype}")
    registry.REGISTRY[Op.PREFILL] = registry.REGISTRY[Op.PREFILL] + (variant,)
    MODULES[variant.name] = module
    return variant.name


@triton.jit
def _floor_kernel(q_ptr, w_ptr, k_ptr, ks_ptr, out_ptr, SK, H: tl.constexpr, D: tl.constexpr, BQ: tl.constexpr,
                  BK: tl.constexpr, STAGES: tl.constexpr):
    """logits[i, j] = ks[j] * sum_h w[i, h] relu(q[i, h] . k[j]) over all keys: keys on M, BQ tokens x H heads
    on N, nothing else."""
    pq = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, BQ * H)
    d = tl.arange(0, D)
    j = tl.arange(0, BK)
    qt = tl.load(q_ptr + (pq * BQ * H + r)[None, :] * D + d[:, None]).to(tl.float8e4nv, bitcast=True)
    w = tl.load(w_ptr + pq * BQ * H + r)
    tok = pq * BQ + tl.arange(0, BQ)
    for k0 in tl.range(0, SK, BK, num_stages=STAGES):
        k = tl.load(k_ptr + (k0 + j)[:, None] * D + d[None, :]).to(tl.float8e4nv, bitcast=True)
        acc = tl.maximum(tl.dot(k, qt), 0.0) * w[None, :]
        o = tl.sum(tl.reshape(acc, (BK, BQ, H)), axis=2) * tl.load(ks_ptr + k0 + j)[:, None]
        tl.store(out_ptr + tok[None, :] * SK + (k0 + j)[:, None], o)


def floor_case(causal: bool, size: int = SIZE) -> float:
    if causal:
        return float("nan")   # the floor has no ranges
    s = pk.keys_m_prefill_settings(Target.NVIDIA, "fp8", HEADS, HEAD_DIM)
    q = torch.randint(0, 0x7E, (size, HEADS, HEAD_DIM), dtype=torch.uint8, device="cuda")
    k = torch.randint(0, 0x7E, (size, HEAD_DIM), dtype=torch.uint8, device="cuda")
    w, ks = torch.rand(size, HEADS, device="cuda"), torch.rand(size, device="cuda")
    out = torch.empty(size, size, device="cuda")

    def call():
        _floor_kernel[(size // s.block_q,)](q, w, k, ks, out, size, H=HEADS, D=HEAD_DIM, BQ=s.block_q,
                                            BK=s.block_k, STAGES=s.num_stages, num_warps=s.num_warps)
    return graph_time_us([call], inner=INNER, replays=REPLAYS)


def prefill_case(kv_dtype: str, causal: bool, variant=None, launch_settings=None,
                 size: int = SIZE) -> tuple[float, float]:
    call, flops = prefill_inputs(kv_dtype, "cuda", queries=size, keys=size, heads=HEADS, head_dim=HEAD_DIM,
                                 causal=causal, variant=variant, launch_settings=launch_settings)
    us = graph_time_us([call], inner=INNER, replays=REPLAYS)
    return us, flops / us / 1e6


def fold_keys_case() -> float:
    codes = torch.randint(0, 256, (SIZE, HEAD_DIM // 2), dtype=torch.uint8, device="cuda")
    scales = torch.randint(120, 135, (SIZE, HEAD_DIM // 32), dtype=torch.uint8, device="cuda")
    k8 = torch.empty(2, SIZE, HEAD_DIM // 2, dtype=torch.uint8, device="cuda")
    meta = torch.empty(SIZE, dtype=torch.int32, device="cuda")

    def call():
        pk.fold_keys_kernel[(triton.cdiv(SIZE, pk.FOLD_KEYS_BLOCK),)](
            codes, scales, k8, meta, SIZE, codes.stride(0), scales.stride(0), k8.stride(0), D=HEAD_DIM,
            BLOCK_K=pk.FOLD_KEYS_BLOCK, MX_MODE=pk.MX_FOLD_PTX.value, num_warps=4)
    return graph_time_us([call], inner=INNER, replays=REPLAYS)


def topk_cases(log):
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(SIZE, SIZE, device="cuda", generator=gen)
    lengths = torch.arange(1, SIZE + 1, dtype=torch.int32, device="cuda")
    padded = logits.masked_fill(torch.arange(SIZE, device="cuda")[None, :] >= lengths[:, None], float("-inf"))
    want = hw.top_k_per_row(logits, lengths, TOP_K)
    out = torch.empty_like(want)
    for name, variant, settings in (("radix_fast", "radix_fast", None),
                                    ("radix_fast_4w", "radix_fast", {"num_warps": 4}),
                                    ("radix_fast_16w", "radix_fast", {"num_warps": 16}),
                                    ("per_row", "per_row", None)):
        def call(variant=variant, settings=settings):
            hw.top_k_per_row(logits, lengths, TOP_K, out=out, variant=variant, launch_settings=settings)
        try:
            us = graph_time_us([call], inner=INNER, replays=REPLAYS)
            log(f"topk_hook/{name}", {"time_us": us, "same": bool(torch.equal(out, want))})
        except Exception as e:   # a warp count that does not compile is a result too
            log(f"topk_hook/{name}", {"error": repr(e)[:300]})
    log("topk_hook/torch.topk", {"time_us": graph_time_us([lambda: torch.topk(padded, TOP_K, dim=1)],
                                                           inner=INNER, replays=REPLAYS)})


def tiles_grid(log) -> None:
    for size in (SIZE, SIZE // 2):
        log(f"{size}/fp8/full/floor", {"time_us": floor_case(False, size)})
        for causal in (False, True):
            for block_q, stages in ((4, 3), (4, 4), (8, 3), (8, 4)):
                us, tf = prefill_case("fp8", causal, launch_settings={"block_q": block_q, "num_stages": stages},
                                      size=size)
                log(f"{size}/fp8/{'causal' if causal else 'full'}/block_q{block_q}_stages{stages}",
                    {"time_us": us, "TFLOPs": tf})
        for block_q in (4, 8):      # two warpgroups on 128 keys
            us, tf = prefill_case("fp8", False, size=size, launch_settings={
                "block_q": block_q, "block_k": 128, "num_warps": 8, "num_stages": 3})
            log(f"{size}/fp8/full/block_q{block_q}_block_k128_warps8_stages3", {"time_us": us, "TFLOPs": tf})


def stores_grid(log) -> None:
    for size in (SIZE, SIZE // 2):
        for kv_dtype in ("fp8", "mxfp4"):
            names = {"shipped": None, "store_evict_first": patched_variant("store_evict_first", kv_dtype)}
            for causal in (False, True):
                for round_ in (1, 2):
                    for label, name in names.items():
                        us, tf = prefill_case(kv_dtype, causal, variant=name, size=size)
                        log(f"{size}/{kv_dtype}/{'causal' if causal else 'full'}/{label}/{round_}",
                            {"time_us": us, "TFLOPs": tf})


def timeline(trace: torch.Tensor, slots: int) -> dict:
    """Summary of a `trace` probe's int32 [programs, 8] record (SM, then globaltimer_lo at start, before the query
    load, after the key loops, at the end): makespan, the share of `slots` x makespan the programs held, the summed
    phases and the drain (from the last program's start to the end)."""
    t = trace.view(-1, 8).cpu().to(torch.int64)
    ns = (t[:, 1:5] - t[:, 1].min()) % 2**32                    # globaltimer_lo wraps every 4.3 s
    start, query, loop, end = ns.unbind(1)
    span = int(end.max())
    sm_last_end = torch.zeros(int(t[:, 0].max()) + 1, dtype=torch.int64).scatter_reduce(0, t[:, 0], end, "amax")
    return {"makespan_us": span / 1e3, "held": float((end - start).sum()) / (slots * span),
            "before_query_us": float((query - start).sum()) / 1e3,
            "query_and_loops_us": float((loop - query).sum()) / 1e3,
            "after_loops_us": float((end - loop).sum()) / 1e3, "drain_us": (span - int(start.max())) / 1e3,
            "first_sm_done_us": int(sm_last_end[sm_last_end > 0].min()) / 1e3,
            "mean_program_us": float((end - start).float().mean()) / 1e3}


def timeline_grid(log) -> None:
    """Timelines of the shipped FP8 kernel (probe `trace`): 8192 causal and full, 4096 causal, four calls each."""
    slots = 2 * torch.cuda.get_device_properties(0).multi_processor_count     # two programs per SM (registers)
    name = patched_variant("trace", "fp8")
    for size, causal in ((SIZE, True), (SIZE, False), (SIZE // 2, True)):
        call, _ = prefill_inputs("fp8", "cuda", queries=size, keys=size, heads=HEADS, head_dim=HEAD_DIM,
                                 causal=causal, variant=name)
        MODULES[name].TRACE = torch.zeros(size // 8 * 8, dtype=torch.int32, device="cuda")   # 8 tokens a program
        for i in range(4):
            call()
            torch.cuda.synchronize()
            log(f"timeline/{size}/{'causal' if causal else 'full'}/{i}", timeline(MODULES[name].TRACE, slots))


def main(out_path: str, grid: str = "levers") -> None:
    log = json_recorder(out_path)

    if grid == "tiles":
        return tiles_grid(log)
    if grid == "stores":
        return stores_grid(log)
    if grid == "timeline":
        return timeline_grid(log)
    for causal in (False, True):
        mode = "causal" if causal else "full"
        us, tf = prefill_case("fp8", causal)
        log(f"fp8/{mode}/shipped", {"time_us": us, "TFLOPs": tf})
        log(f"fp8/{mode}/floor", {"time_us": floor_case(causal)})
        us, tf = prefill_case("mxfp4", causal)
        log(f"mxfp4/{mode}/shipped", {"time_us": us, "TFLOPs": tf})
        for block_q, stages in ((4, 3), (4, 4), (8, 3)):
            us, tf = prefill_case("mxfp4", causal, launch_settings={"block_q": block_q, "num_stages": stages})
            log(f"mxfp4/{mode}/block_q{block_q}_stages{stages}", {"time_us": us, "TFLOPs": tf})
    log("mxfp4/fold_keys_kernel", {"time_us": fold_keys_case()})
    for feature in PROBES:
        for kv_dtype in ("fp8", "mxfp4"):
            name = patched_variant(feature, kv_dtype)
            for causal in (False, True):
                key = f"{kv_dtype}/{'causal' if causal else 'full'}/probe_{feature}"
                try:
                    us, tf = prefill_case(kv_dtype, causal, variant=name)
                    log(key, {"time_us": us, "TFLOPs": tf})
                except Exception as e:   # a probe that does not compile is reported, the others still run
                    log(key, {"error": repr(e)[:300]})
    topk_cases(log)


if __name__ == "__main__":
    main(*sys.argv[1:3])
