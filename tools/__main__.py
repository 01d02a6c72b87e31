"""`python -m tools ...` is `mxidx ...` (for machines where the package is on PYTHONPATH but not installed)."""
from .cli import main

if __name__ == "__main__":    # not when a worker process (tools.difftest --jobs) imports it
    main(prog_name="mxidx")
