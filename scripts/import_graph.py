"""specmoe's import graph between its layers, read from the source with `ast` (nothing is imported).

Layers, top to bottom; an import may point sideways (within one layer) or down, never up:

    0  cli                      the command line: the specmoe/cli/ package, one module per
                                command group
    1  findings                 the studies' claims checked on measured runs
    2  bench                    measuring: a suite's runs (local and served) into the results store
    3  report                   the HTML report, the terminal result table and the demo's account:
                                read from the results store, never from the harness that wrote it
    4  suite, calibration       suite files read, checked and expanded into runs; the engine
                                profiles fitted to and scored against published SD measurements
    5  zoo, perf                the model zoo; the performance model
    6  results                  the results store, its row model and what is read from it; no torch
    7  prompts                  prompt sets and chat templates, shared by zoo, results and suites
    8  api                      one-call decoding for library users
    9  metrics                  scalars derived from recorded counts
    10 decoding                 the SD loop, drafters, acceptance
    11 audit                    audits of other tools' results: they need only theory and errors
    12 backends, serving        model runtimes: in this process, or behind an OpenAI-compatible server
    12 theory, extras, drafts   closed-form algebra; which optional extras are installed; the typed
                                drafts, parsed once from their spelling
    13 errors, stats, console, dtypes, canonical, user_files
                                small shared modules that import no other specmoe module but errors:
                                the error type, interval statistics, terminal output, dtype names,
                                canonical JSON, reading a file a user names

Every command's parser and run function live in specmoe/cli/, on the top floor, because a command
line wires the layers together; no other package holds a command line. specmoe/__init__.py, which
holds only the version, sits on the bottom floor.

An import inside a function (or under `if TYPE_CHECKING:`) runs later than module import, so it
cannot close an import-time circle; it still couples the layers, so it is checked for direction too
and reported as "deferred". So is a string that names a specmoe module, whole, for importlib
(`"specmoe.backends.hf:load_hf"`, `"specmoe.zoo.gguf"`): the import it stands for is as real as
a statement, only hidden from a reader, and is reported as "by name". Circles are reported twice:
among module-level imports (they fail at import time) and among all imports (a deferred circle
still ties two modules into one).

An upward arrow is allowed only when WRITTEN_EXCEPTIONS names it with its reason; one listed there
that no longer exists is reported too, so the list cannot outlive its reasons.

Usage: python scripts/import_graph.py [package_dir]   (default: specmoe next to this script)
Exit status 1 when there is a circle, an upward arrow not written down, or a stale written one.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

LAYERS: dict[str, int] = {
    "cli": 0,
    "findings": 1,
    "bench": 2,
    "report": 3,
    "suite": 4,
    "calibration": 4,
    "zoo": 5,
    "perf": 5,
    "results": 6,
    "prompts": 7,
    "api": 8,
    "metrics": 9,
    "decoding": 10,
    "audit": 11,
    "backends": 12,
    "serving": 12,
    "theory": 12,
    "extras": 12,
    "drafts": 12,
    "errors": 13,
    "stats": 13,
    "console": 13,
    "dtypes": 13,
    "canonical": 13,
    "user_files": 13,
}

# (importer, imported) -> why the arrow points up and what removes it. Empty: no arrow points up.
WRITTEN_EXCEPTIONS: dict[tuple[str, str], str] = {}

# A string constant that is a dotted specmoe module name, whole, optionally with `:attribute`.
_MODULE_STRING = re.compile(r"(specmoe(?:\.\w+)+)(?::\w+)?")


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` (dotted module names); `deferred` when not at module level;
    `by_name` when the import is a string handed to importlib (always deferred)."""

    source: str
    target: str
    deferred: bool
    by_name: bool = False


@dataclass
class Graph:
    modules: list[str]
    edges: list[Edge] = field(default_factory=list)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest existing module that `name` (a dotted import target) lives in."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _targets(node: ast.Import | ast.ImportFrom, current: str, is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = current if is_pkg else current.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    # `from pkg import mod` imports the submodule pkg.mod when one exists.
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement with whether it is deferred (in a function or TYPE_CHECKING block)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append((child, deferred))
            inner = deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.If) and _is_type_checking(child):
                inner = True
            visit(child, inner)

    visit(tree, False)
    return found


def _named_modules(tree: ast.Module, known: set[str]) -> set[str]:
    """The specmoe modules that string constants name whole, for importlib to import later.

    Only a string that is exactly a module's dotted name (optionally `:attribute`) counts: a GGUF
    key such as "specmoe.source_sha256" names no module, and prose only mentions one."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _MODULE_STRING.fullmatch(node.value)
            if match and match.group(1) in known:
                found.add(match.group(1))
    return found


def build_graph(package_dir: Path) -> Graph:
    """Edges between specmoe modules; one edge per (source, target), the most direct kind winning
    (module level over deferred over by name)."""
    files = sorted(package_dir.rglob("*.py"))
    names = {module_name(f, package_dir): f for f in files}
    known = set(names)
    # (source, target) -> (deferred, by_name); False sorts first, so min keeps the most direct.
    best: dict[tuple[str, str], tuple[bool, bool]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_pkg = path.name == "__init__.py"
        for node, deferred in _imports(tree):
            resolved = set()
            for target in _targets(node, name, is_pkg):
                hit = _resolve(target, known)
                if hit is not None and hit != name:
                    resolved.add(hit)
            # `from a.b import c` where a.b.c is a module also names a.b's __init__: keep the
            # most specific targets only.
            specific = {t for t in resolved if not any(o.startswith(t + ".") for o in resolved)}
            for target in specific:
                key = (name, target)
                best[key] = min(best.get(key, (True, True)), (deferred, False))
        for target in _named_modules(tree, known) - {name}:
            key = (name, target)
            best[key] = min(best.get(key, (True, True)), (True, True))
    edges = [Edge(s, t, d, n) for (s, t), (d, n) in sorted(best.items())]
    return Graph(modules=sorted(known), edges=edges)


def layer_of(module: str) -> str:
    """The layer name of a dotted module name (`specmoe.cli.bench` -> `cli`)."""
    parts = module.split(".")[1:]
    if not parts:
        return "errors"  # the package's own __init__ holds only the version
    return parts[0]


def upward(graph: Graph) -> list[Edge]:
    """Arrows from a lower layer to a higher one, written exceptions included."""
    return [e for e in graph.edges if LAYERS[layer_of(e.source)] > LAYERS[layer_of(e.target)]]


def unwritten_upward(graph: Graph) -> list[Edge]:
    """Upward arrows that WRITTEN_EXCEPTIONS does not name: each one breaks the layer rule."""
    return [e for e in upward(graph) if (e.source, e.target) not in WRITTEN_EXCEPTIONS]


def stale_exceptions(graph: Graph) -> list[tuple[str, str]]:
    """Written exceptions that are no longer an upward arrow in the graph."""
    present = {(e.source, e.target) for e in upward(graph)}
    return [pair for pair in WRITTEN_EXCEPTIONS if pair not in present]


def unknown_layers(graph: Graph) -> list[str]:
    return sorted({layer_of(m) for m in graph.modules} - set(LAYERS))


def cycles(graph: Graph, with_deferred: bool = False) -> list[list[str]]:
    """Strongly connected components (more than one module) among module-level imports, or among
    all imports with `with_deferred` (Tarjan's algorithm)."""
    succ: dict[str, list[str]] = defaultdict(list)
    for e in graph.edges:
        if with_deferred or not e.deferred:
            succ[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in succ[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for module in graph.modules:
        if module not in index:
            strong(module)
    return sorted(found)


def layer_arrows(graph: Graph) -> dict[tuple[str, str], tuple[int, int]]:
    """(source layer, target layer) -> (module-level import count, deferred import count)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for e in graph.edges:
        a, b = layer_of(e.source), layer_of(e.target)
        if a != b:
            counts[(a, b)][int(e.deferred)] += 1
    return {k: (v[0], v[1]) for k, v in sorted(counts.items())}


def format_report(graph: Graph) -> str:
    lines = [f"{len(graph.modules)} modules, {len(graph.edges)} imports between them", ""]
    lines.append("layer arrows (module-level + deferred imports, by-name ones among the deferred):")
    order = sorted(layer_arrows(graph).items(), key=lambda kv: (LAYERS.get(kv[0][0], 99), kv[0]))
    for (a, b), (top, deferred) in order:
        mark = "  UP" if LAYERS.get(a, 99) > LAYERS.get(b, 99) else ""
        lines.append(f"  {a:>9} -> {b:<9} {top:3d} + {deferred:2d} deferred{mark}")
    missing = unknown_layers(graph)
    if missing:
        lines.append(f"modules in no layer: {', '.join(missing)}")
    ups = upward(graph) if not missing else []
    lines.append("")
    written = sum((e.source, e.target) in WRITTEN_EXCEPTIONS for e in ups)
    lines.append(f"upward arrows: {len(ups)} ({written} of them written exceptions)")
    for e in ups:
        kind = "by name" if e.by_name else "deferred" if e.deferred else "module-level"
        why = WRITTEN_EXCEPTIONS.get((e.source, e.target))
        lines.append(f"  {e.source} -> {e.target} ({kind})")
        if why:
            lines.append(f"      written exception: {why}")
    stale = stale_exceptions(graph)
    lines.append(f"written exceptions no longer needed: {len(stale)}")
    for source, target in stale:
        lines.append(f"  {source} -> {target}")
    found = cycles(graph)
    lines.append(f"circles among module-level imports: {len(found)}")
    for component in found:
        lines.append("  " + " <-> ".join(component))
    found = cycles(graph, with_deferred=True)
    lines.append(f"circles once deferred imports count: {len(found)}")
    for component in found:
        lines.append("  " + " <-> ".join(component))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    default = Path(__file__).resolve().parent.parent / "specmoe"
    package_dir = Path(argv[0]) if argv else default
    graph = build_graph(package_dir)
    print(format_report(graph))
    if unknown_layers(graph):
        return 1
    bad = unwritten_upward(graph) or stale_exceptions(graph) or cycles(graph, with_deferred=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
