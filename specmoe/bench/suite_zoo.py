"""The zoo a suite runs on: where it is cached and building it before the first run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specmoe.zoo.cache import default_zoo_dir


def prepare_zoo(suite, zoo: Path | None, progress: Callable[[str], None] | None = None) -> Path | None:
    """Build the suite's zoo if it names zoo models; a complete build is reused."""
    if not any(m.zoo for m in suite.models.values()):
        return zoo
    from specmoe.zoo import build_zoo

    zoo = zoo or default_zoo_dir(suite.zoo_preset, suite.zoo_seed)
    build_zoo(suite.zoo_preset, zoo, seed=suite.zoo_seed, progress=progress)
    return zoo
