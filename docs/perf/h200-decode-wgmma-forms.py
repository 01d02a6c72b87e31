"""The MXFP4 Gluon decode scorer (`mxfp4_keys_m_wgmma`) against other forms of its module, given as files (e.g. a
commit's), at the shapes of h200-decode-wgmma-async.json; FP8 (the default) beside them at the `mxidx bench` shape;
median of CUDA-graph replays over 4 input sets as `mxidx bench` times them, each form's logits compared bit for bit
with the tree's (the visible columns), the forms alternating over two rounds in one process:

    git show 87744b5:hw/_logits_details/paged_keys_m_wgmma.py > /tmp/wgmma_87744b5.py
    PYTHONPATH=. python3 docs/perf/h200-decode-wgmma-forms.py OUT.json /tmp/wgmma_87744b5.py [FILE ...]

A form is loaded as a module of hw._logits_details (its relative imports resolve in the tree) and takes the place of
the variant's launch and settings while it is timed.
"""
import dataclasses
import importlib.util
import json
import os
import sys

import torch

from hw import variants
from hw.targets import Op
from tools.cmd_bench import INPUT_SETS, _copy_GBps, decode_inputs
from tools.timing import graph_time_us

NAME = "mxfp4_keys_m_wgmma"
#: (batch, context, next_n, heads)
SHAPES = ((64, 8192, 1, 32), (8, 8192, 1, 32), (8, 32768, 1, 32), (32, 8192, 1, 32), (64, 32768, 1, 32),
          (256, 8192, 1, 32), (64, 8192, 2, 32), (64, 8192, 1, 64))


def _load_form(path: str, i: int):
    name = f"hw._logits_details._form{i}_{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _use(form) -> None:
    """The registry's MXFP4 Gluon variant replaced by the record `form` (the tree's own record restores it)."""
    variants.REGISTRY[Op.DECODE] = tuple(form if v.name == NAME else v for v in variants.REGISTRY[Op.DECODE])


def main(out_path: str, *files: str) -> None:
    tree = next(v for v in variants.REGISTRY[Op.DECODE] if v.name == NAME)
    forms = [("tree", tree)] + [
        (os.path.basename(f), dataclasses.replace(tree, launch=m.launch, settings=m.VARIANT.settings))
        for f, m in ((f, _load_form(f, i)) for i, f in enumerate(files))]
    results = {"copy": _copy_GBps(20, 30)}

    def log():
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)

    fp8 = [decode_inputs("fp8", "cuda", layout=None, seed=i, batch=64, next_n=1, heads=32, head_dim=128,
                         context=8192, page_size=64) for i in range(INPUT_SETS)]
    for batch, context, next_n, heads in SHAPES:
        shape = dict(batch=batch, next_n=next_n, heads=heads, head_dim=128, context=context, page_size=64)
        sets = [decode_inputs("mxfp4", "cuda", layout=None, seed=i, variant=NAME, **shape)
                for i in range(INPUT_SETS)]
        key = f"B{batch}/ctx{context}/N{next_n}/H{heads}"
        res = results.setdefault(key, {})
        visible = context - next_n      # every row sees at least these columns
        _use(tree)
        ref = sets[0][0]()[:, :visible].clone()
        for label, form in forms[1:]:
            _use(form)
            res[f"{label}_equal"] = bool(torch.equal(ref.nan_to_num(7.0), sets[0][0]()[:, :visible].nan_to_num(7.0)))
        for _ in range(2):
            if key == "B64/ctx8192/N1/H32":
                res.setdefault("fp8", []).append(round(graph_time_us([c for c, _ in fp8], inner=20, replays=30), 2))
            for label, form in forms:
                _use(form)
                us = graph_time_us([c for c, _ in sets], inner=20, replays=30)
                res.setdefault(label, []).append(round(us, 2))
        _use(tree)
        print(key, res, flush=True)
        log()
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
