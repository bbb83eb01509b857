"""Pickle checkpoints (`pytorch_model.bin`), read only when the user passes --allow-pickle.

transformers reads a pickle checkpoint with torch's weights-only unpickler whatever `weights_only`
it is given (5.23 drops the flag on the way to `torch.load`), and that unpickler refuses anything
but tensors and a few containers: an older checkpoint that pickled a numpy scalar or a custom
dict beside its tensors fails with "Weights only load failed". --allow-pickle is the user saying
they trust the files, so here they are read with the full unpickler and only their tensors handed
to the architecture's model class (`from_pretrained(None, config=..., state_dict=...)`; the Auto
class takes no state dict with a path), which loads, checks and reports them as it does any
checkpoint; the directory's generation_config.json is read as transformers would.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError

WEIGHTS_NAME = "pytorch_model.bin"
INDEX_NAME = "pytorch_model.bin.index.json"


def pickle_files(model_dir: Path) -> list[Path]:
    """The pickle weight files transformers would read, as its index or its file name says; empty
    when the directory has safetensors weights or neither name (transformers then decides)."""
    if any(model_dir.glob("*.safetensors")):
        return []
    index = model_dir / INDEX_NAME
    if index.is_file():
        try:
            shards = sorted(set(json_value(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            raise SpecmoeError(f"{index}: not a valid checkpoint index (weight_map); copy it again") from None
        return [model_dir / shard for shard in shards]
    single = model_dir / WEIGHTS_NAME
    return [single] if single.is_file() else []


def pickle_state_dict(model_dir: Path) -> dict[str, torch.Tensor] | None:
    """The tensors of the directory's pickle checkpoint, read with the full unpickler (the caller has
    --allow-pickle); None when it has none for transformers to be given this way."""
    files = pickle_files(model_dir)
    if not files:
        return None
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            # mmap: a zip-format checkpoint is paged in as transformers itself would read it
            loaded = torch.load(file, map_location="cpu", weights_only=False, mmap=zipfile.is_zipfile(file))
        except FileNotFoundError:
            raise SpecmoeError(
                f"{file}: a weight shard its index names is missing; is the download complete?"
            ) from None
        # a cut or foreign file: each unpickler and archive layer fails in its own way
        except (
            pickle.UnpicklingError,
            EOFError,
            OSError,
            RuntimeError,
            ValueError,
            AttributeError,
            ImportError,
        ) as err:
            lines = str(err).strip().splitlines() or [type(err).__name__]
            raise SpecmoeError(
                f"{file}: not a readable pickle checkpoint ({lines[0]}); copy it again"
            ) from None
        if not isinstance(loaded, dict):
            raise SpecmoeError(
                f"{file}: holds a pickled {type(loaded).__name__}, not a state dict of tensors; save the "
                "model's state_dict(), or convert it to safetensors"
            )
        tensors.update((name, value) for name, value in loaded.items() if isinstance(value, torch.Tensor))
    return tensors


def from_pickle(path: Path, trust_remote_code: bool, **options):
    """(model, loading info) of a directory whose weights are a pickle checkpoint, read as above with
    transformers' `options`; None when it has none to read this way (transformers then decides)."""
    tensors = pickle_state_dict(path)
    if tensors is None:
        return None
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    model_class = AutoModelForCausalLM._model_mapping.get(type(config), None)
    if model_class is None:
        raise SpecmoeError(
            f"'{path}': --allow-pickle reads pickle checkpoints of transformers' own causal-LM "
            f"architectures, and {type(config).__name__} is not one; convert the weights to safetensors"
        )
    model, info = model_class.from_pretrained(None, config=config, state_dict=tensors, **options)
    if (path / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(path, local_files_only=True)
    return model, info
