"""Runs a store holds from before prompt files were keyed by their content keep their keys.

A prompt set read from a file is part of a run's key by content (`RunSpec.prompt_digest`), so a file
edited in place is measured again rather than taken as already measured. Runs stored before that
were keyed by the file's path alone; a store that holds such runs of a file goes on using path keys
for it, so those runs resume as they always did instead of being measured a second time. Their
content was never recorded, so an edit to such a file cannot be told from here: a new store (or a
new file name) gives that file content keys.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace

from specmoe.suite.types import RunSpec

log = logging.getLogger(__name__)


def path_keyed(spec: RunSpec) -> RunSpec:
    """The spec as it was keyed before prompt files were keyed by content."""
    return replace(spec, prompt_digest=None)


def keep_stored_keys(specs: Sequence[RunSpec], stored_ids: Iterable[str]) -> list[RunSpec]:
    """The specs, with those of every prompt file the store holds path-keyed runs of keyed by path.

    Decided per file, not per run, so an SD arm and its baseline keep one kind of key and still pair.
    """
    stored = set(stored_ids)
    legacy = {
        spec.prompt_set
        for spec in specs
        if spec.prompt_digest is not None and path_keyed(spec).run_id in stored
    }
    return [path_keyed(s) if s.prompt_digest is not None and s.prompt_set in legacy else s for s in specs]


def warn_path_keys(specs: Sequence[RunSpec], kept: Sequence[RunSpec]) -> list[str]:
    """Say, once per prompt file, that `keep_stored_keys` kept its path keys: an edit to it since its
    stored runs were measured cannot be told, so a resumed suite would take them as measured."""
    files = sorted(
        {s.prompt_set for s, k in zip(specs, kept, strict=True) if s.prompt_digest and not k.prompt_digest}
    )
    lines = [
        f"prompt file {name}: this store's runs of it are keyed by its path (measured before prompt files "
        "were keyed by content), so an edit to it since cannot be told and its stored runs resume as "
        "they are; measure into a new --db to key it by what it holds"
        for name in files
    ]
    for line in lines:
        log.warning("%s", line)
    return lines


__all__ = ["keep_stored_keys", "path_keyed", "warn_path_keys"]
