"""Host-side argument checks shared by every launcher.

They read only shapes, dtypes, strides and devices (never tensor values), so they are legal inside CUDA-graph
capture. Every failure is a ValueError that names the argument and says what was expected.
"""
from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
PAGE_STRIDE_ALIGN = 16  # page strides and view offsets are multiples of 16 bytes (DESIGN §2)


def check_tensor(name: str, t, *, dtypes=None, ndim: int | None = None, shape=None, device=None,
                 contiguous: bool = False) -> torch.Tensor:
    """Check one tensor argument. `shape` entries may be None (any size). Returns the tensor."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None:
        dtypes = (dtypes,) if isinstance(dtypes, torch.dtype) else tuple(dtypes)
        if t.dtype not in dtypes:
            raise ValueError(f"{name} must have dtype {' or '.join(str(d) for d in dtypes)}, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if shape is not None:
        if t.dim() != len(shape) or any(s is not None and s != a for s, a in zip(shape, t.shape)):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"{name} must have shape {want}, got {list(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device} (all tensors of one call share a device)")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous()), got strides {t.stride()}")
    return t


def check_same_device(**tensors) -> torch.device:
    """All given tensors (None entries skipped) share one device; returns it."""
    devices = {n: t.device for n, t in tensors.items() if t is not None}
    first = next(iter(devices.values()))
    for n, d in devices.items():
        if d != first:
            others = ", ".join(f"{k}={v}" for k, v in devices.items())
            raise ValueError(f"{n} is on {d}, but the tensors of one call must share a device ({others})")
    return first
