"""Float64 reference scorer of the sparse-attention indexer (DESIGN §4) and its fp32 error bound.

    logits[r, j] = sum_h  w[r, h] * relu( q[r, h, :] . k[j, :] )      for the visible columns j of row r

Dequantized q and k are exact in float64 (sim.fp8 / sim.mxfp4 with dtype=np.float64); everything here is float64.

Summation order (fixed, so that sim.fast_scorer reproduces every value bit for bit): each head's dot product
starts at 0.0 and adds q[r, h, d] * k[j, d] for d = 0, 1, ..., D-1; the logit starts at 0.0 and adds
w[r, h] * relu(dot_h) for h = 0, 1, ..., H-1. No fused multiply-add. A logit is therefore never -0.0.

relu keeps NaN: relu(x) = x if x > 0 or x is NaN, else 0. A NaN anywhere in a row's q, a used k row or a weight
makes that logit NaN (0 * inf also gives NaN, as in IEEE arithmetic).

Visibility:
  prefill (ragged)  row i sees columns ks[i] <= j < ke[i] (absolute column index into k).
  decode  (paged)   row r = b*N + n sees columns j < ctx(b, n), see decode_visible().
Invisible entries are -inf when clean_logits=True. When clean_logits=False their value is unspecified by the
contract; this reference writes NaN there, so that a consumer reading one notices (compare with visible=...).

The error bound (DESIGN §4) for a kernel that accumulates with unit roundoff u:
    |kernel - ref| <= gamma * A,   A[r, j] = sum_h |w[r, h]| * sum_d |q[r, h, d] * k[j, d]|,
    gamma = (n + H + 2) * u,       n = D/32 for MXFP4 (exact block sums), D for FP8.
The bound functions below add 2 * (D + H + 2) * 2^-53 * A: once for the float64 reference's own rounding and once
for the rounding of A itself, so that the check is rigorous and not only up to float64 noise (at D = 128 this is
2^-45 of A, far below any fp32 gamma).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from sim import fp8, layout, mxfp4
from sim.formats import MX_BLOCK

#: unit roundoff of fp32 accumulation, the default u of the bound.
FP32_UNIT_ROUNDOFF = 2.0 ** -24
#: unit roundoff of the float64 reference itself.
FLOAT64_UNIT_ROUNDOFF = 2.0 ** -53
#: elements of the (rows x heads x columns) float64 temporary the NumPy row scorer works on at once (64 MiB).
_BLOCK_ELEMENTS = 1 << 23

#: computes out[r, j] for starts[r] <= j < ends[r]; leaves the other entries of out alone.
#: (q float64[R, H, D], k float64[T, D], weights float64[R, H], starts int64[R], ends int64[R], out float64[R, W])
RowScorer = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]


# ============================================================================================ dequantization
def dequantize_q(values, scales) -> np.ndarray:
    """Exact float64 q [..., H, D] from the DESIGN §8 pair.

    FP8:   (e4m3fn bits uint8[..., H, D], None) -> the e4m3 values; the per-(token, head) q scale is folded into
           the weights, so it is not applied here.
    MXFP4: (codes uint8[..., H, D/2] (even d in the low nibble), scales uint8[..., H, D/32] E8M0) -> the values.
    """
    if scales is None:
        return fp8.decode_e4m3(values)
    return mxfp4.dequantize(values, scales, dtype=np.float64)


def dequantize_kv(values, scales) -> np.ndarray:
    """Exact float64 k [SK, D] from the DESIGN §8 pair; the format follows the scales' dtype.

    FP8:   (e4m3fn bits uint8[SK, D], float32[SK] per-token scale) -> value * scale.
    MXFP4: (codes uint8[SK, D/2] (even d in the low nibble), scales uint8[SK, D/32] E8M0) -> the values.
    """
    scales = np.asarray(scales)
    if np.ndim(values) != 2:
        raise ValueError(f"kv values must be [SK, D] (FP8) or [SK, D/2] (MXFP4 codes), got shape {np.shape(values)}")
    if scales.dtype == np.float32:
        return fp8.dequantize(values, scales, dtype=np.float64)
    if scales.dtype == np.uint8:
        return mxfp4.dequantize(values, scales, dtype=np.float64)
    raise ValueError(
        f"kv scales must be float32 [SK] (FP8) or uint8 [SK, D/{MX_BLOCK}] (MXFP4), got {scales.dtype}"
    )


def read_keys_or_nan(pool, geom, block_table_row, num_tokens: int) -> np.ndarray:
    """Exact float64 k [num_tokens, D] of one sequence under the hot-path policy for bad page ids: the tokens of a
    logical page i whose entry block_table_row[i] is not a page id in [0, geom.num_pages), or that lies past the
    row (i >= len(block_table_row)), are NaN keys; every other page is read through sim.layout.read_tokens.
    Entries past the pages covering num_tokens are never looked at."""
    row = np.asarray(block_table_row)
    P = geom.page_size
    k = np.full((num_tokens, geom.head_dim), np.nan)
    for i in range(-(-num_tokens // P)):
        tokens = min(P, num_tokens - i * P)
        if i < row.size and 0 <= row[i] < geom.num_pages:
            k[i * P: i * P + tokens] = read_keys(pool, geom, row[i:i + 1], tokens)
    return k


def read_keys(pool, geom, block_table_row, num_tokens: int) -> np.ndarray:
    """Exact float64 k [num_tokens, D] of one sequence, read through sim.layout.read_tokens.

    Only the pages covering num_tokens are read; the rest of block_table_row is never looked at.
    """
    values, scales = layout.read_tokens(pool, geom, block_table_row, num_tokens)
    return dequantize_kv(values, scales)


# ============================================================================================ argument checks
def _float_array(x, name: str, ndim: int, hint: str) -> np.ndarray:
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"{name} must be a float array ({hint}), got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions ({hint}), got shape {x.shape}")
    return x.astype(np.float64)


def _int_array(x, name: str, ndims: tuple[int, ...]) -> np.ndarray:
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array, got dtype {x.dtype}")
    if x.ndim not in ndims:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndims))} dimension(s), got shape {x.shape}")
    return x.astype(np.int64)


def _python_int(x, name: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {x!r}")
    if x < 0:
        raise ValueError(f"{name} must be >= 0, got {x}")
    return int(x)


def _check_prefill(q, k, weights, ks, ke):
    q = _float_array(q, "q", 3, "[S, H, D] dequantized; use dequantize_q")
    k = _float_array(k, "k", 2, "[SK, D] dequantized; use dequantize_kv")
    weights = _float_array(weights, "weights", 2, "[S, H]")
    s, h, d = q.shape
    if k.shape[1] != d:
        raise ValueError(f"k head dim {k.shape[1]} != q head dim {d}")
    if weights.shape != (s, h):
        raise ValueError(f"weights must be [S, H] = {(s, h)}, got {weights.shape}")
    ks, ke = check_column_ranges(ks, ke, k.shape[0], rows=s, names=("ks", "ke", "SK"))
    return q, k, weights, ks, ke


def decode_visible(context_lens, next_n: int, max_context_len: int, max_pages: int, page_size: int) -> np.ndarray:
    """Visible column count of every decode row r = b*N + n (DESIGN §4): int64[B*N].

    context_lens int[B] (1-D: ctx = max(0, context_lens[b] - N + n + 1), the N draft tokens of a sequence end at its
    last position) or int[B, N] (2-D: ctx = max(0, context_lens[b, n])); then clamped to max_context_len and to
    max_pages * page_size. A negative length sees nothing, as in the kernels' hot path (their validate mode
    rejects it). These are the columns with a block-table entry; decode_logits scores the columns up to
    max_context_len (decode_columns), the ones past max_pages * page_size being NaN.
    """
    cap = min(_python_int(max_context_len, "max_context_len"),
              _python_int(max_pages, "max_pages") * _python_int(page_size, "page_size"))
    return decode_columns(context_lens, next_n, cap)


def decode_columns(context_lens, next_n: int, max_context_len: int) -> np.ndarray:
    """Columns decode_logits fills in every row r = b*N + n: int64[B*N], DESIGN §4's ctx(b, n) (decode_visible's)
    clamped to max_context_len only."""
    n_rows = _python_int(next_n, "next_n")
    if n_rows < 1:
        raise ValueError(f"next_n must be >= 1, got {next_n}")
    cap = _python_int(max_context_len, "max_context_len")
    lens = _int_array(context_lens, "context_lens", (1, 2))
    if lens.ndim == 2 and lens.shape[1] != n_rows:
        raise ValueError(f"2-D context_lens must be [B, next_n] = [B, {n_rows}], got {lens.shape}")
    lens = np.maximum(0, lens[:, None] - n_rows + np.arange(n_rows) + 1 if lens.ndim == 1 else lens)
    return np.minimum(lens, cap).reshape(-1)


def check_column_ranges(starts, ends, width: int, *, rows: int | None = None,
                        names: tuple[str, str, str] = ("starts", "ends", "width")) -> tuple[np.ndarray, np.ndarray]:
    """Validate per-row column ranges [starts[r], ends[r]) of a width-column array; returns both as int64[R].

    starts None means 0. Needs 0 <= starts[r] <= ends[r] <= width (and R == rows when given); ValueError names the
    arguments (names = their names in the caller) and the first bad row.
    """
    s_name, e_name, w_name = names
    width = _python_int(width, w_name)
    ends = _int_array(ends, e_name, (1,))
    starts = np.zeros_like(ends) if starts is None else _int_array(starts, s_name, (1,))
    expected = ends.shape if rows is None else (rows,)
    if starts.shape != expected or ends.shape != expected:
        raise ValueError(f"{s_name} and {e_name} must both have shape {expected}, got {starts.shape} and {ends.shape}")
    bad = np.flatnonzero((starts < 0) | (starts > ends) | (ends > width))
    if bad.size:
        r = int(bad[0])
        raise ValueError(f"need 0 <= {s_name}[r] <= {e_name}[r] <= {w_name} = {width}; row {r} has "
                         f"{s_name} = {starts[r]}, {e_name} = {ends[r]}")
    return starts, ends


def visible_mask(ends, width: int, *, starts=None) -> np.ndarray:
    """bool[R, width]: True where starts[r] <= j < ends[r] (starts default 0), as check_column_ranges requires.

    Prefill: visible_mask(ke, SK, starts=ks); decode: visible_mask(decode_visible(...), max_context_len).
    """
    starts, ends = check_column_ranges(starts, ends, width)
    cols = np.arange(width)
    return (cols >= starts[:, None]) & (cols < ends[:, None])


def _check_decode(q, geom, weights, context_lens, block_table, max_context_len):
    q = _float_array(q, "q", 4, "[B, N, H, D] dequantized; use dequantize_q")
    b, n, h, d = q.shape
    if d != geom.head_dim:
        raise ValueError(f"q head dim {d} != geom.head_dim {geom.head_dim}")
    weights = _float_array(weights, "weights", 2, "[B*N, H]")
    if weights.shape != (b * n, h):
        raise ValueError(f"weights must be [B*N, H] = {(b * n, h)}, got {weights.shape}")
    block_table = _int_array(block_table, "block_table", (2,))
    if block_table.shape[0] != b:
        raise ValueError(f"block_table must be [B, max_pages] with B = {b}, got {block_table.shape}")
    lens = np.asarray(context_lens)
    if lens.ndim >= 1 and lens.shape[0] != b:
        raise ValueError(f"context_lens must be [B] or [B, N] with B = {b}, got {lens.shape}")
    return q, weights, block_table, decode_columns(context_lens, n, max_context_len)


def _check_decode_pool(pool, geom):
    """Checked before the per-sequence reads, so that their errors are only about block-table rows."""
    if not isinstance(geom, layout.PageGeometry):
        raise ValueError(f"geom must be a sim.layout.PageGeometry, got {type(geom).__name__}")
    layout.check_pool(pool, geom)


# ============================================================================================ scoring
def _relu_keep_nan(x: np.ndarray) -> np.ndarray:
    return np.where((x > 0) | np.isnan(x), x, 0.0)


def _row_groups(starts: np.ndarray, ends: np.ndarray, num_heads: int):
    """Consecutive row groups [r0, r1) with their column union [lo, hi), each as large as fits the
    (rows x heads x columns) temporary budget (at least one row)."""
    r0, num_rows = 0, starts.size
    while r0 < num_rows:
        lo, hi, r1 = int(starts[r0]), int(ends[r0]), r0 + 1
        while r1 < num_rows:
            new_lo, new_hi = min(lo, int(starts[r1])), max(hi, int(ends[r1]))
            if (r1 + 1 - r0) * num_heads * (new_hi - new_lo) > _BLOCK_ELEMENTS:
                break
            lo, hi, r1 = new_lo, new_hi, r1 + 1
        yield r0, r1, lo, hi
        r0 = r1


def score_rows_numpy(q: np.ndarray, k: np.ndarray, weights: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     out: np.ndarray) -> None:
    """The NumPy RowScorer: out[r, j] = logit of row r against k[j] for starts[r] <= j < ends[r].

    Rows are scored in groups whose (rows x heads x columns) float64 temporary stays within _BLOCK_ELEMENTS.
    """
    num_heads, head_dim = q.shape[1:]
    for r0, r1, lo, hi in _row_groups(starts, ends, num_heads):
        if hi <= lo:
            continue
        kb = k[lo:hi]
        dots = np.zeros((r1 - r0, num_heads, hi - lo))
        for d in range(head_dim):            # fixed order: d = 0, 1, ..., D-1
            dots += q[r0:r1, :, d, None] * kb[None, None, :, d]
        relu = _relu_keep_nan(dots)
        logits = np.zeros((r1 - r0, hi - lo))
        with np.errstate(invalid="ignore"):  # inf * 0 = NaN is the intended IEEE result
            for h in range(num_heads):       # fixed order: h = 0, 1, ..., H-1
                logits += weights[r0:r1, h, None] * relu[:, h, :]
        cols = np.arange(lo, hi)
        keep = (cols >= starts[r0:r1, None]) & (cols < ends[r0:r1, None])
        out[r0:r1, lo:hi] = np.where(keep, logits, out[r0:r1, lo:hi])


def _prefill(q, k, weights, ks, ke, fill: float, row_scorer: RowScorer, magnitude: bool = False) -> np.ndarray:
    q, k, weights, ks, ke = _check_prefill(q, k, weights, ks, ke)
    if magnitude:
        q, k, weights = np.abs(q), np.abs(k), np.abs(weights)
    out = np.full((q.shape[0], k.shape[0]), fill)
    row_scorer(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(weights), ks, ke, out)
    return out


def _decode(q, pool, geom, weights, context_lens, block_table, max_context_len, fill: float,
            row_scorer: RowScorer, magnitude: bool = False) -> np.ndarray:
    _check_decode_pool(pool, geom)
    q, weights, block_table, visible = _check_decode(q, geom, weights, context_lens, block_table, max_context_len)
    b, n = q.shape[:2]
    if magnitude:
        q, weights = np.abs(q), np.abs(weights)
    out = np.full((b * n, int(max_context_len)), fill)
    zeros = np.zeros(n, dtype=np.int64)
    for seq in range(b):
        rows = slice(seq * n, (seq + 1) * n)
        num_tokens = int(visible[rows].max())
        if num_tokens == 0:
            continue
        k = read_keys_or_nan(pool, geom, block_table[seq], num_tokens)
        if magnitude:
            k = np.abs(k)
        row_scorer(np.ascontiguousarray(q[seq]), k, np.ascontiguousarray(weights[rows]), zeros, visible[rows],
                   out[rows])
    return out


def _invisible_fill(clean_logits: bool) -> float:
    return -np.inf if clean_logits else np.nan


def prefill_logits(q, k, weights, ks, ke, *, clean_logits: bool = True) -> np.ndarray:
    """Ragged prefill logits, float64[S, SK].

    q float[S, H, D] (dequantized: dequantize_q), k float[SK, D] (dequantize_kv), weights float[S, H],
    ks / ke int[S] with 0 <= ks[i] <= ke[i] <= SK. Row i is scored against k[j] for ks[i] <= j < ke[i]; other
    entries are -inf (clean_logits=True) or NaN (clean_logits=False: unspecified by the contract).
    """
    return _prefill(q, k, weights, ks, ke, _invisible_fill(clean_logits), score_rows_numpy)


def decode_logits(q, pool, geom, weights, context_lens, block_table, max_context_len: int, *,
                  clean_logits: bool = True) -> np.ndarray:
    """Paged decode logits, float64[B*N, max_context_len].

    q float[B, N, H, D] (dequantized: dequantize_q); pool uint8 bytes of the cache, geom its sim.layout.PageGeometry;
    weights float[B*N, H]; context_lens int[B] or int[B, N]; block_table int[B, max_pages] physical page ids.
    Row r = b*N + n is scored against the first decode_columns(...)[r] tokens of sequence b (its context clamped to
    max_context_len), read through sim.layout.read_tokens from the pages block_table[b, :ceil(max of those / P)]
    only. The hot-path policy for bad inputs (read_keys_or_nan): the columns of a page whose block-table entry is
    not a page id in [0, num_pages), or of a page past the row (a context longer than max_pages * P), are NaN.
    Invisible entries are -inf (clean_logits=True) or NaN (clean_logits=False: unspecified by the contract).
    """
    return _decode(q, pool, geom, weights, context_lens, block_table, max_context_len,
                   _invisible_fill(clean_logits), score_rows_numpy)


# ============================================================================================ error bound
def dot_product_roundings(kv_dtype: str, head_dim: int) -> int:
    """n of DESIGN §4 for a kernel that keeps each 32-element block sum exact: MXFP4 (any layout) D/32; FP8 D.
    A kernel whose path sums all D products in fp32 (e.g. tl.dot_scaled's decomposition) declares n = D itself:
    `mxidx diff` takes n from hw.logits.dot_product_roundings."""
    if kv_dtype in ("mxfp4", "mxfp4_tiled"):
        return head_dim // MX_BLOCK
    if kv_dtype == "fp8":
        return head_dim
    raise ValueError(f"kv_dtype must be 'fp8', 'mxfp4' or 'mxfp4_tiled', got {kv_dtype!r}")


def _bound_factor(n_roundings: int, num_heads: int, head_dim: int, u: float) -> float:
    n_roundings = _python_int(n_roundings, "n_roundings")
    if isinstance(u, (bool, np.bool_)) or not isinstance(u, (int, float, np.integer, np.floating)) or not 0 < u < 1:
        raise ValueError(f"u (unit roundoff of the kernel's accumulation) must be in (0, 1), got {u!r}")
    gamma = (n_roundings + num_heads + 2) * u
    gamma_ref = (head_dim + num_heads + 2) * FLOAT64_UNIT_ROUNDOFF
    return gamma + 2 * gamma_ref


def prefill_error_bound(q, k, weights, ks, ke, *, n_roundings: int, u: float = FP32_UNIT_ROUNDOFF) -> np.ndarray:
    """Bound on |kernel - prefill_logits(...)| per entry, float64[S, SK]; 0 on invisible entries (exact match).

    Same arguments as prefill_logits; n_roundings = dot_product_roundings(kv_dtype, D); u = the kernel's declared
    unit roundoff. Entries are NaN where the inputs hold NaN (the reference is NaN there too).
    """
    magnitude = _prefill(q, k, weights, ks, ke, 0.0, score_rows_numpy, magnitude=True)   # validates q first
    return _bound_factor(n_roundings, np.shape(q)[1], np.shape(q)[2], u) * magnitude


def decode_error_bound(q, pool, geom, weights, context_lens, block_table, max_context_len: int, *,
                       n_roundings: int | None = None, u: float = FP32_UNIT_ROUNDOFF) -> np.ndarray:
    """Bound on |kernel - decode_logits(...)| per entry, float64[B*N, max_context_len]; 0 on invisible entries.

    Same arguments as decode_logits; n_roundings defaults to dot_product_roundings(geom.kv_dtype, D).
    """
    magnitude = _decode(q, pool, geom, weights, context_lens, block_table, max_context_len, 0.0,
                        score_rows_numpy, magnitude=True)                              # validates q first
    num_heads, head_dim = np.shape(q)[2:]
    if n_roundings is None:
        n_roundings = dot_product_roundings(geom.kv_dtype, head_dim)
    return _bound_factor(n_roundings, num_heads, head_dim, u) * magnitude


# ============================================================================================ checker
@dataclass(frozen=True)
class LogitCheck:
    """Outcome of check_logits.

    worst_ratio: max over compared entries of |actual - ref| / bound (0 where both are the same non-finite value or
    the error is 0; inf for a NaN/inf mismatch or an error where the bound is 0).
    violation: the first compared coordinate (C order) with ratio > 1, with actual, reference and bound there.
    """

    worst_ratio: float
    compared: int
    violation: tuple[int, ...] | None = None
    actual: float | None = None
    reference: float | None = None
    bound: float | None = None

    @property
    def ok(self) -> bool:
        return self.violation is None

    def describe(self) -> str:
        head = f"{self.compared} logits compared, worst |err|/bound = {self.worst_ratio:.3g}"
        if self.ok:
            return head
        return (f"{head}; first violation at {self.violation}: actual {self.actual!r}, reference "
                f"{self.reference!r}, bound {self.bound!r}")


def check_logits(actual, reference, bound, *, visible=None) -> LogitCheck:
    """Compare kernel logits with the float64 reference entry by entry.

    actual float[R, W] (fp32 or float64), reference float64[R, W], bound float64[R, W] (*_error_bound), visible
    optional bool[R, W]: only those entries are compared (needed when the kernel ran with clean_logits=False).
    Rules: a NaN reference needs a NaN result; a ±inf reference (e.g. -inf invisible entries) needs the same inf; a
    finite reference needs a finite result with |actual - reference| <= bound.
    """
    actual = np.asarray(actual)
    if not np.issubdtype(actual.dtype, np.floating):
        raise ValueError(f"actual must be a float array, got {actual.dtype}")
    actual = actual.astype(np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    bound = np.asarray(bound, dtype=np.float64)
    if not (actual.shape == reference.shape == bound.shape):
        raise ValueError(f"actual {actual.shape}, reference {reference.shape} and bound {bound.shape} must match")
    compared = np.ones(actual.shape, dtype=bool) if visible is None else np.asarray(visible, dtype=bool)
    if compared.shape != actual.shape:
        raise ValueError(f"visible must have shape {actual.shape}, got {compared.shape}")

    finite = np.isfinite(reference)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(finite & np.isfinite(actual), np.abs(actual - reference), np.inf)
        ratio = np.where(err == 0, 0.0, err / bound)           # bound 0 and err > 0 -> inf
    same_nonfinite = ~finite & ((actual == reference) | (np.isnan(reference) & np.isnan(actual)))
    ratio = np.where(finite, ratio, np.where(same_nonfinite, 0.0, np.inf))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)          # NaN bound with a finite reference: cannot pass
    ratio = np.where(compared, ratio, 0.0)

    worst = float(ratio.max(initial=0.0))
    count = int(compared.sum())
    bad = np.argwhere(ratio > 1)
    if bad.size == 0:
        return LogitCheck(worst, count)
    at = tuple(int(i) for i in bad[0])
    return LogitCheck(worst, count, at, float(actual[at]), float(reference[at]), float(bound[at]))


def assert_logits_within_bound(actual, reference, bound, *, visible=None) -> LogitCheck:
    """check_logits, raising AssertionError with the first violation (coordinate and values) when there is one."""
    result = check_logits(actual, reference, bound, visible=visible)
    if not result.ok:
        raise AssertionError(result.describe())
    return result
