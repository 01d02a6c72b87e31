"""The MXFP4 decode scorer at 128 query columns (next_n 2 x H 64, H 128): the Gluon kernel forced on every grid
(`WIDE_MIN_TILES_PER_SLOT` = 0), the `tl` fold (`mxfp4_keys_m`), the shipped rule and FP8, on grids from 2.6 to 83
tiles per resident program; at 32 and 64 query columns the tree's Gluon kernel against another form of its module
(a file, e.g. the commit before), logits compared bit for bit on the visible columns. Medians of CUDA-graph replays
over 4 input sets as `mxidx bench` times them, two rounds alternating in one process:

    git show d1acde7:hw/_logits_details/paged_keys_m_wgmma.py > /tmp/wgmma_d1acde7.py
    PYTHONPATH=. python3 docs/perf/h200-decode-wgmma-128-columns.py OUT.json /tmp/wgmma_d1acde7.py
"""
import dataclasses
import importlib
import json
import os
import sys

import torch

from hw import variants
from hw._logits_details import paged_keys_m_wgmma as wgmma
from hw.targets import Op
from tools.cmd_bench import INPUT_SETS, _copy_GBps, decode_inputs
from tools.timing import graph_time_us

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
forms = importlib.import_module("h200-decode-wgmma-forms")

NAME = "mxfp4_keys_m_wgmma"
#: (batch, context, next_n, heads) at 128 query columns, and at 32 / 64
WIDE = ((16, 8192, 2, 64), (4, 32768, 2, 64), (32, 8192, 2, 64), (8, 32768, 2, 64), (8, 8192, 2, 64),
        (64, 8192, 2, 64), (256, 8192, 2, 64), (8, 32768, 1, 128), (64, 8192, 1, 128))
NARROW = ((64, 8192, 1, 32), (64, 8192, 1, 64), (64, 8192, 2, 32), (8, 32768, 1, 32))


def _time(sets) -> float:
    return round(graph_time_us([c for c, _ in sets], inner=20, replays=30), 2)


def _inputs(kv_dtype: str, variant: str | None, shape: dict):
    return [decode_inputs(kv_dtype, "cuda", layout=None, seed=i, variant=variant, **shape) for i in range(INPUT_SETS)]


def main(out_path: str, before: str) -> None:
    tree = next(v for v in variants.REGISTRY[Op.DECODE] if v.name == NAME)
    module = forms._load_form(before, 0)
    form = dataclasses.replace(tree, launch=module.launch, settings=module.VARIANT.settings)
    shipped_min = wgmma.WIDE_MIN_TILES_PER_SLOT
    results = {"copy": _copy_GBps(20, 30)}
    for batch, context, next_n, heads in WIDE + NARROW:
        shape = dict(batch=batch, next_n=next_n, heads=heads, head_dim=128, context=context, page_size=64)
        visible = context - next_n      # every row sees at least these columns
        res = {"tiles_per_slot": round(batch * context / 64 / (wgmma.programs_per_sm(wgmma.WIDE_MAXNREG) * 132), 1)}
        sets, fp8 = _inputs("mxfp4", NAME, shape), _inputs("fp8", None, shape)
        if (batch, context, next_n, heads) in WIDE:
            fold = _inputs("mxfp4", "mxfp4_keys_m", shape)
            wgmma.WIDE_MIN_TILES_PER_SLOT = 0
            res["max_abs_diff"] = float((fold[0][0]()[:, :visible] - sets[0][0]()[:, :visible])
                                        .nan_to_num(0.0, 0.0, 0.0).abs().max())
            for _ in range(2):
                wgmma.WIDE_MIN_TILES_PER_SLOT = 0
                res.setdefault("gluon", []).append(_time(sets))
                wgmma.WIDE_MIN_TILES_PER_SLOT = shipped_min
                res.setdefault("shipped", []).append(_time(sets))
                res.setdefault("tl_fold", []).append(_time(fold))
                res.setdefault("fp8", []).append(_time(fp8))
            del fold
        else:
            forms._use(form)
            ref = sets[0][0]()[:, :visible].clone()
            forms._use(tree)
            res["equal"] = bool(torch.equal(ref.nan_to_num(7.0), sets[0][0]()[:, :visible].nan_to_num(7.0)))
            for _ in range(2):
                for label, variant in (("tree", tree), ("head", form)):
                    forms._use(variant)
                    res.setdefault(label, []).append(_time(sets))
                res.setdefault("fp8", []).append(_time(fp8))
            forms._use(tree)
        key = f"B{batch}/ctx{context}/N{next_n}/H{heads}"
        results[key] = res
        print(key, res, flush=True)
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)
        del sets, fp8
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
