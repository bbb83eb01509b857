"""Writing and fingerprinting the zoo's files: one definition for every builder and fetcher."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 16 MiB chunks (weight files run to gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON through a temporary file and a rename: a reader sees the old file or the new one,
    never half of one (the zoo's manifests and cache markers are read to decide what to rebuild)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def apply_umask(path: Path) -> None:
    # safetensors writes through a private temporary file (mode 0600); a zoo is often built once
    # and read by other users or containers, so give it the permissions a plain write would.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
