"""Suite files: declarative, versioned sweeps of speculative-decoding experiments.

A suite is a TOML file (`schema = 1`) naming models and groups of experiments; list-valued axes of a
group form a cartesian grid. `load_suite` parses and validates it (every error is one line naming the
file and key), and `expand` flattens it into `RunSpec`s: one per arm, grid point and repeat, each SD
arm paired with the baseline arm it is compared against. The schema is documented in docs/suites.md.

Run identity: `RunSpec.config_key` hashes everything that decides the measured work (models by what
they are, not by their suite-local names), so the same work in two groups or two suites is one run.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from specmoe.bench.overrides import SuiteOverrides, apply_overrides
from specmoe.bench.server_engines import ENGINES
from specmoe.bench.server_spec import (
    DEFAULT_TIMEOUT_S,
    ENDPOINTS,
    ServerSpec,
    normalize_url,
    without_userinfo,
)
from specmoe.canonical import short_key
from specmoe.dtypes import DTYPE_NAMES
from specmoe.engine.draft_spec import (
    NGRAM,
    DraftSpec,
    ModelDraft,
    NgramDraft,
    OracleDraft,
    draft_of,
    is_reserved_name,
    parse_draft,
)
from specmoe.errors import SpecmoeError
from specmoe.prompts import BUILTIN_PROMPT_SETS, batch_count, is_builtin, load_prompts, selection_size

SCHEMA_VERSION = 1
ARMS = ("baseline", "sd")
SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"

# Grid axes take a value or a list of values; settings take one value. Both may sit in [defaults]
# and be overridden per group.
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
_SETTINGS = ("prompts", "repeats", "warmup", "oracle_cost", "requests", "cpus", "gpus", "compile", "chat")
_TOP_KEYS = ("schema", "name", "description", "zoo", "defaults", "models", "groups")
_ZOO_KEYS = ("preset", "seed")
_SERVER_KEYS = ("url", "model", "engine", "endpoint", "api_key_env", "timeout_s", "tokenizer")
_MODEL_KEYS = ("zoo", "path", "backend", "gguf", *_SERVER_KEYS)
LLAMACPP_BACKEND = "llamacpp"
SERVING_BACKEND = "openai"  # a model behind an OpenAI-compatible server (specmoe.serving)
_DEFAULTS_KEYS = (*GRID_AXES, *_SETTINGS)
_GROUP_KEYS = ("name", "description", *GRID_AXES, *_SETTINGS)
# What a key is when neither [defaults] nor the group sets it.
_BUILTIN_DEFAULTS: dict[str, Any] = {
    "draft": [],
    "prompt_set": "factual",
    "batch_size": 1,
    "concurrency": None,  # served targets only; 1 when unset (closed loop), `requests` when open loop
    "request_rate": None,  # served targets only: requests/s of Poisson arrivals (open loop); None: closed
    "moe_top_k": None,
    "temperature": 0.0,
    "max_new_tokens": 64,
    "dtype": "float32",
    "device": "cpu",
    "prompts": "all",  # prompts of the set each grid point measures: a count, or "all"
    "repeats": 1,
    "warmup": 0,
    "oracle_cost": "draft-xs",
    "requests": None,  # requests per served run; the concurrency when unset
    "cpus": 1.0,  # resources a run asks of a Ray cluster (--executor ray)
    "gpus": None,  # None: 1 for cuda devices, else 0
    "compile": False,  # compiled static-shape forwards (hf backend; docs/engine.md)
    "chat": False,  # prompts wrapped in the target tokenizer's chat template, as a chat server would
}
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DEVICE_RE = re.compile(r"cpu|mps|cuda(:\d+)?")


@dataclass(frozen=True)
class ModelSpec:
    """A model as a suite declares it: a zoo model (built from the suite's preset and seed), a path,
    or a server (`server`, with backend "openai")."""

    name: str  # the suite-local name groups refer to
    zoo: str | None  # zoo model name, e.g. "moe"
    path: str | None  # absolute path of an HF directory or .gguf file
    backend: str = "hf"
    zoo_preset: str | None = None  # set for zoo models only
    zoo_seed: int | None = None
    server: ServerSpec | None = None  # set for served models only
    gguf: str | None = None  # GGUF weight type of a zoo model run by llamacpp (its zoo export)
    # A path that names no local file but reads as a hub ID ("org/name") the local Hugging Face cache
    # does not hold (yet): preflight says so in one line. Not part of the identity (the path is).
    hub_id: str | None = None

    @property
    def identity(self) -> dict[str, Any]:
        """What the model *is*, independent of its suite-local name: part of every run's key."""
        if self.server is not None:
            return {**self.server.identity, "backend": self.backend}
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
class Group:
    """One experiment of a suite, with [defaults] already merged in; axes are tuples of values."""

    name: str
    description: str
    target: tuple[str, ...]
    draft: tuple[str, ...]  # model names, canonical "oracle:P" and "ngram:MIN-MAX"; empty: baseline only
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

    @property
    def served(self) -> bool:
        return self.concurrency != (None,)


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

    `draft_model` is the model the drafter runs: the draft itself, or for an "oracle:P" draft the
    model whose forward pass the oracle pays for (named by `oracle_cost`); None for an
    "ngram:MIN-MAX" draft, which runs no model. `moe_top_k` is always
    explicit for zoo MoE targets (the preset's top-k unless overridden) and None for dense zoo targets.
    """

    suite: str
    group: str
    arm: str  # "baseline" | "sd"
    target: str
    draft: str | None  # model name, "oracle:P" or "ngram:MIN-MAX"; None for the baseline arm
    gamma: int  # 0 for the baseline arm
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

    @property
    def draft_spec(self) -> DraftSpec | None:
        """The typed draft of the canonical `draft` string; None for the baseline arm."""
        return draft_of(self.draft)

    @property
    def key_fields(self) -> dict[str, Any]:
        """Everything that decides the measured work: all fields but repeat, suite and group, with
        models given by identity rather than by suite-local name."""
        draft: dict[str, Any] | None = None
        spec = self.draft_spec
        if isinstance(spec, NgramDraft):
            draft = {"ngram": [spec.min_n, spec.max_n]}
        elif self.draft_model is not None:
            draft = (
                {"oracle": spec.acceptance, "cost": self.draft_model.identity}
                if isinstance(spec, OracleDraft)
                else self.draft_model.identity
            )
        fields = {
            "arm": self.arm,
            "target": self.target_model.identity,
            "draft": draft,
            "gamma": self.gamma,
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

    def baseline(self) -> RunSpec:
        """The baseline arm this arm is compared against (itself for a baseline arm)."""
        return replace(self, arm="baseline", draft=None, gamma=0, oracle_cost=None, draft_model=None)

    @property
    def baseline_key(self) -> str:
        return self.baseline().config_key

    def as_dict(self) -> dict[str, Any]:
        """Every field plus the derived keys, JSON-ready (for the store's `config` column)."""
        return {
            **asdict(self),
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


def builtin_suite_path(name: str) -> Path:
    """suites/<name>.toml at the repository root (the suites ship with the source tree)."""
    path = SUITES_DIR / f"{name}.toml"
    if not path.is_file():
        available = sorted(p.stem for p in SUITES_DIR.glob("*.toml")) if SUITES_DIR.is_dir() else []
        if not available:
            raise SpecmoeError(
                f"no built-in suites at {SUITES_DIR} (specmoe is installed without its source tree); "
                "pass the path of a suite .toml file instead"
            )
        raise SpecmoeError(f"no built-in suite '{name}' in {SUITES_DIR}; available: {', '.join(available)}")
    return path


def resolve_suite_path(name_or_path: str | Path) -> Path:
    """A suite file from a path, or from a built-in suite name such as "quick"."""
    text = str(name_or_path)
    if text.endswith(".toml") or "/" in text or "\\" in text:
        return Path(name_or_path)
    return builtin_suite_path(text)


# --- loading -------------------------------------------------------------------------------------


class _Ctx:
    """Where values come from, so every error names the file and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, message: str) -> NoReturn:
        raise SpecmoeError(f"{self.path}: {key}: {message}")


def load_suite(path: str | Path, overrides: SuiteOverrides | None = None) -> Suite:
    """Parse and validate a suite file, after any command-line overrides; raises SpecmoeError with
    one line on any problem."""
    path = Path(path)
    if not path.is_file():
        raise SpecmoeError(
            f"suite file not found: {path}; pass a .toml path or a built-in name "
            f"({', '.join(sorted(p.stem for p in SUITES_DIR.glob('*.toml')))})"
        )
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        where = str(err).replace("end of document", f"end of document, line {_line_count(path)}")
        raise SpecmoeError(f"{path}: TOML syntax error: {where}; fix the file at that position") from None
    except UnicodeDecodeError:
        raise SpecmoeError(f"{path}: not UTF-8 text; save the suite file as UTF-8") from None
    if overrides:
        raw = apply_overrides(raw, overrides)
    return parse_suite(raw, path)


def parse_suite(raw: dict[str, Any], path: Path) -> Suite:
    """Validate a suite given as the parsed TOML table, as if read from `path` (relative paths are
    taken from its folder, errors name it): `load_suite` after reading, and `specmoe bench quick`,
    which builds the table from its arguments."""
    ctx = _Ctx(path)
    _check_keys(ctx, "", raw, _TOP_KEYS)
    _check_schema(ctx, raw)
    preset, seed = _parse_zoo(ctx, raw.get("zoo", {}))
    models = _parse_models(ctx, raw.get("models"), preset, seed, path.parent)
    defaults = _table(ctx, "defaults", raw.get("defaults", {}))
    _check_keys(ctx, "defaults", defaults, _DEFAULTS_KEYS)
    groups_raw = raw.get("groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        ctx.fail("groups", "a suite needs at least one [[groups]] table")
    groups = tuple(
        _parse_group(ctx, f"groups[{i}]", _table(ctx, f"groups[{i}]", g), defaults, models)
        for i, g in enumerate(groups_raw)
    )
    _check_unique_group_names(ctx, groups)
    name = _string(ctx, "name", raw.get("name", path.stem))
    description = _string(ctx, "description", raw.get("description", ""))
    return Suite(name, description, path, preset, seed, models, groups)


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _check_schema(ctx: _Ctx, raw: dict[str, Any]) -> None:
    if "schema" not in raw:
        ctx.fail("schema", f"missing; put `schema = {SCHEMA_VERSION}` at the top of the file")
    schema = raw["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA_VERSION:
        ctx.fail("schema", f"unsupported schema {schema!r}; this specmoe reads schema = {SCHEMA_VERSION}")


def _check_keys(ctx: _Ctx, where: str, table: dict[str, Any], valid: tuple[str, ...]) -> None:
    for key in table:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(valid)}"
            ctx.fail(f"{where}.{key}" if where else key, f"unknown key '{key}'; {hint}")


def _check_unique_group_names(ctx: _Ctx, groups: tuple[Group, ...]) -> None:
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if group.name in seen:
            ctx.fail(
                f"groups[{i}].name", f"duplicate group name '{group.name}'; give each group its own name"
            )
        seen.add(group.name)


def _parse_zoo(ctx: _Ctx, raw: Any) -> tuple[str | None, int]:
    zoo = _table(ctx, "zoo", raw)
    _check_keys(ctx, "zoo", zoo, _ZOO_KEYS)
    seed = _int(ctx, "zoo.seed", zoo.get("seed", 0), minimum=0)
    if "preset" not in zoo:
        return None, seed
    preset = _string(ctx, "zoo.preset", zoo["preset"])
    from specmoe.zoo.presets import PRESETS  # every preset the zoo builds, known here by name

    if preset not in PRESETS:
        hint = _suggest(preset, tuple(PRESETS))
        ctx.fail("zoo.preset", f"unknown zoo preset '{preset}'{hint}; available: {', '.join(PRESETS)}")
    return preset, seed


def _parse_models(ctx: _Ctx, raw: Any, preset: str | None, seed: int, base_dir: Path) -> dict[str, ModelSpec]:
    if raw is None:
        ctx.fail("models", "no models; declare each one as [models.<name>] with zoo = or path =")
    models = {}
    for name, entry in _table(ctx, "models", raw).items():
        where = f"models.{name}"
        if not _NAME_RE.fullmatch(name) or is_reserved_name(name):
            ctx.fail(
                where,
                f"bad model name '{name}'; use letters, digits, '_', '.', '-' (not 'oracle...' or '{NGRAM}')",
            )
        models[name] = _parse_model(ctx, where, name, _table(ctx, where, entry), preset, seed, base_dir)
    return models


def _parse_model(
    ctx: _Ctx, where: str, name: str, entry: dict[str, Any], preset: str | None, seed: int, base_dir: Path
) -> ModelSpec:
    _check_keys(ctx, where, entry, _MODEL_KEYS)
    if sum(k in entry for k in ("zoo", "path", "url")) != 1:
        ctx.fail(
            where, 'give exactly one of zoo = "<zoo model>", path = "<HF dir or .gguf>" or url = "<server>"'
        )
    if "url" in entry:
        return _parse_served_model(ctx, where, name, entry)
    for key in _SERVER_KEYS:
        if key in entry:
            ctx.fail(f"{where}.{key}", f"{key} applies to served models (url = ...) only; remove it")
    if "zoo" in entry:
        zoo = _string(ctx, f"{where}.zoo", entry["zoo"])
        if preset is None:
            ctx.fail(
                f"{where}.zoo", 'zoo models need a [zoo] table with preset = "tiny", "bench" or "trained"'
            )
        names = _zoo_model_names(preset)
        if zoo not in names:
            hint = _suggest(zoo, names)
            ctx.fail(
                f"{where}.zoo", f"preset '{preset}' has no model '{zoo}'{hint}; available: {', '.join(names)}"
            )
        backend = _backend(ctx, where, entry, "hf")
        return ModelSpec(name, zoo, None, backend, preset, seed, gguf=_gguf_type(ctx, where, entry, backend))
    if "gguf" in entry:
        ctx.fail(f"{where}.gguf", "gguf = picks a zoo model's export; a path names its .gguf file itself")
    text = _string(ctx, f"{where}.path", entry["path"])
    resolved, hub_id = _model_path(text, base_dir)
    backend = _backend(ctx, where, entry, "llamacpp" if text.endswith(".gguf") else "hf")
    return ModelSpec(name, None, str(resolved), backend, hub_id=hub_id)


def _model_path(text: str, base_dir: Path) -> tuple[Path, str | None]:
    """A path relative to the suite file, or for a hub ID ("org/name") no such path exists for, its
    snapshot in the local Hugging Face cache (`specmoe.zoo.hub_cache`, never the network).

    Returns the path and, when `text` reads as a hub ID the cache does not hold, that ID: the path
    may still appear before the suite runs (a folder the suite's own setup writes), so loading the
    suite does not fail; preflight names the ID if the path is still missing then.
    """
    from specmoe.zoo.hub_cache import looks_like_hub_id, resolve_hub_id

    resolved = (base_dir / Path(text).expanduser()).resolve()
    if resolved.exists() or not looks_like_hub_id(text):
        return resolved, None
    try:
        return resolve_hub_id(text), None
    except SpecmoeError:
        return resolved, text


def _gguf_type(ctx: _Ctx, where: str, entry: dict[str, Any], backend: str) -> str | None:
    """The GGUF export a llamacpp zoo model runs (f16 unless gguf = says otherwise); None for others."""
    from specmoe.zoo.gguf import DEFAULT_GGUF_TYPE, GGUF_TYPES

    if backend != LLAMACPP_BACKEND:
        if "gguf" in entry:
            ctx.fail(f"{where}.gguf", f'gguf = needs backend = "{LLAMACPP_BACKEND}"; add it or remove gguf')
        return None
    return _choice(ctx, f"{where}.gguf", entry.get("gguf", DEFAULT_GGUF_TYPE), GGUF_TYPES)


def _backend(ctx: _Ctx, where: str, entry: dict[str, Any], default: str) -> str:
    backend = _string(ctx, f"{where}.backend", entry.get("backend", default))
    if backend == SERVING_BACKEND:
        ctx.fail(
            f"{where}.backend",
            f'backend "{SERVING_BACKEND}" talks to a server: give url = "http://host:port" and '
            'model = "<served name>" instead of zoo = or path =',
        )
    if backend != "hf":
        # Imported only here: the registry pulls in torch, which validating a zoo suite never needs.
        from specmoe.backends import available_backends

        if backend not in available_backends():
            implied = "" if "backend" in entry else " (the default for .gguf paths)"
            ctx.fail(
                f"{where}.backend",
                f"unknown backend '{backend}'{implied}; "
                f"available: {', '.join([*available_backends(), SERVING_BACKEND])}",
            )
    return backend


def _parse_served_model(ctx: _Ctx, where: str, name: str, entry: dict[str, Any]) -> ModelSpec:
    backend = _string(ctx, f"{where}.backend", entry.get("backend", SERVING_BACKEND))
    if backend != SERVING_BACKEND:
        ctx.fail(f"{where}.backend", f'a model with url = is served: backend must be "{SERVING_BACKEND}"')
    if "gguf" in entry:
        ctx.fail(f"{where}.gguf", "gguf = picks the export of a zoo model; a server loads its own weights")
    url = normalize_url(_string(ctx, f"{where}.url", entry["url"]))
    if url is None:
        shown = without_userinfo(str(entry["url"]))  # never echo a password
        ctx.fail(f"{where}.url", f"not a server URL: {shown!r}; write http://host:port")
    if "model" not in entry:
        ctx.fail(f"{where}.model", 'a served model needs model = "<its name on the server>" (GET /v1/models)')
    key_env = entry.get("api_key_env")
    if key_env is not None and not _ENV_NAME_RE.fullmatch(_string(ctx, f"{where}.api_key_env", key_env)):
        # Never echo the value: it may be a key pasted by mistake.
        ctx.fail(
            f"{where}.api_key_env",
            "not an environment variable name; give the name of the variable that holds the key "
            "(e.g. OPENAI_API_KEY), never the key itself",
        )
    tokenizer = None
    if "tokenizer" in entry:  # only for synthetic prompts (prompt_length): the ids are made here
        text = _string(ctx, f"{where}.tokenizer", entry["tokenizer"])
        found, hub_id = _model_path(text, ctx.path.parent)
        if hub_id is not None:
            from specmoe.zoo.hub_cache import resolve_hub_id

            try:
                resolve_hub_id(hub_id)  # not cached: its one line says where it looked and what to do
            except SpecmoeError as err:
                ctx.fail(f"{where}.tokenizer", str(err))
        if not found.is_dir():
            ctx.fail(
                f"{where}.tokenizer",
                f"no model directory at {found}; give the served model's HF directory or hub ID",
            )
        tokenizer = str(found)
    timeout = entry.get("timeout_s", DEFAULT_TIMEOUT_S)
    if _float(ctx, f"{where}.timeout_s", timeout) <= 0:
        ctx.fail(f"{where}.timeout_s", f"timeout_s must be > 0, got {timeout}")
    server = ServerSpec(
        url=url,
        model=_string(ctx, f"{where}.model", entry["model"]),
        engine=_choice(ctx, f"{where}.engine", entry.get("engine", "generic"), tuple(ENGINES)),
        endpoint=_choice(ctx, f"{where}.endpoint", entry.get("endpoint", "completions"), ENDPOINTS),
        api_key_env=key_env,
        timeout_s=float(timeout),
        tokenizer=tokenizer,
    )
    return ModelSpec(name, None, None, SERVING_BACKEND, server=server)


def _zoo_model_names(preset: str) -> tuple[str, ...]:
    from specmoe.zoo.presets import get_preset

    return get_preset(preset).model_names


def _zoo_shape(spec: ModelSpec):
    from specmoe.zoo.presets import get_preset

    assert spec.zoo is not None and spec.zoo_preset is not None
    return get_preset(spec.zoo_preset).model(spec.zoo)


# --- groups --------------------------------------------------------------------------------------


def _parse_group(
    ctx: _Ctx, where: str, raw: dict[str, Any], defaults: dict[str, Any], models: dict[str, ModelSpec]
) -> Group:
    _check_keys(ctx, where, raw, _GROUP_KEYS)
    if "name" not in raw:
        ctx.fail(f"{where}.name", 'every group needs a name, e.g. name = "B"')
    name = _string(ctx, f"{where}.name", raw["name"])
    merged = {**_BUILTIN_DEFAULTS, **defaults, **raw}

    def key(k: str) -> str:
        # Errors point at the table the value came from.
        return f"{where}.{k}" if k in raw else f"defaults.{k}" if k in defaults else f"{where}.{k}"

    if "target" not in merged:
        ctx.fail(f"{where}.target", 'no target; set target = ["<model>", ...] in the group or [defaults]')
    target = _axis(ctx, key("target"), merged["target"], lambda k, v: _model_ref(ctx, k, v, models))
    draft = _axis(
        ctx, key("draft"), merged["draft"], lambda k, v: _draft_ref(ctx, k, v, models), allow_empty=True
    )
    gamma: tuple[int, ...] = (0,)
    if draft:
        if "gamma" not in merged:
            ctx.fail(f"{where}.gamma", "a group with drafts needs gamma = [<draft length>, ...]")
        gamma = _axis(ctx, key("gamma"), merged["gamma"], lambda k, v: _int(ctx, k, v, minimum=1))
    elif "gamma" in raw:
        ctx.fail(f"{where}.gamma", "gamma is set but the group has no draft; add a draft or remove gamma")
    prompt_set, prompt_length = _prompts(ctx, where, raw, defaults, merged)
    oracle_cost = _string(ctx, key("oracle_cost"), merged["oracle_cost"])
    if any(isinstance(draft_of(d), OracleDraft) for d in draft) and oracle_cost not in models:
        ctx.fail(
            key("oracle_cost"),
            f"oracle drafts run model '{oracle_cost}' for their cost, but it is not in [models]; "
            f"add [models.{oracle_cost}] or set oracle_cost",
        )
    moe_top_k = _axis(ctx, key("moe_top_k"), merged["moe_top_k"], lambda k, v: _int(ctx, k, v, minimum=1))
    _check_top_k(ctx, key("moe_top_k"), moe_top_k, target, models)
    served = _check_serving(ctx, key, raw, target, draft, prompt_length, moe_top_k, models)

    def positive(k: str, v: Any) -> int:
        return _int(ctx, k, v, minimum=1)

    requests = merged["requests"]
    request_rate = _request_rates(ctx, key, merged, served)
    return Group(
        name=name,
        description=_string(ctx, f"{where}.description", raw.get("description", "")),
        target=target,
        draft=draft,
        gamma=gamma,
        prompt_set=prompt_set,
        prompt_length=prompt_length,
        batch_size=(1,) if served else _axis(ctx, key("batch_size"), merged["batch_size"], positive),
        moe_top_k=moe_top_k,
        temperature=_axis(ctx, key("temperature"), merged["temperature"], lambda k, v: _float(ctx, k, v)),
        max_new_tokens=_axis(
            ctx, key("max_new_tokens"), merged["max_new_tokens"], lambda k, v: _int(ctx, k, v, minimum=1)
        ),
        dtype=_axis(ctx, key("dtype"), merged["dtype"], lambda k, v: _choice(ctx, k, v, DTYPE_NAMES)),
        device=_axis(ctx, key("device"), merged["device"], lambda k, v: _device(ctx, k, v)),
        repeats=_int(ctx, key("repeats"), merged["repeats"], minimum=1),
        warmup=_int(ctx, key("warmup"), merged["warmup"], minimum=0),
        oracle_cost=oracle_cost,
        concurrency=_concurrency(ctx, key, merged, served, request_rate),
        request_rate=request_rate,
        requests=positive(key("requests"), requests) if served and requests is not None else None,
        cpus=_resource(ctx, key("cpus"), merged["cpus"], minimum=0.001),
        prompts=_prompt_count(ctx, key("prompts"), merged["prompts"]),
        compile=_flag(ctx, key("compile"), merged["compile"]),
        chat=_chat(ctx, key, merged, prompt_length),
        gpus=None if merged["gpus"] is None else _resource(ctx, key("gpus"), merged["gpus"], minimum=0.0),
    )


def _request_rates(ctx: _Ctx, key, merged: dict[str, Any], served: bool) -> tuple[float | None, ...]:
    """Open-loop arrival rates (requests/s, "inf" for all at once); (None,) for a closed loop."""
    if merged["request_rate"] is None or not served:
        return (None,)  # a local group was refused by _check_serving when it set one itself
    if merged["requests"] is None:
        ctx.fail(
            key("request_rate"),
            "an open-loop run (request_rate) needs requests = N, the requests sent per run; add it",
        )

    def rate(k: str, v: Any) -> float:
        if v == "inf" or (isinstance(v, float) and v == math.inf):  # TOML's bare inf too
            return math.inf
        if isinstance(v, str) or _float(ctx, k, v) <= 0:
            ctx.fail(k, f'request_rate must be a number of requests/s > 0 or "inf", got {v!r}')
        return float(v)

    return _axis(ctx, key("request_rate"), merged["request_rate"], rate)


def _concurrency(
    ctx: _Ctx, key, merged: dict[str, Any], served: bool, rates: tuple[float | None, ...]
) -> tuple[int | None, ...]:
    """Requests in flight: 1 by default in a closed loop; in an open loop a cap, by default none (as
    many as the run sends)."""
    if not served:
        return (None,)
    default = merged["requests"] if rates != (None,) else 1
    return _axis(
        ctx, key("concurrency"), _or(merged["concurrency"], default), lambda k, v: _int(ctx, k, v, 1)
    )


def _chat(ctx: _Ctx, key, merged: dict[str, Any], prompt_length: tuple[int | None, ...]) -> bool:
    chat = _flag(ctx, key("chat"), merged["chat"])
    if chat and prompt_length != (None,):
        ctx.fail(key("chat"), "synthetic prompts (prompt_length) are token ids with no text to template")
    return chat


def _flag(ctx: _Ctx, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        ctx.fail(key, f"{_leaf(key)} must be true or false, got {value!r}")
    return value


def _prompt_count(ctx: _Ctx, key: str, value: Any) -> int | None:
    """`prompts = N` (N >= 1) or `prompts = "all"` (None)."""
    if value == "all":
        return None
    if isinstance(value, str):
        ctx.fail(key, f'prompts must be a count >= 1 or "all", got {value!r}')
    return _int(ctx, key, value, minimum=1)


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _resource(ctx: _Ctx, key: str, value: Any, minimum: float) -> float:
    amount = _float(ctx, key, value)
    if amount < minimum:
        ctx.fail(key, f"{_leaf(key)} must be > 0, got {value}")
    return amount


def _check_serving(
    ctx: _Ctx,
    key,
    raw: dict[str, Any],
    target: tuple[str, ...],
    draft: tuple[str, ...],
    prompt_length: tuple[int | None, ...],
    moe_top_k: tuple[int | None, ...],
    models: dict[str, ModelSpec],
) -> bool:
    """Whether a group measures servers. Its targets are all servers or all local models; a served
    target's drafts are its SD arms: other servers of the same model, with speculative decoding on."""
    served = [models[t].server is not None for t in target]
    if any(served) and not all(served):
        ctx.fail(key("target"), "a group's targets must be all servers (url =) or all local; split the group")
    if not served[0]:
        for name in draft:
            if name in models and models[name].server is not None:
                ctx.fail(key("draft"), f"'{name}' is a server: only a served target's SD arm can be")
        for k in ("concurrency", "requests", "request_rate"):
            if k in raw:
                ctx.fail(key(k), f"{k} applies to served targets (url =) only; local targets use batch_size")
        return False
    for name in draft:
        server = models[name].server if name in models else None
        if server is None:
            ctx.fail(
                key("draft"),
                f"'{name}' is not a server; the SD arm of a served target is a second server of the same "
                "model with speculative decoding on (url =)",
            )
        for t in target:
            served_model = models[t].server.model  # type: ignore[union-attr]
            if server.model != served_model:
                ctx.fail(
                    key("draft"),
                    f"server '{name}' serves '{server.model}' but target '{t}' serves '{served_model}'; "
                    "both arms must serve the same model",
                )
    if prompt_length != (None,):
        _check_served_lengths(ctx, key("prompt_length"), (*target, *draft), models)
    if raw.get("batch_size", 1) not in (1, [1]):
        ctx.fail(key("batch_size"), "servers batch requests themselves: set concurrency = [...] instead")
    if moe_top_k != (None,):
        ctx.fail(key("moe_top_k"), "moe_top_k cannot change a served model; remove it from this group")
    return True


def _check_served_lengths(ctx: _Ctx, key: str, names: tuple[str, ...], models: dict[str, ModelSpec]) -> None:
    """Synthetic prompts for servers are token ids made with the served model's tokenizer and sent as
    a completions prompt, so every server of the group needs `tokenizer =` and the completions
    endpoint (a chat message is text, whose token count the server's template would change)."""
    for name in names:
        server = models[name].server
        assert server is not None
        if server.tokenizer is None:
            ctx.fail(
                key,
                f"synthetic prompts for server '{name}' need its tokenizer: add tokenizer = \"<HF dir or "
                f'hub ID>" to [models.{name}], or use prompt_set',
            )
        if server.endpoint != "completions":
            ctx.fail(
                key,
                f"synthetic prompts are token ids, sent to /v1/completions; server '{name}' uses "
                f'endpoint = "{server.endpoint}": set endpoint = "completions" or use prompt_set',
            )


def _prompts(
    ctx: _Ctx, where: str, raw: dict[str, Any], defaults: dict[str, Any], merged: dict[str, Any]
) -> tuple[tuple[str | None, ...], tuple[int | None, ...]]:
    """A group uses prompt sets or synthetic prompt lengths, never both: the innermost table that
    sets either one decides, so a group's prompt_length overrides a default prompt_set."""
    for table, prefix in ((raw, where), (defaults, "defaults")):
        has_set, has_length = "prompt_set" in table, "prompt_length" in table
        if has_set and has_length:
            ctx.fail(f"{prefix}.prompt_length", "set prompt_set or prompt_length, not both")
        if has_length:
            lengths = _axis(
                ctx, f"{prefix}.prompt_length", table["prompt_length"], lambda k, v: _int(ctx, k, v, 1)
            )
            return (None,), lengths
        if has_set:
            return _axis(ctx, f"{prefix}.prompt_set", table["prompt_set"], _prompt_set_checker(ctx)), (None,)
    return _axis(ctx, f"{where}.prompt_set", merged["prompt_set"], _prompt_set_checker(ctx)), (None,)


def _prompt_set_checker(ctx: _Ctx):
    def check(key: str, value: Any) -> str:
        name = _string(ctx, key, value)
        if is_builtin(name):
            return name
        if name.endswith(".jsonl") or "/" in name:
            path = (ctx.path.parent / Path(name).expanduser()).resolve()
            if not path.is_file():
                ctx.fail(key, f"prompt set file not found: {path}")
            return str(path)
        hint = f"{_suggest(name, BUILTIN_PROMPT_SETS)}; built-ins: {', '.join(BUILTIN_PROMPT_SETS)}"
        ctx.fail(key, f"unknown prompt set '{name}'{hint} (or give the path of a .jsonl file)")

    return check


def _check_top_k(
    ctx: _Ctx,
    key: str,
    top_ks: tuple[int | None, ...],
    targets: tuple[str, ...],
    models: dict[str, ModelSpec],
) -> None:
    if top_ks == (None,):
        return
    for name in targets:
        spec = models[name]
        if spec.zoo is None:
            continue  # a path model's shape is only known once it is loaded
        shape = _zoo_shape(spec)
        if not shape.is_moe:
            ctx.fail(
                key, f"moe_top_k applies to MoE targets only, but '{name}' is dense; move it to its own group"
            )
        for k in top_ks:
            if k is not None and k > shape.num_experts:
                ctx.fail(key, f"moe_top_k must be <= {shape.num_experts} (the experts of '{name}'), got {k}")


def _model_ref(ctx: _Ctx, key: str, value: Any, models: dict[str, ModelSpec]) -> str:
    name = _string(ctx, key, value)
    if name not in models:
        ctx.fail(
            key, f"unknown model '{name}'{_suggest(name, tuple(models))}; define it under [models.{name}]"
        )
    return name


def _draft_ref(ctx: _Ctx, key: str, value: Any, models: dict[str, ModelSpec]) -> str:
    """The canonical spelling of a draft (`specmoe.engine.draft_spec`), so "ngram" and "ngram:1-3",
    or "oracle:0.60" and "oracle:0.6", are one run."""
    text = _string(ctx, key, value)
    try:
        draft = parse_draft(text)
    except SpecmoeError as err:
        ctx.fail(key, str(err))
    if isinstance(draft, ModelDraft):
        return _model_ref(ctx, key, text, models)
    return str(draft)


# --- scalar checks -------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


def _suggest(value: str, options: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _table(ctx: _Ctx, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        ctx.fail(key, f"expected a table, got {_type_name(value)}")
    return value


def _string(ctx: _Ctx, key: str, value: Any) -> str:
    if not isinstance(value, str):
        ctx.fail(key, f"expected a string, got {_type_name(value)} {value!r}")
    return value


def _int(ctx: _Ctx, key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        ctx.fail(key, f"expected an integer, got {_type_name(value)} {value!r}")
    if value < minimum:
        ctx.fail(key, f"{_leaf(key)} must be >= {minimum}, got {value}")
    return value


def _float(ctx: _Ctx, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        ctx.fail(key, f"expected a number, got {_type_name(value)} {value!r}")
    if not value >= 0.0:  # also rejects nan
        ctx.fail(key, f"{_leaf(key)} must be >= 0, got {value}")
    return float(value)


def _choice(ctx: _Ctx, key: str, value: Any, options: tuple[str, ...]) -> str:
    text = _string(ctx, key, value)
    if text not in options:
        ctx.fail(
            key, f"unknown {_leaf(key)} '{text}'{_suggest(text, options)}; choose from {', '.join(options)}"
        )
    return text


def _device(ctx: _Ctx, key: str, value: Any) -> str:
    text = _string(ctx, key, value)
    if not _DEVICE_RE.fullmatch(text):
        ctx.fail(key, f"unknown device '{text}'; use cpu, mps, cuda or cuda:<index>")
    return text


def _axis(ctx: _Ctx, key: str, value: Any, check, allow_empty: bool = False) -> tuple:
    """A grid axis: one value or a list of values, each checked; duplicates dropped, order kept."""
    if value is None:
        return (None,)
    values = value if isinstance(value, list) else [value]
    if not values and not allow_empty:
        ctx.fail(key, f"{_leaf(key)} must not be empty; give at least one value")
    return tuple(dict.fromkeys(check(key, v) for v in values))


# --- expansion -----------------------------------------------------------------------------------


def expand(suite: Suite) -> list[RunSpec]:
    """Every RunSpec of the suite, repeat outermost: all of repeat 0, then all of repeat 1, ...

    Within a repeat, specs follow the file: group order, then the grid (target outermost, so the
    runner switches models rarely), then the prompt batch; each SD spec follows its baseline. Each
    grid point measures ⌈N / B⌉ batches of its set's N selected prompts (`prompts`). Specs are
    deduplicated by run_id; a run shared by two groups keeps the first group's name. The order in
    which a runner measures them is `specmoe.bench.plan.plan`'s.
    """
    specs: dict[str, RunSpec] = {}
    points = [(group, point) for group in suite.groups for point in _grid(suite, group)]
    for repeat in range(max(group.repeats for group in suite.groups)):
        for group, point in points:
            if repeat >= group.repeats:
                continue
            for batch in range(_batches(point)):
                spec = replace(point, repeat=repeat, prompt_batch=batch)
                baseline = spec.baseline()
                specs.setdefault(baseline.run_id, baseline)
                specs.setdefault(spec.run_id, spec)
    return list(specs.values())


def _batches(spec: RunSpec) -> int:
    """Prompt batches a grid point measures: ⌈selected prompts / B⌉; one for servers and for
    synthetic prompts without an explicit count."""
    if spec.concurrency is not None:
        return 1
    if spec.prompt_length is not None:
        return batch_count(spec.prompts or spec.batch_size, spec.batch_size)
    return batch_count(selection_size(len(load_prompts(spec.prompt_set)), spec.prompts), spec.batch_size)


def _grid(suite: Suite, group: Group):
    axes = itertools.product(
        group.target,
        group.draft or (None,),
        group.gamma,
        group.prompt_set,
        group.prompt_length,
        group.batch_size,
        group.concurrency,
        group.request_rate,
        group.moe_top_k,
        group.temperature,
        group.max_new_tokens,
        group.dtype,
        group.device,
    )
    for (
        target,
        draft,
        gamma,
        prompt_set,
        length,
        batch,
        concurrency,
        rate,
        top_k,
        temperature,
        new_tokens,
        dtype,
        device,
    ) in axes:
        target_model = suite.model(target)
        draft_model = None
        spec = draft_of(draft)
        if isinstance(spec, OracleDraft):
            draft_model = suite.model(group.oracle_cost)
        elif isinstance(spec, ModelDraft):
            draft_model = suite.model(spec.name)
        yield RunSpec(
            suite=suite.name,
            group=group.name,
            arm="baseline" if draft is None else "sd",
            target=target,
            draft=draft,
            gamma=gamma if draft is not None else 0,
            prompt_set=prompt_set,
            prompt_length=length,
            batch_size=batch,
            temperature=temperature,
            max_new_tokens=new_tokens,
            moe_top_k=_effective_top_k(target_model, top_k),
            dtype=dtype,
            device=device,
            repeat=0,
            warmup=group.warmup,
            oracle_cost=group.oracle_cost if isinstance(spec, OracleDraft) else None,
            target_model=target_model,
            draft_model=draft_model,
            concurrency=concurrency,
            request_rate=rate,
            requests=group.requests,
            prompts=None if concurrency is not None else group.prompts,
            compile=group.compile and concurrency is None,
            chat=group.chat and concurrency is None,
        )


def _effective_top_k(model: ModelSpec, top_k: int | None) -> int | None:
    # Zoo MoE targets always carry their real top-k, so an override equal to the preset's own value
    # is the same run as no override at all.
    if model.zoo is None:
        return top_k
    shape = _zoo_shape(model)
    if not shape.is_moe:
        return None
    return shape.top_k if top_k is None else top_k


__all__ = [
    "ARMS",
    "BUILTIN_PROMPT_SETS",
    "GRID_AXES",
    "SCHEMA_VERSION",
    "Group",
    "ModelSpec",
    "RunSpec",
    "Suite",
    "builtin_suite_path",
    "expand",
    "load_suite",
    "parse_suite",
    "resolve_suite_path",
]
