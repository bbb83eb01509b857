"""Model runtimes behind one small protocol, registered by name and imported only when used.

The modules, one concept each:

- `base`: the protocol, the few operations the decode loops need from a runtime.
- `hf` (transformers, eager), `hf_static` (static KV cache, `torch.compile`d forwards),
  `hf_experts` (specmoe's MoE experts kernels), `hf_model` (what both read off a loaded model),
  `hf_mask` (the eager backend's ready attention masks), `hf_recurrent` (hybrid models'
  linear-attention state: checkpoint, log, rollback) and `gated_delta` (the state a gated-DeltaNet
  layer reaches over a prefix of logged inputs).
- `slots`: the cache layout of both, decided on the host, and host values sent without waiting.
- `llamacpp`: GGUF models through llama-cpp-python (the `llamacpp` extra); `llamacpp_state`: a
  hybrid GGUF's recurrent state checkpointed per sequence and rolled back; `gguf_tokenizer`: the
  tokenizer inside a GGUF file; `llamacpp_check` and `llamacpp_probe`: its self-test in a child
  process, so a build that cannot run here is one line.
- `weights`, `config_shape` and `gguf_layout`: a model's files checked before anything loads them;
  `pickle_weights`: the opted-in load of pickle checkpoints.
- `tokenizer_digest`: which tokenizer a model directory has, by content.
- `router_trace`: the experts a transformers MoE model's routers select.
"""

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
