"""What both transformers backends read off a loaded model, in one place below both of them."""

from __future__ import annotations

import inspect

import torch

from specmoe.backends.base import check_hidden_layers
from specmoe.backends.config_shape import expert_count
from specmoe.backends.hf_experts import experts_modules
from specmoe.backends.hf_recurrent import LinearStates
from specmoe.errors import SpecmoeError


def set_model_facts(backend, model, name: str, device: torch.device) -> None:
    """The protocol's read-only attributes of a backend over a transformers model, read from the
    model once: both HF backends (eager in hf, static-cache in hf_static) describe a model the same."""
    config = model.config
    backend.model = model
    backend.name = name
    backend.device = device
    backend.dtype = next(model.parameters()).dtype
    backend.vocab_size = int(model.get_output_embeddings().weight.shape[0])
    context = getattr(config, "max_position_embeddings", None)  # XLNet states -1: unbounded
    backend.max_context = int(context) if isinstance(context, int) and context > 0 else 1 << 30
    backend.eos_token_ids = eos_ids(model)
    backend.is_moe = expert_count(config.to_dict()) > 0 or bool(experts_modules(model))
    backend.num_layers = int(config.get_text_config().num_hidden_layers)


@torch.inference_mode()
def check_causal(model, name: str) -> None:
    """Refuse, in one line, a model whose logits at a position change with later tokens: an encoder
    that transformers registers as a causal LM (BERT, RoBERTa, ELECTRA... with `is_decoder` false)
    attends both ways, so neither its plain nor its speculative decoding would mean anything. Two
    forwards of one and two tokens; the tolerance, relative to the largest logit, is far above the
    rounding of the dtype's kernels (5% in 16-bit floats, 0.01% above) and below what attending to
    a later token changes."""
    parameter = next(model.parameters())
    ids = torch.tensor([[1, 2]], device=parameter.device)
    alone = model(input_ids=ids[:, :1]).logits[0, 0].double()  # [V]
    followed = model(input_ids=ids).logits[0, 0].double()  # [V]
    relative = 0.05 if parameter.element_size() <= 2 else 1e-4
    if (alone - followed).abs().max() > relative * alone.abs().max() + 1e-9:
        model_type = getattr(model.config, "model_type", "?")
        raise SpecmoeError(
            f"'{name}' is a {model_type} model whose logits at a position change with later tokens, so it "
            "cannot generate text; an encoder needs is_decoder: true in its config.json to decode causally"
        )


def batch_refusal(model, name: str) -> str | None:
    """Why this model cannot decode a batch of prompts exactly, in one line naming it, or None.

    The backends left-pad a batch and give each token its position in its own row; a model whose
    forward takes no position_ids (ALiBi in Bloom and MPT, RoFormer's sinusoids) counts positions
    in cache slots instead, which left padding and rejected draft tokens shift; a cache layer that
    pools every n slots into one entry (DeepSeek-V4's compressed attention) pools a row's padding
    with its tokens. Either way a row decodes differently beside others than alone."""
    from transformers import DynamicCache

    why = None
    if "position_ids" not in inspect.signature(model.forward).parameters:
        why = "whose forward takes no position_ids (it counts positions in cache slots, which padding shifts)"
    else:  # both callers built the model's cache layout first: it keeps a transformers Cache
        pooled = [
            (index, layer.compress_rate)
            for index, layer in enumerate(DynamicCache(config=model.config).layers)
            if isinstance(getattr(layer, "compress_rate", None), int)
        ]
        if pooled:
            index, rate = pooled[0]
            why = f"whose layer {index} pools every {rate} cache slots into one entry, padding included"
    if why is None:
        return None
    return batched_refused(name, getattr(model.config, "model_type", "?"), why)


def batched_refused(name: str, model_type: str, why: str, fix: str = "") -> str:
    """The one line that refuses a batch of prompts (B > 1) on a model that decodes it wrong."""
    return (
        f"'{name}' is a {model_type} model {why}, so a batch of left-padded prompts would decode "
        f"silently wrong and is refused; decode one prompt at a time (B = 1){fix}"
    )


def padded_nan_refusal(model, name: str) -> str:
    """The refusal of a model whose own forward turns a left-padded batch into NaN: Gemma 2,
    VaultGemma, Granite and MPT take their eager softmax in float32, where float64's mask value
    (its finfo.min) is -inf, so a padding query sees only -inf, its softmax is NaN, and the NaN
    reaches every row's keys in the next layer; transformers' own generate does the same."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    fix = ", or load it in float32" if dtype == "float64" else ""
    why = f"whose forward turns a left-padded {dtype} batch into NaN (transformers' own generate does too)"
    return batched_refused(name, getattr(model.config, "model_type", "?"), why, fix)


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


class CapturedHidden:
    """What the eager and the compiled transformers backends share beside their caches: the
    hidden-state layers a head drafter asked for (`capture_hidden`) and the seconds the
    linear-attention rollback took. Listed before `BackendBase`, whose defaults it overrides."""

    name: str
    _capture: tuple[int, ...]
    _hidden: torch.Tensor | None  # [B, t, K, H] of the last prefill or forward
    _linear: LinearStates | None

    def capture_hidden(self, layers: tuple[int, ...]) -> None:
        check_hidden_layers(self, layers)
        self._capture = tuple(layers)

    def hidden(self) -> torch.Tensor:
        if self._hidden is None:
            raise RuntimeError(f"'{self.name}' captured no hidden states: capture_hidden was not called")
        return self._hidden

    @property
    def state_s(self) -> float:
        """Seconds spent checkpointing and re-advancing linear-attention state (0 without any)."""
        return self._linear.seconds if self._linear is not None else 0.0
