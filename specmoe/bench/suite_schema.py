"""The suite file format, described once as pydantic models: its tables, keys, types and defaults.

The loader (`suite_load`, `suite_groups`) takes from here the keys each table may hold, their order
(error messages list them in it) and the value a group gets when neither it nor [defaults] sets a
key; `specmoe bench schema` prints the models' JSON Schema for editors. The values themselves are
checked by the loader, whose one-line errors name the file, the key, the fix and a close match;
a file the loader accepts also validates here (`tests/test_suite_schema.py`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from specmoe.dtypes import DTYPE_NAMES

SCHEMA_VERSION = 1

DType = Literal[DTYPE_NAMES]  # type: ignore[valid-type]  # the names of specmoe.dtypes
Rate = Annotated[float, Field(gt=0.0)] | Literal["inf"]
Positive = Annotated[int, Field(ge=1)]
NonNegative = Annotated[float, Field(ge=0.0)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GridAxes(_Table):
    """Axes of a group's grid: each takes one value or a list, and the group runs their product."""

    target: str | list[str] | None = Field(None, description="target model names (required)")
    draft: str | list[str] = Field(
        default_factory=list,
        description='draft model names, "ngram", "ngram:MIN-MAX" or "oracle:P"; none: baseline only',
    )
    gamma: Positive | list[Positive] | None = Field(
        None, description="tokens drafted per round (with drafts)"
    )
    prompt_set: str | list[str] = Field(
        "factual", description="a built-in set (factual, code, reasoning, chinese) or a .jsonl path"
    )
    prompt_length: Positive | list[Positive] | None = Field(
        None, description="synthetic prompts of exactly this many tokens, instead of a set"
    )
    batch_size: Positive | list[Positive] = Field(1, description="sequences decoded together")
    concurrency: Positive | list[Positive] | None = Field(
        None, description="served targets: requests in flight (1 when unset)"
    )
    request_rate: Rate | list[Rate] | None = Field(
        None, description='served targets: Poisson arrivals, requests/s, or "inf" (open loop)'
    )
    moe_top_k: Positive | list[Positive] | None = Field(None, description="experts per token of MoE targets")
    temperature: NonNegative | list[NonNegative] = Field(0.0, description="0: greedy")
    max_new_tokens: Positive | list[Positive] = Field(64, description="tokens decoded per sequence")
    dtype: DType | list[DType] = "float32"
    device: str | list[str] = Field("cpu", description="cpu, mps, cuda or cuda:<index>")


class GroupSettings(GridAxes):
    """[defaults]: every axis and setting a group may take, inherited by each group."""

    prompts: Positive | Literal["all"] = Field(
        "all", description="prompts of the set each grid point measures"
    )
    repeats: int = Field(1, ge=1)
    warmup: int = Field(0, ge=0, description="untimed runs of each arm before the timed ones")
    oracle_cost: str = Field("draft-xs", description="the model whose forwards an oracle draft pays for")
    requests: int | None = Field(None, ge=1, description="served targets: requests per run")
    cpus: float = Field(1.0, ge=0.0, description="per run, for the Ray executor")
    gpus: float | None = Field(None, ge=0.0, description="per run; unset: 1 on cuda devices, else 0")
    compile: bool = Field(False, description="compiled static-shape forwards (hf backend)")
    chat: bool = Field(False, description="prompts wrapped in the target tokenizer's chat template")


class GroupTable(GroupSettings):
    """One [[groups]] table: an experiment, with [defaults] merged under it."""

    name: str
    description: str = ""


class ModelTable(_Table):
    """One [models.<name>] table: a zoo model, a path (HF directory or .gguf) or a server."""

    zoo: str | None = Field(None, description="a model of the [zoo] preset, e.g. moe or draft-xs")
    path: str | None = Field(None, description="an HF model directory, a .gguf file or a hub ID")
    backend: str | None = Field(None, description='hf, llamacpp or "openai" (a server)')
    gguf: str | None = Field(None, description="llamacpp zoo models: the GGUF weight type, e.g. q8_0")
    url: str | None = Field(None, description="served models: http://host:port")
    model: str | None = Field(None, description="served models: the model name the server serves")
    engine: str | None = Field(None, description="served models: vllm, sglang, llamacpp or generic")
    endpoint: str | None = Field(None, description="served models: chat or completions")
    api_key_env: str | None = Field(None, description="served models: environment variable of the key")
    timeout_s: float | None = Field(None, gt=0.0, description="served models: seconds per request")
    tokenizer: str | None = Field(None, description="served models: a local tokenizer directory")


class ZooTable(_Table):
    preset: str | None = Field(None, description="tiny, bench, trained or smollm2-draft")
    seed: int = Field(0, ge=0)


class SuiteFile(_Table):
    """A suite file (TOML): models, and groups of experiments whose list-valued axes form a grid."""

    schema_version: Literal[1] = Field(alias="schema", description="the suite format's version: 1")
    name: str | None = Field(None, description="the suite's name (default: the file name)")
    description: str = ""
    zoo: ZooTable = Field(default_factory=ZooTable)
    defaults: GroupSettings = Field(default_factory=GroupSettings)
    models: dict[str, ModelTable]
    groups: list[GroupTable] = Field(min_length=1)


def keys(model: type[BaseModel]) -> tuple[str, ...]:
    """The keys a table may hold, as written in the file, in the order errors list them."""
    return tuple(field.alias or name for name, field in model.model_fields.items())


GRID_AXES = keys(GridAxes)
DEFAULTS_KEYS = keys(GroupSettings)
SETTINGS = DEFAULTS_KEYS[len(GRID_AXES) :]
GROUP_KEYS = ("name", "description", *DEFAULTS_KEYS)  # a group's own keys first
TOP_KEYS = keys(SuiteFile)
ZOO_KEYS = keys(ZooTable)
MODEL_KEYS = keys(ModelTable)
SERVER_KEYS = MODEL_KEYS[MODEL_KEYS.index("url") :]  # what only a served model sets
NO_BUILTIN_DEFAULT = ("target", "gamma", "prompt_length")  # a group sets these or goes without


def builtin_defaults() -> dict[str, Any]:
    """What a key is when neither [defaults] nor the group sets it."""
    fields = GroupSettings.model_fields.items()
    return {k: f.get_default(call_default_factory=True) for k, f in fields if k not in NO_BUILTIN_DEFAULT}


def json_schema() -> str:
    """The JSON Schema of a suite file (for editors: point a TOML language server at it)."""
    schema = SuiteFile.model_json_schema(by_alias=True)
    schema["title"] = "specmoe suite"
    return json.dumps(schema, indent=2, sort_keys=False)
