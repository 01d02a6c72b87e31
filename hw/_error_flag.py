"""The device side of hw.checks' error flag: kernels report an out-of-range input without a host sync.

A kernel that takes a flag has a `flag_ptr` argument and a constexpr HAS_FLAG; without a flag (HAS_FLAG False) the
reporting code is not compiled at all. Reports happen outside the kernels' inner loops (a loop carries what it met,
the report follows it), at most once per program and kind.
"""
import triton
import triton.language as tl

from ._constant import Constant
from .checks import FLAG_COUNT, FLAG_KIND, FLAG_ROW, FLAG_VALUE, ErrorKind

KIND_PAGE_ID = Constant(ErrorKind.PAGE_ID.value)
KIND_CONTEXT_PAST_TABLE = Constant(ErrorKind.CONTEXT_PAST_TABLE.value)
KIND_SLOT = Constant(ErrorKind.SLOT.value)
KIND_RANGE = Constant(ErrorKind.RANGE.value)
KIND_CU_SEQ_LENS = Constant(ErrorKind.CU_SEQ_LENS.value)
_COUNT = Constant(FLAG_COUNT)
_KIND = Constant(FLAG_KIND)
_ROW = Constant(FLAG_ROW)
_VALUE = Constant(FLAG_VALUE)
INT32_MIN = Constant(-(2**31))
INT32_MAX = Constant(2**31 - 1)
INT64_MAX = Constant(2**63 - 1)


@triton.jit
def report(flag_ptr, kind: tl.constexpr, row, value):
    """Count one report in the flag; the first reporter (compare-and-swap of the kind from 0) also stores its row
    and value. row and value are scalars, stored as int32 (value saturated to the int32 range)."""
    tl.atomic_add(flag_ptr + _COUNT, 1)
    if tl.atomic_cas(flag_ptr + _KIND, 0, kind) == 0:
        tl.store(flag_ptr + _ROW, tl.cast(row, tl.int32))
        v = tl.minimum(tl.maximum(tl.cast(value, tl.int64), INT32_MIN), INT32_MAX)
        tl.store(flag_ptr + _VALUE, v.to(tl.int32))


@triton.jit
def report_if(flag_ptr, kind: tl.constexpr, bad, row, value, HAS_FLAG: tl.constexpr):
    """report(...) when HAS_FLAG and the scalar `bad` holds."""
    if HAS_FLAG:
        if bad:
            report(flag_ptr, kind, row, value)


@triton.jit
def report_ranges(flag_ptr, rows, row_in, ks, ke, SK):
    """Report (ErrorKind.RANGE) the first of `rows` (int64 [R]; row_in: real rows) whose raw range [ks, ke) is not
    inside 0 <= ks <= ke <= SK; the value is its ks when ks < 0 or ks > ke, else its ke."""
    bad = row_in & ((ks < 0) | (ke > SK) | (ks > ke))
    if tl.max(bad.to(tl.int32)) > 0:
        first = tl.min(tl.where(bad, rows, INT64_MAX))
        culprit = tl.where((ks < 0) | (ks > ke), ks, ke)
        report(flag_ptr, KIND_RANGE, first, tl.sum(tl.where(rows == first, culprit, 0)))
