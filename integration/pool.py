"""One uint8 page pool for every indexer layer, with zero-copy per-layer cache views (DESIGN §2, §6, §8).

Byte map of the pool (page-major, as engines that co-locate per-page data lay out their shared pools):

    pool[b * S + extra_bytes_per_page + l * L .. + page_bytes)    the indexer page b of layer l

    S  = page stride: extra_bytes_per_page + num_layers * L, or larger if the caller asks
    L  = page_bytes = P * bytes_per_token (a multiple of 16: every page size P is)
    extra_bytes_per_page (a multiple of 16): other per-page data (e.g. the attention KV page) the pool holds in
         front of the indexer pages; it makes the page stride larger than the indexer page

A physical page id b therefore names the same page slot in every layer, so one block table serves all layers.
Layer l's cache is `torch.as_strided(pool, (num_pages, P, 1, bytes_per_token), (S, bpt, bpt, 1), offset_l)` with
offset_l = extra_bytes_per_page + l * L: the uint8[num_pages, P, 1, bytes_per_token] view of DESIGN §8 (stride(0) =
S). The 4-D shape fixes only the page's size and stride; inside a page the bytes are block-planar or tiled.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from hw.checks import PAGE_STRIDE_ALIGN, new_error_flag, raise_if_flagged
from hw.layout import PAGE_SIZES, bytes_per_token, check_head_dim, resolve_layout

UNUSED_FILL = 0xFF   # fresh pools are NaN-poisoned: a read of an unwritten page shows up as NaN, never as 0


@dataclass(frozen=True)
class PoolLayout:
    """Byte geometry of a pool (no tensor): see the module docstring.

    kv_dtype "fp8" | "mxfp4"; layout None (the kv_dtype's planar layout) | "fp8" | "mxfp4" | "mxfp4_tiled";
    page_size P in 16/32/64/128/256; head_dim D a multiple of 32 in 32..256 (of 128 for mxfp4_tiled).
    ValueError names the field on anything else.
    """

    kv_dtype: str
    layout: str
    num_layers: int
    num_pages: int
    page_size: int
    head_dim: int
    extra_bytes_per_page: int = 0
    page_stride: int | None = None   # None: the smallest stride that holds every layer's page (+ extra bytes)

    def __post_init__(self):
        object.__setattr__(self, "layout", resolve_layout(self.kv_dtype, self.layout))
        for name in ("num_layers", "num_pages", "page_size", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        # DESIGN §2's page sizes are multiples of 16, so every layer's page (and view offset) stays 16-byte aligned
        if self.page_size not in PAGE_SIZES:
            raise ValueError(f"page_size must be one of {PAGE_SIZES}, got {self.page_size}")
        check_head_dim("head_dim", self.head_dim, self.layout)
        if self.extra_bytes_per_page < 0 or self.extra_bytes_per_page % PAGE_STRIDE_ALIGN:
            raise ValueError(f"extra_bytes_per_page must be a non-negative multiple of {PAGE_STRIDE_ALIGN} "
                             f"(view offsets are 16-byte aligned), got {self.extra_bytes_per_page}")
        need = self.extra_bytes_per_page + self.num_layers * self.page_bytes
        if self.page_stride is None:
            object.__setattr__(self, "page_stride", need)
        elif self.page_stride < need or self.page_stride % PAGE_STRIDE_ALIGN:
            raise ValueError(f"page_stride must be a multiple of {PAGE_STRIDE_ALIGN} and >= {need} bytes (extra "
                             f"bytes + {self.num_layers} layer pages of {self.page_bytes}), got {self.page_stride}")

    @property
    def bytes_per_token(self) -> int:
        return bytes_per_token(self.kv_dtype, self.head_dim)

    @property
    def page_bytes(self) -> int:
        return self.page_size * self.bytes_per_token

    @property
    def pool_bytes(self) -> int:
        return self.num_pages * self.page_stride

    def view_offset(self, layer: int) -> int:
        """Byte offset of layer `layer`'s page 0 in the pool (a multiple of 16)."""
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in 0..{self.num_layers - 1}, got {layer}")
        return self.extra_bytes_per_page + layer * self.page_bytes


class IndexerPool:
    """The pool tensor and its per-layer views.

    pool:       uint8[pool_bytes] on `device`, filled with 0xFF
    views:      views[l] is layer l's kv_cache, uint8[num_pages, P, 1, bytes_per_token], stride (S, bpt, bpt, 1),
                aliasing pool[view_offset(l) + b * S ...] (no copy)
    error_flag: one hw.checks error flag for every layer's hook (SparseIndexer(..., error_flag=pool.error_flag));
                check_errors() reads it where the caller syncs anyway, clear_errors() resets it (graph-capturable)
    """

    def __init__(self, layout: PoolLayout, device: torch.device | str):
        self.layout = layout
        self.pool = torch.full((layout.pool_bytes,), UNUSED_FILL, dtype=torch.uint8, device=device)
        bpt = layout.bytes_per_token
        shape = (layout.num_pages, layout.page_size, 1, bpt)
        strides = (layout.page_stride, bpt, bpt, 1)
        self.views = tuple(torch.as_strided(self.pool, shape, strides, layout.view_offset(layer))
                           for layer in range(layout.num_layers))
        self.error_flag = new_error_flag(device)

    def check_errors(self) -> None:
        """ValueError naming the first out-of-range input a kernel reported to error_flag (a device sync)."""
        raise_if_flagged(self.error_flag)

    def clear_errors(self) -> None:
        self.error_flag.zero_()

    def view(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s kv_cache view (see the class docstring); ValueError if layer is out of range."""
        self.layout.view_offset(layer)   # range check with a clear message
        return self.views[layer]
