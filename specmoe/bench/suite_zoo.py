"""The zoo a suite runs on: where it is cached and building it before the first run, and the
suite's config models (`config =`), each built into its own cache folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.zoo.cache import default_zoo_dir


def prepare_zoo(suite, zoo: Path | None, progress: Callable[[str], None] | None = None) -> Path | None:
    """Build the suite's zoo if it names zoo models, and its config models; a complete build is
    reused."""
    build_config_models(suite, progress)
    if not any(m.zoo for m in suite.models.values()):
        return zoo
    from specmoe.zoo import build_zoo

    if zoo is None:
        zoo = default_zoo_dir(suite.zoo_preset, suite.zoo_seed)
        _check_cache(zoo)
    build_zoo(suite.zoo_preset, zoo, seed=suite.zoo_seed, progress=progress)
    return zoo


def build_config_models(suite, progress: Callable[[str], None] | None = None) -> None:
    """Build (or find built) every config model a run of the suite uses, on the device of its first
    run when that is a CUDA GPU (seconds there) and on the CPU otherwise."""
    from specmoe.suite.expand import expand
    from specmoe.suite.model_paths import config_source_of
    from specmoe.suite.types import CONFIG_WEIGHTS
    from specmoe.zoo.config_build import build_cached

    devices: dict[str, str] = {}
    for spec in expand(suite):
        for name in spec.model_names:
            devices.setdefault(name, spec.device)
    for name, model in suite.models.items():
        if model.config is None or name not in devices:
            continue
        device = devices[name] if devices[name].startswith("cuda") else "cpu"
        if device != "cpu":
            _check_cuda(suite, name, device)
        build_cached(
            config_source_of(model),
            seed=model.zoo_seed or 0,
            dtype=CONFIG_WEIGHTS,
            device=device,
            progress=progress,
        )


def _check_cuda(suite, name: str, device: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise SpecmoeError(
            f"suite {suite.name}: model {name} runs on {device} but torch sees no CUDA GPU; run the suite "
            "on a machine with one, or --set device=cpu"
        )


def _check_cache(zoo: Path) -> None:
    """The default zoo's folder can be made: a cache root that is a file (XDG_CACHE_HOME set to one
    by mistake, or ~/.cache a file) is named with the fix, not left to the build lock to trip on."""
    for folder in (zoo.parent, *zoo.parent.parents):
        if folder.exists():
            if not folder.is_dir():
                raise SpecmoeError(
                    f"cannot make the zoo cache {zoo}: {folder} is a file, not a folder; set "
                    "XDG_CACHE_HOME to a writable folder, or pass --zoo DIR"
                )
            return
