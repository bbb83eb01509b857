"""The zoo a suite runs on: where it is cached and building it before the first run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.zoo.cache import default_zoo_dir


def prepare_zoo(suite, zoo: Path | None, progress: Callable[[str], None] | None = None) -> Path | None:
    """Build the suite's zoo if it names zoo models; a complete build is reused."""
    if not any(m.zoo for m in suite.models.values()):
        return zoo
    from specmoe.zoo import build_zoo

    if zoo is None:
        zoo = default_zoo_dir(suite.zoo_preset, suite.zoo_seed)
        _check_cache(zoo)
    build_zoo(suite.zoo_preset, zoo, seed=suite.zoo_seed, progress=progress)
    return zoo


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
