"""An offline, deterministic model zoo in Hugging Face format.

One preset (`tiny` for tests, `bench` for measurements) is a family of six Qwen3-architecture
models sharing one locally trained tokenizer: an MoE target (`moe`), two dense targets (`dense-s`,
`dense-l`) and three drafts (`draft-s`, `draft-xs`, and `draft-moe`, draft-s's sparse twin),
sized as a scaled-down Qwen3.5-35B-A3B family.
Weights are random but routing-aware (see `specmoe.zoo.init` and docs/zoo.md).

Modules: presets (shapes), params (counting), tokenizer, init, build (writing), preset_build (which
builder makes which preset, real-weight ones included), manifest (reading, listing, name resolution),
routing (distinct-expert statistics); train (the `trained` preset's weights, see its docstring for
its own modules) and agreement (greedy acceptance per prompt kind).

Real weights: smollm2 (SmolLM2-135M-Instruct fetched from the package registry, converted for
transformers), smollm2_draft (the `smollm2-draft` preset: a draft cut from it and distilled, from
chat_requests and chat_transcripts, resumable through checkpoint) and gguf_derive (GGUF files made
from its GGUF: the draft's twin, a dequantized copy).

Around them: hf_config (a shape as a transformers config), files (writing and fingerprinting),
cache (the per-user cache), hub_cache (hub IDs found locally, never downloaded), gguf and
gguf_quantize (GGUF exports, K-quants through llama.cpp), synthetic (the generated training text),
distill, train_data, train_loop and train_experts (the trained preset's training, see `train`);
train_heads (an MTP module and an EAGLE-3 head distilled from the frozen target) and heads (a
family's head drafters on disk and in its manifest); gguf_names, gguf_hybrid and gguf_mtp (what
every GGUF export shares; hybrid gated-DeltaNet targets; a hybrid target's MTP layer).

Any Hugging Face config as a random-weight model: config_source (read, checked, overridden),
config_init (routing-aware weights by tensor role) and config_build (built on its device).
"""

from specmoe.zoo.build import build_zoo, zoo_model
from specmoe.zoo.manifest import format_zoo_table, load_manifest, resolve_model, zoo_rows
from specmoe.zoo.params import ParamCount, count_params
from specmoe.zoo.presets import PRESETS, ModelShape, ZooPreset, get_preset
from specmoe.zoo.tokenizer import EOS_TOKEN, EOS_TOKEN_ID

__all__ = [
    "EOS_TOKEN",
    "EOS_TOKEN_ID",
    "PRESETS",
    "ModelShape",
    "ParamCount",
    "ZooPreset",
    "build_zoo",
    "count_params",
    "format_zoo_table",
    "get_preset",
    "load_manifest",
    "resolve_model",
    "zoo_model",
    "zoo_rows",
]
