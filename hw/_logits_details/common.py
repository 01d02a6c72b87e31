"""What the scorer variants share: declared unit roundoffs (DESIGN §4), the MMA's smallest M, and where
tl.dot_scaled runs."""
from __future__ import annotations

from ..checks import triton_version
from ..targets import Target

ALL_TARGETS = frozenset(Target)
FP32_UNIT_ROUNDOFF = 2.0 ** -24
#: Hopper's FP8 MMA keeps about 14 bits inside one K group: the u an FP8 scorer that promotes to fp32 every 32
#: products declares on NVIDIA (docs/design.md, clarifications)
NVIDIA_FP8_MMA_UNIT_ROUNDOFF = 2.0 ** -13
#: the keys-on-M scorers do not promote: over D / 32 chained K groups the truncation model's error stays below
#: (33/32) D 2^-13 of the sum of |q k|, which (D + H + 2) u covers with this u
UNPROMOTED_FP8_MMA_UNIT_ROUNDOFF = 2.0 ** -12
MMA_MIN_ROWS = 16               # tl.dot / tl.dot_scaled need M >= 16
INTERPRETER_DOT_SCALED_TRITON = (3, 8)   # the first triton whose CPU interpreter runs tl.dot_scaled


def dot_scaled_targets() -> frozenset:
    """Where tl.dot_scaled runs: compiled GPUs always, the interpreter from INTERPRETER_DOT_SCALED_TRITON on."""
    has = triton_version() >= INTERPRETER_DOT_SCALED_TRITON
    return frozenset({Target.NVIDIA, Target.AMD} | ({Target.INTERPRETER} if has else set()))
