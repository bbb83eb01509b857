"""GGUF export of a hybrid target's multi-token-prediction (MTP) layer, as llama.cpp's qwen35,
qwen35moe and qwen3next loaders read it.

Shape legend: H hidden size, L the trunk's decoder layers, n its MTP layers.

Qwen3.5 / Qwen3-Next checkpoints keep the MTP module beside the trunk under `mtp.*` (transformers
ignores it on load): `fc` [H, 2H] over the concatenation [embedding of the next token, hidden
state], the zero-centred norms `pre_fc_norm_embedding` and `pre_fc_norm_hidden` applied before it,
`layers.0.*` (a full-attention decoder layer with the target's MLP, routed experts included) and
`norm`, the MTP's final norm; the embedding table and LM head are the target's. The config says
how many (`mtp_num_hidden_layers`).

llama.cpp stores the MTP layer as one more block after the trunk, as its converter does: the file's
`block_count` is L + n, `{arch}.nextn_predict_layers` is n (llama.cpp's trunk is then block_count
- n layers, and only an MTP context runs the last n), and the `recurrent_layers` flags say False for
the MTP block. Block L holds the decoder layer under the trunk's names and the MTP's own tensors
under `nextn.*`:

    mtp.fc.weight                     -> blk.L.nextn.eh_proj.weight           (as is: [H, 2H])
    mtp.pre_fc_norm_embedding.weight  -> blk.L.nextn.enorm.weight             (+1, zero-centred)
    mtp.pre_fc_norm_hidden.weight     -> blk.L.nextn.hnorm.weight             (+1)
    mtp.norm.weight                   -> blk.L.nextn.shared_head_norm.weight  (+1)
    mtp.layers.0.<suffix>             -> blk.L.<the trunk's name for suffix>  (the trunk's rules)

llama.cpp's qwen35moe MTP graph asserts a single MTP layer, so n > 1 is refused here in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import numpy as np

from specmoe.errors import SpecmoeError
from specmoe.zoo.gguf_names import EXPERT_TENSORS

PREFIX = "mtp."
# HF name after "mtp." -> GGUF name after "blk.{L}.nextn."; every one is needed by llama.cpp's graph
_NEXTN_TENSORS = {
    "fc.weight": "eh_proj.weight",
    "pre_fc_norm_embedding.weight": "enorm.weight",
    "pre_fc_norm_hidden.weight": "hnorm.weight",
    "norm.weight": "shared_head_norm.weight",
}
_LAYERS_MAX = 1  # what llama.cpp's Qwen3.5 MTP graphs run


def mtp_layer_count(config: dict, keys: Collection[str], weights: Path) -> int:
    """n, the checkpoint's MTP layers (0 without any), refused in one line when its config and its
    tensors disagree or llama.cpp cannot run them."""
    layers = sorted({int(k.split(".")[2]) for k in keys if k.startswith(PREFIX + "layers.")})
    found = layers[-1] + 1 if layers else 0
    declared = int(config.get("mtp_num_hidden_layers") or 0)
    has_any = any(k.startswith(PREFIX) for k in keys)
    if not declared and not has_any:
        return 0
    count = declared or found
    if found != count or layers != list(range(found)):
        raise SpecmoeError(
            f"'{weights}' holds MTP layers {layers} but its config says mtp_num_hidden_layers = {declared}; "
            "restore the checkpoint's mtp.* tensors or its config.json"
        )
    missing = [PREFIX + k for k in _NEXTN_TENSORS if PREFIX + k not in keys]
    if missing:
        raise SpecmoeError(
            f"'{weights}' lacks the MTP tensor(s) {', '.join(missing)}; restore its mtp.* tensors"
        )
    if count > _LAYERS_MAX:
        raise SpecmoeError(
            f"'{weights}' has {count} MTP layers; llama.cpp's Qwen3.5 MTP graph runs {_LAYERS_MAX}: "
            "export a checkpoint with mtp_num_hidden_layers = 1"
        )
    return count


def check_mtp_shapes(keys: Collection[str], shape: Callable[[str], tuple[int, ...]], config: dict) -> None:
    """Refuse, in one line, an MTP tensor whose shape is not its trunk twin's (the decoder layer's,
    against the last full-attention layer's) or [H, 2H] / [H] for `fc` and the norms: llama.cpp
    would refuse the file, or read a truncated tensor as a different model."""
    hidden = int(config["hidden_size"])
    expected = {PREFIX + k: (hidden,) for k in _NEXTN_TENSORS}
    expected[PREFIX + "fc.weight"] = (hidden, 2 * hidden)
    attention = [i for i, t in enumerate(config["layer_types"]) if t == "full_attention"]
    twin = f"model.layers.{attention[-1]}." if attention else None
    for key in sorted(k for k in keys if k.startswith(PREFIX)):
        if key in expected:
            want = expected[key]
        elif twin is not None and (twin + _layer_suffix(key)) in keys:
            want = shape(twin + _layer_suffix(key))
        else:
            continue  # not a trunk name: `unmapped` names it
        if tuple(shape(key)) != tuple(want):
            raise SpecmoeError(
                f"MTP tensor '{key}' has shape {list(shape(key))}, not {list(want)}; the checkpoint is "
                "truncated or not this model's: restore it"
            )


def mtp_tensors(
    keys: Collection[str],
    read: Callable[[str], np.ndarray],
    block: int,
    layer_tensor: Callable[[str, np.ndarray], tuple[str, np.ndarray] | None],
    experts: Callable[[int, str], Iterator[tuple[str, np.ndarray]]],
) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array) of the MTP layer written as block `block` (= L).

    layer_tensor(suffix, array) gives the trunk's (GGUF name after "blk.{i}.", converted array) of a
    decoder-layer tensor, or None for a suffix the trunk does not map; experts(block, prefix) stacks
    the routed experts found under prefix."""
    for suffix, name in _NEXTN_TENSORS.items():
        array = read(PREFIX + suffix)
        yield f"blk.{block}.nextn.{name}", array if suffix == "fc.weight" else array + np.float32(1)
    prefix = PREFIX + "layers.0."
    for key in sorted(k for k in keys if k.startswith(prefix) and ".mlp.experts." not in k):
        mapped = layer_tensor(key[len(prefix) :], read(key))
        if mapped is not None:
            yield f"blk.{block}.{mapped[0]}", mapped[1]
    yield from experts(block, prefix)


def unmapped(keys: Collection[str], layer_names: Collection[str]) -> list[str]:
    """The MTP tensors no GGUF name is given (the export refuses them, as it does trunk tensors)."""
    known = {PREFIX + k for k in _NEXTN_TENSORS}
    return sorted(
        k
        for k in keys
        if k.startswith(PREFIX)
        and k not in known
        and not (k.startswith(PREFIX + "layers.0.") and (_layer_suffix(k) in layer_names or _expert(k)))
    )


def _expert(key: str) -> bool:
    """One routed expert's projection, as the trunk stores them (`mlp.experts.{e}.gate_proj.weight`);
    a fused layout (`mlp.experts.gate_up_proj`) is not one, so the export names it and stops."""
    parts = key.split(".")
    return (
        len(parts) == 8
        and parts[3:5] == ["mlp", "experts"]
        and parts[5].isdigit()
        and parts[6] in EXPERT_TENSORS
    )


def _layer_suffix(key: str) -> str:
    """`mtp.layers.0.self_attn.q_proj.weight` -> `self_attn.q_proj.weight`."""
    return key.split(".", 3)[3] if key.startswith(PREFIX + "layers.") else key
