"""EAGLE-3 heads in the checkpoint layout vLLM and SGLang load, bound to a transformers target.

Shape legend: B rows, t positions, H the head's hidden size, Ht the target's, V the target's
vocabulary, Vd the head's draft vocabulary.

A head is a directory: config.json naming an EAGLE-3 architecture (`LlamaForCausalLMEagle3`, as
SGLang and vLLM spell it, or vLLM's `Eagle3LlamaForCausalLM`) with a Llama decoder's settings,
`num_hidden_layers` 1, `draft_vocab_size` and, optionally, `eagle_aux_hidden_state_layer_ids`;
and safetensors holding

    fc               [H, 3Ht]  fusion of the target's low, mid and high hidden states
    midlayer.*                 one Llama decoder layer whose attention reads [embedding ; state]
                               (q/k/v [., 2H]), with its own `hidden_norm` for the state
    norm             [H]       final norm
    lm_head          [Vd, H]   over the draft vocabulary
    d2t              [Vd]      draft id -> target id offset (target = draft + d2t[draft])
    t2d              [V]       which target ids the draft vocabulary holds (bool)
    embed_tokens     [V, H]    optional; without it the head shares the target's embeddings

The target layers are vLLM's ids, which are transformers' `hidden_states` indices (`HiddenAccess`):
the config's `eagle_aux_hidden_state_layer_ids`, else vLLM's default (2, L // 2, L - 3), read in
ascending order as vLLM concatenates them. At position i the head reads fc([low_i ; mid_i ;
high_i]) and the embedding of x_{i+1}, and predicts x_{i+2}; a drafted step reads the head's own
output before its final norm in place of the fused features (vLLM's `hidden_prenorm`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from specmoe.backends.hf_heads import Head, HeadOutput
from specmoe.backends.tokenizer_digest import tokenizer_digest
from specmoe.errors import SpecmoeError

ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
LAYER_IDS_KEY = "eagle_aux_hidden_state_layer_ids"
FEATURES = 3  # low, mid, high


def is_eagle3(config: dict) -> bool:
    """Whether a config.json describes an EAGLE-3 head (by its architecture name, as vLLM decides)."""
    return any(name in ARCHITECTURES for name in config.get("architectures") or ())


@dataclass(frozen=True)
class Eagle3Checkpoint:
    """An EAGLE-3 head as loaded, before it is bound to a target (`eagle3_head`)."""

    path: Path
    config: dict
    tensors: dict[str, torch.Tensor]  # checkpoint names, "midlayer." for the decoder layer
    dtype: torch.dtype
    device: torch.device
    tokenizer_digest: str | None


def load_eagle3(path: Path, config: dict, dtype: torch.dtype, device: torch.device) -> Eagle3Checkpoint:
    """Read an EAGLE-3 head directory (`hf.check_model_dir` has checked its files)."""
    from safetensors import safe_open

    tensors = {}
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (a safetensors handle is no dict)
                name = key.removeprefix("model.").replace("layers.0.", "midlayer.")
                tensors[name] = handle.get_tensor(key)
    if int(config.get("num_hidden_layers", 1)) != 1:
        raise SpecmoeError(
            f"'{path}': an EAGLE-3 head has one decoder layer, its config.json says "
            f"num_hidden_layers {config.get('num_hidden_layers')}; restore the head's own config.json"
        )
    return Eagle3Checkpoint(path, config, tensors, dtype, device, tokenizer_digest(path))


class Eagle3Layer(nn.Module):
    """The head's decoder layer: attention over [norm(embedding) ; norm(state)], residual the state."""

    def __init__(self, config) -> None:
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm

        super().__init__()
        size, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = LlamaAttention(config, layer_idx=0)
        bias = bool(getattr(config, "attention_bias", False))
        for name in ("q_proj", "k_proj", "v_proj"):  # they read 2H: the embedding and the state
            proj = getattr(self.self_attn, name)
            setattr(self.self_attn, name, nn.Linear(2 * size, proj.out_features, bias=bias))
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(size, eps=eps)
        self.hidden_norm = LlamaRMSNorm(size, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(size, eps=eps)
        self.norm_before_residual = bool(getattr(config, "norm_before_residual", False))

    def forward(self, embedded, state, position_embeddings, attention_mask, past_key_values) -> torch.Tensor:
        residual = state
        state = self.hidden_norm(state)
        if self.norm_before_residual:
            residual = state
        mixed = torch.cat([self.input_layernorm(embedded), state], -1)  # [B, t, 2H]
        attended, _ = self.self_attn(
            hidden_states=mixed,
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
        )
        hidden = residual + attended
        return hidden + self.mlp(self.post_attention_layernorm(hidden))  # [B, t, H], before the norm


class Eagle3Model(nn.Module):
    """The head as a causal LM over [state ; token embedding] input vectors ([B, t, 2H]); its
    `state_dict` names are the checkpoint's. Logits come out over the target's vocabulary, -inf
    outside the draft vocabulary (vLLM's `compute_logits`)."""

    def __init__(self, config, target_hidden: int, target_vocab: int, own_embeddings: bool) -> None:
        from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

        super().__init__()
        size, draft_vocab = config.hidden_size, int(getattr(config, "draft_vocab_size", None) or target_vocab)
        self.config = config
        self.fc = nn.Linear(FEATURES * target_hidden, size, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(size, draft_vocab, bias=False)
        self.embed_tokens = nn.Embedding(target_vocab, size) if own_embeddings else None
        self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(target_vocab, dtype=torch.bool))
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.target_vocab = target_vocab

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
        **_,
    ) -> HeadOutput:
        from transformers.masking_utils import create_causal_mask

        state, embedded = inputs_embeds.chunk(2, dim=-1)  # [B, t, H] each
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=state,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )
        rotary = self.rotary_emb(state, position_ids)
        prenorm = self.midlayer(embedded, state, rotary, mask, past_key_values)  # the next step's state
        kept = prenorm[:, -logits_to_keep:] if logits_to_keep else prenorm
        draft_logits = self.lm_head(self.norm(kept))  # [B, t, Vd]
        targets = torch.arange(draft_logits.shape[-1], device=draft_logits.device) + self.d2t
        logits = draft_logits.new_full((*draft_logits.shape[:-1], self.target_vocab), float("-inf"))
        logits[..., targets] = draft_logits
        return HeadOutput(logits, (None, prenorm))


class Eagle3Features(nn.Module):
    """The target's low, mid and high hidden states fused by the head's fc: [..., 3, Ht] -> [..., H]."""

    def __init__(self, fc: nn.Linear) -> None:
        super().__init__()
        self.fc = fc

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.fc(hidden.flatten(-2))


def layer_ids(config: dict, target_layers: int, where: Path) -> tuple[int, ...]:
    """The target hidden-state layers the head reads, ascending; refused in one line when the target
    lacks one of them."""
    named = config.get(LAYER_IDS_KEY) or (config.get("eagle_config") or {}).get(LAYER_IDS_KEY)
    layers = named if named else [2, target_layers // 2, target_layers - 3]  # vLLM's default
    source = f"its config.json's {LAYER_IDS_KEY}" if named else "vLLM's default (2, L // 2, L - 3)"
    if not isinstance(layers, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in layers
    ):
        raise SpecmoeError(
            f"'{where}': {LAYER_IDS_KEY} must be a list of {FEATURES} layer numbers, got {layers!r}"
        )
    bad = [i for i in layers if not 0 <= i <= target_layers]
    if bad or len(set(layers)) != FEATURES or len(layers) != FEATURES:
        raise SpecmoeError(
            f"'{where}': the EAGLE-3 head reads target layers {layers} ({source}), but the target has "
            f"{target_layers} decoder layers (hidden states 0 to {target_layers}); an EAGLE-3 head reads "
            f"{FEATURES} distinct ones: use a head made for this target"
        )
    return tuple(sorted(layers))


def eagle3_head(checkpoint: Eagle3Checkpoint, model: nn.Module) -> Head:
    """The head bound to its target's transformers model: shapes checked against the target's hidden
    size and vocabulary, weights copied in, on the head's device and dtype."""
    from transformers import LlamaConfig

    path, raw = checkpoint.path, checkpoint.config
    text = model.config.get_text_config()
    layers = layer_ids(raw, int(text.num_hidden_layers), path)
    target_hidden, vocab = int(text.hidden_size), int(model.get_output_embeddings().weight.shape[0])
    _check_vocab(raw, vocab, path)
    _check_target_hidden(raw, target_hidden, path)
    fields = {k: v for k, v in raw.items() if k not in ("architectures", "auto_map")}
    config = LlamaConfig.from_dict(fields)
    config._attn_implementation = "sdpa"
    own = "embed_tokens.weight" in checkpoint.tensors
    with torch.device(checkpoint.device):
        module = Eagle3Model(config, target_hidden, vocab, own).to(checkpoint.dtype)
    _load(module, checkpoint.tensors, path, target_hidden)
    embed = module.embed_tokens if own else model.get_input_embeddings()
    if int(embed.weight.shape[1]) != config.hidden_size:
        raise SpecmoeError(
            f"'{path}': the EAGLE-3 head has hidden size {config.hidden_size} and no embeddings of its own, "
            f"and the target's have {embed.weight.shape[1]}; use a head made for this target"
        )
    features = Eagle3Features(module.fc)
    return Head("eagle3", module.eval(), layers, features, embed, checkpoint.tokenizer_digest)


def _check_vocab(config: dict, vocab: int, path: Path) -> None:
    stated = config.get("vocab_size")
    if stated != vocab:
        raise SpecmoeError(
            f"'{path}': the EAGLE-3 head is made for a vocabulary of {stated} tokens, the target has "
            f"{vocab}; use a head made for this target"
        )


def _check_target_hidden(config: dict, target_hidden: int, path: Path) -> None:
    """vLLM and SGLang size the head's fc from `target_hidden_size` when the config states it: a head
    whose config names another target's width is refused here even when its fc happens to fit."""
    stated = config.get("target_hidden_size")
    if stated is not None and stated != target_hidden:
        raise SpecmoeError(
            f"'{path}': the EAGLE-3 head's config.json says target_hidden_size {stated}, the target's "
            f"hidden size is {target_hidden}; use a head made for this target"
        )


def _load(module: Eagle3Model, tensors: dict[str, torch.Tensor], path: Path, target_hidden: int) -> None:
    """Copy the checkpoint's tensors in, refusing in one line one missing, extra or of another shape,
    and draft -> target maps that leave the target's vocabulary."""
    wanted = module.state_dict()
    fix = "restore the head's files, or use a head made for this target"
    if (
        "d2t" not in tensors
        and "lm_head.weight" in tensors
        and tensors["lm_head.weight"].shape[0] != module.target_vocab
    ):
        raise SpecmoeError(f"'{path}': the EAGLE-3 head has a draft vocabulary but no d2t map; {fix}")
    tensors = {"d2t": wanted["d2t"], "t2d": wanted["t2d"], **tensors}
    missing = sorted(wanted.keys() - tensors.keys())
    extra = sorted(tensors.keys() - wanted.keys())
    if missing or extra:
        which = f"{missing[0]} is missing" if missing else f"{extra[0]} has no place in the head"
        raise SpecmoeError(f"'{path}': EAGLE-3 tensor {which}; {fix}")
    if tensors["fc.weight"].shape[1:] != wanted["fc.weight"].shape[1:]:
        size = tensors["fc.weight"].shape[1] // FEATURES
        raise SpecmoeError(
            f"'{path}': the EAGLE-3 head fuses target hidden states of size {size}, the target's are "
            f"{target_hidden}; use a head made for this target"
        )
    for name, slot in wanted.items():
        if tensors[name].shape != slot.shape:
            raise SpecmoeError(
                f"'{path}': EAGLE-3 tensor {name} has shape {tuple(tensors[name].shape)}, its config.json "
                f"says {tuple(slot.shape)}; {fix}"
            )
        with torch.no_grad():
            slot.copy_(tensors[name].to(slot.dtype))
    targets = torch.arange(len(module.d2t), device=module.d2t.device) + module.d2t
    if (
        targets.min() < 0
        or targets.max() >= module.target_vocab
        or len(set(targets.tolist())) != len(targets)
    ):
        raise SpecmoeError(
            f"'{path}': the EAGLE-3 head's d2t maps draft tokens outside the target's vocabulary; {fix}"
        )


__all__ = ["ARCHITECTURES", "Eagle3Checkpoint", "Eagle3Model", "eagle3_head", "is_eagle3", "load_eagle3"]
