"""GGUF export of hybrid models (gated-DeltaNet linear attention beside full attention): Qwen3.5
as llama.cpp's `qwen35` (dense) and `qwen35moe` (routed experts and a shared expert), the hybrid
zoo's architectures, and Qwen3-Next as `qwen3next`.

Shape legend: H hidden size, Hk / Hv linear-attention key / value heads, D their head size
(llama.cpp needs the key and value head sizes equal), r = Hv / Hk value heads per key head,
C = 2 Hk D + Hv D conv channels (q, k, v), K conv kernel, E experts.

What differs from transformers' layout, and why (llama.cpp's graph expects it):

- *Value heads tiled, not grouped.* transformers lets value head j read key head j // r (keys
  repeated with `repeat_interleave`); llama.cpp broadcasts keys over value heads, so value head j
  reads key head j % Hk. Every tensor indexed by value head is therefore reordered from grouped
  [k0v0, k0v1, k1v0, k1v1] to tiled [k0v0, k1v0, k0v1, k1v1] order: the v rows of the q/k/v
  projection and of the conv kernel, the z (output gate) rows, the β and decay-input rows, the
  per-head decay and time-step bias, and the out projection's columns. The state llama.cpp keeps
  is then tiled too, which nothing outside it sees.
- *Decay stored as used.* `A_log` becomes `ssm_a = -exp(A_log)` (float32), `dt_bias` is named
  `ssm_dt.bias`, the conv kernel [C, 1, K] loses its middle axis.
- *Zero-centred norms.* Qwen3.5's RMS norms scale by (1 + weight); llama.cpp's scale by weight,
  so 1 is added to every norm but the linear layers' gated norm, which scales by weight itself.
- *Rotary.* Qwen3.5 rotates the first `partial_rotary_factor` of each head (NeoX halves) with
  interleaved multimodal RoPE. A text token has the same position in the time, height and width
  sections, so every split of the rotary pairs among those three gives plain RoPE; llama.cpp
  requires a split and gives a pair outside them position 0, so the pairs are split three ways as
  evenly as possible (Qwen3.5's own [11, 11, 10] for its 32 pairs, [1, 1, 0] for the zoo's 2).
- The full-attention layers' q projection holds each head's query and output gate side by side
  ([Hq, 2, D] rows), as llama.cpp reads it: no reordering. The MoE router and shared-expert gate
  stay float32, as do the conv kernel, norms and 1-D tensors.

Qwen3-Next differs from Qwen3.5 where llama.cpp's `qwen3next` graph differs from `qwen35`'s: its
value heads stay grouped (the graph repeats keys as transformers does), its RoPE is plain (no
sections), and transformers fuses its linear-layer projections per key head ([q, k, v, z] rows of
`in_proj_qkvz`, [β, a] rows of `in_proj_ba`): q/k/v are regrouped into [all q, all k, all v]
(`attn_qkv`, the conv's channel order) with z apart (`attn_gate`), while `in_proj_ba` is read as
it is (`ssm_ba`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from specmoe.errors import SpecmoeError
from specmoe.zoo.gguf_mtp import PREFIX as MTP_PREFIX
from specmoe.zoo.gguf_mtp import check_mtp_shapes, mtp_layer_count, mtp_tensors, unmapped
from specmoe.zoo.gguf_names import GLOBAL_TENSORS, refuse_unmapped, stacked_experts

# transformers model_type -> llama.cpp architecture
HYBRID_ARCHITECTURES = {"qwen3_5_text": "qwen35", "qwen3_5_moe_text": "qwen35moe", "qwen3_next": "qwen3next"}
_TILED = ("qwen35", "qwen35moe")  # llama.cpp graphs that broadcast keys over tiled value heads
_MOE = ("qwen35moe", "qwen3next")
KEEP_F32 = ("ffn_gate_inp_shexp.weight", "ssm_conv1d.weight")  # besides norms, router, 1-D tensors

# HF name after "model.layers.{i}." -> GGUF name after "blk.{i}."
_LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkvz.weight": "attn_qkv.weight",  # and attn_gate.weight (Qwen3-Next)
    "linear_attn.in_proj_ba.weight": "ssm_ba.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
_ZERO_CENTRED = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "q_norm.weight",
    "k_norm.weight",
)


def linear_heads(config: dict, model_dir: Path) -> tuple[int, int, int]:
    """(Hk, Hv, D) of the linear layers, refused in one line where llama.cpp cannot hold them."""
    k_heads, v_heads = int(config["linear_num_key_heads"]), int(config["linear_num_value_heads"])
    k_dim, v_dim = int(config["linear_key_head_dim"]), int(config["linear_value_head_dim"])
    if k_dim != v_dim or v_heads % k_heads:
        raise SpecmoeError(
            f"'{model_dir}' has linear-attention key heads {k_heads} x {k_dim} and value heads {v_heads} x "
            f"{v_dim}; llama.cpp's qwen35 needs equal head sizes and value heads a multiple of key heads"
        )
    return k_heads, v_heads, k_dim


def hybrid_mtp_layers(weights: Path, config: dict) -> int:
    """The checkpoint's MTP layers (0 without any), checked (`gguf_mtp`) before anything is written."""
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as f:
        keys = set(f.keys())
        count = mtp_layer_count(config, keys, weights)
        if count:
            check_mtp_shapes(keys, lambda key: tuple(f.get_slice(key).get_shape()), config)
            refuse_unmapped(weights, (), _LAYER_TENSORS, also=unmapped(keys, _LAYER_TENSORS))
    return count


def add_hybrid_hparams(writer, arch: str, config: dict, model_dir: Path, mtp_layers: int = 0) -> None:
    """The keys llama.cpp's qwen35 / qwen35moe / qwen3next loaders read beyond the transformer's;
    mtp_layers: the MTP blocks written after the trunk (`gguf_mtp`)."""
    k_heads, v_heads, head = linear_heads(config, model_dir)
    if arch == "qwen3next" and (config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1):
        raise SpecmoeError(
            f"'{model_dir}' has dense layers among its MoE ones; llama.cpp's qwen3next has none"
        )
    if arch in _MOE and not config.get("norm_topk_prob", True):
        raise SpecmoeError(
            f"'{model_dir}' does not renormalise its top-k expert weights (norm_topk_prob = false); "
            f"llama.cpp's {arch} always does, so the GGUF would compute a different model"
        )
    rope = config.get("rope_parameters") or {}
    head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    rotary = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))
    writer.add_rope_dimension_count(rotary)
    if arch in _TILED:
        writer.add_rope_dimension_sections(rope_sections(rotary // 2))
    writer.add_ssm_conv_kernel(int(config["linear_conv_kernel_dim"]))
    writer.add_ssm_state_size(head)
    writer.add_ssm_group_count(k_heads)
    writer.add_ssm_time_step_rank(v_heads)
    writer.add_ssm_inner_size(head * v_heads)
    layer_types = config["layer_types"]
    recurrent = [t == "linear_attention" for t in layer_types] + [False] * mtp_layers
    writer.add_array(f"{arch}.attention.recurrent_layers", recurrent)
    if mtp_layers:
        writer.add_nextn_predict_layers(mtp_layers)
    if arch in _MOE:
        writer.add_expert_count(int(config["num_experts"]))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_feed_forward_length(int(config["shared_expert_intermediate_size"]))


def rope_sections(pairs: int) -> list[int]:
    """The rotary pairs split among time, height and width as evenly as possible, the larger parts
    first, and an empty fourth section: under llama.cpp's interleaved rule (pair p in section p % 3
    while p < 3 x that section's size) every pair then falls in one of the three."""
    return [pairs // 3 + (part < pairs % 3) for part in range(3)] + [0]


def tile_value_heads(array: np.ndarray, axis: int, k_heads: int, v_heads: int, width: int) -> np.ndarray:
    """Reorder the Hv * width entries along axis from grouped (value heads of key head 0 first) to
    tiled (value head 0 of every key head first) order."""
    moved = np.moveaxis(array, axis, 0)
    rest = moved.shape[1:]
    per_key = v_heads // k_heads
    tiled = moved.reshape(k_heads, per_key, width, *rest).swapaxes(0, 1).reshape(v_heads * width, *rest)
    return np.moveaxis(tiled, 0, axis)


def split_qkvz(array: np.ndarray, k_heads: int, v_heads: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """Qwen3-Next's fused projection [Hk (2 D + 2 r D), H], per key head [q, k, v, z], as
    (q/k/v rows [all q, all k, all v] [C, H], z rows [Hv D, H]); value heads stay grouped."""
    per_key = v_heads // k_heads * head
    groups = array.reshape(k_heads, 2 * head + 2 * per_key, -1)
    q, k, v, z = np.split(groups, np.cumsum([head, head, per_key]), axis=1)
    flat = [part.reshape(-1, array.shape[-1]) for part in (q, k, v, z)]
    return np.concatenate(flat[:3]), flat[3]


def _layer_tensor(suffix: str, array: np.ndarray, heads: tuple[int, int, int], tile: bool) -> np.ndarray:
    """One layer tensor in llama.cpp's form (see the module docstring)."""
    k_heads, v_heads, head = heads
    qk = 2 * k_heads * head  # q and k rows (or channels) before the value rows

    def tiled(a: np.ndarray, axis: int, width: int) -> np.ndarray:
        return tile_value_heads(a, axis, k_heads, v_heads, width) if tile else a

    if suffix.endswith(_ZERO_CENTRED):
        return array + np.float32(1)
    if suffix == "linear_attn.in_proj_qkv.weight":  # [C, H]
        return np.concatenate([array[:qk], tiled(array[qk:], 0, head)])
    if suffix == "linear_attn.conv1d.weight":  # [C, 1, K] -> [C, K]
        kernel = array[:, 0, :]
        return np.concatenate([kernel[:qk], tiled(kernel[qk:], 0, head)])
    if suffix == "linear_attn.in_proj_z.weight":  # [Hv D, H]
        return tiled(array, 0, head)
    if suffix in ("linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight", "linear_attn.dt_bias"):
        return tiled(array, 0, 1)  # [Hv, H] or [Hv]
    if suffix == "linear_attn.A_log":  # [Hv]; torch's exp, as transformers computes the decay
        return -torch.from_numpy(tiled(array, 0, 1)).exp().numpy()
    if suffix == "linear_attn.out_proj.weight":  # [H, Hv D]
        return tiled(array, 1, head)
    if suffix == "mlp.shared_expert_gate.weight":  # [1, H] -> [H]
        return array[0]
    return array


def hybrid_tensors(weights: Path, config: dict, mtp_layers: int = 0) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array in HF [out, in] order) of every tensor; experts stacked [E, out, in];
    the MTP layer, when mtp_layers is 1, as block num_hidden_layers (`gguf_mtp`)."""
    from safetensors import safe_open

    heads = linear_heads(config, weights.parent)
    tile = HYBRID_ARCHITECTURES[config["model_type"]] in _TILED
    with safe_open(str(weights), "pt") as f:
        keys = set(f.keys())

        def read(key: str) -> np.ndarray:
            return f.get_tensor(key).float().numpy()

        for key, name in GLOBAL_TENSORS.items():
            if key in keys:
                array = read(key)
                yield name, array + np.float32(1) if key == "model.norm.weight" else array
        for i in range(int(config["num_hidden_layers"])):
            prefix = f"model.layers.{i}."
            for suffix, name in _LAYER_TENSORS.items():
                if prefix + suffix not in keys:
                    continue
                if suffix == "linear_attn.in_proj_qkvz.weight":
                    qkv, z = split_qkvz(read(prefix + suffix), *heads)
                    yield f"blk.{i}.attn_qkv.weight", qkv
                    yield f"blk.{i}.attn_gate.weight", z
                else:
                    yield f"blk.{i}.{name}", _layer_tensor(suffix, read(prefix + suffix), heads, tile)
            yield from stacked_experts(i, keys, read)
        if mtp_layers:

            def layer_tensor(suffix: str, array: np.ndarray):
                name = _LAYER_TENSORS.get(suffix)
                return None if name is None else (name, _layer_tensor(suffix, array, heads, tile))

            def experts(block: int, prefix: str):
                return stacked_experts(block, keys, read, prefix)

            block = int(config["num_hidden_layers"])
            yield from mtp_tensors(keys, read, block, layer_tensor, experts)
    trunk = [k for k in keys if not k.startswith(MTP_PREFIX)]
    stray = unmapped(keys, _LAYER_TENSORS) if mtp_layers else [k for k in keys if k.startswith(MTP_PREFIX)]
    refuse_unmapped(weights, trunk, _LAYER_TENSORS, also=stray)
