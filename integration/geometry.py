"""IndexerGeometry: the shape of one indexer layer, checked against what every format supports (DESIGN §2, §6).

Shared by the gates (integration.gates) and the self-check (integration.selfcheck), which must not import each
other: the gates import the self-check only when a gate reaches it.
"""
from __future__ import annotations

from dataclasses import dataclass

from hw.layout import PAGE_SIZES, check_scorer_head_dim, check_scorer_heads


@dataclass(frozen=True)
class IndexerGeometry:
    """Shape of one indexer layer: H heads of head dim D, P tokens per cache page.

    Raises ValueError for geometry that no format supports (D not one of the scorers' 32, 64, 128, 256; P not
    in 16/32/64/128/256; H outside 1..128, the scorers' range).
    """

    num_heads: int
    head_dim: int
    page_size: int

    def __post_init__(self):
        if not isinstance(self.num_heads, int):
            raise ValueError(f"num_heads must be an int, got {self.num_heads!r}")
        check_scorer_heads("num_heads", self.num_heads)
        check_scorer_head_dim("head_dim", self.head_dim, "mxfp4")
        if self.page_size not in PAGE_SIZES:
            raise ValueError(f"page_size must be one of {PAGE_SIZES}, got {self.page_size!r}")
