"""Are the weights at each model's path still those the store's runs measured?

A run key names a model by its suite name and path, not by its weights: retrain a model in place,
or point a suite at a directory whose files were replaced, and a resumed suite would call the old
runs "already measured" and pair them with new ones. Every row records the fingerprint of the
weights it measured (`env.weights`, `specmoe.backends.weights.weights_fingerprint`); before a
suite resumes, each model's files are fingerprinted again and a change is said, once per model.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from specmoe.results.store import RunRow
from specmoe.suite.types import SERVING_BACKEND, Suite

log = logging.getLogger(__name__)


def changed_weights(rows: Iterable[RunRow], now: Mapping[str, str]) -> list[str]:
    """One line per model whose fingerprint `now` differs from the one stored runs recorded."""
    stale: Counter[tuple[str, str]] = Counter()
    for row in rows:
        for name, stored in (row.env.get("weights") or {}).items():
            if name in now and stored != now[name]:
                stale[(name, stored)] += 1
    return [
        f"model '{name}': its weights are not those {count} stored run(s) measured (fingerprint {stored} "
        f"then, {now[name]} now); resuming would pair two models' numbers: measure into a new --db, or "
        "restore the files"
        for (name, stored), count in sorted(stale.items())
    ]


def current_weights(suite: Suite, zoo_dir: Path | None, names: Iterable[str]) -> dict[str, str]:
    """Fingerprints of the named local models as their files are now; a zoo model's GGUF export
    not made yet, and served models, have none."""
    from specmoe.backends.weights import weights_fingerprint
    from specmoe.bench.runner import ModelPool
    from specmoe.zoo.gguf import zoo_gguf_path

    pool, found = ModelPool(suite, zoo_dir), {}
    for name in sorted(set(names) & set(suite.models)):
        model = suite.models[name]
        if model.backend == SERVING_BACKEND:
            continue
        if model.path is None and model.gguf is not None:
            path = zoo_gguf_path(zoo_dir, model.zoo, model.gguf)
            if not path.is_file():
                continue
        else:
            path = pool.path(name)
        found[name] = weights_fingerprint(path)
    return found


def warn_changed_weights(suite: Suite, zoo_dir: Path | None, rows: list[RunRow]) -> list[str]:
    """Say, once per model, that stored runs measured other weights than the files hold now."""
    names = {name for row in rows for name in (row.env.get("weights") or {})}
    lines = changed_weights(rows, current_weights(suite, zoo_dir, names)) if names else []
    for line in lines:
        log.warning("%s", line)
    return lines
