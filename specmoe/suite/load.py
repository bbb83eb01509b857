"""Reading a suite file: TOML, command-line overrides, the schema (`schema`), then [models]
and the groups (`groups`); every problem is one line naming the file and key (`errors`)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specmoe.backends import DEFAULT_BACKEND, available_backends, backend_for, backend_info, file_backends
from specmoe.errors import SpecmoeError
from specmoe.serving.spec import DEFAULT_TIMEOUT_S, ServerSpec
from specmoe.suite.errors import SuiteContext, explain, suggest
from specmoe.suite.groups import parse_group
from specmoe.suite.model_paths import spelled_path
from specmoe.suite.overrides import SuiteOverrides, apply_overrides
from specmoe.suite.schema import ModelTable, SuiteFile
from specmoe.suite.shipped import SUITES_DIR, shipped_suites
from specmoe.suite.types import SERVING_BACKEND, ModelSpec, Suite


def builtin_suite_path(name: str) -> Path:
    """specmoe/suites/<name>.toml (the suites ship inside the package)."""
    path = SUITES_DIR / f"{name}.toml"
    if not path.is_file():
        available = shipped_suites()
        if not available:
            raise SpecmoeError(
                f"no built-in suites at {SUITES_DIR} (specmoe is installed without its package data); "
                "reinstall specmoe, or pass the path of a suite .toml file instead"
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
    if path.is_dir():
        raise SpecmoeError(f"suite file {path} is a directory; pass the .toml file of a suite inside it")
    if not path.is_file():
        raise SpecmoeError(
            f"suite file not found: {path}; pass a .toml path or a built-in name "
            f"({', '.join(shipped_suites())})"
        )
    try:
        # utf-8-sig: a byte-order mark, which some editors write first, is not TOML's but no error
        raw = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except tomllib.TOMLDecodeError as err:
        where = str(err).replace("end of document", f"end of document, line {_line_count(path)}")
        raise SpecmoeError(f"{path}: TOML syntax error: {where}; fix the file at that position") from None
    except UnicodeDecodeError:
        raise SpecmoeError(f"{path}: not UTF-8 text; save the suite file as UTF-8") from None
    except RecursionError:  # the parser recurses per level; no suite nests more than a few
        raise SpecmoeError(
            f"{path}: arrays or tables nested too deeply to read (hundreds of levels); a suite's values "
            "are numbers, strings and lists of them: fix the file"
        ) from None
    if overrides:
        raw = apply_overrides(raw, overrides)
    return parse_suite(raw, path)


def parse_suite(raw: dict[str, Any], path: Path) -> Suite:
    """Validate a suite given as the parsed TOML table, as if read from `path` (relative paths are
    taken from its folder, errors name it): `load_suite` after reading, and `specmoe bench quick`,
    which builds the table from its arguments. The values go through the schema (`SuiteFile`),
    then the checks that tie tables together: zoo models against the preset, backends against the
    registry, groups against the models (`groups`)."""
    try:
        table = SuiteFile.model_validate(raw)
    except ValidationError as err:
        raise explain(err, path) from None
    ctx = SuiteContext(path)
    preset, seed = _preset(ctx, table.zoo.preset), table.zoo.seed
    models = {
        name: _parse_model(ctx, f"models.{name}", name, entry, preset, seed)
        for name, entry in table.models.items()
    }
    groups = tuple(
        parse_group(ctx, f"groups[{i}]", group, table.defaults, models)
        for i, group in enumerate(table.groups)
    )
    name = path.stem if table.name is None else table.name
    return Suite(name, table.description, path, preset, seed, models, groups)


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _preset(ctx: SuiteContext, preset: str | None) -> str | None:
    from specmoe.zoo.presets import PRESETS  # every preset the zoo builds, known here by name

    if preset is not None and preset not in PRESETS:
        hint = suggest(preset, tuple(PRESETS))
        ctx.fail("zoo.preset", f"unknown zoo preset '{preset}'{hint}; available: {', '.join(PRESETS)}")
    return preset


def _parse_model(
    ctx: SuiteContext, where: str, name: str, entry: ModelTable, preset: str | None, seed: int
) -> ModelSpec:
    """A model table the schema accepted (one of zoo, path or url; server keys on servers only),
    checked against the zoo preset, the backend registry and the file system."""
    if entry.url is not None:
        return _parse_served_model(ctx, where, name, entry)
    if entry.zoo is not None:
        if preset is None:
            ctx.fail(
                f"{where}.zoo", 'zoo models need a [zoo] table with preset = "tiny", "bench" or "trained"'
            )
        names = _zoo_model_names(preset)
        if entry.zoo not in names:
            hint = suggest(entry.zoo, names)
            ctx.fail(
                f"{where}.zoo",
                f"preset '{preset}' has no model '{entry.zoo}'{hint}; available: {', '.join(names)}",
            )
        backend = _backend(ctx, where, entry, DEFAULT_BACKEND.name)
        gguf = _gguf_type(ctx, where, entry, backend)
        return ModelSpec(name, entry.zoo, None, backend, preset, seed, gguf=gguf)
    if entry.config is not None:
        return _parse_config_model(ctx, where, name, entry, seed)
    assert entry.path is not None  # the schema's one-of
    resolved, hub_id = spelled_path(entry.path, ctx.path.parent)
    backend = _backend(ctx, where, entry, backend_for(entry.path).name)
    return ModelSpec(name, None, str(resolved), backend, hub_id=hub_id)


def _parse_config_model(ctx: SuiteContext, where: str, name: str, entry: ModelTable, seed: int) -> ModelSpec:
    """A config-built model: the file (relative to the suite) read and checked now, so a bad config
    is one line before anything runs; the model itself is built by `prepare_zoo`."""
    from specmoe.zoo.config_source import read_config_source

    assert entry.config is not None
    backend = _backend(ctx, where, entry, DEFAULT_BACKEND.name)
    if backend != DEFAULT_BACKEND.name:
        runs = f'{DEFAULT_BACKEND.label}: backend "{DEFAULT_BACKEND.name}"'
        ctx.fail(f"{where}.backend", f'config models run through {runs}, not "{backend}"')
    path = (ctx.path.parent / Path(entry.config).expanduser()).resolve()
    try:
        source = read_config_source(path, entry.overrides)
    except SpecmoeError as err:
        ctx.fail(f"{where}.config", str(err))
    return ModelSpec(
        name,
        None,
        None,
        backend,
        zoo_seed=seed,
        config=str(path),
        config_overrides=source.overrides,
        config_digest=source.digest,
    )


def _gguf_type(ctx: SuiteContext, where: str, entry: ModelTable, backend: str) -> str | None:
    """The GGUF export a llamacpp zoo model runs (f16 unless gguf = says otherwise); None for others."""
    from specmoe.zoo.gguf import DEFAULT_GGUF_TYPE, GGUF_TYPES

    if not backend_info(backend).reads_file:
        if entry.gguf is not None:
            needs = " or ".join(f'backend = "{name}"' for name in file_backends())
            ctx.fail(f"{where}.gguf", f"gguf = needs {needs}; add it or remove gguf")
        return None
    return ctx.choice(f"{where}.gguf", entry.gguf or DEFAULT_GGUF_TYPE, GGUF_TYPES)


def _backend(ctx: SuiteContext, where: str, entry: ModelTable, default: str) -> str:
    backend = entry.backend or default
    if backend not in available_backends():
        implied = "" if entry.backend else " (the default for .gguf paths)"
        ctx.fail(
            f"{where}.backend",
            f"unknown backend '{backend}'{implied}; "
            f"available: {', '.join([*available_backends(), SERVING_BACKEND])}",
        )
    return backend


def _parse_served_model(ctx: SuiteContext, where: str, name: str, entry: ModelTable) -> ModelSpec:
    """A server the schema accepted (a URL, a served model name, server keys only)."""
    assert entry.url is not None and entry.model is not None
    server = ServerSpec(
        url=entry.url,
        model=entry.model,
        engine=entry.engine or "generic",
        endpoint=entry.endpoint or "completions",
        api_key_env=entry.api_key_env,
        timeout_s=DEFAULT_TIMEOUT_S if entry.timeout_s is None else float(entry.timeout_s),
        tokenizer=None if entry.tokenizer is None else _tokenizer(ctx, f"{where}.tokenizer", entry.tokenizer),
    )
    return ModelSpec(name, None, None, SERVING_BACKEND, server=server)


def _tokenizer(ctx: SuiteContext, key: str, text: str) -> str:
    """A served model's local tokenizer directory: only synthetic prompts (prompt_length) need it,
    for their ids are made here."""
    found, hub_id = spelled_path(text, ctx.path.parent)
    if hub_id is not None:
        from specmoe.zoo.hub_cache import resolve_hub_id

        try:
            resolve_hub_id(hub_id)  # not cached: its one line says where it looked and what to do
        except SpecmoeError as err:
            ctx.fail(key, str(err))
    if not found.is_dir():
        ctx.fail(key, f"no model directory at {found}; give the served model's HF directory or hub ID")
    return str(found)


def _zoo_model_names(preset: str) -> tuple[str, ...]:
    from specmoe.zoo.presets import get_preset

    return get_preset(preset).zoo_names
