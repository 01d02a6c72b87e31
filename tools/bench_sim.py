"""Throughput of the simulator's hot paths, NumPy oracle vs Numba twin, on this machine's CPU.

    python -m tools.bench_sim [--out docs/perf/sim.md]

Each figure is the best of several runs after a warm-up call (numba compiles on first use; its cache is on disk).
Rates count input elements (quantize), output elements (dequantize), token bytes (pool write/read) or cache
bytes (verification). The NumPy and Numba results are compared for equality before timing is reported.
"""
from __future__ import annotations

import argparse
import platform
import time

import numba
import numpy as np

from sim import fast_codecs, fast_layout, fast_scorer, fp8, layout, mxfp4, scorer, verify

REPEATS = 5


def _best(fn, repeats=REPEATS) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _verify_row(rng):
    """Cache verification over a 1.07 GiB mxfp4 pool of random bytes (freed on return)."""
    big = layout.PageGeometry("mxfp4", 64, 128, num_pages=1 << 18)
    big_pool = layout.new_pool(big, fill=0)
    big_pool[:] = rng.integers(0, 255, size=big_pool.size, dtype=np.uint8)
    t_nb = _best(lambda: verify.verify_cache(big_pool, big), repeats=2)
    return f"verify a {big_pool.nbytes / 2**30:.2f} GiB mxfp4 cache", "MB/s", None, big_pool.nbytes / t_nb / 1e6


def _rows(rng):
    rows = []
    x = (rng.standard_normal((1 << 17, 128)) * 3).astype(np.float32)  # 16.8 M elements
    n = x.size
    assert all(np.array_equal(a, b) for a, b in zip(mxfp4.quantize(x[:4096]), fast_codecs.mxfp4_quantize(x[:4096])))
    t_np = _best(lambda: mxfp4.quantize(x[:8192]), repeats=1) * (n / (8192 * 128))
    t_nb = _best(lambda: fast_codecs.mxfp4_quantize(x))
    rows.append(("MXFP4 quantize + pack (rceil, rne)", "M elem/s", n / t_np / 1e6, n / t_nb / 1e6))
    codes, scales = fast_codecs.mxfp4_quantize(x)
    t_np = _best(lambda: mxfp4.dequantize(codes, scales))
    t_nb = _best(lambda: fast_codecs.mxfp4_dequantize(codes, scales))
    rows.append(("MXFP4 dequantize to fp32", "M elem/s", n / t_np / 1e6, n / t_nb / 1e6))
    t_np = _best(lambda: fp8.quantize(x[:8192]), repeats=1) * (n / (8192 * 128))
    t_nb = _best(lambda: fast_codecs.fp8_quantize(x))
    rows.append(("FP8 quantize (per-token 2^k scale)", "M elem/s", n / t_np / 1e6, n / t_nb / 1e6))

    geom = layout.PageGeometry("mxfp4", 64, 128, num_pages=2048, page_stride=8192)
    tokens = geom.num_pages * geom.page_size
    c, s = fast_codecs.mxfp4_quantize(x[:tokens])
    slots = rng.permutation(tokens).astype(np.int64)
    pool_np, pool_nb = layout.new_pool(geom), layout.new_pool(geom)
    layout.write_tokens(pool_np, geom, slots, c, s)
    fast_layout.write_tokens(pool_nb, geom, slots, c, s)
    assert np.array_equal(pool_np, pool_nb)
    nbytes = tokens * geom.bytes_per_token
    t_np = _best(lambda: layout.write_tokens(pool_np, geom, slots, c, s))
    t_nb = _best(lambda: fast_layout.write_tokens(pool_nb, geom, slots, c, s))
    rows.append(("pool write through slot mapping (mxfp4)", "MB/s", nbytes / t_np / 1e6, nbytes / t_nb / 1e6))
    table = rng.permutation(geom.num_pages).astype(np.int32)
    t_np = _best(lambda: layout.read_tokens(pool_np, geom, table, tokens))
    t_nb = _best(lambda: fast_layout.read_tokens(pool_nb, geom, table, tokens))
    rows.append(("pool read through block table (mxfp4)", "MB/s", nbytes / t_np / 1e6, nbytes / t_nb / 1e6))

    rows.append(_verify_row(rng))

    dgeom = layout.PageGeometry("mxfp4", 64, 128, num_pages=8 * 64)
    dpool = layout.new_pool(dgeom)
    dtok = dgeom.num_pages * dgeom.page_size
    dc, ds = fast_codecs.mxfp4_quantize(x[:dtok])
    fast_layout.write_tokens(dpool, dgeom, np.arange(dtok, dtype=np.int64), dc, ds)
    q = mxfp4.dequantize(*mxfp4.quantize(x[: 8 * 32].reshape(8, 1, 32, 128)), dtype=np.float64)
    w = rng.standard_normal((8, 32))
    bt = np.arange(dgeom.num_pages, dtype=np.int32).reshape(8, 64)
    lens = np.full(8, 4096, dtype=np.int32)
    args = (q, dpool, dgeom, w, lens, bt, 4096)
    assert np.array_equal(scorer.decode_logits(*args), fast_scorer.decode_logits(*args), equal_nan=True)
    t_np = _best(lambda: scorer.decode_logits(*args), repeats=2)
    t_nb = _best(lambda: fast_scorer.decode_logits(*args), repeats=3)
    logits = 8 * 4096
    rows.append(("decode scorer B8/H32/D128/ctx 4096 (float64)", "k logits/s", logits / t_np / 1e3,
                 logits / t_nb / 1e3))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write a markdown report here")
    args = parser.parse_args(argv)
    rows = _rows(np.random.default_rng(0))
    lines = ["| hot path | unit | NumPy oracle | Numba | speed-up |", "|---|---|---|---|---|"]
    for name, unit, r_np, r_nb in rows:
        np_txt = "—" if r_np is None else f"{r_np:,.1f}"
        up = "—" if r_np is None else f"{r_nb / r_np:,.0f}x"
        lines.append(f"| {name} | {unit} | {np_txt} | {r_nb:,.1f} | {up} |")
    machine = (f"{platform.processor() or platform.machine()}, {numba.config.NUMBA_NUM_THREADS} numba threads, "
               f"numpy {np.__version__}, numba {numba.__version__}")
    report = "\n".join(lines)
    print(report)
    print(machine)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Simulator throughput (CPU)\n\n")
            f.write("Command: `python -m tools.bench_sim --out docs/perf/sim.md` (best of several runs after warm-up; "
                    "NumPy and Numba outputs are checked equal first; the NumPy quantizers are timed once on a "
                    "1 M-element slice and scaled, the verification runs in memory on random bytes).\n\n")
            f.write(f"Machine: {machine}.\n\n{report}\n\n")
            f.write("Targets: quantize + pack >= 50 M elements/s; cache verification >= 100 MB/s "
                    "(a 1 GiB cache in under 20 s).\n")


if __name__ == "__main__":
    main()
