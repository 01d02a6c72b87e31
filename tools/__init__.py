"""The `mxidx` command line (click): thin commands over sim/, hw/ and integration/."""
