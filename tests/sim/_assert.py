"""Exact array comparison with a message that points at the first difference (shared by the sim tests).

    from tests.sim._assert import assert_exact
    assert_exact(got, want, "codes")           # byte/bit equality, NaN == NaN (same positions)
"""
from __future__ import annotations

import numpy as np


def first_difference(got, want) -> tuple[int, ...] | None:
    """Index of the first element (C order) where got and want differ (NaN equals NaN, -0.0 differs from 0.0)."""
    bad = np.argwhere(~_same_mask(np.asarray(got), np.asarray(want)))
    return tuple(int(i) for i in bad[0]) if len(bad) else None


def assert_exact(got, want, what: str = "array", context=None) -> None:
    """Assert got == want element for element (shape and dtype too); report the first differing coordinate.

    `context`: optional array of the same leading shape (e.g. the input x) whose entry at that coordinate is
    printed as well, or a callable index -> str.
    """
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != expected {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != expected {want.dtype}"
    idx = first_difference(got, want)
    if idx is None:
        return
    n_bad = int((~_same_mask(got, want)).sum())
    msg = f"{what}: {n_bad} of {got.size} differ; first at {idx}: got {_fmt(got[idx])}, expected {_fmt(want[idx])}"
    if callable(context):
        msg += f" ({context(idx)})"
    elif context is not None:
        c = np.asarray(context)
        msg += f" (input at {idx[:c.ndim]}: {_fmt(c[idx[:c.ndim]])})"
    raise AssertionError(msg)


def _same_mask(got, want):
    if np.issubdtype(got.dtype, np.floating) or np.issubdtype(want.dtype, np.floating):
        g, w = got.astype(np.float64), want.astype(np.float64)
        return (g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))
    return got == want


def _fmt(v) -> str:
    v = np.asarray(v)
    if v.ndim:
        return np.array2string(v, max_line_width=200, threshold=64)
    if np.issubdtype(v.dtype, np.integer):
        return f"{int(v)} (0x{int(v):02X})"
    if np.issubdtype(v.dtype, np.floating):
        return f"{float(v)!r} ({float(v).hex()})"
    return repr(v.item())
