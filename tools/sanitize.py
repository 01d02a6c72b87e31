"""The GPU hostile-input check (run by .ci/gpu): `python -m tools.sanitize OUTDIR`.

1. The fuzzer (tools/fuzz.py) on the GPU: --cases cases of --seed, every variant, compact geometry unless --wide
   (the wide geometry compiles many more kernel specializations; use it for long runs). -> OUTDIR/fuzz.json
2. The first --sanitizer-cases of those cases again, in a child process under `compute-sanitizer --tool memcheck`
   and `--tool racecheck` (the writer, the gather, every scorer variant and top-k at small hostile shapes: shuffled
   pages, sentinels in unused block-table entries, partial last pages, contexts 0 and 1, fp8 / mxfp4 /
   mxfp4_tiled, and every hostile input of tools.fuzz.HOSTILE). The child runs with PYTORCH_NO_CUDA_MEMORY_CACHING=1
   so that every tensor is its own allocation and a read past one is a memcheck error, not a read inside torch's
   pool. -> OUTDIR/sanitizer.json and OUTDIR/<tool>.log: each tool's error count from its summary line.

When compute-sanitizer is not on PATH (nor in $CUDA_HOME/bin, /usr/local/cuda/bin), or a tool cannot run on the
machine (no summary line, e.g. a kernel without the debugger interface), the log and sanitizer.json say
UNAVAILABLE for it and the exit status is 3: never a silent pass. Exit 0: no fuzz failure and 0 errors from each
tool; 1: a fuzz failure or a sanitizer error; 2: no GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .runtime import choose_device

SANITIZER_TOOLS = ("memcheck", "racecheck")
#: cases per tool (racecheck instruments every shared-memory access: fewer cases)
TOOL_CASES = {"memcheck": 1.0, "racecheck": 0.5}
# memcheck ends with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: H hazards displayed (N errors,
# W warnings)": N is the count either way
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error")
EXIT_UNAVAILABLE = 3
EXIT_NO_GPU = 2
PROGRESS_EVERY = 25      # fuzz cases between progress lines (stderr)


def find_sanitizer() -> str | None:
    """The compute-sanitizer executable, or None."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and os.access(os.path.join(root, "bin", "compute-sanitizer"), os.X_OK):
            return os.path.join(root, "bin", "compute-sanitizer")
    return None


def _run_fuzz(seed: int, cases: int, compact: bool) -> dict:
    import torch

    from . import fuzz  # after choose_device: TRITON_INTERPRET is read when hw's kernels are defined
    start = time.perf_counter()

    def progress(done: int, failed: int) -> None:   # a long run shows where it is (and what a timeout cut off)
        if done % PROGRESS_EVERY == 0 or done == cases:
            print(f"fuzz [{done}/{cases}] {failed} failed, {time.perf_counter() - start:.1f} s", file=sys.stderr,
                  flush=True)
    results = fuzz.run(seed, cases, torch.device("cuda"), compact=compact, progress=progress)
    bad = [r.describe() for r in results if r.failures]
    return {"cases": cases, "seed": seed, "compact": compact, "failed": len(bad), "failures": bad,
            "seconds": round(time.perf_counter() - start, 1)}


def _sanitize(exe: str, tool: str, seed: int, cases: int, compact: bool, out: Path) -> dict:
    """One compute-sanitizer run over a child fuzz run; its log goes to out/<tool>.log."""
    cmd = [exe, "--tool", tool, "--target-processes", "all", sys.executable, "-m", "tools.sanitize", "--child",
           "--seed", str(seed), "--cases", str(cases)] + ([] if compact else ["--wide"])
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log = proc.stdout + proc.stderr
    (out / f"{tool}.log").write_text(log)
    found = SUMMARY.findall(log)
    result = {"cases": cases, "rc": proc.returncode, "seconds": round(time.perf_counter() - start, 1)}
    if not found:
        return {**result, "status": "UNAVAILABLE", "why": "no summary line (see the log)"}
    errors = int(next(n for n in found[-1] if n))
    return {**result, "errors": errors, "status": "ok" if errors == 0 and proc.returncode == 0 else "FAILED"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sanitize", description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("--cases", type=int, default=210, help="fuzz cases (default 210; thousands for a long run)")
    parser.add_argument("--sanitizer-cases", type=int, default=42)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wide", action="store_true", help="the wide geometry (many more compilations)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)   # the run under the sanitizer
    opts = parser.parse_args(argv)
    try:
        choose_device("cuda")
    except RuntimeError as e:
        print(f"tools.sanitize: {e}", file=sys.stderr)
        return EXIT_NO_GPU
    if opts.child:
        report = _run_fuzz(opts.seed, opts.cases, not opts.wide)
        print(json.dumps({k: v for k, v in report.items() if k != "failures"}))
        print("\n".join(report["failures"]))
        return 1 if report["failed"] else 0
    if not opts.outdir:
        parser.error("OUTDIR is required")
    out = Path(opts.outdir)
    out.mkdir(parents=True, exist_ok=True)
    fuzz_report = _run_fuzz(opts.seed, opts.cases, not opts.wide)
    (out / "fuzz.json").write_text(json.dumps(fuzz_report, indent=1))
    print(f"fuzz: {fuzz_report['cases']} cases, {fuzz_report['failed']} failed ({fuzz_report['seconds']} s)")
    for line in fuzz_report["failures"][:20]:
        print("  " + line)
    exe = find_sanitizer()
    tools = {}
    for tool in SANITIZER_TOOLS:
        if exe is None:
            tools[tool] = {"status": "UNAVAILABLE", "why": "compute-sanitizer not found (PATH, $CUDA_HOME/bin, "
                                                          "/usr/local/cuda/bin)"}
        else:
            cases = max(1, int(opts.sanitizer_cases * TOOL_CASES[tool]))
            tools[tool] = _sanitize(exe, tool, opts.seed, cases, not opts.wide, out)
        line = tools[tool]
        detail = (f"{line['errors']} errors over {line['cases']} cases, rc {line['rc']}, {line['seconds']} s"
                  if "errors" in line else line["why"])
        print(f"compute-sanitizer {tool}: {line['status']} ({detail})")
    (out / "sanitizer.json").write_text(json.dumps({"executable": exe, "tools": tools}, indent=1))
    if fuzz_report["failed"] or any(t["status"] == "FAILED" for t in tools.values()):
        return 1
    return EXIT_UNAVAILABLE if any(t["status"] == "UNAVAILABLE" for t in tools.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
