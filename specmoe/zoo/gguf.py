"""Export zoo models to GGUF, the file format llama.cpp runs, with the `gguf` package.

A zoo model is a Hugging Face directory (config.json, model.safetensors in bf16, tokenizer.json).
Its GGUF twin uses the architectures llama.cpp ships for these shapes: `qwen3` for the dense models
and `qwen3moe` for the MoE ones; the hybrid zoo's Qwen3.5 models become `qwen35` and `qwen35moe`
(`specmoe.zoo.gguf_hybrid` says what their layout changes). The tensor names and layouts are those
of llama.cpp's own converter (convert_hf_to_gguf.py): per-expert matrices stacked into one
[E, rows, cols] tensor per projection, norms and the router kept in f32, no RoPE permutation (Qwen3
uses NeoX-style rotary in both runtimes).

Weight types (`GGUF_TYPES`):
    f32   the bf16 checkpoint widened, bit for bit: the reference when comparing runtimes;
    f16   bf16 values rounded to f16 (exact for all but values below f16's range, ~6e-8);
    bf16  the checkpoint's own bits;
    q8_0  llama.cpp's 8-bit blocks of 32 (the study's Q8_0); rows not divisible by 32 stay f16;
    q4_k_m  llama.cpp's Q4_K_M recipe (the study's Q4), made by llama.cpp's own quantiser from an
          f32 export (`specmoe.zoo.gguf_quantize`, which says what happens to rows k-quants cannot
          hold); the type each tensor got is kept beside the file as `<file>.types.json`.

The tokenizer is written as a GPT-2 style byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with
llama.cpp's `qwen2` pre-tokenizer, whose split regex is the zoo tokenizer's own (checked on export).

Zoo exports are cached beside the zoo (`<zoo>/gguf/<model>-<type>.gguf`) and redone when the
source checkpoint's sha256 or this exporter's version changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from specmoe.errors import SpecmoeError
from specmoe.extras import require
from specmoe.zoo.files import sha256_file
from specmoe.zoo.gguf_hybrid import (
    HYBRID_ARCHITECTURES,
    KEEP_F32,
    add_hybrid_hparams,
    hybrid_mtp_layers,
    hybrid_tensors,
)
from specmoe.zoo.gguf_names import GLOBAL_TENSORS, refuse_unmapped, stacked_experts

GGUF_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k_m")
DEFAULT_GGUF_TYPE = "f16"
EXPORT_VERSION = 1  # bump when the written file changes for the same checkpoint
GGUF_DIR = "gguf"  # inside a zoo directory
_SOURCE_KEY = "specmoe.source_sha256"
_VERSION_KEY = "specmoe.export_version"
_WEIGHTS = "model.safetensors"
_Q8_BLOCK = 32

# The split regex llama.cpp's `qwen2` pre-tokenizer implements (llama-vocab.cpp quotes it as the
# original tokenizer.json pattern); a tokenizer exported under that name must split the same way.
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# transformers model_type -> llama.cpp architecture
_ARCHITECTURES = {"qwen3": "qwen3", "qwen3_moe": "qwen3moe", **HYBRID_ARCHITECTURES}

# Per-layer tensors: HF name after "model.layers.{i}." -> GGUF name after "blk.{i}."
_LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",  # the MoE router
}
_KEEP_F32 = ("_norm.weight", "ffn_gate_inp.weight", *KEEP_F32)  # as llama.cpp's converter does


def export_gguf(
    model_dir: Path, out_path: Path, gguf_type: str = DEFAULT_GGUF_TYPE, source_sha256: str | None = None
) -> Path:
    """Write the HF model in model_dir as one GGUF file at out_path (atomically); return out_path.

    source_sha256 is the checkpoint's sha256 when the caller knows it (a zoo manifest does); it is
    stored in the file so a cached export can be checked without rereading the checkpoint.
    """
    import gguf

    from specmoe.zoo.gguf_quantize import KQUANT_TYPES, quantize_gguf

    model_dir, out_path = Path(model_dir), Path(out_path)
    _check_type(gguf_type)
    if gguf_type in KQUANT_TYPES:  # gguf-py has no k-quant encoder: llama.cpp quantises an f32 export
        source = out_path.with_name(out_path.name + ".f32.partial")
        try:
            export_gguf(model_dir, source, "f32", source_sha256)
            return quantize_gguf(source, out_path, gguf_type)
        finally:
            source.unlink(missing_ok=True)
    config = _read_json(model_dir / "config.json")
    arch = _architecture(config, model_dir)
    tokenizer = _read_json(model_dir / "tokenizer.json")
    weights = model_dir / _WEIGHTS
    if not weights.is_file():
        raise SpecmoeError(f"'{model_dir}' has no {_WEIGHTS}; export zoo models or single-file checkpoints")
    hybrid = config["model_type"] in HYBRID_ARCHITECTURES
    mtp_layers = hybrid_mtp_layers(weights, config) if hybrid else 0  # checked before a file is made
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch)
    _add_hparams(writer, arch, config, model_dir.name, gguf_type, mtp_layers)
    _add_tokenizer(writer, tokenizer, config, model_dir)
    writer.add_string(_SOURCE_KEY, source_sha256 or sha256_file(weights))
    writer.add_uint32(_VERSION_KEY, EXPORT_VERSION)
    if hybrid:
        add_hybrid_hparams(writer, arch, config, model_dir, mtp_layers)
    layers = int(config["num_hidden_layers"])
    tensors = hybrid_tensors(weights, config, mtp_layers) if hybrid else _gguf_tensors(weights, layers)
    for name, tensor in tensors:
        data, raw_type = _encode(name, tensor, gguf_type)
        writer.add_tensor(name, data, raw_dtype=raw_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(partial, out_path)
    return out_path


def zoo_gguf_path(zoo_dir: Path, model: str, gguf_type: str = DEFAULT_GGUF_TYPE) -> Path:
    """Where the zoo keeps the GGUF export of one model."""
    return Path(zoo_dir) / GGUF_DIR / f"{model}-{gguf_type}.gguf"


def zoo_gguf(zoo_dir: Path, model: str, gguf_type: str = DEFAULT_GGUF_TYPE) -> Path:
    """The GGUF file of a zoo model, exported now unless an up-to-date export exists."""
    from specmoe.zoo.manifest import load_manifest

    _check_type(gguf_type)
    models = load_manifest(zoo_dir)["models"]
    if model not in models:
        raise SpecmoeError(f"the zoo at {zoo_dir} has no model '{model}'; it has {', '.join(models)}")
    model_dir = Path(zoo_dir) / models[model]["path"]
    source = models[model]["safetensors_sha256"]
    out = zoo_gguf_path(zoo_dir, model, gguf_type)
    if out.is_file() and _is_current(out, source):
        return out
    return export_gguf(model_dir, out, gguf_type, source_sha256=source)


def export_zoo(
    zoo_dir: Path,
    gguf_type: str = DEFAULT_GGUF_TYPE,
    models: Iterable[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Export the named models of a built zoo (all of them by default); return the GGUF paths."""
    from specmoe.zoo.gguf_quantize import KQUANT_TYPES
    from specmoe.zoo.manifest import load_manifest

    _check_type(gguf_type)
    # The gguf package writes every file; llama.cpp itself quantizes the K-quant recipes.
    modules = ("gguf", "llama_cpp") if gguf_type in KQUANT_TYPES else ("gguf",)
    require("llamacpp", f"`specmoe zoo export-gguf --type {gguf_type}`", modules=modules)
    names = list(models) if models else list(load_manifest(zoo_dir)["models"])
    paths = []
    for name in names:
        if progress is not None:
            progress(f"exporting {name} as {gguf_type}")
        paths.append(zoo_gguf(zoo_dir, name, gguf_type))
    return paths


# --- metadata ------------------------------------------------------------------------------------


def _check_type(gguf_type: str) -> None:
    if gguf_type not in GGUF_TYPES:
        raise SpecmoeError(f"unknown GGUF type '{gguf_type}'; use one of {', '.join(GGUF_TYPES)}")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise SpecmoeError(f"'{path}' not found; GGUF export needs a model directory with {path.name}")
    return json.loads(path.read_text(encoding="utf-8"))


def _architecture(config: dict, model_dir: Path) -> str:
    model_type = config.get("model_type")
    if model_type not in _ARCHITECTURES:
        raise SpecmoeError(
            f"'{model_dir}' is a {model_type!r} model; GGUF export supports "
            f"{', '.join(_ARCHITECTURES)} (the zoo's architectures)"
        )
    if model_type == "qwen3_moe" and not config.get("norm_topk_prob", False):
        raise SpecmoeError(
            f"'{model_dir}' does not renormalise its top-k expert weights (norm_topk_prob = false); "
            "llama.cpp's qwen3moe always does, so the GGUF would compute a different model"
        )
    return _ARCHITECTURES[model_type]


def _file_type(gguf_type: str) -> int:
    import gguf

    return {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "bf16": gguf.LlamaFileType.MOSTLY_BF16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }[gguf_type]


def _add_hparams(writer, arch: str, config: dict, name: str, gguf_type: str, mtp_layers: int = 0) -> None:
    """The transformer's keys; the block count includes the MTP layers after the trunk (`gguf_mtp`)."""
    import gguf

    rope = config.get("rope_parameters") or {}
    head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    writer.add_name(name)
    writer.add_file_type(_file_type(gguf_type))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]) + mtp_layers)
    if "intermediate_size" in config:  # an MoE without dense layers has none
        writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config["num_key_value_heads"]))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10_000.0))))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    if arch == "qwen3moe":
        # transformers 5 saves the expert count as num_local_experts; older files say num_experts.
        experts = config.get("num_experts") or config["num_local_experts"]
        writer.add_expert_count(int(experts))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))


def _add_tokenizer(writer, tokenizer: dict, config: dict, model_dir: Path) -> None:
    import gguf

    model = tokenizer.get("model", {})
    if model.get("type") != "BPE" or _split_pattern(tokenizer) != QWEN2_SPLIT_PATTERN:
        raise SpecmoeError(
            f"'{model_dir}/tokenizer.json' is not a byte-level BPE with the Qwen2 split pattern; "
            "GGUF export writes llama.cpp's qwen2 pre-tokenizer and would tokenize differently"
        )
    vocab: dict[str, int] = model["vocab"]
    special = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    tokens = {**vocab, **special}
    by_id = sorted(tokens.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise SpecmoeError(f"'{model_dir}/tokenizer.json' has gaps in its token ids; GGUF needs 0..n-1")
    width = int(config["vocab_size"])
    if len(by_id) != width:
        raise SpecmoeError(
            f"'{model_dir}': tokenizer has {len(by_id)} tokens but the model's vocab_size is {width}"
        )
    special_ids = set(special.values())
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([text for text, _ in by_id])
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in special_ids else gguf.TokenType.NORMAL for _, i in by_id]
    )
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model["merges"]])
    eos = config.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0]
    if eos is not None:
        writer.add_eos_token_id(int(eos))
    pad = config.get("pad_token_id")
    if pad is not None:
        writer.add_pad_token_id(int(pad))
    writer.add_add_bos_token(config.get("bos_token_id") is not None)
    writer.add_add_eos_token(False)
    if config.get("bos_token_id") is not None:
        writer.add_bos_token_id(int(config["bos_token_id"]))


def _split_pattern(tokenizer: dict) -> str | None:
    """The regex of the tokenizer's Split pre-tokenizer, when it is Split then ByteLevel (no regex)."""
    pre = tokenizer.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if len(steps) != 2 or steps[0].get("type") != "Split" or steps[1].get("type") != "ByteLevel":
        return None
    if steps[1].get("use_regex", True):
        return None
    return steps[0].get("pattern", {}).get("Regex")


# --- tensors -------------------------------------------------------------------------------------


def _gguf_tensors(weights: Path, layers: int) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array in HF [out, in] order) for every tensor; experts stacked [E, out, in]."""
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as f:
        keys = set(f.keys())

        def read(key: str) -> np.ndarray:
            return f.get_tensor(key).float().numpy()

        for key, name in GLOBAL_TENSORS.items():
            if key in keys:
                yield name, read(key)
        for i in range(layers):
            prefix = f"model.layers.{i}."
            for suffix, name in _LAYER_TENSORS.items():
                if prefix + suffix in keys:
                    yield f"blk.{i}.{name}", read(prefix + suffix)
            yield from stacked_experts(i, keys, read)
    refuse_unmapped(weights, keys, _LAYER_TENSORS)


def _encode(name: str, tensor: np.ndarray, gguf_type: str):
    """(array to write, raw GGML type or None) for one tensor in the requested weight type."""
    import gguf
    from gguf.quants import quantize

    if gguf_type == "f32" or tensor.ndim == 1 or name.endswith(_KEEP_F32):
        return tensor.astype(np.float32), None
    if gguf_type == "bf16":
        return quantize(tensor, gguf.GGMLQuantizationType.BF16), gguf.GGMLQuantizationType.BF16
    if gguf_type == "q8_0" and tensor.shape[-1] % _Q8_BLOCK == 0:
        return quantize(tensor, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    return tensor.astype(np.float16), None


# --- cache freshness -----------------------------------------------------------------------------


def _is_current(gguf_path: Path, source_sha256: str) -> bool:
    """Whether gguf_path was exported from the checkpoint with this sha256 by this exporter version."""
    import gguf

    try:
        reader = gguf.GGUFReader(gguf_path)
    except (ValueError, OSError):
        return False
    source, version = reader.get_field(_SOURCE_KEY), reader.get_field(_VERSION_KEY)
    if source is None or version is None:
        return False
    return version.contents() == EXPORT_VERSION and source.contents() == source_sha256


__all__ = [
    "DEFAULT_GGUF_TYPE",
    "GGUF_TYPES",
    "QWEN2_SPLIT_PATTERN",
    "export_gguf",
    "export_zoo",
    "zoo_gguf",
    "zoo_gguf_path",
]
