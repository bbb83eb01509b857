"""What every GGUF export of a transformers checkpoint shares: the global and expert tensor names,
the experts stacked into one tensor per projection, and the check that no tensor was left unmapped.
The per-layer names differ by architecture (`specmoe.zoo.gguf`, `specmoe.zoo.gguf_hybrid`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import numpy as np

from specmoe.errors import SpecmoeError

EXPERT_TENSORS = {
    "gate_proj": "ffn_gate_exps.weight",
    "up_proj": "ffn_up_exps.weight",
    "down_proj": "ffn_down_exps.weight",
}
GLOBAL_TENSORS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def stacked_experts(
    layer: int, keys: Collection[str], read: Callable[[str], np.ndarray], prefix: str | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """A layer's routed experts, one [E, out, in] tensor per projection (none for a dense layer),
    written as block `layer`; prefix: where the checkpoint keeps them (default model.layers.{layer}.)."""
    prefix = prefix or f"model.layers.{layer}."
    experts = sorted(
        {int(k[len(prefix) :].split(".")[2]) for k in keys if k.startswith(prefix + "mlp.experts.")}
    )
    if not experts:
        return
    for proj, name in EXPERT_TENSORS.items():
        parts = [read(f"{prefix}mlp.experts.{e}.{proj}.weight") for e in experts]
        yield f"blk.{layer}.{name}", np.stack(parts)


def refuse_unmapped(
    weights: Path, keys: Collection[str], layer_tensors: Collection[str], also: Collection[str] = ()
) -> None:
    """One line naming the first tensors no GGUF name was given: an export never drops weights.
    also: further unmapped tensors the caller found (the MTP layer's, `gguf_mtp.unmapped`)."""
    unknown = sorted({*(k for k in keys if not _known(k, layer_tensors)), *also})
    if unknown:
        raise SpecmoeError(f"'{weights}' holds tensors GGUF export does not map: {', '.join(unknown[:3])}")


def _known(key: str, layer_tensors: Collection[str]) -> bool:
    if key in GLOBAL_TENSORS:
        return True
    parts = key.split(".")
    if len(parts) < 4 or parts[:2] != ["model", "layers"]:
        return False
    rest = ".".join(parts[3:])
    return rest in layer_tensors or (rest.startswith("mlp.experts.") and parts[-2] in EXPERT_TENSORS)
