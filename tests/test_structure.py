"""The layering rules of docs/design.md, checked by reading the source (ast; nothing is imported or run).

What counts as an import: every `import X` and `from X import Y` statement anywhere in a module -- at module level,
inside functions and methods, under `if TYPE_CHECKING:` or `try:` alike -- with relative imports resolved against
the module's package. `from P import Y` counts as an import of P.Y when P.Y is a module of the repository, else of
P. Imports inside strings (importlib.import_module("..."), subprocess command lines) are not seen.

Rules:
  1. Outside hw/, no module imports a private hw module (`hw._*`, e.g. hw._logits_details). tests/hw/ is exempt:
     it holds the white-box tests of hw's internals.
  2. sim/ imports neither hw nor torch (nor triton).
  3. No package (sim, hw, integration, tools) has an import cycle among its own modules. A package's __init__
     counts as a module; an import of a submodule does not count as an import of its package's __init__ (Python
     runs that __init__ first, but an __init__ that imports its own submodules would otherwise always be a cycle).
  4. hw/ types no kernel signature by hand (hw.isa_spec.kernel_signature derives it from the kernel's parameter
     list): no module-level name ending in `_SIGNATURE`, no dict literal or comprehension passed as `signature=`.
  5. Every Python file of the repository lies in one of those packages or in tests/, so the rules above see it
     (docs/ holds records and their commands, no scripts).
  6. A probe (a module of tools/probes) runs nothing when imported: at module level it only imports, defines
     functions and classes, assigns constants and calls main() under `if __name__ == "__main__":`.
  7. No test imports the CLI's tools.difftest but the tests of `mxidx diff` itself (DIFF_CLI_TESTS): the other
     tests take their fixtures from sim.testing and hw.testing.
  8. One name, one meaning in hw's kernel packages: no module-level name is bound to different expressions in two
     modules of hw/_*_details (a constant shared is imported from one home), except the names every such module
     defines for itself by protocol (PER_MODULE_NAMES: its ISA specs and shapes, its Variant records).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "hw", "integration", "tools")
SOURCE_DIRS = (*PACKAGES, "tests")
#: directories that hold no source of the repository: version control, caches, builds, environments
NOT_SOURCE = {"__pycache__", "build", "dist"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    """module name -> file, for every .py file under SOURCE_DIRS."""
    return {_module_name(p): p for d in SOURCE_DIRS for p in sorted((ROOT / d).rglob("*.py"))}


SOURCES = _sources()


def _imports(module: str, path: Path) -> set[str]:
    """The modules `module` imports (see the module docstring for what counts)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in SOURCES else base)
    return found


IMPORTS = {module: _imports(module, path) for module, path in SOURCES.items()}


def _rel(module: str) -> str:
    return SOURCES[module].relative_to(ROOT).as_posix()


def _is_private_hw(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "hw" and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def test_only_hw_imports_private_hw_modules():
    offenders = sorted(f"{_rel(m)} imports {name}" for m, names in IMPORTS.items() for name in names
                       if _is_private_hw(name) and m.split(".")[0] != "hw" and not m.startswith("tests.hw."))
    assert not offenders, "import the public hw modules instead:\n" + "\n".join(offenders)


def test_sim_imports_neither_hw_nor_torch():
    offenders = sorted(f"{_rel(m)} imports {name}" for m, names in IMPORTS.items() if m.split(".")[0] == "sim"
                       for name in names if name.split(".")[0] in ("hw", "torch", "triton"))
    assert not offenders, "sim/ imports numpy/numba only:\n" + "\n".join(offenders)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles_inside_a_package(package):
    members = {m for m in IMPORTS if m.split(".")[0] == package}
    graph = {m: {n for n in IMPORTS[m] if n in members and n != m} for m in members}
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle in {package}/: " + " -> ".join(cycle)


def _hand_typed_signatures(source: str) -> list[str]:
    """Where `source` types a signature by hand (rule 4), as "line N: what"."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.asname or alias.name for alias in node.names]
        else:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        found += [f"line {node.lineno}: {name}" for name in names if name.endswith("_SIGNATURE")]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found += [f"line {kw.lineno}: a dict passed as signature=" for kw in node.keywords
                      if kw.arg == "signature" and any(isinstance(n, (ast.Dict, ast.DictComp))
                                                       for n in ast.walk(kw.value))]
    return found


def test_hw_types_no_signature_by_hand():
    offenders = sorted(f"{_rel(m)} {where}" for m, path in SOURCES.items() if m.split(".")[0] == "hw"
                       for where in _hand_typed_signatures(path.read_text()))
    assert not offenders, "derive signatures with hw.isa_spec.kernel_signature (CompileSpec's types):\n" + \
        "\n".join(offenders)


def _repository_python_files() -> list[Path]:
    """Every .py file under ROOT but in hidden directories (.git, .venv, ...), NOT_SOURCE and *.egg-info."""
    return sorted(p for p in ROOT.rglob("*.py")
                  if not any(part.startswith(".") or part in NOT_SOURCE or part.endswith(".egg-info")
                             for part in p.relative_to(ROOT).parts[:-1]))


def test_every_python_file_is_checked():
    outside = [p.relative_to(ROOT).as_posix() for p in _repository_python_files()
               if p.relative_to(ROOT).parts[0] not in SOURCE_DIRS]
    assert not outside, f"Python outside {SOURCE_DIRS}, unseen by these rules:\n" + "\n".join(outside)


def _is_main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` with no else branch."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__" and not node.orelse)


def _runs_at_import(path: Path) -> list[str]:
    """The module-level statements of `path` other than its docstring, imports, definitions, assignments and a
    main guard, as 'line N: StatementType'."""
    body = ast.parse(path.read_text(), str(path)).body
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
    return [f"line {node.lineno}: {type(node).__name__}" for i, node in enumerate(body)
            if not (isinstance(node, allowed) or _is_main_guard(node)
                    or (i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)))]


PROBES = sorted(m for m in SOURCES if m.startswith("tools.probes."))
#: The tests of `mxidx diff` itself, the only tests that may import tools.difftest (rule 7).
DIFF_CLI_TESTS = {"tests.tools.test_cmd_diff"}


@pytest.mark.parametrize("probe", PROBES)
def test_a_probe_runs_nothing_at_import(probe):
    found = _runs_at_import(SOURCES[probe])
    assert not found, f"{_rel(probe)} runs code at import (move it into main()): " + ", ".join(found)


def _imports_difftest(names: set[str]) -> bool:
    return any(name == "tools.difftest" or name.startswith("tools.difftest.") for name in names)


def test_only_the_diff_cli_tests_import_difftest():
    offenders = sorted(_rel(m) for m, names in IMPORTS.items()
                       if m.split(".")[0] == "tests" and m not in DIFF_CLI_TESTS and _imports_difftest(names))
    assert not offenders, "take test fixtures from sim.testing / hw.testing, not tools.difftest:\n" + \
        "\n".join(offenders)


PER_MODULE_NAMES = ("ISA_SPECS", "ISA_SHAPES")    # and names ending in VARIANT: each module's own records


def _bindings(source: str) -> dict[str, str]:
    """Module-level `NAME = expr` / `NAME: T = expr` of `source` -> the expression's source text."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    found[target.id] = ast.unparse(node.value)
    return found


def _names_with_two_meanings(sources: dict[str, str]) -> dict[str, list[str]]:
    """name -> ["module: expr", ...] for the names bound to different expressions in `sources` (rule 8)."""
    seen: dict[str, dict[str, str]] = {}
    for module, source in sources.items():
        for name, expr in _bindings(source).items():
            if name not in PER_MODULE_NAMES and not name.endswith("VARIANT"):
                seen.setdefault(name, {})[module] = expr
    return {name: [f"{m}: {e}" for m, e in where.items()] for name, where in seen.items()
            if len(set(where.values())) > 1}


def test_kernel_packages_give_each_name_one_meaning():
    details = {m: SOURCES[m].read_text() for m in SOURCES if m.startswith("hw._") and "_details" in m}
    clashes = _names_with_two_meanings(details)
    assert not clashes, "a name bound to different values in hw's kernel packages (rename one, or import it):\n" + \
        "\n".join(f"{name}: {where}" for name, where in sorted(clashes.items()))


def test_the_checks_see_imports():
    """The rules are not vacuous: the import graph holds edges these tests rely on."""
    assert "hw.layout" in IMPORTS["integration.pool"]
    assert "hw.checks" in IMPORTS["hw.layout"]                         # a relative import, resolved
    assert "integration.selfcheck" in IMPORTS["integration.gates"]     # a function-local import
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _is_private_hw("hw._logits_details.launch_config") and not _is_private_hw("hw.__init__")
    assert _hand_typed_signatures('_SIGNATURE = {"x_ptr": "*u8"}\nfrom .a import _B_SIGNATURE\n'
                                  'S: dict = spec(signature={"n": "i32"})\nf(signature=T | {"m": "i32"})\n'
                                  'g(signature={n: "i32" for n in N})\ng(types={"x_ptr": "*u8"})\n') == [
        "line 1: _SIGNATURE", "line 2: _B_SIGNATURE", "line 3: a dict passed as signature=",
        "line 4: a dict passed as signature=", "line 5: a dict passed as signature="]
    assert "tools.timing" in IMPORTS["tools.probes.decode_pdl"] and "hw" in IMPORTS["tools.probes.decode_pdl"]
    assert len(PROBES) >= 10
    assert DIFF_CLI_TESTS <= set(SOURCES) and all(_imports_difftest(IMPORTS[m]) for m in DIFF_CLI_TESTS)
    assert _imports_difftest({"tools.difftest.cases"}) and not _imports_difftest({"tools.difftests", "tools"})
    assert sum(m.startswith("hw._") and "_details" in m for m in SOURCES) >= 10
    assert _names_with_two_meanings({"a": "K = 2\nV = 1\nISA_SPECS = ()\nX_VARIANT = f(1)\n",
                                     "b": "K = 0\nV = 1\nISA_SPECS = (1,)\nX_VARIANT = f(2)\n"}) == {
        "K": ["a: 2", "b: 0"]}


def test_the_checks_see_files(tmp_path):
    """The file and probe checks are not vacuous: they see every package and flag what they exist to flag."""
    seen = {p.relative_to(ROOT).parts[0] for p in _repository_python_files()}
    assert set(SOURCE_DIRS) <= seen
    script = tmp_path / "probe.py"
    script.write_text('"""doc"""\nimport sys\nfor a in sys.argv:\n    print(a)\nif __name__ == "__main__":\n'
                      '    main()\nelse:\n    main()\n')
    assert _runs_at_import(script) == ["line 3: For", "line 5: If"]
