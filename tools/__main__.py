"""`python -m tools ...` is `mxidx ...` (for machines where the package is on PYTHONPATH but not installed)."""
from .cli import main

main(prog_name="mxidx")
