"""Host-side argument checks shared by every launcher.

They read only shapes, dtypes, strides, devices and Python scalars (never tensor values), so they are legal inside
CUDA-graph capture. Every failure is a ValueError that names the argument and says what was expected. The one
exception to "never tensor values" is the opt-in validate mode (validate_requested), whose checks sync.
"""
from __future__ import annotations

import enum
import os
import re

import torch
import triton

FP8_DTYPE = torch.float8_e4m3fn
PAGE_STRIDE_ALIGN = 16  # page strides and view offsets are multiples of 16 bytes (DESIGN §2)
MX_BLOCK = 32           # elements per MXFP4 block (one E8M0 scale byte, 16 code bytes)
INT32_MAX = 2**31 - 1
VALIDATE_ENV = "MXIDX_VALIDATE"   # "1": every launcher with a validate mode validates (DESIGN §4); "0"/unset: off
GPU_DEVICE_TYPE = "cuda"          # torch's device type of CUDA and ROCm GPUs alike
INTERPRETER_MIN_TRITON = (3, 7)   # the first triton whose CPU interpreter runs these kernels (triton 3.6's fails)


def parse_version(text: str) -> tuple[int, ...]:
    """"3.6.0+git9e1f" -> (3, 6, 0). ValueError if it does not start with a dotted number."""
    m = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    if not m:
        raise ValueError(f"cannot parse a version from {text!r}")
    return tuple(int(p) for p in m.group(1).split("."))


def triton_version() -> tuple[int, ...]:
    """The installed triton's version as a tuple, e.g. (3, 7, 1)."""
    return parse_version(triton.__version__)


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


def check_flag(name: str, value) -> bool:
    """A Python bool (not a tensor, not 0/1: a tensor's truth value would sync)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_int(name: str, value, minimum: int) -> int:
    """A Python int >= minimum (bool and tensors rejected: reading a tensor would sync)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a Python int >= {minimum}, got {value!r}")
    return value


def check_int32_extent(name: str, t: torch.Tensor, dims: tuple[int, ...], why: str) -> None:
    """The kernel forms offsets of `t` along `dims` (in elements) in 32-bit arithmetic: they must not wrap.

    Checked from the shape and strides only: the largest offset is sum over dims of (size - 1) * stride."""
    extent = sum((t.shape[d] - 1) * t.stride(d) for d in dims if t.shape[d] > 0)
    if extent > INT32_MAX:
        raise ValueError(f"{name}: {why} are 32-bit in the kernel and would reach element {extent} > {INT32_MAX} "
                         f"(shape {list(t.shape)}, strides {t.stride()}); split the call into smaller pieces")


def kernels_interpreted(kernel) -> bool:
    """True when `kernel` was defined under TRITON_INTERPRET=1 (it then runs on CPU tensors).

    TRITON_INTERPRET is read when a @triton.jit function is defined, so the kernel object, not today's environment,
    says which it is."""
    return not isinstance(kernel, triton.runtime.JITFunction)


def interpreter_problem() -> str | None:
    """None if this triton's CPU interpreter runs hw's kernels, else why not and what to do."""
    if triton_version() >= INTERPRETER_MIN_TRITON:
        return None
    need = ".".join(map(str, INTERPRETER_MIN_TRITON))
    return (f"the Triton interpreter of triton {triton.__version__} cannot run hw's kernels (it fails on loop bounds "
            f"passed as kernel arguments under NumPy 2); install triton >= {need} (PyPI's torch 2.13 pins 3.7.1) "
            f"or run on a GPU")


def check_kernel_device(name: str, device: torch.device, kernel) -> None:
    """The device `kernel` can run on: a GPU ("cuda", which includes ROCm) always; the CPU only through the
    interpreter of a triton that runs it (interpreter_problem). Anything else (CPU tensors with compiled kernels,
    "meta", ...) would fail inside the launch."""
    if device.type == GPU_DEVICE_TYPE:
        return
    if device.type == "cpu" and kernels_interpreted(kernel):
        problem = interpreter_problem()
        if problem:
            raise ValueError(f"{name} is on the CPU, but {problem}")
        return
    if device.type == "cpu":
        raise ValueError(f"{name} is on the CPU but the Triton interpreter is off: set TRITON_INTERPRET=1 before "
                         f"importing hw, or pass CUDA/ROCm tensors")
    raise ValueError(f"{name} is on {device}; the kernels run on CUDA/ROCm GPUs, or on the CPU with "
                     f"TRITON_INTERPRET=1 set before importing hw")


def stream_capturing() -> bool:
    """True inside CUDA-graph capture on the current stream (False on machines without CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def validate_requested(validate) -> bool:
    """Whether a launcher runs its value checks (DESIGN §4): validate=True or MXIDX_VALIDATE=1.

    MXIDX_VALIDATE must be unset, "0" or "1" (a misspelt setting is an error, not silently off). The checks sync
    with the device, which CUDA-graph capture forbids: requesting them while capturing is a ValueError."""
    check_flag("validate", validate)
    setting = os.environ.get(VALIDATE_ENV, "0")
    if setting not in ("0", "1"):
        raise ValueError(f"{VALIDATE_ENV} must be 0 or 1 (or unset), got {setting!r}")
    if not (validate or setting == "1"):
        return False
    if stream_capturing():
        raise ValueError(f"validation reads tensor values (a device sync), which CUDA-graph capture forbids: pass "
                         f"validate=False and unset {VALIDATE_ENV} while capturing (validate in an eager run)")
    return True


# ============================================================================================ the error flag
class ErrorKind(enum.IntEnum):
    """What a kernel met on the hot path (the kind code in an error flag's entry FLAG_KIND).

    Every kind is bounded on the device (nothing is read or written outside the tensors given) and its affected
    outputs follow the documented policy (docs/design.md's clarifications); the flag only reports it."""

    NONE = 0
    PAGE_ID = 1            # a block-table entry a row needs is outside [0, num_pages): row = sequence, value = the id
    CONTEXT_PAST_TABLE = 2  # a sequence is longer than its block-table row covers: row = sequence, value = its
                            # visible context (decode) or the position + 1 of a token past the table (gather)
    SCHEDULE = 3           # schedule_meta is not get_paged_mqa_logits_metadata(context_lens, P, num_sms) of this
                           # call: row = the program whose entry differs, value = the entry's sequence. Reserved:
                           # no decode kernel reads schedule_meta (validate mode still refuses a foreign one)
    SLOT = 4               # a writer slot at or past num_pages * P: row = the token, value = the slot (saturated to
                           # int32)
    RANGE = 5              # a prefill row whose [ks, ke) is not inside [0, SK] with ks <= ke: row = the query row,
                           # value = ks if it is the culprit, else ke
    CU_SEQ_LENS = 6        # gather: cu_seq_lens[0] != 0, a decrease (row = b + 1, value = cu_seq_lens[b + 1]), or
                           # cu_seq_lens[-1] > num_tokens (row = B, value = cu_seq_lens[-1])


#: an error flag: int32 [FLAG_SIZE] on the kernels' device; entry FLAG_COUNT counts the reports (one per kernel
#: program that met something, so an order of magnitude, not an exact count), FLAG_KIND / FLAG_ROW / FLAG_VALUE
#: are those of the first report (first writer wins, through an atomic compare-and-swap on FLAG_KIND)
FLAG_COUNT, FLAG_KIND, FLAG_ROW, FLAG_VALUE = 0, 1, 2, 3
FLAG_SIZE = 4


def new_error_flag(device) -> torch.Tensor:
    """A cleared error flag on `device` (int32 [FLAG_SIZE] zeros): pass it as `error_flag=` to any launcher, check
    it with raise_if_flagged when you sync anyway, clear it with .zero_() (graph-capturable)."""
    return torch.zeros(FLAG_SIZE, dtype=torch.int32, device=device)


def check_error_flag(error_flag, device) -> torch.Tensor | None:
    """The launchers' host-side check of `error_flag=`: None, or int32 [FLAG_SIZE] contiguous on `device`."""
    if error_flag is None:
        return None
    return check_tensor("error_flag", error_flag, dtypes=torch.int32, shape=(FLAG_SIZE,), device=device,
                        contiguous=True)


_KIND_TEXT = {
    ErrorKind.PAGE_ID: "block_table: sequence {row} needs page id {value}, outside [0, num_pages) (the page is not "
                       "read: its logits are NaN, its gathered tokens NaN tokens)",
    ErrorKind.CONTEXT_PAST_TABLE: "sequence {row} needs {value} tokens, more than its block-table row covers (NaN "
                                  "past the table)",
    ErrorKind.SCHEDULE: "schedule_meta: entry {row} (sequence {value}) is not get_paged_mqa_logits_metadata of "
                        "these context_lens and page size (not read by the kernels)",
    ErrorKind.SLOT: "slot_mapping: token {row} has slot {value}, at or past num_pages * P (not written)",
    ErrorKind.RANGE: "cu_seq_len_k_start / cu_seq_len_k_end: row {row} has a bound {value} outside "
                     "0 <= ks <= ke <= SK (clamped)",
    ErrorKind.CU_SEQ_LENS: "cu_seq_lens: entry {row} ({value}) is not a non-decreasing sequence from 0 whose last "
                           "entry is at most num_tokens (rows without a well-formed token are NaN tokens)",
}


def describe_error_flag(values) -> str | None:
    """None for a clear flag, else the text of its first report (values: the flag's FLAG_SIZE ints)."""
    count, kind, row, value = (int(v) for v in values)
    if count == 0 and kind == ErrorKind.NONE:
        return None
    try:
        text = _KIND_TEXT[ErrorKind(kind)].format(row=row, value=value)
    except (KeyError, ValueError):
        text = f"unknown kind code {kind} (row {row}, value {value})"
    return f"{text}; {count} report(s) in all"


def raise_if_flagged(error_flag: torch.Tensor) -> None:
    """Read an error flag (a device-to-host copy: call it where you sync anyway, never inside graph capture) and
    raise ValueError naming the first case a kernel met, if any. The flag is left as it is."""
    check_tensor("error_flag", error_flag, dtypes=torch.int32, shape=(FLAG_SIZE,), contiguous=True)
    if stream_capturing():
        raise ValueError("raise_if_flagged reads the flag (a device sync), which CUDA-graph capture forbids")
    text = describe_error_flag(error_flag.tolist())
    if text is not None:
        raise ValueError(f"a kernel met an out-of-range input: {text}")
