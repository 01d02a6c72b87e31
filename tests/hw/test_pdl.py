"""hw._pdl: programmatic dependent launch is asked for on NVIDIA only, turned off where the device cannot do it,
and every kernel that takes part waits for the previous kernel before anything else."""
from __future__ import annotations

import ast
import inspect
import textwrap
from types import SimpleNamespace

import torch

from hw._logits_details import paged_keys_m as km
from hw._pdl import pdl_launch
from hw._topk_details import column_order, radix_fast
from hw._topk_details import fast as topk_fast
from hw.targets import Target

KERNELS = (km.paged_keys_m_kernel, radix_fast._topk_row_kernel, radix_fast._group_max_kernel, radix_fast._tau_kernel,
           radix_fast._candidates_kernel, radix_fast._topk_long_kernel, radix_fast._order_kernel,
           column_order._columns_row_kernel, column_order._columns_long_kernel)


def test_launch_keywords():
    assert pdl_launch(True, torch.device("cpu")) == {"PDL": False}
    assert pdl_launch(False, torch.device("cpu")) == {"PDL": False}
    assert pdl_launch(False, "cuda") == {"PDL": False}      # not wanted: no device query at all


def test_wanted_on_nvidia_only():
    for target in Target:
        assert km.keys_m_settings(target, "fp8", 32, 1, 64).pdl == (target is Target.NVIDIA)
        call = SimpleNamespace(logits=torch.empty(1, 131072), k=2048, sorted=True)
        if topk_fast.VARIANT.runs_on(target):
            assert topk_fast.VARIANT.settings(target, call).pdl == (target is Target.NVIDIA)


def test_kernels_wait_before_anything_else():
    """The first statement of each kernel body (after its docstring) is grid_dependency_sync(PDL): no global
    load or store can run before the previous kernel has completed."""
    for kernel in KERNELS:
        tree = ast.parse(textwrap.dedent(inspect.getsource(kernel.fn)))
        body = tree.body[0].body
        body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        body = [s for s in body if not ast.unparse(s).startswith("tl.static_assert")]
        assert ast.unparse(body[0]) == "grid_dependency_sync(PDL)", kernel.fn.__name__
