"""The `mxidx` command line (click): thin commands over sim/, hw/ and integration/."""

__version__ = "0.1.0"   # the package version (pyproject.toml reads it from here)
