"""The stable public names of DESIGN §8 (and docs/notes api.md's keyword-only extras) exist with exactly these
signatures, and sim/ never imports torch."""
from __future__ import annotations

import inspect
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from sim import fp8, layout, mxfp4

KW, POS = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
NO_DEFAULT = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    name: str
    kind: inspect._ParameterKind = POS
    default: object = NO_DEFAULT


@dataclass(frozen=True)
class ApiCase:
    name: str
    fn: object
    params: tuple[Param, ...]


API = [
    ApiCase("sim.mxfp4.quantize", mxfp4.quantize,
            (Param("x"), Param("scale_rule", KW, "rceil"), Param("rounding", KW, "rne"),
             Param("min_scale_byte", KW, 1))),
    ApiCase("sim.mxfp4.dequantize", mxfp4.dequantize,
            (Param("codes"), Param("scales"), Param("dtype", KW, np.float32))),
    ApiCase("sim.fp8.quantize", fp8.quantize, (Param("x"),)),
    ApiCase("sim.fp8.dequantize", fp8.dequantize,
            (Param("values"), Param("scales"), Param("dtype", KW, np.float32))),
    ApiCase("sim.layout.PageGeometry", layout.PageGeometry,
            (Param("kv_dtype"), Param("page_size"), Param("head_dim"), Param("num_pages"),
             Param("page_stride", POS, None), Param("layout", POS, None), Param("view_offset", POS, 0))),
]


@pytest.mark.parametrize("case", API, ids=lambda c: c.name)
def test_signature(case):
    got = tuple(Param(p.name, p.kind, p.default) for p in inspect.signature(case.fn).parameters.values())
    assert got == case.params, f"{case.name}{inspect.signature(case.fn)}: expected {case.params}"


def test_layout_names():
    assert layout.LAYOUTS == ("fp8", "mxfp4", "mxfp4_tiled")


SIM_MODULES = ("sim.formats", "sim.mxfp4", "sim.fp8", "sim.layout", "sim.addressing", "sim.scorer", "sim.topk",
               "sim.verify", "sim.fast_codecs", "sim.fast_layout", "sim.fast_scorer", "sim.testing")


def test_sim_does_not_import_torch():
    """In a fresh interpreter (this one has torch loaded by other tests): importing every sim module pulls in
    neither torch nor triton nor the hw/integration/tools layers."""
    code = (f"import sys\nimport {', '.join(SIM_MODULES)}\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'hw', 'integration', "
            "'tools'))\nprint(bad)\nsys.exit(1 if bad else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"sim imported forbidden modules: {r.stdout.strip()} {r.stderr.strip()[-2000:]}"
