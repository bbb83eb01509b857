"""Copies of a model directory with one fault each, as an interrupted copy or a wrong file makes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def broken_models(source: Path, folder: Path) -> dict[str, Path]:
    """{"missing", "extra", "truncated", "shapes"}: a copy of `source` missing its final norm
    tensor, holding a tensor the model has no place for, with its weights file cut in half, and
    with a config.json whose intermediate_size disagrees with the weights."""
    from safetensors.torch import load_file, save_file

    def copy(name: str) -> Path:
        out = folder / name
        shutil.copytree(source, out)
        return out

    missing = copy("missing-tensor")
    tensors = load_file(missing / "model.safetensors")
    del tensors["model.norm.weight"]
    save_file(tensors, missing / "model.safetensors", metadata={"format": "pt"})
    extra = copy("extra-tensor")
    tensors = load_file(extra / "model.safetensors")
    tensors["model.unused.weight"] = tensors["model.norm.weight"].clone()
    save_file(tensors, extra / "model.safetensors", metadata={"format": "pt"})
    truncated = copy("truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    shapes = copy("shape-mismatch")
    config = json.loads((shapes / "config.json").read_text())
    config["intermediate_size"] *= 2
    (shapes / "config.json").write_text(json.dumps(config))
    return {"missing": missing, "extra": extra, "truncated": truncated, "shapes": shapes}
