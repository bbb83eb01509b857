"""A Hugging Face config.json as the source of a random-weight model: read, checked, overridden.

`specmoe zoo build --config FILE` and a suite's `models.X.config = FILE` build a model of exactly
the shape a config describes, with random weights (`specmoe.zoo.config_build`). This module turns
the file into a transformers config, or refuses it in one line: not JSON, code of its own
(`auto_map`), a `model_type` transformers does not build as a causal LM, a size that is zero or
negative, an override of a key the architecture does not have.

What a source changes on the way, and why:
- keys starting with "_" (the `_note` of docs/perf-examples) are comments, dropped;
- `quantization_config` is dropped: weights are written unquantized in the build's dtype, and a
  quantized format would need its own kernels (the performance model prices formats from the
  config itself, `specmoe advise --dtype`);
- `torch_dtype` / `dtype` give way to the build's dtype;
- BOS, EOS and pad ids become the project tokenizer's (`specmoe.zoo.tokenizer`): every config-built
  model shares that tokenizer, so drafts and targets agree on ids by construction.
The vocabulary keeps the config's size: embedding and output tables, and so every step's cost, are
the real model's. The tokenizer has fewer tokens than that (docs/zoo.md says what the ids beyond it do).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmoe.backends.config_shape import EXPERT_COUNT_KEYS, TOP_K_KEYS
from specmoe.canonical import short_key
from specmoe.errors import SpecmoeError
from specmoe.zoo.tokenizer import EOS_TOKEN_ID, VOCAB_SIZE

DROPPED_KEYS = ("quantization_config", "torch_dtype", "dtype")
# Sizes every decoder has; a config whose value is below 1 describes no model.
CORE_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
# Other integer widths and counts: 0 can mean "none" (n_shared_experts = 0), a negative never does.
_SIZE_KEY = re.compile(r"^(num_|n_)|(_size|_dim|_rank|_experts|_heads|_layers|_per_tok)$")


@dataclass(frozen=True)
class ConfigSource:
    """One config file and the overrides applied to it: what a config-built model is made from."""

    path: Path
    sha256: str  # of the file's bytes
    raw: dict[str, Any]  # the file's object, comments dropped, overrides applied
    overrides: tuple[tuple[str, Any], ...] = ()  # (key, value), sorted by key
    dropped: tuple[str, ...] = ()  # keys of the file the build ignores (DROPPED_KEYS it had)

    @property
    def name(self) -> str:
        """The model's name: the file's stem ("olmoe-1b-7b")."""
        return self.path.stem

    @property
    def model_type(self) -> str:
        return self.raw["model_type"]

    @property
    def shape(self) -> dict[str, Any]:
        """The values that shape the language model: a composite config's `text_config` (Qwen3.5,
        whose config.json nests the decoder beside a vision tower) over its top level."""
        return {**self.raw, **_text_config(self.raw)}

    @property
    def identity(self) -> dict[str, Any]:
        """What the model's shape is made from, independent of where the file lies."""
        return {"config_sha256": self.sha256, "overrides": dict(self.overrides)}

    @property
    def digest(self) -> str:
        """16 hex digits over `identity`: seeds the weights and names cached builds."""
        return short_key(self.identity)

    def hf_config(self):
        """The transformers config the model is built with (tokenizer ids set, see the module doc)."""
        from transformers import AutoConfig

        ids = {"bos_token_id": None, "eos_token_id": EOS_TOKEN_ID, "pad_token_id": EOS_TOKEN_ID}
        values = {k: v for k, v in self.raw.items() if k != "model_type"} | ids
        if _text_config(self.raw):
            values["text_config"] = _text_config(self.raw) | ids
        try:
            return AutoConfig.for_model(self.model_type, **values)
        except (ValueError, TypeError, KeyError) as err:
            raise SpecmoeError(
                f"{self.path}: transformers refuses this config ({_first_line(err)}); fix the file"
            ) from None


def read_config_source(path: str | Path, overrides: dict[str, Any] | None = None) -> ConfigSource:
    """The checked source of a config file, with `overrides` (key -> JSON value) applied."""
    path = Path(path).expanduser()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecmoeError(f"config file not found: {path}; pass a Hugging Face config.json") from None
    except IsADirectoryError:
        raise SpecmoeError(f"{path} is a directory; pass its config.json") from None
    except OSError as err:
        raise SpecmoeError(f"{path} cannot be read ({err.strerror}); pass a readable config.json") from None
    try:
        raw = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecmoeError(f"{path} is not UTF-8 JSON ({err}); pass a Hugging Face config.json") from None
    if not isinstance(raw, dict):
        raise SpecmoeError(f"{path} holds no JSON object; pass a Hugging Face config.json")
    if "auto_map" in raw:
        raise SpecmoeError(
            f"{path} needs its own Python code (auto_map); only architectures transformers ships build "
            "(remove auto_map if the model_type is one of them)"
        )
    raw = {k: v for k, v in raw.items() if not k.startswith("_")}
    dropped = tuple(k for k in DROPPED_KEYS if k in raw)
    raw = {k: v for k, v in raw.items() if k not in DROPPED_KEYS}
    _check_model_type(path, raw.get("model_type"))
    items = tuple(sorted((overrides or {}).items()))
    _check_overrides(path, raw, items)
    _apply(raw, items)
    _check_sizes(path, {**raw, **_text_config(raw)})
    return ConfigSource(path, hashlib.sha256(data).hexdigest(), raw, items, dropped)


def _text_config(raw: dict[str, Any]) -> dict[str, Any]:
    text = raw.get("text_config")
    return text if isinstance(text, dict) else {}


def _apply(raw: dict[str, Any], items: tuple[tuple[str, Any], ...]) -> None:
    """Overrides in place: into a composite config's text_config when that is where the key lives
    (num_hidden_layers of Qwen3.5), else at the top level."""
    text = _text_config(raw)
    for key, value in items:
        if text and key not in raw and key in _text_keys(raw["model_type"]) | set(text):
            raw["text_config"] = text = {**text, key: value}
        else:
            raw[key] = value


def _text_keys(model_type: str) -> set[str]:
    from transformers import AutoConfig

    text = getattr(AutoConfig.for_model(model_type), "text_config", None)
    return set(text.to_dict()) if text is not None else set()


def _check_model_type(path: Path, model_type: Any) -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    known = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if not isinstance(model_type, str):
        raise SpecmoeError(
            f'{path} has no model_type; add the architecture\'s, e.g. "model_type": "qwen3_moe"'
        )
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        close = difflib.get_close_matches(model_type, known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise SpecmoeError(
            f"{path}: unknown model_type '{model_type}'{hint}; transformers builds {len(known)} causal-LM "
            "architectures here (transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)"
        )


def _check_overrides(path: Path, raw: dict[str, Any], items: tuple[tuple[str, Any], ...]) -> None:
    """Each overridden key is one the file or the architecture's config has: a typo would be stored
    in the config and silently shape nothing."""
    from transformers import AutoConfig

    model_type = raw["model_type"]
    defaults = AutoConfig.for_model(model_type)
    inner = _text_keys(model_type) | set(_text_config(raw))
    for key, _ in items:
        known_key = key in raw or hasattr(defaults, key) or key in inner
        if key.startswith("_") or key in DROPPED_KEYS or key == "model_type" or not known_key:
            known = [k for k in defaults.to_dict() if not k.startswith("_")]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise SpecmoeError(
                f"override {key}: {model_type} configs have no key '{key}'{hint}, for {path}; "
                "override a key the architecture has"
            )


def _check_sizes(path: Path, raw: dict[str, Any]) -> None:
    for key, value in raw.items():
        if type(value) is not int or not _SIZE_KEY.search(key):
            continue
        least = 1 if key in CORE_SIZES else 0
        if value < least:
            raise SpecmoeError(f"{path}: {key} = {value} describes no model; give {key} >= {least}")
    if raw.get("vocab_size", VOCAB_SIZE) < VOCAB_SIZE:
        raise SpecmoeError(
            f"{path}: vocab_size = {raw['vocab_size']} is below the project tokenizer's {VOCAB_SIZE} tokens, "
            f"whose ids every config-built model reads; give vocab_size >= {VOCAB_SIZE}"
        )
    experts, top_k = moe_fields(raw)
    if experts and not 1 <= top_k <= experts:
        raise SpecmoeError(f"{path}: {top_k} experts per token of {experts}; give 1 <= top-k <= experts")


def moe_fields(config: dict[str, Any]) -> tuple[int, int]:
    """(routed experts per MoE layer, experts per token) of a config's values; (0, 0) for a dense
    model. The key names differ by architecture (`config_shape.EXPERT_COUNT_KEYS`, `TOP_K_KEYS`)."""
    experts = next((config[k] for k in EXPERT_COUNT_KEYS if isinstance(config.get(k), int) and config[k]), 0)
    top_k = next((config[k] for k in TOP_K_KEYS if isinstance(config.get(k), int) and config[k]), 0)
    return (experts, top_k) if experts else (0, 0)


def parse_override(text: str) -> tuple[str, Any]:
    """ "KEY=VALUE" from the command line; VALUE is JSON (2, true, [1, 2]) or else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise SpecmoeError(f"--override {text!r}: expected KEY=VALUE, e.g. --override num_hidden_layers=2")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value.strip()


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
