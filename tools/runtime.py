"""Shared pieces of the commands: the bad-input error, and the device choice for commands that run kernels.

TRITON_INTERPRET is read when kernels are defined, so a command decides the device *before* importing hw/:
the GPU when one is present, else the CPU through the Triton interpreter.
"""
from __future__ import annotations

import os

import click

EXIT_BAD_INPUT = 2


class BadInput(click.ClickException):
    """A command's one-line error for bad arguments or files: `Error: ...`, exit status 2, no traceback."""

    exit_code = EXIT_BAD_INPUT


def choose_device(requested: str | None = None) -> str:
    """Return "cuda" or "cpu" and set TRITON_INTERPRET to match (1 for the CPU; removed for the GPU, so a stale
    TRITON_INTERPRET=1 in the environment cannot put GPU runs on the interpreter). Call before the first `import hw`."""
    import torch

    if requested in (None, "auto"):
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no GPU; use --device cpu")
    if requested not in ("cuda", "cpu"):
        raise RuntimeError(f"--device must be auto, cuda or cpu, got {requested!r}")
    if requested == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    return requested
