"""`specmoe bench quick`: a sweep from command-line arguments, with no suite file to write first.

The arguments become a suite table (the same data a TOML suite holds), validated by the suite
parser (`parse_suite`, so there is one schema and one set of error messages), written as TOML next
to the store so the run can be repeated or edited with `specmoe bench run FILE --db DB`, and run.

One group, "quick": the target against every draft at every γ and batch size, each SD arm with its
baseline, on one prompt set (a built-in name or a JSONL file of `{"prompt": ...}` or
`{"text": ...}` lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from specmoe.drafts import is_reserved_name, parse_draft
from specmoe.dtypes import DEFAULT_DTYPE
from specmoe.errors import SpecmoeError
from specmoe.prompts import is_builtin, load_prompts
from specmoe.suite.load import parse_suite
from specmoe.suite.overrides import command_line_path
from specmoe.suite.schema import SCHEMA_VERSION
from specmoe.suite.types import Suite
from specmoe.user_files import check_regular
from specmoe.zoo.hub_cache import looks_like_hub_id, resolve_hub_id

SUITE_NAME = "bench-quick"
GROUP_NAME = "quick"
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class QuickArgs:
    """What `bench quick` was asked for, as given on the command line."""

    model: str  # a model directory, a .gguf file or a hub ID in the local HF cache
    drafts: tuple[str, ...]  # each a model as above, or "ngram[:MIN-MAX]"
    gammas: tuple[int, ...]
    batches: tuple[int, ...]
    db: Path
    dataset: str = "factual"  # a built-in prompt set or a .jsonl file
    num_prompts: int | None = None  # None: every prompt of the set
    max_new_tokens: int = 64
    temperature: float = 0.0
    dtype: str = DEFAULT_DTYPE
    device: str = "cpu"
    repeats: int = 1
    warmup: int = 1  # one untimed run per arm, so the first timed run pays no one-off start-up
    chat: bool = False


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    """ "2,4,8" -> (2, 4, 8); anything else is one line naming the option."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or any(v < 1 for v in values):
        raise SpecmoeError(f"{what} {text!r}: give whole numbers >= 1 separated by commas, e.g. 2,4,8")
    return values


def suite_path_for(db: Path) -> Path:
    """Where the suite of a quick run is written: beside the store, named after it."""
    return db.with_name(f"{db.stem}.suite.toml")


def model_name(spec: str) -> str:
    """A suite-local name for a model given by path or hub ID: its last path part, made safe."""
    stem = Path(spec.rstrip("/\\")).name.removesuffix(".gguf") or "model"
    name = _UNSAFE_RE.sub("-", stem).strip("-.") or "model"
    if not name[0].isalnum() or is_reserved_name(name):
        name = f"m-{name}"
    return name


def _model_source(spec: str, option: str) -> str:
    """An absolute path, or a hub ID kept as written once the local cache is found to hold it (so
    an absent model is one line, naming its option, before anything is written)."""
    source = command_line_path(spec)
    if source == spec and looks_like_hub_id(spec):
        resolve_hub_id(spec)
    elif not Path(source).exists():
        others = "ngram[:MIN-MAX], mtp or " if option == "--draft" else ""
        raise SpecmoeError(
            f"{option} {spec}: no such model directory or .gguf file ({source}); pass one, or "
            f"{others}a hub ID (org/name) in the local Hugging Face cache"
        )
    return source


def _dataset(text: str) -> str:
    """A built-in set's name, or the absolute path of a JSONL file after reading it once (a bad
    file is one line naming the file and line, before anything is written)."""
    if is_builtin(text):
        return text
    path = Path(text).expanduser()
    check_regular(path)  # a FIFO would block the read forever
    if not path.is_file():
        raise SpecmoeError(
            f'--dataset {text}: no such file; give a .jsonl file of {{"prompt": ...}} or '
            '{"text": ...} lines, or a built-in set (factual, code, reasoning, chinese)'
        )
    load_prompts(path)
    return str(path.resolve())


def quick_table(args: QuickArgs) -> dict[str, Any]:
    """The suite table of a quick run: what a suite file would hold (see docs/suites.md)."""
    if not args.drafts:
        raise SpecmoeError("bench quick needs at least one --draft (a model directory, hub ID or ngram)")
    models: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}  # model spec -> its suite-local name
    parsed = {spec: parse_draft(spec) for spec in (args.model, *args.drafts)}  # the one parse
    for spec, draft in parsed.items():
        if draft.needs_cost_model:
            raise SpecmoeError(
                f"--draft {spec}: oracle drafts need a cost model; write a suite file (docs/suites.md)"
            )
        if draft.model_name is None or spec in names:
            continue
        name = base = model_name(spec)
        count = 2
        while name in models:
            name, count = f"{base}-{count}", count + 1
        names[spec] = name
        models[name] = {"path": _model_source(spec, "--model" if spec == args.model else "--draft")}
    drafts = [spec if parsed[spec].model_name is None else names[spec] for spec in args.drafts]
    group: dict[str, Any] = {
        "name": GROUP_NAME,
        "target": names[args.model],
        "draft": list(dict.fromkeys(drafts)),
        "gamma": list(args.gammas),
        "batch_size": list(args.batches),
        "prompt_set": _dataset(args.dataset),
        "prompts": "all" if args.num_prompts is None else args.num_prompts,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "dtype": args.dtype,
        "device": args.device,
        "repeats": args.repeats,
        "warmup": args.warmup,
    }
    if args.chat:
        group["chat"] = True
    return {
        "schema": SCHEMA_VERSION,
        "name": SUITE_NAME,
        "description": "written by `specmoe bench quick`; rerun or edit with `specmoe bench run`",
        "models": models,
        "groups": [group],
    }


def build_quick_suite(args: QuickArgs) -> tuple[Suite, Path]:
    """The validated suite of a quick run and the TOML file it was written to (written only once the
    suite is valid, so a bad argument leaves no file behind)."""
    table = quick_table(args)
    path = suite_path_for(args.db)
    suite = parse_suite(table, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(table), encoding="utf-8")
    return suite, path
