"""GGUF files made from a parent GGUF: its metadata (tokenizer, chat template, hyperparameters)
copied, its tensors replaced.

- `write_draft_gguf`: a draft cut from the parent (`specmoe.zoo.smollm2_draft`) for llama.cpp: the
  parent's quantized embedding table as is, the draft's layers from its transformers checkpoint in
  Q8_0, q/k rows put back in llama.cpp's order (`rope_permute`).
- `dequantized_gguf`: the parent with every tensor dequantized to f32. llama.cpp runs it with f32
  matmuls, so it computes what the transformers copy computes (to ~1e-5 in the logits); set beside
  the quantized file it separates the weights' rounding from llama.cpp's quantized arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

_LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_COPIED_TENSORS = ("token_embd.weight",)  # the target's own quantized embedding table


def rope_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """q/k rows reordered from transformers' rotate-half layout to llama.cpp's llama layout (as
    llama.cpp's converter does): within each head, the two halves are interleaved. [out, in]."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_draft_gguf(parent: Path, draft_dir: Path, out: Path) -> Path:
    """The draft as a GGUF file: the parent's metadata (tokenizer, chat template, hyperparameters)
    with the draft's block count, the parent's embedding table as is, the draft's layers in Q8_0."""
    import gguf
    from gguf.quants import quantize
    from safetensors import safe_open

    reader = gguf.GGUFReader(parent)
    arch = reader.get_field("general.architecture").contents()
    config = json.loads((draft_dir / "config.json").read_text(encoding="utf-8"))
    changed = {
        f"{arch}.block_count": int(config["num_hidden_layers"]),
        "general.name": "SmolLM2-135M-Instruct draft",
        "general.file_type": int(gguf.LlamaFileType.MOSTLY_Q8_0),
    }
    partial = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch)
    copy_metadata(reader, writer, changed)
    for tensor in reader.tensors:
        if tensor.name in _COPIED_TENSORS:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    with safe_open(str(draft_dir / "model.safetensors"), "pt") as weights:
        writer.add_tensor("output_norm.weight", weights.get_tensor("model.norm.weight").float().numpy())
        for i in range(int(config["num_hidden_layers"])):
            for suffix, name in _LAYER_TENSORS.items():
                array = weights.get_tensor(f"model.layers.{i}.{suffix}").float().numpy()
                if suffix.startswith("self_attn.q_proj"):
                    array = rope_permute(array, heads)
                elif suffix.startswith("self_attn.k_proj"):
                    array = rope_permute(array, kv_heads)
                if array.ndim == 1:
                    writer.add_tensor(f"blk.{i}.{name}", array)
                else:
                    q8 = gguf.GGMLQuantizationType.Q8_0
                    writer.add_tensor(f"blk.{i}.{name}", quantize(array, q8), raw_dtype=q8)
    return _finish(writer, partial, out)


def copy_metadata(reader, writer, changed: dict) -> None:
    """Every key-value pair of the parent except GGUF's own header fields, with `changed` applied."""
    import gguf

    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # written by the writer itself
        kind = field.types[0]
        value = changed.get(name, field.contents())
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, kind, sub_type=sub)


def dequantized_gguf(parent: Path, out: Path) -> Path:
    """The parent with every tensor dequantized to f32 (same names, same order, same metadata)."""
    import gguf

    reader = gguf.GGUFReader(parent)
    arch = reader.get_field("general.architecture").contents()
    partial = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch)
    copy_metadata(reader, writer, {"general.file_type": int(gguf.LlamaFileType.ALL_F32)})
    for tensor in reader.tensors:
        array = gguf.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, array.reshape([int(n) for n in reversed(tensor.shape.tolist())]))
    return _finish(writer, partial, out)


def _finish(writer, partial: Path, out: Path) -> Path:
    """Write the file under its partial name, then rename it: a reader never sees half a GGUF."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(out)
    return out
