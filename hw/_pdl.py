"""Programmatic dependent launch (PDL, NVIDIA sm_90 and later) for the kernels of a decode step.

A kernel launched with PDL may be scheduled while the previous kernel of its stream is still running (once every
program of that kernel has started, or called `griddepcontrol.launch_dependents`), so its programs are resident
and waiting when the previous kernel ends, instead of being launched after it. A kernel that takes part:

  - has a constexpr PDL and calls `grid_dependency_sync(PDL)` before its first global memory access: the wait
    returns once the previous kernel has completed and its writes are visible (whatever that kernel is, ours or
    not, launched with PDL or not), so nothing it reads or writes can race with it. One exception, argued where it
    is made (column_order.SWEEP_READS_BEFORE_WAIT): a kernel may read before its wait what was complete before the
    previous kernel's own wait returned, since it cannot be scheduled before every program of that kernel has
    passed that wait;
  - is launched with `**pdl_launch(settings.pdl, device)`, which turns PDL off where the device cannot do it.

The next kernel is scheduled once every program of this one has passed its grid_dependency_sync, unless the
kernel triggers it later itself (grid_dependents_launch, column_order's sweep before the column order's finish).

Without PDL (the interpreter, AMD, pre-sm_90 NVIDIA) the constexpr removes the code and the launch is ordinary.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .targets import nvidia_capability

PDL_MIN_CAPABILITY = (9, 0)     # griddepcontrol needs sm_90


@triton.jit
def grid_dependency_sync(PDL: tl.constexpr, LATE_DEPENDENTS: tl.constexpr = False):
    """PDL: wait for the previous kernel of the stream, then let the next one be scheduled (its programs wait in
    their own grid_dependency_sync until this kernel ends); with LATE_DEPENDENTS only wait: the kernel lets the next
    one be scheduled itself, by grid_dependents_launch after its last store. A no-op without PDL."""
    if PDL:
        gdc_wait()
        if not LATE_DEPENDENTS:
            gdc_launch_dependents()


@triton.jit
def grid_dependents_launch(PDL: tl.constexpr):
    """PDL: let the next kernel be scheduled once every program of this one has called this (or ended). Called
    after a program's last store, the next kernel's launch overlaps this one's last programs, and its programs
    take no SM from this one's earlier waves. A no-op without PDL."""
    if PDL:
        gdc_launch_dependents()


def pdl_launch(wanted: bool, device: torch.device) -> dict:
    """The launch keywords of a kernel with a PDL constexpr: PDL on (with launch_pdl) when `wanted` and the
    device is an NVIDIA GPU of compute capability >= 9.0, else PDL off."""
    capability = nvidia_capability(device) if wanted else None
    if capability is not None and capability >= PDL_MIN_CAPABILITY:
        return {"PDL": True, "launch_pdl": True}
    return {"PDL": False}
