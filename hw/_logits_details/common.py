"""What the scorer variants share: declared precisions (DESIGN §4), head padding, and where tl.dot_scaled runs."""
from __future__ import annotations

from ..checks import triton_version
from ..targets import Target

ALL_TARGETS = frozenset(Target)
FP32_UNIT_ROUNDOFF = 2.0 ** -24
#: Hopper's FP8 MMA keeps about 14 bits inside one K group even with Triton's promotion every 32 products; the
#: FP8 scorers on NVIDIA declare this u (docs/design.md, clarifications: measured up to 55x the u = 2^-24 bound).
NVIDIA_FP8_MMA_UNIT_ROUNDOFF = 2.0 ** -13
#: the keys-on-M scorers do not promote: over D / 32 chained K groups the truncation model's error stays below
#: (33/32) D 2^-13 of the sum of |q k|, which (D + H + 2) u covers with this u
UNPROMOTED_FP8_MMA_UNIT_ROUNDOFF = 2.0 ** -12
FP8_PROMOTE_K = 32              # Hopper FP8 MMA: promote to fp32 every 32 products
MMA_MIN_ROWS = 16               # tl.dot / tl.dot_scaled need M >= 16
INTERPRETER_DOT_SCALED_TRITON = (3, 8)   # the first triton whose CPU interpreter runs tl.dot_scaled


def dot_scaled_targets() -> frozenset:
    """Where tl.dot_scaled runs: compiled GPUs always, the interpreter from INTERPRETER_DOT_SCALED_TRITON on."""
    has = triton_version() >= INTERPRETER_DOT_SCALED_TRITON
    return frozenset({Target.NVIDIA, Target.AMD} | ({Target.INTERPRETER} if has else set()))


def head_pad(num_heads: int, rows: int, min_rows: int) -> int:
    """Padded head count: a power of two with rows * H_PAD >= min_rows (rows a power of two)."""
    return max(1 << (num_heads - 1).bit_length(), min_rows // rows)


def fp8_precision(head_dim: int, target: Target) -> tuple[int, float]:
    """n = D products summed per q.k; u = 2^-13 on NVIDIA (FP8 MMA keeps ~14 bits per K group), 2^-24 else."""
    return head_dim, NVIDIA_FP8_MMA_UNIT_ROUNDOFF if target is Target.NVIDIA else FP32_UNIT_ROUNDOFF


def dot_scaled_precision(head_dim: int, target: Target) -> tuple[int, float]:
    """n = D: the interpreter's emulation and Hopper's bf16 decomposition sum all D products in fp32 (a key with
    one product 1.0 and 96 of 2^-26 comes back as exactly 1.0), and gfx950's scaled MFMA does not document its
    internal accumulation, so it gets the same conservative n."""
    return head_dim, FP32_UNIT_ROUNDOFF


def block_sum_precision(head_dim: int, target: Target) -> tuple[int, float]:
    """n = D/32: each 32-element block sum is exact (a K = 32 FP8 MMA of products with <= 13 significant bits,
    which even Hopper's FP8 MMA keeps), the D/32 block sums are added in fp32."""
    return head_dim // 32, FP32_UNIT_ROUNDOFF
