"""What both transformers backends read off a loaded model, in one place below both of them."""

from __future__ import annotations

import inspect

import torch

from specmoe.backends.config_shape import expert_count
from specmoe.backends.hf_experts import experts_modules


def set_model_facts(backend, model, name: str, device: torch.device) -> None:
    """The protocol's read-only attributes of a backend over a transformers model, read from the
    model once: both HF backends (eager in hf, static-cache in hf_static) describe a model the same."""
    config = model.config
    backend.model = model
    backend.name = name
    backend.device = device
    backend.dtype = next(model.parameters()).dtype
    backend.vocab_size = int(model.get_output_embeddings().weight.shape[0])
    backend.max_context = int(getattr(config, "max_position_embeddings", 1 << 30))
    backend.eos_token_ids = eos_ids(model)
    backend.is_moe = expert_count(config.to_dict()) > 0 or bool(experts_modules(model))
    backend.num_layers = int(config.get_text_config().num_hidden_layers)


def keeps_cache(model) -> bool:
    """Whether the model keeps its past in a transformers Cache (`past_key_values`); Mamba, RWKV,
    xLSTM and some older models keep it in their own objects or not at all."""
    return "past_key_values" in inspect.signature(model.forward).parameters


def hidden_request(layers: tuple[int, ...]) -> dict:
    """The keyword that makes a transformers forward collect these hidden states (none: {})."""
    return {"output_hidden_states": list(layers)} if layers else {}


def stacked_hidden(out, layers: tuple[int, ...]) -> torch.Tensor | None:
    """The hidden states a forward collected at these layers as one tensor [B, t, K, H], or None
    when none were asked for (transformers returns one entry per layer, None where not selected)."""
    return torch.stack([out.hidden_states[i] for i in layers], 2) if layers else None


def eos_ids(model) -> frozenset[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if ids is None:
        ids = getattr(model.config, "eos_token_id", None)
    if ids is None:
        return frozenset()
    return frozenset([ids] if isinstance(ids, int) else ids)
