"""Reading a suite file: TOML, command-line overrides, the top-level tables and [models], then the
groups (`suite_groups`); every problem is one line naming the file and key (`suite_checks`)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from specmoe.bench.overrides import SuiteOverrides, apply_overrides
from specmoe.bench.server_engines import ENGINES
from specmoe.bench.server_spec import (
    DEFAULT_TIMEOUT_S,
    ENDPOINTS,
    ServerSpec,
    normalize_url,
    without_userinfo,
)
from specmoe.bench.suite import LLAMACPP_BACKEND, SERVING_BACKEND, Group, ModelSpec, Suite
from specmoe.bench.suite_checks import SuiteContext, suggest
from specmoe.bench.suite_groups import parse_group
from specmoe.bench.suite_schema import (
    DEFAULTS_KEYS,
    MODEL_KEYS,
    SCHEMA_VERSION,
    SERVER_KEYS,
    TOP_KEYS,
    ZOO_KEYS,
)
from specmoe.engine.draft_spec import NGRAM, is_reserved_name
from specmoe.errors import SpecmoeError

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"

_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


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
    ctx = SuiteContext(path)
    ctx.check_keys("", raw, TOP_KEYS)
    _check_schema(ctx, raw)
    preset, seed = _parse_zoo(ctx, raw.get("zoo", {}))
    models = _parse_models(ctx, raw.get("models"), preset, seed, path.parent)
    defaults = ctx.table("defaults", raw.get("defaults", {}))
    ctx.check_keys("defaults", defaults, DEFAULTS_KEYS)
    groups_raw = raw.get("groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        ctx.fail("groups", "a suite needs at least one [[groups]] table")
    groups = tuple(
        parse_group(ctx, f"groups[{i}]", ctx.table(f"groups[{i}]", g), defaults, models)
        for i, g in enumerate(groups_raw)
    )
    _check_unique_group_names(ctx, groups)
    name = ctx.string("name", raw.get("name", path.stem))
    description = ctx.string("description", raw.get("description", ""))
    return Suite(name, description, path, preset, seed, models, groups)


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _check_schema(ctx: SuiteContext, raw: dict[str, Any]) -> None:
    if "schema" not in raw:
        ctx.fail("schema", f"missing; put `schema = {SCHEMA_VERSION}` at the top of the file")
    schema = raw["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA_VERSION:
        ctx.fail("schema", f"unsupported schema {schema!r}; this specmoe reads schema = {SCHEMA_VERSION}")


def _check_unique_group_names(ctx: SuiteContext, groups: tuple[Group, ...]) -> None:
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if group.name in seen:
            ctx.fail(
                f"groups[{i}].name", f"duplicate group name '{group.name}'; give each group its own name"
            )
        seen.add(group.name)


def _parse_zoo(ctx: SuiteContext, raw: Any) -> tuple[str | None, int]:
    zoo = ctx.table("zoo", raw)
    ctx.check_keys("zoo", zoo, ZOO_KEYS)
    seed = ctx.integer("zoo.seed", zoo.get("seed", 0), minimum=0)
    if "preset" not in zoo:
        return None, seed
    preset = ctx.string("zoo.preset", zoo["preset"])
    from specmoe.zoo.presets import PRESETS  # every preset the zoo builds, known here by name

    if preset not in PRESETS:
        hint = suggest(preset, tuple(PRESETS))
        ctx.fail("zoo.preset", f"unknown zoo preset '{preset}'{hint}; available: {', '.join(PRESETS)}")
    return preset, seed


def _parse_models(
    ctx: SuiteContext, raw: Any, preset: str | None, seed: int, base_dir: Path
) -> dict[str, ModelSpec]:
    if raw is None:
        ctx.fail("models", "no models; declare each one as [models.<name>] with zoo = or path =")
    models = {}
    for name, entry in ctx.table("models", raw).items():
        where = f"models.{name}"
        if not _NAME_RE.fullmatch(name) or is_reserved_name(name):
            ctx.fail(
                where,
                f"bad model name '{name}'; use letters, digits, '_', '.', '-' (not 'oracle...' or '{NGRAM}')",
            )
        models[name] = _parse_model(ctx, where, name, ctx.table(where, entry), preset, seed, base_dir)
    return models


def _parse_model(
    ctx: SuiteContext,
    where: str,
    name: str,
    entry: dict[str, Any],
    preset: str | None,
    seed: int,
    base_dir: Path,
) -> ModelSpec:
    ctx.check_keys(where, entry, MODEL_KEYS)
    if sum(k in entry for k in ("zoo", "path", "url")) != 1:
        ctx.fail(
            where, 'give exactly one of zoo = "<zoo model>", path = "<HF dir or .gguf>" or url = "<server>"'
        )
    if "url" in entry:
        return _parse_served_model(ctx, where, name, entry)
    for key in SERVER_KEYS:
        if key in entry:
            ctx.fail(f"{where}.{key}", f"{key} applies to served models (url = ...) only; remove it")
    if "zoo" in entry:
        zoo = ctx.string(f"{where}.zoo", entry["zoo"])
        if preset is None:
            ctx.fail(
                f"{where}.zoo", 'zoo models need a [zoo] table with preset = "tiny", "bench" or "trained"'
            )
        names = _zoo_model_names(preset)
        if zoo not in names:
            hint = suggest(zoo, names)
            ctx.fail(
                f"{where}.zoo", f"preset '{preset}' has no model '{zoo}'{hint}; available: {', '.join(names)}"
            )
        backend = _backend(ctx, where, entry, "hf")
        return ModelSpec(name, zoo, None, backend, preset, seed, gguf=_gguf_type(ctx, where, entry, backend))
    if "gguf" in entry:
        ctx.fail(f"{where}.gguf", "gguf = picks a zoo model's export; a path names its .gguf file itself")
    text = ctx.string(f"{where}.path", entry["path"])
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


def _gguf_type(ctx: SuiteContext, where: str, entry: dict[str, Any], backend: str) -> str | None:
    """The GGUF export a llamacpp zoo model runs (f16 unless gguf = says otherwise); None for others."""
    from specmoe.zoo.gguf import DEFAULT_GGUF_TYPE, GGUF_TYPES

    if backend != LLAMACPP_BACKEND:
        if "gguf" in entry:
            ctx.fail(f"{where}.gguf", f'gguf = needs backend = "{LLAMACPP_BACKEND}"; add it or remove gguf')
        return None
    return ctx.choice(f"{where}.gguf", entry.get("gguf", DEFAULT_GGUF_TYPE), GGUF_TYPES)


def _backend(ctx: SuiteContext, where: str, entry: dict[str, Any], default: str) -> str:
    backend = ctx.string(f"{where}.backend", entry.get("backend", default))
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


def _parse_served_model(ctx: SuiteContext, where: str, name: str, entry: dict[str, Any]) -> ModelSpec:
    backend = ctx.string(f"{where}.backend", entry.get("backend", SERVING_BACKEND))
    if backend != SERVING_BACKEND:
        ctx.fail(f"{where}.backend", f'a model with url = is served: backend must be "{SERVING_BACKEND}"')
    if "gguf" in entry:
        ctx.fail(f"{where}.gguf", "gguf = picks the export of a zoo model; a server loads its own weights")
    url = normalize_url(ctx.string(f"{where}.url", entry["url"]))
    if url is None:
        shown = without_userinfo(str(entry["url"]))  # never echo a password
        ctx.fail(f"{where}.url", f"not a server URL: {shown!r}; write http://host:port")
    if "model" not in entry:
        ctx.fail(f"{where}.model", 'a served model needs model = "<its name on the server>" (GET /v1/models)')
    key_env = entry.get("api_key_env")
    if key_env is not None and not _ENV_NAME_RE.fullmatch(ctx.string(f"{where}.api_key_env", key_env)):
        # Never echo the value: it may be a key pasted by mistake.
        ctx.fail(
            f"{where}.api_key_env",
            "not an environment variable name; give the name of the variable that holds the key "
            "(e.g. OPENAI_API_KEY), never the key itself",
        )
    tokenizer = None
    if "tokenizer" in entry:  # only for synthetic prompts (prompt_length): the ids are made here
        text = ctx.string(f"{where}.tokenizer", entry["tokenizer"])
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
    if ctx.number(f"{where}.timeout_s", timeout) <= 0:
        ctx.fail(f"{where}.timeout_s", f"timeout_s must be > 0, got {timeout}")
    server = ServerSpec(
        url=url,
        model=ctx.string(f"{where}.model", entry["model"]),
        engine=ctx.choice(f"{where}.engine", entry.get("engine", "generic"), tuple(ENGINES)),
        endpoint=ctx.choice(f"{where}.endpoint", entry.get("endpoint", "completions"), ENDPOINTS),
        api_key_env=key_env,
        timeout_s=float(timeout),
        tokenizer=tokenizer,
    )
    return ModelSpec(name, None, None, SERVING_BACKEND, server=server)


def _zoo_model_names(preset: str) -> tuple[str, ...]:
    from specmoe.zoo.presets import get_preset

    return get_preset(preset).model_names
