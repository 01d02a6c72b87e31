"""The ```python examples of the user docs run, so the docs cannot rot.

Each page's blocks run in order in one namespace, in a fresh Python process (`python this_file PAGE`) with
TRITON_INTERPRET=1 set before anything imports hw/: the examples are CPU examples, and a fresh process keeps them
independent of what the test session imported (on a GPU machine hw/ is compiled for the GPU there) and of each
other's environment settings. A failure names the page, the block number and its first line in the page.
"""
from __future__ import annotations

import linecache
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ("docs/simulator.md", "docs/kernels.md", "docs/integration.md", "docs/context_parallel.md")
MIN_BLOCKS = 5                      # each page documents several APIs; fewer blocks means examples went missing
PAGE_TIMEOUT_S = 120                # a page runs in seconds on two CPU cores; this only stops a hang
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(1-based line of the opening fence, code) of every ```python block, in page order."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _FENCE.finditer(text)]


def run_page(path: Path) -> None:
    """Run the page's blocks in order in one namespace; on the first failure print where and exit 1."""
    blocks = python_blocks(path.read_text())
    namespace = {"__name__": "__docs__"}
    for number, (line, code) in enumerate(blocks, 1):
        where = f"{path.name} block {number} (line {line})"
        linecache.cache[where] = (len(code), None, code.splitlines(True), where)   # tracebacks show the line
        try:
            exec(compile(code, where, "exec"), namespace)
        except BaseException:  # an assert, an exception or a SystemExit: all are doc failures
            print(f"FAILED: {where}\n{traceback.format_exc()}", file=sys.stderr)
            raise SystemExit(1)
    print(f"{path.name}: {len(blocks)} blocks passed")


def _run_in_child(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(REPO), *sys.path]))
    env.pop("MXIDX_VALIDATE", None)
    env.pop("MXIDX_MXFP4_PATH", None)
    return subprocess.run([sys.executable, __file__, str(path)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=PAGE_TIMEOUT_S)


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page, tmp_path):
    from hw.checks import interpreter_problem  # not at import: this file is also the child's script

    if interpreter_problem():
        pytest.skip("the pages run hw's kernels in the Triton interpreter: needs a triton whose interpreter runs "
                    "them (>= 3.7)")
    path = REPO / page
    assert len(python_blocks(path.read_text())) >= MIN_BLOCKS, f"{page} has fewer than {MIN_BLOCKS} examples"
    done = _run_in_child(path, tmp_path)
    assert done.returncode == 0, f"{page}: an example failed\n{done.stderr[-6000:]}"


def test_a_failing_block_is_reported_with_page_and_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n\n```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'x is 1'\n```\n")
    done = _run_in_child(page, tmp_path)
    assert done.returncode == 1
    assert "FAILED: page.md block 2 (line 9)" in done.stderr and "x is 1" in done.stderr, done.stderr


def test_blocks_share_one_namespace_in_order(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = [1]\n```\n```console\nnot python\n```\n"
                    "```python\nx.append(2)\nassert x == [1, 2]\n```\n")
    assert [line for line, _ in python_blocks(page.read_text())] == [1, 7]
    done = _run_in_child(page, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 blocks passed" in done.stdout


def test_readme_links_the_pages():
    readme = (REPO / "README.md").read_text()
    docs = readme[readme.index("## Documentation"):]
    for page in PAGES:
        assert f"]({page})" in docs, f"README's Documentation section does not link {page}"


if __name__ == "__main__":
    run_page(Path(sys.argv[1]))
