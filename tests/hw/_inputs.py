"""Hostile kernel inputs as torch tensors, shared by the hw quantizer, writer and gather tests.

    hostile_input(rng, rows, head_dim, dtype)   sim.testing.hostile_rows rounded to `dtype` (hw.testing.as_input)
"""
from __future__ import annotations

import numpy as np
import torch

from hw.testing import as_input
from sim.testing import hostile_rows


def hostile_input(rng: np.random.Generator, rows: int, head_dim: int, dtype: str) -> torch.Tensor:
    """CPU tensor [rows, head_dim] of input dtype `dtype` ("bf16" | "fp16" | "fp32") holding hostile_rows' values."""
    return as_input(hostile_rows(rng, rows, head_dim, dtype), dtype)
