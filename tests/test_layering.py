"""specmoe's imports point only down its layers and close no circle (scripts/import_graph.py)."""

import importlib.util
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


def test_no_import_points_up_a_layer():
    assert [f"{e.source} -> {e.target}" for e in GRAPH.upward(_graph())] == []


def test_no_circle_even_through_deferred_imports():
    assert GRAPH.cycles(_graph(), with_deferred=True) == []


def test_the_checker_sees_an_upward_deferred_import_and_a_circle(tmp_path):
    # A negative control: a tiny package with both faults must be reported.
    package = tmp_path / "specmoe"
    (package / "engine").mkdir(parents=True)
    (package / "bench").mkdir()
    (package / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("")
    (package / "bench" / "__init__.py").write_text("")
    (package / "engine" / "a.py").write_text("def f():\n    from specmoe.bench import b\n")
    (package / "bench" / "b.py").write_text("from specmoe.engine import a\n")
    graph = GRAPH.build_graph(package)
    assert [(e.source, e.target, e.deferred) for e in GRAPH.upward(graph)] == [
        ("specmoe.engine.a", "specmoe.bench.b", True)
    ]
    assert GRAPH.cycles(graph) == []
    assert GRAPH.cycles(graph, with_deferred=True) == [["specmoe.bench.b", "specmoe.engine.a"]]
