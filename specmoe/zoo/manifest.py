"""Reading a built zoo: its manifest (zoo.json), the `specmoe zoo list` table, model name lookup.

Only JSON and paths here, no torch: listing a zoo or resolving a model name stays cheap.

zoo.json is written last by `build_zoo`, so its presence means every model directory is complete.
While a build runs, `.zoo-build.json` holds the build's arguments; finding it without zoo.json means
the build was interrupted, and rerunning the same command finishes it.
"""

import json
from pathlib import Path

from specmoe.backends import backend_for
from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError
from specmoe.zoo.hub_cache import looks_like_hub_id, resolve_hub_id

MANIFEST_NAME = "zoo.json"
IN_PROGRESS_NAME = ".zoo-build.json"
MANIFEST_FORMAT = 1
BUILD_HINT = "build it with `specmoe zoo build --preset tiny --out DIR`"


_ROW_KEYS = ("architecture", "experts", "top_k", "total_params", "active_params", "bytes_bf16")


def load_manifest(zoo_dir: Path) -> dict:
    """The parsed zoo.json of a complete build in zoo_dir."""
    zoo_dir = Path(zoo_dir)
    manifest_path = zoo_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        if (zoo_dir / IN_PROGRESS_NAME).is_file():
            raise SpecmoeError(
                f"zoo build in {zoo_dir} did not finish (interrupted?); rerun the same "
                "`specmoe zoo build` command to complete it"
            )
        raise SpecmoeError(f"no zoo at {zoo_dir} ({MANIFEST_NAME} missing); {BUILD_HINT}")
    fix = "rebuild the zoo into a new --out"
    try:
        manifest = json_value(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SpecmoeError(f"{manifest_path} is not valid UTF-8 JSON ({err}); {fix}") from None
    except OSError as err:
        raise SpecmoeError(f"{manifest_path} cannot be read ({err.strerror}); {fix}") from None
    if not isinstance(manifest, dict):
        raise SpecmoeError(f"{manifest_path} is not a JSON object; {fix}")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise SpecmoeError(
            f"{manifest_path} has format {manifest.get('format')!r}, this specmoe reads {MANIFEST_FORMAT}; "
            "rebuild the zoo into a new --out"
        )
    models = manifest.get("models")
    # Every reader indexes these: a hand-edited or truncated manifest is refused here, in one line.
    if not isinstance(models, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("path"), str) and set(_ROW_KEYS) <= entry.keys()
        for entry in models.values()
    ):
        raise SpecmoeError(
            f"{manifest_path}: models is not a table of model entries (path, {', '.join(_ROW_KEYS)}); {fix}"
        )
    heads = manifest.get("heads", {})
    if not isinstance(heads, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("path"), str) for entry in heads.values()
    ):
        raise SpecmoeError(f"{manifest_path}: heads is not a table of head entries (path, ...); {fix}")
    return manifest


def zoo_rows(zoo_dir: Path) -> list[dict]:
    """One row per model, in manifest order: name, arch, total_params, active_params, bytes, path."""
    zoo_dir = Path(zoo_dir)
    manifest = load_manifest(zoo_dir)
    return [
        {
            "name": name,
            "arch": entry["architecture"],
            "experts": entry["experts"],
            "top_k": entry["top_k"],
            "total_params": entry["total_params"],
            "active_params": entry["active_params"],
            "bytes": entry["bytes_bf16"],
            "path": str(zoo_dir / entry["path"]),
        }
        for name, entry in manifest["models"].items()
    ] + [
        {
            "name": name,
            "arch": f"{entry.get('kind', name)} head"
            + (f" in {entry['path']}" if entry["path"] != name else ""),
            "experts": 0,
            "top_k": 0,
            "total_params": entry.get("params", 0),
            "active_params": entry.get("active_params", entry.get("params", 0)),
            "bytes": entry.get("bytes_bf16", 0),
            "path": str(zoo_dir / entry["path"]),
        }
        for name, entry in manifest.get("heads", {}).items()
    ]


def format_count(n: int) -> str:
    """A parameter count with a decimal suffix: 831.0M, 684.4K."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def format_bytes(n_bytes: int) -> str:
    """A size in decimal units (1 GB = 1e9 bytes): 1.66 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.2f} {unit}"
    return f"{n_bytes} B"


def format_zoo_table(rows: list[dict]) -> str:
    """A plain-text table of `zoo_rows` output; sizes are decimal (1 GB = 1e9 bytes), bf16."""
    header = ("name", "arch", "experts", "total", "active", "bf16 size")
    body = [
        (
            row["name"],
            row["arch"],
            f"{row['top_k']}/{row['experts']}" if row["experts"] else "-",
            format_count(row["total_params"]),
            format_count(row["active_params"]),
            format_bytes(row["bytes"]),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(len(header))]

    def render(line: tuple[str, ...]) -> str:
        # Text columns left-aligned, numbers right-aligned.
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return "\n".join([render(header), *(render(line) for line in body)])


def resolve_model_file(spec: str, zoo_dir: Path | None) -> Path:
    """`resolve_model`, or a .gguf file's path as given (its backend checks the file when it loads it)."""
    if backend_for(spec).reads_file:
        return Path(spec).expanduser()
    return resolve_model(spec, zoo_dir)


def resolve_model(spec: str, zoo_dir: Path | None) -> Path:
    """A model directory from a path, from a zoo model name looked up in zoo_dir's manifest, or from
    a hub ID ("org/name") found in the local Hugging Face cache (`specmoe.zoo.hub_cache`).

    A path wins when it is a model directory (has config.json); a hub ID is looked up only when no
    such path exists; otherwise the name is looked up in the zoo.
    """
    path = Path(spec).expanduser()
    if (path / "config.json").is_file():
        return path
    if not path.exists() and looks_like_hub_id(spec):
        return resolve_hub_id(spec)
    zoo_dir = None if zoo_dir is None else Path(zoo_dir)
    if zoo_dir is not None and (zoo_dir / MANIFEST_NAME).is_file():
        manifest = load_manifest(zoo_dir)
        models = manifest["models"]
        if spec in models:
            return zoo_dir / models[spec]["path"]
        heads = manifest.get("heads", {})
        if spec in heads and heads[spec]["path"] == spec:  # a head in a folder of its own (EAGLE-3)
            return zoo_dir / spec
        models = {**models, **{name: e for name, e in heads.items() if e["path"] == name}}
        where = f"not a model directory and not in the zoo at {zoo_dir} (has: {', '.join(models)})"
    elif zoo_dir is not None:
        where = f"not a model directory, and {zoo_dir} holds no built zoo"
    else:
        where = "not a model directory (no config.json) and no zoo directory was given"
    raise SpecmoeError(f"model '{spec}' not found: {where}; {BUILD_HINT}")
