"""Models named by Hugging Face hub ID ("org/name"), found in the local hub cache, never downloaded.

A machine that has run `hf download org/name` (or loaded the model through transformers once) holds
it under `<cache>/models--org--name/snapshots/<commit>/`, with `refs/main` naming the commit. This
module finds that folder with `huggingface_hub.snapshot_download(local_files_only=True)`, which
reads only the cache, and with HF_HUB_OFFLINE=1 set for the look-up, so no request ever leaves the
machine. The cache is the one huggingface_hub uses: HF_HUB_CACHE, else HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub, read when a look-up is made (not at
import), so a test or a user can point it elsewhere.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path

from specmoe.backends import backend_for
from specmoe.errors import SpecmoeError

# "org/name" as the hub spells repository IDs: one slash, no "..", no leading "." or "-".
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def looks_like_hub_id(text: str) -> bool:
    """Whether `text` has the shape of a hub repository ID (the caller checks no local path has it)."""
    # A GGUF file is read by llama.cpp from disk; the hub cache holds repositories, never one file.
    return bool(_HUB_ID_RE.fullmatch(text)) and ".." not in text and not backend_for(text).reads_file


def hub_cache_dir() -> Path:
    """The hub cache folder huggingface_hub would use, from the environment as it is now."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


@contextmanager
def _offline():
    """HF_HUB_OFFLINE=1 for the duration: belt and braces beside local_files_only."""
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = before


def resolve_hub_id(repo_id: str) -> Path:
    """The cached snapshot folder of `repo_id` (its `main` revision); a SpecmoeError in one line when
    the cache does not hold it or the snapshot is not a model (no config.json)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache = hub_cache_dir()
    try:
        with _offline():
            folder = Path(snapshot_download(repo_id, cache_dir=cache, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError):
        raise SpecmoeError(
            f"model '{repo_id}' is not a local directory and not in the local Hugging Face cache "
            f"({cache}); download it with `hf download {repo_id}` on a machine with access (and copy "
            "the cache here, or set HF_HUB_CACHE), or pass a model directory"
        ) from None
    if not (folder / "config.json").is_file():
        raise SpecmoeError(
            f"model '{repo_id}' in the local Hugging Face cache ({folder}) has no config.json; "
            f"download the whole model with `hf download {repo_id}`, or pass a model directory"
        )
    return folder
