"""specmoe's imports point only down its layers and close no circle (scripts/import_graph.py)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


GRAPH = _import_graph()


def _graph():
    return GRAPH.build_graph(ROOT / "specmoe")


def test_every_module_has_a_layer():
    assert GRAPH.unknown_layers(_graph()) == []


def test_the_command_line_lives_in_the_cli_package_only():
    # A `cli` module elsewhere would sit in its package's layer and look like part of it.
    stray = [m for m in _graph().modules if m.split(".")[-1] == "cli" and m != "specmoe.cli"]
    assert stray == []


def test_no_import_points_up_a_layer_unless_written_down():
    assert [f"{e.source} -> {e.target}" for e in GRAPH.unwritten_upward(_graph())] == []


def test_every_written_exception_is_still_needed():
    # Once an exception's arrow is gone, its entry must go too, or it would excuse the next one.
    assert GRAPH.stale_exceptions(_graph()) == []


def test_no_circle_even_through_deferred_imports():
    assert GRAPH.cycles(_graph(), with_deferred=True) == []


def _tiny_package(tmp_path):
    """An empty `specmoe` with a decoding and a bench package, for the checker's negative controls."""
    package = tmp_path / "specmoe"
    for folder in (package, package / "decoding", package / "bench"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    return package


def test_the_checker_sees_an_upward_deferred_import_and_a_circle(tmp_path):
    # A negative control: a tiny package with both faults must be reported.
    package = _tiny_package(tmp_path)
    (package / "decoding" / "a.py").write_text("def f():\n    from specmoe.bench import b\n")
    (package / "bench" / "b.py").write_text("from specmoe.decoding import a\n")
    graph = GRAPH.build_graph(package)
    assert [(e.source, e.target, e.deferred) for e in GRAPH.upward(graph)] == [
        ("specmoe.decoding.a", "specmoe.bench.b", True)
    ]
    assert GRAPH.cycles(graph) == []
    assert GRAPH.cycles(graph, with_deferred=True) == [["specmoe.bench.b", "specmoe.decoding.a"]]


def test_the_checker_sees_a_module_named_by_a_string(tmp_path):
    # A negative control for imports hidden in strings: "specmoe.bench.b:Runner" handed to importlib
    # points up as surely as an import statement; prose and non-module names are not imports.
    package = _tiny_package(tmp_path)
    (package / "bench" / "b.py").write_text("")
    (package / "decoding" / "a.py").write_text(
        'RUNNER = "specmoe.bench.b:Runner"\n'
        'KEY = "specmoe.source_sha256"\n'
        'NOTE = "see specmoe.bench.b for the runner"\n'
    )
    graph = GRAPH.build_graph(package)
    assert [(e.source, e.target, e.deferred, e.by_name) for e in graph.edges] == [
        ("specmoe.decoding.a", "specmoe.bench.b", True, True)
    ]
    assert len(GRAPH.unwritten_upward(graph)) == 1
    # This package has none of the arrows written down as exceptions: each is reported as stale.
    assert GRAPH.stale_exceptions(graph) == list(GRAPH.WRITTEN_EXCEPTIONS)


def test_reading_results_imports_no_torch():
    # A results database is read (stored, exported, compared, audited) without any model runtime.
    modules = sorted(m for m in _graph().modules if m.startswith("specmoe.results") or m == "specmoe.drafts")
    code = f"import sys\nfor m in {modules!r}:\n    __import__(m)\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert len(modules) > 5 and out.stdout.strip() == "False"


def test_every_package_index_names_each_of_its_modules():
    """Each package's docstring lists its modules, one concept each; a module it does not name is
    one a reader of the index cannot find."""
    unnamed = []
    for init in sorted((ROOT / "specmoe").glob("*/__init__.py")):
        index = init.read_text(encoding="utf-8")
        for module in sorted(init.parent.glob("*.py")):
            name = module.stem
            if name != "__init__" and not re.search(rf"\b{re.escape(name)}\b", index):
                unnamed.append(f"{init.parent.name}.{name}")
    assert unnamed == []
