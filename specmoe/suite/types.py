"""Suite files: declarative, versioned sweeps of speculative-decoding experiments.

A suite is a TOML file (`schema = 1`) naming models and groups of experiments; list-valued axes of a
group form a cartesian grid. This module holds what a loaded suite is (`Suite`, `ModelSpec`, `Group`)
and the unit of work it expands into (`RunSpec`). Reading and checking a file is `load`
(`load_suite`: the values through the pydantic schema, `schema`; the groups, `groups`; every error
one line naming the file and key, `errors`); flattening it into runs, each SD arm paired with its
baseline arm, is `expand.expand`. The schema is documented in docs/suites.md.

Run identity: `RunSpec.config_key` hashes everything that decides the measured work (models by what
they are, not by their suite-local names), so the same work in two groups or two suites is one run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specmoe.backends.registry import BACKENDS, DEFAULT_BACKEND, BackendInfo
from specmoe.canonical import short_key
from specmoe.drafts import DraftSpec, draft_spelling, stored_gamma
from specmoe.errors import SpecmoeError
from specmoe.serving.spec import ServerSpec

SERVING_BACKEND = "openai"  # a model behind an OpenAI-compatible server (specmoe.serving)
CONFIG_WEIGHTS = "bfloat16"  # the dtype a suite's config-built models are stored in (runs cast it)
# The axes of a group's grid, each a tuple of values on `Group`, in the order `expand` nests them
# (target outermost) and `schema.GridAxes` declares them; `size` counts the same product.
GRID_AXES = (
    "target",
    "draft",
    "gamma",
    "prompt_set",
    "prompt_length",
    "batch_size",
    "concurrency",
    "request_rate",
    "moe_top_k",
    "temperature",
    "max_new_tokens",
    "dtype",
    "device",
)


@dataclass(frozen=True)
class ModelSpec:
    """A model as a suite declares it: a zoo model (built from the suite's preset and seed), a path,
    a server (`server`, with backend "openai"), or a config-built model (`config`)."""

    name: str  # the suite-local name groups refer to
    zoo: str | None  # zoo model name, e.g. "moe"
    path: str | None  # absolute path of an HF directory or .gguf file
    backend: str = DEFAULT_BACKEND.name
    zoo_preset: str | None = None  # set for zoo models only
    zoo_seed: int | None = None
    server: ServerSpec | None = None  # set for served models only
    gguf: str | None = None  # GGUF weight type of a zoo model run by llamacpp (its zoo export)
    # A path that names no local file but reads as a hub ID ("org/name") the local Hugging Face cache
    # does not hold (yet): preflight says so in one line. Not part of the identity (the path is).
    hub_id: str | None = None
    # A random-weight model of a config.json's shape (`specmoe.zoo.config_build`), built with the
    # suite's [zoo] seed into the per-user cache: the file's absolute path, the overrides applied
    # to it, and the digest of both (`ConfigSource.digest`), which is what the model is.
    config: str | None = None
    config_overrides: tuple[tuple[str, Any], ...] = ()
    config_digest: str | None = None

    @property
    def backend_info(self) -> BackendInfo | None:
        """The registered backend that loads the model here; None for a served model."""
        return BACKENDS.get(self.backend)

    @property
    def identity(self) -> dict[str, Any]:
        """What the model *is*, independent of its suite-local name: part of every run's key."""
        if self.server is not None:
            return {**self.server.identity, "backend": self.backend}
        if self.config_digest is not None:
            return {
                "config": self.config_digest,
                "seed": self.zoo_seed,
                "weights": CONFIG_WEIGHTS,
                "backend": self.backend,
            }
        if self.zoo is not None:
            identity = {
                "zoo": self.zoo,
                "preset": self.zoo_preset,
                "seed": self.zoo_seed,
                "backend": self.backend,
            }
            # Only GGUF zoo models carry the key, so every other model's run keys stay as they were.
            return identity if self.gguf is None else {**identity, "gguf": self.gguf}
        return {"path": self.path, "backend": self.backend}


@dataclass(frozen=True)
class PlainSetting:
    """A group setting that flows unchanged from the suite file to each run of the group and into
    its stored config, and only when set: unset (None), it is in neither a run's key nor its stored
    config, so declaring a new one changes no run already stored. `keyed`: part of the run's key,
    for a setting that decides the measured work; otherwise only recorded beside the run."""

    name: str
    keyed: bool = False


# Settings with no rule of their own, each declared in three places: its field in the suite schema
# (`schema.GroupSettings`, default None), its line here, and its field of the stored config's
# typed view (`run_config.RunConfig`). The group merge, the expansion into runs, the run key and the
# stored config carry them from this table.
PLAIN_SETTINGS: tuple[PlainSetting, ...] = (PlainSetting("note"),)


@dataclass(frozen=True)
class Group:
    """One experiment of a suite, with [defaults] already merged in; axes are tuples of values."""

    name: str
    description: str
    target: tuple[str, ...]
    draft: tuple[DraftSpec, ...]  # parsed by the schema; empty: baseline only
    gamma: tuple[int, ...]
    prompt_set: tuple[str | None, ...]  # (None,) when the group uses prompt_length
    prompt_length: tuple[int | None, ...]  # (None,) when the group uses prompt_set
    batch_size: tuple[int, ...]
    moe_top_k: tuple[int | None, ...]
    temperature: tuple[float, ...]
    max_new_tokens: tuple[int, ...]
    dtype: tuple[str, ...]
    device: tuple[str, ...]
    repeats: int
    warmup: int
    oracle_cost: str
    concurrency: tuple[int | None, ...] = (None,)  # (None,) for local targets
    request_rate: tuple[float | None, ...] = (None,)  # requests/s (math.inf: all at once); (None,): closed
    requests: int | None = None  # requests per served run; None: the concurrency
    cpus: float = 1.0  # per run, for the Ray executor
    gpus: float | None = None  # per run; None: 1 on cuda devices, else 0
    prompts: int | None = None  # prompts measured per grid point; None: all of the set
    compile: bool = False  # compiled static-shape forwards for every model of the group
    chat: bool = False  # prompts go through the target tokenizer's chat template
    plain: tuple[tuple[str, Any], ...] = ()  # (name, value) of each PLAIN_SETTINGS the group sets

    @property
    def served(self) -> bool:
        return self.concurrency != (None,)

    def axis(self, name: str) -> tuple[Any, ...]:
        """The values of one of `GRID_AXES`; a group without drafts has the one draft None (baseline)."""
        values = getattr(self, name)
        return (values or (None,)) if name == "draft" else values


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    path: Path
    zoo_preset: str | None
    zoo_seed: int
    models: dict[str, ModelSpec]  # by suite-local name, in file order
    groups: tuple[Group, ...]

    def model(self, name: str) -> ModelSpec:
        if name not in self.models:
            raise SpecmoeError(f"{self.path}: models: no model '{name}'; define it under [models.{name}]")
        return self.models[name]


@dataclass(frozen=True)
class RunSpec:
    """One arm of one grid point, one repeat: the unit the runner executes and the store records.

    `draft_model` is the model the drafter runs: a ModelDraft's model, or for an OracleDraft the
    model whose forward pass the oracle pays for (named by `oracle_cost`); None for an NgramDraft,
    which runs no model. `moe_top_k` is always explicit for zoo MoE targets (the preset's top-k
    unless overridden) and None for dense zoo targets.
    """

    suite: str
    group: str
    arm: str  # "baseline" | "sd"
    target: str
    draft: DraftSpec | None  # stored as its canonical spelling; None for the baseline arm
    gamma: int | None  # tokens drafted per round, >= 1; None for the baseline arm (stored as 0)
    prompt_set: str | None  # built-in name or absolute .jsonl path; None with prompt_length
    prompt_length: int | None  # synthetic prompt of exactly this many tokens
    batch_size: int
    temperature: float
    max_new_tokens: int
    moe_top_k: int | None
    dtype: str
    device: str
    repeat: int  # 0-based
    warmup: int  # untimed runs of each arm before the timed ones, per (target, draft) pair
    target_model: ModelSpec = field(repr=False)
    draft_model: ModelSpec | None = field(default=None, repr=False)
    oracle_cost: str | None = None  # model name whose forwards an oracle draft pays for; else None
    concurrency: int | None = None  # served targets: requests in flight (open loop: at most); None: local
    request_rate: float | None = None  # open loop: Poisson arrivals at this many requests/s (inf: all
    # at once), capped at `concurrency` in flight; None: closed loop (served) or a local run
    requests: int | None = None  # served targets: requests per run; None: the concurrency
    prompts: int | None = None  # prompts of the set the grid point measures; None: all of them
    prompt_batch: int = 0  # which batch of B prompts of that selection this run decodes (0-based)
    compile: bool = False  # the models run compiled static-shape forwards
    chat: bool = False  # each prompt is one user message in the target's chat template
    # What a prompt set read from a file holds (`specmoe.prompts.prompt_set_digest`), so a file edited
    # in place is new work, not "already measured"; None for built-in sets and synthetic prompts,
    # whose content ships with the package, and for runs a store holds from before files were keyed
    # by content (`specmoe.suite.legacy_keys`).
    prompt_digest: str | None = None
    plain: tuple[tuple[str, Any], ...] = ()  # (name, value) of each PLAIN_SETTINGS set, from its group

    @property
    def model_names(self) -> list[str]:
        """Suite-local names of the models the run loads: target, draft, an oracle's cost model."""
        names = [self.target]
        if self.draft_model is not None:
            names.append(self.draft_model.name)
        if self.oracle_cost is not None and self.oracle_cost not in names:
            names.append(self.oracle_cost)
        return names

    @property
    def key_fields(self) -> dict[str, Any]:
        """Everything that decides the measured work: all fields but repeat, suite and group, with
        models given by identity rather than by suite-local name."""
        draft: dict[str, Any] | None = None
        spec = self.draft
        if spec is not None:  # a model or an oracle keys its model's identity; others their own
            draft = spec.key(None if self.draft_model is None else self.draft_model.identity)
        fields = {
            "arm": self.arm,
            "target": self.target_model.identity,
            "draft": draft,
            "gamma": stored_gamma(self.gamma),
            "prompt_set": self.prompt_set,
            "prompt_length": self.prompt_length,
            "batch_size": self.batch_size,
            "temperature": self.temperature,
            "max_new_tokens": self.max_new_tokens,
            "moe_top_k": self.moe_top_k,
            "dtype": self.dtype,
            "device": self.device,
            "warmup": self.warmup,
        }
        if self.concurrency is not None:
            # Server runs only: leaving the keys out otherwise keeps every local run's key unchanged.
            fields["concurrency"] = self.concurrency
            fields["requests"] = self.requests
        if self.request_rate is not None:  # open-loop runs only, so closed-loop keys stay as they were
            fields["request_rate"] = rate_text(self.request_rate)
        # Which prompts the run decodes: batch `prompt_batch` of the set's selection of `prompts`. Left
        # out at their defaults (all prompts, batch 0), whose prompts are the first B of the set, as
        # every run decoded before batches existed: those runs keep their keys and resume.
        if self.prompts is not None:
            fields["prompts"] = self.prompts
        if self.prompt_batch:
            fields["prompt_batch"] = self.prompt_batch
        if self.compile:  # only when set, so eager runs keep their keys
            fields["compile"] = True
        if self.chat:  # likewise
            fields["chat"] = True
        if self.prompt_digest is not None:  # file prompt sets only: built-in sets keep their keys
            fields["prompt_digest"] = self.prompt_digest
        keyed = {setting.name for setting in PLAIN_SETTINGS if setting.keyed}
        fields.update((name, value) for name, value in self.plain if name in keyed)
        return fields

    @property
    def config_key(self) -> str:
        """16 hex digits of sha256 over the canonical JSON of `key_fields`: stable across processes."""
        return short_key(self.key_fields)

    @property
    def cell_key(self) -> str:
        """The configuration across its prompt batches: `config_key` without the batch index. Runs
        with one cell key are units of one measured cell (summaries aggregate over them)."""
        fields = {k: v for k, v in self.key_fields.items() if k != "prompt_batch"}
        return short_key(fields)

    @property
    def run_id(self) -> str:
        return f"{self.config_key}-{self.repeat}"

    @property
    def oracle_seed(self) -> int:
        """The oracle drafter's seed: one stream per paired unit (this cell, prompt batch and
        repeat), so no two units, and no two targets, share their accept/reject coins."""
        return (
            int(short_key({"cell": self.cell_key, "batch": self.prompt_batch, "repeat": self.repeat}), 16)
            % 2**63
        )

    def baseline(self) -> RunSpec:
        """The baseline arm this arm is compared against (itself for a baseline arm)."""
        return replace(self, arm="baseline", draft=None, gamma=None, oracle_cost=None, draft_model=None)

    @property
    def baseline_key(self) -> str:
        return self.baseline().config_key

    def as_dict(self) -> dict[str, Any]:
        """Every field plus the derived keys, JSON-ready (for the store's `config` column); each
        plain setting set is a key of its own, and an unset one is absent."""
        fields = asdict(self)
        del fields["plain"]
        return {
            **fields,
            "draft": draft_spelling(self.draft),  # asdict would spell a typed draft as its fields
            "gamma": stored_gamma(self.gamma),
            **dict(self.plain),
            # JSON has no infinity: an all-at-once rate is stored as "inf", as the suite spells it.
            "request_rate": None if self.request_rate is None else rate_text(self.request_rate),
            "config_key": self.config_key,
            "run_id": self.run_id,
            "baseline_key": self.baseline_key,
            "cell_key": self.cell_key,
            "baseline_cell_key": self.baseline().cell_key,
        }


def rate_text(rate: float) -> str | float:
    """A request rate as stored and keyed: "inf" for all at once (JSON has no infinity), else itself."""
    return "inf" if math.isinf(rate) else rate


def zoo_shape(spec: ModelSpec):
    from specmoe.zoo.presets import get_preset

    assert spec.zoo is not None and spec.zoo_preset is not None
    return get_preset(spec.zoo_preset).model(spec.zoo)


__all__ = [
    "CONFIG_WEIGHTS",
    "PLAIN_SETTINGS",
    "SERVING_BACKEND",
    "Group",
    "ModelSpec",
    "PlainSetting",
    "RunSpec",
    "Suite",
    "rate_text",
    "zoo_shape",
]
