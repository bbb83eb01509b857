"""Where a suite's models live on disk: from the spelling in the file to the files a run loads.

A `path =` is taken from the suite file's folder when the suite loads (`spelled_path`); one that
reads as a hub ID ("org/name") and names no local file is looked up in the local Hugging Face cache
(`specmoe.zoo.hub_cache`, never the network), then and again when the model is needed, for the
cache may be filled in between. A zoo model is found through the zoo's manifest; a llamacpp zoo
model runs its GGUF export, made on first use; a config model (`config =`) lives in the per-user
cache folder of its config's digest, seed and weights dtype (`specmoe.zoo.config_build`).
Preflight and the runner's model pool both resolve through `local_files`, so what is checked is
what is loaded.
"""

from __future__ import annotations

from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.suite.types import ModelSpec


def spelled_path(text: str, base_dir: Path) -> tuple[Path, str | None]:
    """A path relative to the suite file, or for a hub ID ("org/name") no such path exists for, its
    snapshot in the local Hugging Face cache.

    Returns the path and, when `text` reads as a hub ID the cache does not hold, that ID: the path
    may still appear before the suite runs (a folder the suite's own setup writes), so loading the
    suite does not fail; preflight names the ID if the path is still missing then.
    """
    from specmoe.zoo.hub_cache import looks_like_hub_id, resolve_hub_id

    try:
        resolved = (base_dir / Path(text).expanduser()).resolve()
    except (RuntimeError, OSError):  # Python < 3.13 raises RuntimeError on a symlink loop
        raise SpecmoeError(
            f"model path {text} (from {base_dir}) is a symlink loop or unreadable; point path = at the model"
        ) from None
    if resolved.exists() or not looks_like_hub_id(text):
        return resolved, None
    try:
        return resolve_hub_id(text), None
    except SpecmoeError:
        return resolved, text


def local_files(model: ModelSpec, zoo_dir: Path | None) -> Path | None:
    """Where the model's files are now; None for a zoo model's GGUF export not made yet (`model_path`
    makes it), which preflight leaves to the run."""
    if model.config is not None:
        return config_model_dir(model)
    if model.path is not None:
        if model.hub_id is not None and not Path(model.path).exists():
            return _hub_snapshot(model)
        return Path(model.path)
    if model.gguf is not None:
        return None
    from specmoe.zoo import resolve_model

    return resolve_model(model.zoo, zoo_dir)


def model_path(model: ModelSpec, zoo_dir: Path | None) -> Path:
    """The file or directory a run loads the model from: `local_files`, or a llamacpp zoo model's
    GGUF export, exported now unless an up-to-date one exists."""
    found = local_files(model, zoo_dir)
    if found is not None:
        return found
    from specmoe.zoo.gguf import zoo_gguf

    assert model.zoo is not None and model.gguf is not None
    return zoo_gguf(zoo_dir, model.zoo, model.gguf)


def config_source_of(model: ModelSpec):
    """The `ConfigSource` a config model is built from, read again: a file edited since the suite was
    loaded is another model, refused rather than built under the old model's key."""
    from specmoe.zoo.config_source import read_config_source

    assert model.config is not None
    source = read_config_source(model.config, dict(model.config_overrides))
    if source.digest != model.config_digest:
        raise SpecmoeError(
            f"models.{model.name}.config: {model.config} changed while the suite ran; run the suite again"
        )
    return source


def config_model_dir(model: ModelSpec) -> Path:
    """Where a config model's directory is (or will be, once `prepare_zoo` builds it): the per-user
    cache folder of its config, seed and weights dtype."""
    from specmoe.suite.types import CONFIG_WEIGHTS
    from specmoe.zoo.config_build import config_cache_dir

    source = config_source_of(model)
    assert model.zoo_seed is not None
    return config_cache_dir(source, model.zoo_seed, CONFIG_WEIGHTS) / source.name


def _hub_snapshot(model: ModelSpec) -> Path:
    """The cached snapshot of a model the suite names by hub ID; the cache did not hold it when the
    suite was loaded, so this is most likely the one line that says so, under the model's key."""
    from specmoe.zoo.hub_cache import resolve_hub_id

    assert model.hub_id is not None
    try:
        return resolve_hub_id(model.hub_id)
    except SpecmoeError as err:
        raise SpecmoeError(f"models.{model.name}.path: {err}") from None


__all__ = ["config_model_dir", "config_source_of", "local_files", "model_path", "spelled_path"]
