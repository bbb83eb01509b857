"""Tiny random hybrid (gated-DeltaNet + attention) models for the lossless tests, built from their
transformers configs in float64: Qwen3.5-MoE, Qwen3-Next and dense Qwen3.5.

A draft that sometimes disagrees with its target is the target with noise added to every weight:
the same architecture, so a hybrid draft rolls back too, and the noise sets how often it agrees.
For llama.cpp, whose GGUF export needs the zoo's tokenizer, a hybrid zoo MoE is paired with its
dense twin (`dense_twin`), its routed experts damped (`damp_routed_experts`) so the two agree
about half the time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

VOCAB = 96
_COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_conv_kernel_dim=4,
)
# three linear-attention layers to one full-attention layer, as in Qwen3.5-35B-A3B and Qwen3-Next
LAYER_TYPES = ["linear_attention"] * 3 + ["full_attention"]
_MOE = dict(
    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16
)


def hybrid_config(family: str):
    import transformers as tf

    layers = dict(num_hidden_layers=len(LAYER_TYPES), layer_types=LAYER_TYPES)
    if family == "qwen3_5_moe":
        return tf.Qwen3_5MoeTextConfig(**_MOE, **layers, **_COMMON)
    if family == "qwen3_next":
        return tf.Qwen3NextConfig(intermediate_size=48, **_MOE, **layers, **_COMMON)
    if family == "qwen3_5":
        return tf.Qwen3_5TextConfig(intermediate_size=48, **layers, **_COMMON)
    raise ValueError(family)


def draw_weights(
    model, noise: float = 0.0, seed: int = 0, embed_std: float = 1.0, norm_std: float | None = None
) -> None:
    """Redraw a model's matrices from a generator seeded 0: N(0, 0.3), embeddings N(0, embed_std);
    norms, decays, biases and sinks keep transformers' init, or with `norm_std` norms are shifted
    by N(0, norm_std). noise > 0 adds noise · N(0, 1) from a generator seeded `seed`, which
    perturbs the model into a draft of the noiseless one."""
    weights, perturbation = torch.Generator().manual_seed(0), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() > 1:
                param.normal_(std=embed_std if "embed" in name else 0.3, generator=weights)
                param.add_(noise * torch.randn(param.shape, generator=perturbation))
            elif norm_std is not None and "norm" in name:
                param.add_(norm_std * torch.randn(param.shape, generator=weights))


def save_hybrid(
    family: str, path: Path, noise: float = 0.0, seed: int = 0, tokenizer_from: Path | None = None
) -> Path:
    """A random model of the family (seeded); noise > 0 perturbs it into a draft of the seed-0 one.

    tokenizer_from: a zoo model directory whose tokenizer the model takes (its vocabulary size and
    EOS id too), so it can be exported to GGUF; its norms are then drawn as well (N(0, 0.1)), so
    an export that mishandles a norm's offset shows."""
    from transformers import AutoModelForCausalLM

    config = hybrid_config(family)
    if tokenizer_from is not None:
        zoo_config = json.loads((tokenizer_from / "config.json").read_text())
        for key in ("vocab_size", "eos_token_id", "pad_token_id", "bos_token_id"):
            setattr(config, key, zoo_config[key])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    draw_weights(model, noise, seed, norm_std=None if tokenizer_from is None else 0.1)
    model.save_pretrained(path)
    if tokenizer_from is not None:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(tokenizer_from / name, path / name)
    return path


# --- a hybrid zoo MoE and a dense twin that agrees with it part of the time (GGUF tests) ---------

_MOE_ONLY_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "router_aux_loss_coef")


def damp_routed_experts(moe_dir: Path, out: Path, scale: float) -> Path:
    """The zoo MoE with every routed expert's output scaled by `scale` (its down projections)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(moe_dir, out)
    weights = load_file(out / "model.safetensors")
    for key, tensor in weights.items():
        if ".mlp.experts." in key and key.endswith("down_proj.weight"):
            weights[key] = tensor * scale
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


def dense_twin(moe_dir: Path, out: Path) -> Path:
    """A dense Qwen3.5 cut from a Qwen3.5-MoE: the same embeddings, attention and linear-attention
    layers, its shared expert as the MLP, no router, routed experts or shared-expert gate."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(moe_dir, out)
    config = json.loads((out / "config.json").read_text())
    width = config.pop("shared_expert_intermediate_size")
    for key in (*_MOE_ONLY_KEYS, "output_router_logits"):
        config.pop(key, None)
    config |= {
        "model_type": "qwen3_5_text",
        "architectures": ["Qwen3_5ForCausalLM"],
        "intermediate_size": width,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    weights = {
        key.replace("mlp.shared_expert.", "mlp."): tensor
        for key, tensor in load_file(out / "model.safetensors").items()
        if not any(part in key for part in (".mlp.experts.", ".mlp.gate.", "shared_expert_gate"))
    }
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


# --- a hybrid zoo MoE with an MTP module (the GGUF export and llama.cpp's MTP drafting) -----------

_LAYER_OUTPUTS = ("self_attn.o_proj.", "linear_attn.out_proj.", "down_proj.")  # what a layer adds


def add_mtp(moe_dir: Path, out: Path, seed: int = 0, agree: float | None = None) -> Path:
    """The zoo MoE with an MTP module in Qwen3.5's layout (`mtp.*`, config `mtp_num_hidden_layers:
    1`): its decoder layer shaped like the model's last full-attention layer, each matrix drawn
    with its twin's spread, `fc` [H, 2H] likewise, norms N(0, 0.1) around the zero-centred 0 (so an
    export that mishandles a norm's offset shows).

    agree: None for that random head. A number s makes a head that agrees with its target part of
    the time: `fc` becomes [I | 0] + s x the random one, so the head mostly reads the next token's
    embedding (a bigram through the LM head), the MTP layer's outputs are scaled by s, and so are
    every trunk layer's (attention, linear attention, MLP), so the target leans on its embeddings
    too. s = 0.3 accepts about 40% of the proposals at gamma 3."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(moe_dir, out)
    config = json.loads((out / "config.json").read_text())
    config["mtp_num_hidden_layers"] = 1
    (out / "config.json").write_text(json.dumps(config, indent=1))
    weights = load_file(out / "model.safetensors")
    hidden = config["hidden_size"]
    twin = f"model.layers.{config['layer_types'].index('full_attention')}."
    generator = torch.Generator().manual_seed(seed)

    def like(tensor: torch.Tensor, shape=None) -> torch.Tensor:
        shape = tensor.shape if shape is None else shape
        spread = 0.1 if len(shape) == 1 else tensor.float().std().item()
        return spread * torch.randn(shape, generator=generator)

    mtp = {"mtp.layers.0." + k[len(twin) :]: like(v) for k, v in weights.items() if k.startswith(twin)}
    mtp["mtp.fc.weight"] = like(weights[twin + "self_attn.o_proj.weight"], (hidden, 2 * hidden))
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        mtp[f"mtp.{name}.weight"] = like(weights["model.norm.weight"])
    if agree is not None:
        for key in [k for k in (*weights, *mtp) if any(o in k for o in _LAYER_OUTPUTS)]:
            source = mtp if key in mtp else weights
            source[key] = source[key] * agree
        echo = torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], 1)
        mtp["mtp.fc.weight"] = echo + agree * mtp["mtp.fc.weight"]
    dtype = weights["model.norm.weight"].dtype
    weights |= {k: v.to(dtype) for k, v in mtp.items()}
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


def reference_mtp(
    model_dir: Path, tokens: list[int], hidden: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """What a Qwen3.5-MoE MTP module computes, in float32 from its checkpoint, for entries at
    positions 0..n-1: token x_p and hidden state h (hidden [n, H], the target's final normed hidden
    state of the position before). Returns (logits [n, V], the MTP's final normed hidden [n, H]).

    fc over [norm_e(embedding(x)), norm_h(h)], transformers' own Qwen3.5-MoE decoder layer (full
    attention, causal over the n entries, the routed and shared experts), the MTP's norm and the
    target's LM head; every norm scales by (1 + weight), as Qwen3.5's do."""
    import transformers as tf
    from safetensors.torch import load_file
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as qwen

    config = tf.AutoConfig.from_pretrained(model_dir)
    config._attn_implementation = "eager"
    weights = {k: v.float() for k, v in load_file(model_dir / "model.safetensors").items()}
    layer = qwen.Qwen3_5MoeDecoderLayer(config, config.layer_types.index("full_attention")).float()
    prefix, experts = "mtp.layers.0.", range(config.num_experts)

    def expert(e: int, proj: str) -> torch.Tensor:
        return weights[f"{prefix}mlp.experts.{e}.{proj}_proj.weight"]

    state = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix) and ".experts." not in k}
    state["mlp.experts.gate_up_proj"] = torch.stack(
        [torch.cat([expert(e, "gate"), expert(e, "up")]) for e in experts]
    )
    state["mlp.experts.down_proj"] = torch.stack([expert(e, "down") for e in experts])
    layer.load_state_dict(state, strict=True)

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        scale = 1 + weights[f"mtp.{name}.weight"]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps) * scale

    embedded = weights["model.embed_tokens.weight"][torch.tensor(tokens)]  # [n, H]
    both = torch.cat(
        [norm(embedded, "pre_fc_norm_embedding"), norm(hidden.float(), "pre_fc_norm_hidden")], -1
    )
    x = (both @ weights["mtp.fc.weight"].T)[None]  # [1, n, H]
    n = len(tokens)
    positions = torch.arange(n)[None]  # [1, n]
    rotary = qwen.Qwen3_5MoeTextRotaryEmbedding(config)(x, positions[None].expand(3, 1, n))
    causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        out = norm(
            layer(x, position_embeddings=rotary, attention_mask=causal, position_ids=positions)[0], "norm"
        )
    return out @ weights["lm_head.weight"].T, out
