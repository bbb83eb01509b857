"""Head drafters for the tests: a target's checkpoint with an MTP module added (`mtp.*`), and an
EAGLE-3 head directory, with random weights (seeded) or weights a test sets.

Random weights make a head that agrees with its target by chance only; `distilled` heads
(`tests/test_heads.py`'s fixtures) learn from the target the way the zoo's heads do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specmoe.backends.eagle3_head import Eagle3Model
from specmoe.backends.mtp_head import build_mtp_model, checkpoint_names
from specmoe.zoo.checkpoint import checkpoint_tensors

WEIGHTS = "model.safetensors"


def randomize(module: torch.nn.Module, seed: int, std: float = 0.3, skip: tuple[str, ...] = ()) -> None:
    """Every matrix of the module N(0, std) from a seeded generator, norms left as initialised."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.dim() > 1 and not name.startswith(skip):
                param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float64) * std)


def with_mtp(
    model, source: Path, out: Path, seed: int = 0, module=None, config_key: str = "mtp_num_hidden_layers"
) -> Path:
    """A copy of `source` (the checkpoint `model`, a transformers model, was loaded from) holding an
    MTP module too: `module` (an `MtpModel` for `model`) or a random one."""
    if module is None:
        module = build_mtp_model(model)
        randomize(module, seed, skip=("lm_head", "body.embed_tokens"))
    shutil.copytree(source, out)
    tensors = load_file(out / WEIGHTS)
    state = module.state_dict()
    for name, key in checkpoint_names(module).items():
        for saved, tensor in checkpoint_tensors(key, state[name].detach().to(torch.float32).cpu()):
            tensors[saved] = tensor.contiguous()
    save_file(tensors, out / WEIGHTS, metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    config[config_key] = 1
    (out / "config.json").write_text(json.dumps(config))
    return out


def eagle3_config(model, layers: list[int] | None, draft_vocab: int | None = None) -> dict:
    """An EAGLE-3 head's config.json for a transformers target model."""
    text = model.config.get_text_config()
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": text.hidden_size,
        "intermediate_size": 3 * text.hidden_size,
        "num_attention_heads": text.num_attention_heads,
        "num_key_value_heads": text.num_key_value_heads,
        "head_dim": text.head_dim,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-6,
        "vocab_size": int(model.get_output_embeddings().weight.shape[0]),
        "draft_vocab_size": draft_vocab or int(model.get_output_embeddings().weight.shape[0]),
        "max_position_embeddings": text.max_position_embeddings,
        "tie_word_embeddings": False,
    }
    if layers is not None:
        config["eagle_aux_hidden_state_layer_ids"] = layers
    return config


def eagle3_module(model, config: dict, own_embeddings: bool = False) -> Eagle3Model:
    from transformers import LlamaConfig

    llama = LlamaConfig.from_dict({k: v for k, v in config.items() if k != "architectures"})
    llama._attn_implementation = "sdpa"
    text = model.config.get_text_config()
    return Eagle3Model(llama, int(text.hidden_size), int(config["vocab_size"]), own_embeddings).to(
        torch.float64
    )


def eagle3_dir(model, out: Path, seed: int = 0, layers: list[int] | None = None, module=None,
               config: dict | None = None, draft_vocab: int | None = None) -> Path:  # fmt: skip
    """An EAGLE-3 head directory for `model`: `module` (an `Eagle3Model`) or a random one, whose
    draft vocabulary (`draft_vocab` tokens) is every other target token from 0."""
    config = config or eagle3_config(model, layers, draft_vocab)
    if module is None:
        module = eagle3_module(model, config)
        randomize(module, seed)
        drafted = torch.arange(module.lm_head.out_features) * (2 if draft_vocab else 1)
        module.d2t.copy_(drafted - torch.arange(len(drafted)))
        module.t2d.zero_()
        module.t2d[drafted] = True
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config))
    state = {k: v.detach().to(torch.float32 if v.is_floating_point() else v.dtype).contiguous()
             for k, v in module.state_dict().items()}  # fmt: skip
    save_file(state, out / WEIGHTS, metadata={"format": "pt"})
    return out


def small_hybrid_moe(path: Path, vocab: int = 8, seed: int = 0, std: float = 0.5) -> Path:
    """A random Qwen3.5-MoE hybrid (three gated-DeltaNet layers, one attention layer) over `vocab`
    tokens: small enough that a random head's proposals are often accepted and often not."""
    from hybrid_models import hybrid_config
    from transformers import AutoModelForCausalLM

    config = hybrid_config("qwen3_5_moe")
    config.vocab_size = vocab
    config.eos_token_id = config.pad_token_id = config.bos_token_id = None
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(std=std)
    model.save_pretrained(path)
    return path
