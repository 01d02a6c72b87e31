"""Ablation of the MXFP4 decode scorer on the H200: time variants that leave one stage out (results and reading:
h200-bench.md). Each variant runs in a fresh process, since Triton resolves the patched globals at first compile:

    PYTHONPATH=. python3 docs/perf/h200-ablate-decode.py VARIANT [MXFP4_PATH]

VARIANT: base | no_unpack (codes used as e4m3 bytes) | no_scales (E8M0 factors replaced by 1) | no_relu.
The variants other than base compute wrong logits on purpose; this is a timing probe, not a kernel."""
import json
import os
import sys

os.environ["MXIDX_MXFP4_PATH"] = sys.argv[2] if len(sys.argv) > 2 else "unpack_ptx"
import triton
import triton.language as tl

import hw._logits_details.scoring as S

variant = sys.argv[1]

@triton.jit
def _no_unpack(packed):
    return packed, packed

@triton.jit
def _one_scale(b):
    return tl.full(b.shape, 1.0, tl.float32)

@triton.jit
def _relu_only(x):
    return x

if variant == "no_unpack":
    S._unpack_e2m1_ptx = _no_unpack
elif variant == "no_scales":
    S.e8m0_to_f32 = _one_scale
elif variant == "no_relu":
    S.relu_keep_nan = _relu_only
from tools.cmd_bench import _decode_case

shape = dict(batch=64, next_n=1, heads=32, head_dim=128, context=8192, page_size=64)
row = _decode_case("mxfp4", layout=None, inner=20, replays=20, **shape)
print(json.dumps({"variant": variant, "path": os.environ["MXIDX_MXFP4_PATH"], "time_us": row["time_us"]}))
