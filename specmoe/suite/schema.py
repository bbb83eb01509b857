"""The suite file format, described once as pydantic models: its tables, keys, types, defaults and
the values each key may take.

`load` validates the parsed TOML through `SuiteFile` and `errors` turns the first
problem into one line naming the file and the key. Validation is strict: TOML's types are the file's
types, so "64" is not an integer and `true` is not 1. A check that one table can answer alone (a
served model's keys, prompt_set against prompt_length) is a model validator here; what needs other
tables or the file system (a draft naming an undefined model, a zoo model its preset lacks, a
prompt file) is `groups` / `load`. `specmoe bench schema` prints the JSON Schema.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, NoReturn

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from specmoe.drafts import MTP, NGRAM, DraftSpec, is_reserved_name, parse_draft
from specmoe.dtypes import DEFAULT_DTYPE, DTYPE_NAMES
from specmoe.errors import SpecmoeError
from specmoe.serving.servers import ENGINES
from specmoe.serving.spec import ENDPOINTS, normalize_url, without_userinfo
from specmoe.suite.types import SERVING_BACKEND

SCHEMA_VERSION = 1

_DEVICE_RE = re.compile(r"cpu|mps|cuda(:\d+)?")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


# --- errors a validator raises: `errors` words them with the file and key -----------------


def fail(message: str, key: str = "") -> NoReturn:
    """Refuse a value with the whole message; `key` names a key below the validated value's own
    (a model validator speaks of one of its table's keys, "" for the table itself)."""
    raise PydanticCustomError("suite", "{message}", {"message": message, "key": key})


def _choice(options: tuple[str, ...]):
    """A string that must be one of `options` ("unknown dtype 'bf16' (did you mean ...)")."""

    def check(value: str) -> str:
        if value not in options:
            raise PydanticCustomError("suite_choice", "not one of the options", {"options": options})
        return value

    return Annotated[str, AfterValidator(check), Field(json_schema_extra={"enum": list(options)})]


# --- value types --------------------------------------------------------------------------------


def _device(value: str) -> str:
    if not _DEVICE_RE.fullmatch(value):
        fail(f"unknown device '{value}'; use cpu, mps, cuda or cuda:<index>")
    return value


def _draft(value: str) -> DraftSpec:
    """The typed draft a spelling names (`specmoe.drafts`): the one place a suite's drafts
    are parsed, so "ngram" and "ngram:1-3", or "oracle:0.60" and "oracle:0.6", are one run."""
    try:
        return parse_draft(value)
    except SpecmoeError as err:
        fail(str(err))


def _prompt_count(value: Any) -> int | Literal["all"]:
    if value == "all" or (type(value) is int and value >= 1):
        return value
    fail(f'prompts must be a count >= 1 or "all", got {value!r}')


def _rate(value: Any) -> float:
    """requests/s > 0, or "inf" (TOML's bare inf too): every request at once."""
    if value == "inf":
        return float("inf")
    if type(value) in (int, float) and value > 0:
        return float(value)
    fail(f'request_rate must be a number of requests/s > 0 or "inf", got {value!r}')


def _as_list(value: Any) -> Any:
    return list(value) if isinstance(value, list | tuple) else [value]


def _axis(item: Any, *, may_be_empty: bool = False) -> Any:
    """A grid axis: one value or a list of them (stored as a list); empty only where allowed."""
    items = list[item] if may_be_empty else Annotated[list[item], Field(min_length=1)]
    return Annotated[items, BeforeValidator(_as_list, json_schema_input_type=item | items)]


Positive = Annotated[int, Field(ge=1)]
# Finite: an infinite temperature reaches the store's JSON config (which has no inf) and the sampler.
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Device = Annotated[
    str, AfterValidator(_device), Field(json_schema_extra={"pattern": f"^(?:{_DEVICE_RE.pattern})$"})
]
# Written and documented (JSON schema) as a string; held as the DraftSpec it parses to.
Draft = Annotated[str, AfterValidator(_draft)]
DType = _choice(DTYPE_NAMES)
PromptCount = Annotated[
    int | Literal["all"], PlainValidator(_prompt_count, json_schema_input_type=Positive | Literal["all"])
]
Rate = Annotated[
    float,
    PlainValidator(_rate, json_schema_input_type=Annotated[float, Field(gt=0)] | Literal["inf"]),
]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)


# --- [defaults] and [[groups]] ------------------------------------------------------------------


class GridAxes(_Table):
    """Axes of a group's grid: each takes one value or a list, and the group runs their product."""

    target: _axis(str) | None = Field(None, description="target model names (required)")
    draft: _axis(Draft, may_be_empty=True) = Field(
        default_factory=list,
        description='draft model names, "ngram", "ngram:MIN-MAX" or "oracle:P"; none: baseline only',
    )
    gamma: _axis(Positive) | None = Field(None, description="tokens drafted per round (with drafts)")
    prompt_set: _axis(str) = Field(
        "factual", description="a built-in set (factual, code, reasoning, chinese) or a .jsonl path"
    )
    prompt_length: _axis(Positive) | None = Field(
        None, description="synthetic prompts of exactly this many tokens, instead of a set"
    )
    batch_size: _axis(Positive) = Field(1, description="sequences decoded together")
    concurrency: _axis(Positive) | None = Field(
        None, description="served targets: requests in flight (1 when unset)"
    )
    request_rate: _axis(Rate) | None = Field(
        None, description='served targets: Poisson arrivals, requests/s, or "inf" (open loop)'
    )
    moe_top_k: _axis(Positive) | None = Field(None, description="experts per token of MoE targets")
    temperature: _axis(NonNegative) = Field(0.0, description="0: greedy")
    max_new_tokens: _axis(Positive) = Field(64, description="tokens decoded per sequence")
    dtype: _axis(DType) = DEFAULT_DTYPE
    device: _axis(Device) = Field("cpu", description="cpu, mps, cuda or cuda:<index>")


class GroupSettings(GridAxes):
    """[defaults]: every axis and setting a group may take, inherited by each group."""

    prompts: PromptCount = Field("all", description="prompts of the set each grid point measures")
    repeats: int = Field(1, ge=1)
    warmup: int = Field(0, ge=0, description="untimed runs of each arm before the timed ones")
    oracle_cost: str = Field("draft-xs", description="the model whose forwards an oracle draft pays for")
    requests: int | None = Field(None, ge=1, description="served targets: requests per run")
    cpus: float = Field(1.0, gt=0, allow_inf_nan=False, description="per run, for the Ray executor")
    gpus: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="per run; unset: 1 on cuda devices, else 0"
    )
    compile: bool = Field(False, description="compiled static-shape forwards (hf backend)")
    chat: bool = Field(False, description="prompts wrapped in the target tokenizer's chat template")
    note: str | None = Field(None, description="a free-text label stored with each run; not in the run key")

    @model_validator(mode="after")
    def _one_kind_of_prompt(self) -> GroupSettings:
        # Per table: a group's prompt_length may still override a default prompt_set.
        if {"prompt_set", "prompt_length"} <= self.model_fields_set:
            fail("set prompt_set or prompt_length, not both", "prompt_length")
        return self


class GroupTable(GroupSettings):
    """One [[groups]] table: an experiment, with [defaults] merged under it."""

    name: str
    description: str = ""


# --- [models.<name>] and [zoo] ------------------------------------------------------------------


def _url(value: str) -> str:
    url = normalize_url(value)
    if url is None:
        fail(f"not a server URL: {without_userinfo(value)!r}; write http://host:port")  # no password
    return url


def _env_name(value: str) -> str:
    if not _ENV_NAME_RE.fullmatch(value):  # never echo the value: it may be a key pasted by mistake
        fail(
            "not an environment variable name; give the name of the variable that holds the key "
            "(e.g. OPENAI_API_KEY), never the key itself"
        )
    return value


def _model_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name) or is_reserved_name(name):
        reserved = f"not 'oracle...', '{NGRAM}' or '{MTP}'"
        fail(f"bad model name '{name}'; use letters, digits, '_', '.', '-' ({reserved})")
    return name


class ModelTable(_Table):
    """One [models.<name>] table: a zoo model, a path (HF directory or .gguf) or a server."""

    zoo: str | None = Field(None, description="a model of the [zoo] preset, e.g. moe or draft-xs")
    path: str | None = Field(None, description="an HF model directory, a .gguf file or a hub ID")
    config: str | None = Field(
        None, description="a config.json: a random-weight model of its shape, built with the [zoo] seed"
    )
    overrides: dict[str, Any] | None = Field(
        None, description="config models: config keys changed, e.g. { vocab_size = 50304 }"
    )
    backend: str | None = Field(None, description='hf, llamacpp or "openai" (a server)')
    gguf: str | None = Field(None, description="llamacpp zoo models: the GGUF weight type, e.g. q8_0")
    url: Annotated[str, AfterValidator(_url)] | None = Field(
        None, description="served models: http://host:port"
    )
    model: str | None = Field(None, description="served models: the model name the server serves")
    engine: _choice(tuple(ENGINES)) | None = Field(
        None, description="served models: vllm, sglang, llamacpp-server or generic"
    )
    endpoint: _choice(ENDPOINTS) | None = Field(None, description="served models: chat or completions")
    api_key_env: Annotated[str, AfterValidator(_env_name)] | None = Field(
        None, description="served models: environment variable of the key"
    )
    # Finite: an infinite timeout would let a server that stops answering hold the suite forever.
    timeout_s: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="served models: seconds of silence a request waits"
    )
    tokenizer: str | None = Field(None, description="served models: a local tokenizer directory")

    @model_validator(mode="after")
    def _one_source(self) -> ModelTable:
        given = self.model_fields_set
        if sum(k in given for k in SOURCE_KEYS) != 1:
            fail(
                'give exactly one of zoo = "<zoo model>", path = "<HF dir or .gguf>", url = "<server>" '
                'or config = "<config.json>"'
            )
        if "url" in given:
            _check_served(self)
        else:
            _check_local(self)
        return self


def _check_served(table: ModelTable) -> None:
    if table.backend not in (None, SERVING_BACKEND):
        fail(f'a model with url = is served: backend must be "{SERVING_BACKEND}"', "backend")
    if table.gguf is not None:
        fail("gguf = picks the export of a zoo model; a server loads its own weights", "gguf")
    if table.model is None:
        fail('a served model needs model = "<its name on the server>" (GET /v1/models)', "model")


def _check_local(table: ModelTable) -> None:
    for key in SERVER_KEYS:
        if key in table.model_fields_set:
            fail(f"{key} applies to served models (url = ...) only; remove it", key)
    if table.backend == SERVING_BACKEND:
        fail(
            f'backend "{SERVING_BACKEND}" talks to a server: give url = "http://host:port" and '
            'model = "<served name>" instead of zoo = or path =',
            "backend",
        )
    if table.path is not None and table.gguf is not None:
        fail("gguf = picks a zoo model's export; a path names its .gguf file itself", "gguf")
    if table.overrides is not None and table.config is None:
        fail(
            'overrides = changes a config model\'s config; give config = "<config.json>" or remove it',
            "overrides",
        )
    if table.config is not None and table.gguf is not None:
        fail("gguf = picks a zoo model's export; a config model runs through transformers", "gguf")


class ZooTable(_Table):
    preset: str | None = Field(None, description="tiny, bench, trained or smollm2-draft")
    seed: int = Field(0, ge=0)


# --- the file -----------------------------------------------------------------------------------


def _schema_version(value: int) -> int:
    if value != SCHEMA_VERSION:
        fail(f"unsupported schema {value!r}; this specmoe reads schema = {SCHEMA_VERSION}")
    return value


class SuiteFile(_Table):
    """A suite file (TOML): models, and groups of experiments whose list-valued axes form a grid."""

    schema_version: Annotated[int, AfterValidator(_schema_version)] = Field(
        alias="schema",
        description="the suite format's version: 1",
        json_schema_extra={"const": SCHEMA_VERSION},
    )
    name: str | None = Field(None, description="the suite's name (default: the file name)")
    description: str = ""
    zoo: ZooTable = Field(default_factory=ZooTable)
    defaults: GroupSettings = Field(default_factory=GroupSettings)
    models: dict[Annotated[str, AfterValidator(_model_name)], ModelTable]
    groups: list[GroupTable] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_group_names(self) -> SuiteFile:
        seen: set[str] = set()
        for i, group in enumerate(self.groups):
            if group.name in seen:
                fail(
                    f"duplicate group name '{group.name}'; give each group its own name", f"groups[{i}].name"
                )
            seen.add(group.name)
        return self


def keys(model: type[BaseModel]) -> tuple[str, ...]:
    """The keys a table may hold, as written in the file, in the order errors list them."""
    return tuple(field.alias or name for name, field in model.model_fields.items())


DEFAULTS_KEYS = keys(GroupSettings)
GROUP_KEYS = ("name", "description", *DEFAULTS_KEYS)  # a group's own keys first
TOP_KEYS = keys(SuiteFile)
ZOO_KEYS = keys(ZooTable)
MODEL_KEYS = keys(ModelTable)
SERVER_KEYS = MODEL_KEYS[MODEL_KEYS.index("url") :]  # what only a served model sets
SOURCE_KEYS = ("zoo", "path", "url", "config")  # a model has exactly one
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
