"""Model runtimes behind one small protocol, registered by name and imported only when used."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from specmoe.backends.base import Backend
from specmoe.errors import SpecmoeError

# name -> "module:loader". Loaders take (path, **options) and return a Backend.
_REGISTRY: dict[str, str] = {
    "hf": "specmoe.backends.hf:load_hf",
    "llamacpp": "specmoe.backends.llamacpp:load_llamacpp",
}


def available_backends() -> list[str]:
    return sorted(_REGISTRY)


def backend_for(path: str | Path) -> str:
    """The backend a model path implies: llama.cpp reads GGUF files, transformers reads directories
    (and hub IDs). The one place a backend is chosen from a path."""
    return "llamacpp" if str(path).endswith(".gguf") else "hf"


def load_backend(name: str, path: str, **options: Any) -> Backend:
    """Load a model through the backend registered as `name`, importing that backend only now."""
    if name not in _REGISTRY:
        raise SpecmoeError(f"unknown backend '{name}'; available: {', '.join(available_backends())}")
    module_name, attr = _REGISTRY[name].split(":")
    loader = getattr(importlib.import_module(module_name), attr)
    return loader(path, **options)


__all__ = ["Backend", "available_backends", "backend_for", "load_backend"]
