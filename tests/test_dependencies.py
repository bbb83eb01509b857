"""Every third-party module specmoe imports is declared in pyproject.toml: a module imported when
specmoe's modules load is a core dependency, and one imported only inside a function (a backend, an
executor, an export format) is at least in an extra. A package that arrives only as a dependency of
a dependency (pydantic came through typer, through huggingface_hub) may leave with its next release."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "specmoe"
# Import names that are not their distribution's name (PEP 503-normalised).
DISTRIBUTIONS = {"llama_cpp": "llama-cpp-python", "yaml": "pyyaml"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> tuple[set[str], set[str]]:
    """(core dependencies, every extra's), as normalised distribution names."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> set[str]:
        return {_normal(re.match(r"[A-Za-z0-9_.\-]+", r).group(0)) for r in requirements}

    extras = set().union(*(names(reqs) for reqs in project["optional-dependencies"].values()))
    return names(project["dependencies"]), extras


def _imports() -> dict[str, set[tuple[str, bool]]]:
    """Third-party top-level module -> {(file, imported at module level)}."""
    found: dict[str, set[tuple[str, bool]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
        deferred = {id(node) for function in functions for node in ast.walk(function)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top != "specmoe" and top not in sys.stdlib_module_names and top != "__future__":
                    where = str(path.relative_to(REPO))
                    found.setdefault(top, set()).add((where, id(node) not in deferred))
    return found


def _distribution(module: str) -> str:
    return _normal(DISTRIBUTIONS.get(module, module))


def test_every_third_party_import_is_declared():
    core, extras = _declared()
    undeclared = {
        module: sorted(where for where, _ in places)
        for module, places in _imports().items()
        if _distribution(module) not in core | extras
    }
    assert not undeclared, f"imported but not in pyproject.toml: {undeclared}"


def test_what_loads_with_specmoe_is_a_core_dependency():
    core, _ = _declared()
    at_import = {
        module: sorted(where for where, top in places if top)
        for module, places in _imports().items()
        if any(top for _, top in places) and _distribution(module) not in core
    }
    assert not at_import, f"imported when specmoe loads, but only in an extra (or nowhere): {at_import}"


def test_the_scan_sees_what_it_must():
    found = _imports()
    assert {"torch", "pydantic", "pydantic_core", "llama_cpp", "pyarrow"} <= set(found)
    assert any(top for _, top in found["pydantic"]) and not any(top for _, top in found["llama_cpp"])


def test_every_declared_dependency_is_pinned():
    core, extras = _declared()
    pinned = {
        _normal(line.split("==")[0])
        for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line and not line.startswith("#")
    }
    assert not (core | extras) - pinned, (
        f"declared but not pinned in constraints.txt: {(core | extras) - pinned}"
    )
