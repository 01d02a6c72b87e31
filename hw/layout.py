"""The K-cache formats and page layouts of hw (DESIGN §1, §2, §8): public, for integration/ and tools/.

Format names, page sizes, head-dim rules (the layouts' and the scorers'), bytes per token, and the host-side check
of a paged cache view that the writer, the gather and the scorers share. sim/layout.py declares the same names for
the simulator (sim may not import hw); tests/hw/test_layout.py pins the two equal.

A cache view is `uint8[num_pages, P, 1, bytes_per_token]` with stride(1) == bytes_per_token, stride(3) == 1 and
stride(0) == S, the page stride in bytes (a multiple of 16, >= P * bytes_per_token). The view's bytes inside a page
are *not* token-interleaved: the page is block-planar (all values, then all scales) or tiled; the 4-D shape only
fixes the page's size and stride. Kernels address a page as `base + page_id.to(int64) * S`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .checks import MX_BLOCK, PAGE_STRIDE_ALIGN, check_tensor

KV_DTYPES = ("fp8", "mxfp4")                                  # the cache formats
LAYOUTS_OF = {"fp8": ("fp8",), "mxfp4": ("mxfp4", "mxfp4_tiled")}  # format -> its page layouts, planar first
PAGE_LAYOUTS = tuple(layout for fmt in KV_DTYPES for layout in LAYOUTS_OF[fmt])
PAGE_SIZES = (16, 32, 64, 128, 256)
HEAD_DIMS = range(MX_BLOCK, 257, MX_BLOCK)   # DESIGN §2: multiples of 32 in 32..256
SCORER_HEAD_DIMS = tuple(d for d in HEAD_DIMS if d & (d - 1) == 0)   # the scorer tiles: 32, 64, 128, 256
MAX_HEADS = 128                              # the scorers' query rows per token (padded heads on an MMA axis)
TILE_HEAD_DIM = 128                          # mxfp4_tiled: D a multiple of 128 ...
TILE_TOKENS = 4                              # ... and P a multiple of 4 (one scale word holds 4 tokens)


def bytes_per_token(kv_dtype: str, head_dim: int) -> int:
    """K-cache bytes per token (and layer): fp8 D value bytes + one fp32 scale; mxfp4 D/2 code bytes + D/32 E8M0
    scale bytes. ValueError for a format not in KV_DTYPES (head_dim is not checked: see check_head_dim)."""
    resolve_layout(kv_dtype, None)
    return head_dim + 4 if kv_dtype == "fp8" else head_dim // 2 + head_dim // 32


@dataclass(frozen=True)
class CacheView:
    """Resolved geometry of a checked cache view."""

    kv_dtype: str      # "fp8" | "mxfp4"
    layout: str         # "fp8" | "mxfp4" | "mxfp4_tiled"
    num_pages: int
    page_size: int      # P tokens per page
    head_dim: int       # D
    page_stride: int    # S bytes between page bases

    @property
    def scale_base(self) -> int:
        """Page-local byte offset of the scale region (after the P tokens' values)."""
        return self.page_size * (self.head_dim if self.kv_dtype == "fp8" else self.head_dim // 2)


def resolve_layout(kv_dtype: str, layout: str | None) -> str:
    """The layout a (kv_dtype, layout) argument pair selects: None -> the format's planar layout."""
    if not isinstance(kv_dtype, str) or kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")
    if layout is None:
        return kv_dtype
    if not isinstance(layout, str):
        raise ValueError(f"layout must be None or one of {LAYOUTS_OF[kv_dtype]}, got a {type(layout).__name__}")
    if layout not in LAYOUTS_OF[kv_dtype]:
        raise ValueError(f"layout {layout!r} is not valid for {kv_dtype}; choose one of {LAYOUTS_OF[kv_dtype]}")
    return layout


def _one_of(value, allowed: tuple[int, ...]) -> bool:
    """`value in allowed` by == comparisons, which torch.compile can also trace for a symbolic size (a shape that
    varied between calls), where `in` fails."""
    return any(value == a for a in allowed)


def check_head_dim(name: str, head_dim: int, layout: str | None) -> None:
    """D is one of HEAD_DIMS (and a multiple of 128 for mxfp4_tiled)."""
    if not _one_of(head_dim, HEAD_DIMS):
        raise ValueError(f"{name}: head dim must be a multiple of 32 in 32..256, got {head_dim}")
    if layout == "mxfp4_tiled" and head_dim % TILE_HEAD_DIM:
        raise ValueError(f"{name}: layout mxfp4_tiled needs a head dim that is a multiple of {TILE_HEAD_DIM}, "
                         f"got {head_dim}")


def check_scorer_heads(name: str, num_heads: int) -> None:
    """The scorers' head-count rule: 1 <= H <= MAX_HEADS. ValueError naming `name` otherwise."""
    if not 1 <= num_heads <= MAX_HEADS:
        raise ValueError(f"{name}: the scorers take 1 to {MAX_HEADS} heads, got {num_heads}")


def check_scorer_head_dim(name: str, head_dim: int, layout: str | None) -> None:
    """The scorers' head-dim rule: check_head_dim's head dims for `layout`, of which the scorer tiles take the
    powers of two (SCORER_HEAD_DIMS: 32, 64, 128, 256). ValueError naming `name` otherwise."""
    check_head_dim(name, head_dim, layout)
    if not _one_of(head_dim, SCORER_HEAD_DIMS):
        raise ValueError(f"{name}: the scorers need a power-of-two head dim (32, 64, 128 or 256), got {head_dim}")


def check_cache_view(name: str, kv_cache, kv_dtype: str, head_dim: int, layout: str | None,
                     device: torch.device | None = None) -> CacheView:
    """Validate `kv_cache` (host-side only: shape, dtype, strides, alignment) and return its geometry.

    kv_cache must be uint8 [num_pages, P, 1, bytes_per_token(kv_dtype, head_dim)] with P in PAGE_SIZES,
    stride(3) == 1, stride(1) == bytes_per_token, stride(0) (the page stride S) a multiple of 16 and >= the page's
    P * bytes_per_token bytes (any S when num_pages == 1), and a data pointer on a 16-byte boundary. `device`, when
    given, is the device of the call's other tensors. ValueError names `name` on any mismatch."""
    layout = resolve_layout(kv_dtype, layout)
    check_head_dim(name, head_dim, layout)
    check_tensor(name, kv_cache, dtypes=torch.uint8, ndim=4, device=device)
    num_pages, page_size, one, bpt = kv_cache.shape
    want_bpt = bytes_per_token(kv_dtype, head_dim)
    if one != 1 or bpt != want_bpt:
        raise ValueError(f"{name} must have shape [num_pages, P, 1, {want_bpt}] for {kv_dtype} with D={head_dim}, "
                         f"got {list(kv_cache.shape)}")
    if page_size not in PAGE_SIZES:
        raise ValueError(f"{name}: page size (dim 1) must be one of {PAGE_SIZES}, got {page_size}")
    if layout == "mxfp4_tiled" and page_size % TILE_TOKENS:
        raise ValueError(f"{name}: mxfp4_tiled needs a page size that is a multiple of {TILE_TOKENS}, "
                         f"got {page_size}")
    s0, s1, _, s3 = kv_cache.stride()
    if s3 != 1 or s1 != bpt:
        raise ValueError(f"{name} must have stride(1) == bytes_per_token ({bpt}) and stride(3) == 1, "
                         f"got strides {kv_cache.stride()}")
    page_bytes = page_size * bpt
    if num_pages > 1 and (s0 < page_bytes or s0 % PAGE_STRIDE_ALIGN):
        raise ValueError(f"{name}: page stride (stride(0)) must be a multiple of {PAGE_STRIDE_ALIGN} and >= the "
                         f"page's {page_bytes} bytes, got {s0}")
    if kv_cache.data_ptr() % PAGE_STRIDE_ALIGN:
        raise ValueError(f"{name}: the view must start on a {PAGE_STRIDE_ALIGN}-byte boundary "
                         f"(view offsets are multiples of 16)")
    return CacheView(kv_dtype, layout, num_pages, page_size, head_dim, s0 if num_pages > 1 else max(s0, page_bytes))


def check_pages_in_span(block_table: torch.Tensor, lengths: torch.Tensor, view: CacheView) -> None:
    """Validate mode (syncs): the page ids a kernel reads -- block_table[b, c] for c < cdiv(lengths[b], P) -- are
    pages of the view. lengths: int64 [B], already clamped to the block table's max_pages * P."""
    pages = (lengths + view.page_size - 1) // view.page_size
    in_span = torch.arange(block_table.shape[1], device=block_table.device)[None, :] < pages[:, None]
    bad = in_span & ((block_table < 0) | (block_table >= view.num_pages))
    if bool(bad.any()):
        b, c = (int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"block_table[{b}, {c}] = {int(block_table[b, c])} is inside sequence {b}'s visible span "
                         f"but not a page id in 0..{view.num_pages - 1} of kv_cache")
