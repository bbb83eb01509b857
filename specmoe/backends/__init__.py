"""Model runtimes behind one small protocol, registered by name and imported only when used.

The modules, one concept each:

- `base`: the protocol, the few operations the decode loops need from a runtime.
- `hf` (transformers, eager), `hf_static` (static KV cache, `torch.compile`d forwards),
  `hf_experts` (specmoe's MoE experts kernels), `hf_model` (what both read off a loaded model),
  `hf_mask` (the eager backend's ready attention masks), `hf_recurrent` (hybrid models'
  linear-attention state: checkpoint, log, rollback) and `gated_delta` (the state a gated-DeltaNet
  layer reaches over a prefix of logged inputs); `hf_sliding` (sliding-window layers kept whole and
  windowed in the mask, so they roll back exactly) and `hf_uncached` (plain decoding of a model that
  keeps its past outside transformers' Cache; SD on it is refused).
- `slots`: the cache layout of both, decided on the host, and host values sent without waiting.
- `hf_heads` (a head drafter's model: one layer over [state ; token embedding] vectors), `mtp_head`
  (the target's own MTP module, read from its checkpoint), `eagle3_head` (EAGLE-3 heads in vLLM's
  and SGLang's layout) and `hf_head_runtime` (a head bound to its target, with its backend).
- `llamacpp`: GGUF models through llama-cpp-python (the `llamacpp` extra); `llamacpp_load`: the
  library, the checks a file passes before llama.cpp reads it, and the loaded model; `llamacpp_mtp`:
  the target's own MTP layer as a llama.cpp draft context; `llamacpp_state`: a
  hybrid GGUF's recurrent state checkpointed per sequence and rolled back; `gguf_tokenizer`: the
  tokenizer inside a GGUF file; `llamacpp_check` and `llamacpp_probe`: its self-test in a child
  process, so a build that cannot run here is one line.
- `weights`, `config_shape` and `gguf_layout`: a model's files checked before anything loads them;
  `pickle_weights`: the opted-in load of pickle checkpoints.
- `tokenizer_digest`: which tokenizer a model directory has, by content.
- `router_trace`: the experts a transformers MoE model's routers select.
- `registry`: the backends by name, with the facts callers ask of them (torch-free).

Importing this package loads no runtime: `Backend` (the protocol, which needs torch) is imported
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specmoe.backends.registry import (
    BACKENDS,
    DEFAULT_BACKEND,
    BackendInfo,
    available_backends,
    backend_for,
    backend_info,
    file_backends,
)

if TYPE_CHECKING:
    from specmoe.backends.base import Backend


def load_backend(name: str, path: str, **options: Any) -> Backend:
    """Load a model through the backend registered as `name`, importing that backend only now."""
    return backend_info(name).load(path, **options)


def __getattr__(name: str) -> Any:
    if name == "Backend":  # the protocol imports torch: only when asked for
        from specmoe.backends.base import Backend

        return Backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "Backend",
    "BackendInfo",
    "available_backends",
    "backend_for",
    "backend_info",
    "file_backends",
    "load_backend",
]
