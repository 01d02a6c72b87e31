"""What programmatic dependent launch (hw._pdl) is worth in decode on the H200: each kernel with PDL on (the
NVIDIA default) and off, in one run, timed as `mxidx bench` times them (median of CUDA-graph replays of `inner`
calls back to back), with the copy ceiling and torch.topk measured in the same run:

    PYTHONPATH=. python3 docs/perf/h200-pdl.py OUT.json [pdl|tiles|occupancy|occupancy_wide|tile_keys]

GRID `pdl` (the default):
- the decode scorer, B64 / next_n 1 / H32 / D128 / context 8192 / page 64, FP8 and MXFP4 (4 input sets);
- the decode step as the hook runs it (scorer + top-k of every row, k = 2048), PDL on or off in both;
- top-k of 64 rows of 8192 and 131072 columns, k = 2048.

GRID `tiles`: the decode scorers with PDL at 4, 8 or 16 tiles of 64 keys per program and 2 or 3 pipeline stages.
GRID `occupancy`: the decode scorers at 4, 8 or 16 tiles per program (default stages) over batches 1 / 8 / 64 / 256
and contexts 8192 / 32768 (next_n 1, H32, D128, page 64): how many programs each grid should have.
GRID `occupancy_wide`: the same at 64 and 128 query columns (next_n 2 / H32, next_n 1 / H64, next_n 2 / H64).
GRID `tile_keys`: the decode scorers with 128 or 256 keys (2 or 4 pages) on the MMA's M axis per tile against the
default 64, at 4 or 8 warps (8 warps: two warpgroups of 64 keys each), 2 or 3 stages and 512 or 1024 keys per
program; at the `mxidx bench` shape, then over batches 8 / 64 / 256 and contexts 8192 / 32768 for the default and
the 128-key tiles on 8 warps.
"""
import sys

import torch

import hw
from tools.cmd_bench import INPUT_SETS, _copy_GBps, decode_inputs, json_recorder
from tools.timing import graph_time_us

SHAPE = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
TOP_K, INNER, REPLAYS = 2048, 20, 30
SETTINGS = {"on": None, "off": {"pdl": False}}


def decode_cases(log) -> None:
    lengths = torch.full((SHAPE["batch"],), SHAPE["context"], dtype=torch.int32, device="cuda")
    for kv_dtype in ("fp8", "mxfp4"):
        for mode, settings in SETTINGS.items():
            sets = [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, launch_settings=settings, **SHAPE)
                    for i in range(INPUT_SETS)]
            moved = sets[0][1]
            us = graph_time_us([call for call, _ in sets], inner=INNER, replays=REPLAYS)
            log(f"decode/{kv_dtype}/pdl_{mode}", {"time_us": us, "GBps": moved / us / 1e3})

            def step(call):
                return lambda: hw.top_k_per_row(call(), lengths, TOP_K, launch_settings=settings)
            us = graph_time_us([step(call) for call, _ in sets], inner=INNER, replays=REPLAYS)
            log(f"decode_step/{kv_dtype}/pdl_{mode}", {"time_us": us})


def tile_cases(log) -> None:
    for kv_dtype in ("fp8", "mxfp4"):
        for tiles in (4, 8, 16):
            for stages in (2, 3):
                settings = {"tiles": tiles, "num_stages": stages}
                sets = [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, launch_settings=settings, **SHAPE)
                        for i in range(INPUT_SETS)]
                us = graph_time_us([call for call, _ in sets], inner=INNER, replays=REPLAYS)
                log(f"decode/{kv_dtype}/tiles{tiles}_stages{stages}", {"time_us": us,
                                                                       "GBps": sets[0][1] / us / 1e3})


def occupancy_cases(log, queries=((1, 32),)) -> None:
    """queries: (next_n, heads) pairs; rows of other pairs than (1, 32) are named with them."""
    for (next_n, heads), kv_dtype in ((q, f) for q in queries for f in ("fp8", "mxfp4")):
        for context in (8192, 32768):
            for batch in (1, 8, 64, 256):
                for tiles in (4, 8, 16):
                    shape = dict(SHAPE, batch=batch, context=context, next_n=next_n, heads=heads)
                    sets = [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, launch_settings={"tiles": tiles},
                                          **shape) for i in range(INPUT_SETS)]
                    us = graph_time_us([call for call, _ in sets], inner=INNER, replays=REPLAYS)
                    programs = batch * -(-context // (64 * tiles))
                    query = "" if (next_n, heads) == (1, 32) else f"N{next_n}H{heads}/"
                    log(f"decode/{kv_dtype}/{query}ctx{context}/B{batch}/tiles{tiles}",
                        {"time_us": us, "GBps": sets[0][1] / us / 1e3, "programs": programs})
                    del sets


#: (pages per tile, tiles per program, warps, stages); None: the default settings (one page of 64 keys a tile)
TILE_KEYS = (None, (1, 8, 4, 2), (1, 8, 4, 3), (1, 16, 4, 2), (2, 4, 4, 2), (2, 4, 4, 3), (2, 4, 8, 2), (2, 4, 8, 3),
             (2, 8, 8, 2), (2, 8, 8, 3), (4, 2, 8, 2), (4, 4, 8, 2))
TILE_KEYS_SHAPES = (None, (2, 4, 8, 2), (2, 8, 8, 2))


def tile_keys_cases(log) -> None:
    reference = {}      # (format, shape name): the default settings' logits of input set 0

    def run(kv_dtype, shape, config, name):
        settings = None if config is None else dict(zip(("tile_pages", "tiles", "num_warps", "num_stages"), config))
        sets = [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, launch_settings=settings, **shape)
                for i in range(INPUT_SETS)]
        us = graph_time_us([call for call, _ in sets], inner=INNER, replays=REPLAYS)
        label = "default" if config is None else "tp{}_t{}_w{}_s{}".format(*config)
        out = sets[0][0]().clone()
        if config is None:
            reference[kv_dtype, name] = out
        same = bool(torch.equal(out.nan_to_num(), reference[kv_dtype, name].nan_to_num()))
        log(f"decode/{kv_dtype}/{name}{label}", {"time_us": us, "GBps": sets[0][1] / us / 1e3,
                                                 "same_logits_as_default": same})
        del sets

    for kv_dtype in ("fp8", "mxfp4"):
        for config in TILE_KEYS:
            run(kv_dtype, SHAPE, config, "")
    for kv_dtype in ("fp8", "mxfp4"):
        for context in (8192, 32768):
            for batch in (8, 64, 256):
                for config in TILE_KEYS_SHAPES:
                    run(kv_dtype, dict(SHAPE, batch=batch, context=context), config, f"ctx{context}/B{batch}/")


def topk_cases(log) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    for width in (8192, 131072):
        logits = torch.randn(64, width, device="cuda", generator=gen)
        lengths = torch.full((64,), width, dtype=torch.int32, device="cuda")
        want = torch.topk(logits, TOP_K, dim=1)
        for mode, settings in SETTINGS.items():
            out = hw.top_k_per_row(logits, lengths, TOP_K, launch_settings=settings)
            same = bool(torch.equal(torch.gather(logits, 1, out.long()), want.values))
            us = graph_time_us([lambda: hw.top_k_per_row(logits, lengths, TOP_K, launch_settings=settings)],
                                inner=INNER, replays=REPLAYS)
            log(f"topk/64x{width}/pdl_{mode}", {"time_us": us, "same_values_as_torch": same})
        log(f"topk/64x{width}/torch.topk", {"time_us": graph_time_us([lambda: torch.topk(logits, TOP_K, dim=1)],
                                                                      inner=INNER, replays=REPLAYS)})


def main(out_path: str, grid: str = "pdl") -> None:
    log = json_recorder(out_path)

    log("copy", _copy_GBps(INNER, REPLAYS))
    if grid == "tiles":
        return tile_cases(log)
    if grid == "occupancy":
        return occupancy_cases(log)
    if grid == "tile_keys":
        return tile_keys_cases(log)
    if grid == "occupancy_wide":
        return occupancy_cases(log, queries=((2, 32), (1, 64), (2, 64)))
    decode_cases(log)
    topk_cases(log)


if __name__ == "__main__":
    main(*sys.argv[1:3])
