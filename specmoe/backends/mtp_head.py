"""The target's own MTP module (Qwen3-Next / Qwen3.5 layout), read from its checkpoint.

Shape legend: B rows, t positions, H the target's hidden size, V its vocabulary, E experts, I an
expert's width.

transformers drops these weights when it loads the target (`_keys_to_ignore_on_load_unexpected =
["^mtp.*"]`); they are read here from the same safetensors files. The layout, as Qwen3.5 and
Qwen3-Next checkpoints spell it and vLLM's `qwen3_next_mtp` reads it:

    mtp.pre_fc_norm_embedding   [H]       norm of the next token's embedding
    mtp.pre_fc_norm_hidden      [H]       norm of the target's hidden state
    mtp.fc                      [H, 2H]   fusion of [embedding ; hidden] into the layer's input
    mtp.layers.0.*                        one decoder layer of the target's own kind, full attention
                                          (an MoE target's is an MoE layer; experts one tensor each)
    mtp.norm                    [H]       final norm; the target's LM head and embeddings are shared

At position i the module reads the target's final hidden state h_i (after the target's last norm,
what its LM head reads) and the token x_{i+1}, and predicts x_{i+2}:

    state_i = norm(layer(fc([pre_fc_norm_embedding(embed(x_{i+1})) ; pre_fc_norm_hidden(h_i)])))
    logits_i = lm_head(state_i)

Run recursively for gamma > 1, a drafted step reads the module's own state_i in place of the
target's hidden state (vLLM's MTP proposer does the same). The DeepSeek-V3 / GLM "nextn" layout
(`model.layers.{L}.eh_proj`, `enorm`, `hnorm`, `shared_head`) is refused in one line.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import torch
from torch import nn

from specmoe.backends.hf_heads import FinalLayer, Head, HeadOutput
from specmoe.errors import SpecmoeError

PREFIX = "mtp."
# checkpoint name (after "mtp.") -> the name in `MtpModel.state_dict()`, for everything but the layer
_NAMES = {
    "pre_fc_norm_embedding.weight": "pre_fc_norm_embedding.weight",
    "pre_fc_norm_hidden.weight": "pre_fc_norm_hidden.weight",
    "fc.weight": "fc.weight",
    "norm.weight": "body.norm.weight",
}
_LAYER = "layers.0."
_EXPERT = re.compile(r"(?P<prefix>.*mlp\.experts\.)(?P<expert>\d+)\.(?P<proj>gate|up|down)_proj\.weight")
_NEXTN = re.compile(r"model\.layers\.\d+\.(eh_proj|enorm|hnorm|shared_head)\.")
_SHARED = ("lm_head.", "body.embed_tokens.")  # the target's own modules, not the checkpoint's mtp.*


class MtpModel(nn.Module):
    """The MTP module as a causal LM over [hidden ; token embedding] input vectors ([B, t, 2H])."""

    def __init__(self, body: nn.Module, lm_head: nn.Module) -> None:
        super().__init__()
        config = body.config
        size, eps = int(config.hidden_size), float(config.rms_norm_eps)
        norm = type(body.norm)  # the family's own RMSNorm (Qwen3.5's scales by 1 + weight)
        self.config = config
        self.body = body  # the family's text model holding mtp.layers.0 and mtp.norm
        self.pre_fc_norm_embedding = norm(size, eps=eps)
        self.pre_fc_norm_hidden = norm(size, eps=eps)
        self.fc = nn.Linear(2 * size, size, bias=False)
        self.lm_head = lm_head  # the target's

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
        hidden, embedded = inputs_embeds.chunk(2, dim=-1)  # [B, t, H] each
        fused = self.fc(
            torch.cat([self.pre_fc_norm_embedding(embedded), self.pre_fc_norm_hidden(hidden)], -1)
        )
        out = self.body(
            inputs_embeds=fused,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
        )
        state = out.last_hidden_state  # [B, t, H], after mtp.norm: the logits' and the next step's input
        kept = state[:, -logits_to_keep:] if logits_to_keep else state
        return HeadOutput(self.lm_head(kept), (None, state))


def mtp_head(model: nn.Module, name: str) -> Head:
    """The MTP module in the checkpoint a transformers model was loaded from, on the model's device
    and dtype, sharing its embeddings and LM head; a checkpoint without one (or in a layout this
    build does not run) is refused in one line. name: the model's, for messages."""
    path = Path(str(model.name_or_path or ""))
    tensors = _read_mtp(path, name)
    module = build_mtp_model(model)
    _load(module, tensors, path)
    layers = int(model.config.get_text_config().num_hidden_layers)  # the final hidden state
    return Head("mtp", module.eval(), (layers,), FinalLayer(), model.get_input_embeddings())


def build_mtp_model(model: nn.Module) -> MtpModel:
    """An MTP module shaped for this transformers model (random weights), on its device and dtype:
    one full-attention decoder layer of the model's own kind, its norms, sharing its LM head."""
    from transformers import AutoModel

    config = copy.deepcopy(model.config.get_text_config())
    config.num_hidden_layers = 1
    config.layer_types = ["full_attention"]
    config.vocab_size, config.pad_token_id = 1, None  # its embeddings are the target's: none of its own
    parameter = next(model.parameters())
    with torch.device(parameter.device):
        body = AutoModel.from_config(config, dtype=parameter.dtype)
        module = MtpModel(body, model.get_output_embeddings()).to(parameter.dtype)
    return module


def checkpoint_names(module: MtpModel) -> dict[str, str]:
    """Checkpoint name (mtp.*) of each of the module's own parameters, in-memory names; its
    experts are fused in memory and one tensor each on disk (`zoo.checkpoint` splits them)."""
    inverse = {value: key for key, value in _NAMES.items()}
    names = {}
    for name in module.state_dict():
        if name.startswith(_SHARED):
            continue
        if name in inverse:
            names[name] = PREFIX + inverse[name]
        elif name.startswith("body." + _LAYER):
            names[name] = PREFIX + name.removeprefix("body.")
    return names


def _read_mtp(path: Path, name: str) -> dict[str, torch.Tensor]:
    """The mtp.* tensors of a safetensors checkpoint, keyed without the prefix (CPU, file dtype)."""
    from safetensors import safe_open

    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        raise SpecmoeError(
            f"--draft mtp reads the MTP weights from the target's safetensors files, and '{name}' was "
            f"not loaded from a folder holding them ({path}); load the target from its checkpoint folder"
        )
    found: dict[str, torch.Tensor] = {}
    nextn = False
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (a safetensors handle is no dict)
                short = key.removeprefix("model.")
                if short.startswith(PREFIX):
                    found[short.removeprefix(PREFIX)] = handle.get_tensor(key)
                nextn = nextn or bool(_NEXTN.match(key))
    if not found and nextn:
        raise SpecmoeError(
            f"'{path}' keeps its MTP layer in the DeepSeek-V3 / GLM nextn layout (model.layers.N.eh_proj, "
            "enorm, hnorm, shared_head), which this build does not run; use a Qwen3.5 or Qwen3-Next "
            "checkpoint (mtp.* tensors)"
        )
    if not found:
        raise SpecmoeError(
            f"'{path}' has no MTP weights (no mtp.* tensors); --draft mtp needs a checkpoint that ships "
            "its MTP module (Qwen3.5, Qwen3-Next, or the hybrid-trained zoo's moe)"
        )
    layers = sorted({key.split(".")[1] for key in found if key.startswith("layers.")})
    if layers != ["0"]:
        raise SpecmoeError(
            f"'{path}' has MTP layers {', '.join(layers) or 'none'}; this build runs checkpoints with "
            "exactly one MTP layer (mtp.layers.0), as Qwen3.5 and Qwen3-Next ship"
        )
    return found


def _in_memory(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint tensors (prefix stripped) under `MtpModel` names, one-tensor-per-expert weights
    fused as transformers keeps them ([E, 2I, H] gate and up, [E, H, I] down)."""
    named, experts = {}, {}
    for key, tensor in tensors.items():
        match = _EXPERT.fullmatch(key)
        if match:
            experts.setdefault(match["prefix"], {}).setdefault(match["proj"], {})[int(match["expert"])] = (
                tensor
            )
        elif key in _NAMES:
            named[_NAMES[key]] = tensor
        else:
            named["body." + key] = tensor
    for prefix, projections in experts.items():
        stacked = {proj: [found[e] for e in sorted(found)] for proj, found in projections.items()}
        if "gate" in stacked and "up" in stacked and len(stacked["gate"]) == len(stacked["up"]):
            gate_up = [torch.cat(pair) for pair in zip(stacked["gate"], stacked["up"], strict=True)]
            named[f"body.{prefix}gate_up_proj"] = _stack(gate_up, prefix + "gate_up_proj")
        if "down" in stacked:
            named[f"body.{prefix}down_proj"] = _stack(stacked["down"], prefix + "down_proj")
    return named


def _stack(tensors: list[torch.Tensor], name: str) -> torch.Tensor:
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise SpecmoeError(
            f"mtp.{name}: the experts' tensors differ in shape ({sorted(shapes)}); restore the checkpoint"
        )
    return torch.stack(tensors)


def _load(module: MtpModel, tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Copy the checkpoint's tensors into the module, refusing in one line a tensor missing, extra,
    or of another shape (a cut-short tensor, or a module made for another hidden size)."""
    wanted = {name: p for name, p in module.state_dict().items() if not name.startswith(_SHARED)}
    named = _in_memory(tensors)
    names = checkpoint_names(module)
    fix = "restore the checkpoint's mtp.* tensors, or pick a checkpoint whose MTP module fits its model"
    missing = sorted(names.get(n, n) for n in wanted.keys() - named.keys())
    extra = sorted(named.keys() - wanted.keys())
    if missing:
        raise SpecmoeError(f"'{path}': MTP tensor {missing[0]} is missing ({len(missing)} in all); {fix}")
    if extra:
        raise SpecmoeError(
            f"'{path}': MTP tensor {extra[0]} has no place in the module ({len(extra)} in all); {fix}"
        )
    for name, target in wanted.items():
        found = named[name]
        if found.shape != target.shape:
            raise SpecmoeError(
                f"'{path}': MTP tensor {names.get(name, name)} has shape {tuple(found.shape)}, the target "
                f"({module.config.hidden_size} hidden) needs {tuple(target.shape)}; {fix}"
            )
        with torch.no_grad():
            target.copy_(found.to(target.dtype))


__all__ = ["MtpModel", "build_mtp_model", "checkpoint_names", "mtp_head"]
