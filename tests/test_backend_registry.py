"""The backend registry: each entry's facts, the backend a path implies, and no runtime imported."""

import subprocess
import sys
from pathlib import Path

import pytest

from specmoe.backends import BACKENDS, backend_for, backend_info, file_backends, load_backend
from specmoe.errors import SpecmoeError

ROOT = Path(__file__).resolve().parent.parent


def test_a_path_implies_its_backend():
    assert backend_for("models/moe-q8_0.gguf").name == "llamacpp"
    assert backend_for("models/moe").name == "hf"
    assert backend_for("org/name").name == "hf"  # a hub ID


def test_the_facts_callers_ask():
    hf, llamacpp = backend_info("hf"), backend_info("llamacpp")
    assert (hf.can_compile, hf.traces_routers, hf.reads_file, hf.extra) == (True, True, False, None)
    assert (llamacpp.can_compile, llamacpp.reads_file, llamacpp.extra) == (False, True, "llamacpp")
    assert (hf.engine, llamacpp.engine) == ("transformers", "llamacpp")  # profile folders' names
    assert file_backends() == ["llamacpp"]
    assert hf.library_versions() == {}


def test_every_loader_names_a_function_of_its_module():
    # The loaders are imported only on use, so a misspelt one would surface at a run's first load.
    named = [(i.loader, i.versions, i.files_check, i.device_check) for i in BACKENDS.values()]
    for target in [t for targets in named for t in targets if t]:
        module, attr = target.split(":")
        source = (ROOT / Path(*module.split("."))).with_suffix(".py").read_text(encoding="utf-8")
        assert f"def {attr}(" in source, target


def test_an_unknown_backend_is_one_line():
    with pytest.raises(SpecmoeError, match="unknown backend 'onnx'; available: hf, llamacpp"):
        backend_info("onnx")
    with pytest.raises(SpecmoeError, match="unknown backend 'onnx'"):
        load_backend("onnx", "model.onnx")


def test_the_registry_imports_no_runtime():
    code = "import sys, specmoe.backends\nprint('torch' in sys.modules, 'llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_a_runs_runtime_profile_is_named_from_its_backends_facts():
    from types import SimpleNamespace

    from specmoe.report.predicted import engine_for
    from specmoe.suite.types import ModelSpec

    def profile(backend: str, device: str, compile: bool = False) -> str | None:
        target = ModelSpec("t", "moe", None, backend)
        return engine_for(SimpleNamespace(target_model=target, device=device, compile=compile))

    assert profile("hf", "cpu") == "hf-eager-cpu"
    assert profile("hf", "cuda:1", compile=True) == "hf-compiled"
    assert profile("hf", "mps") is None  # no shipped profile of eager transformers on Apple GPUs
    assert profile("llamacpp", "cpu") == "llamacpp-cpu"
    assert profile("llamacpp", "cuda") == "llamacpp-cuda"
    assert profile("openai", "cpu") is None  # a served model
