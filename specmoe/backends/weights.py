"""Checks of a model directory's safetensors files before anything loads them.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON naming each tensor's
dtype, shape and [begin, end) byte range in the data section, then the data section. Reading only
the header tells whether the file is complete: the data section must end exactly where the largest
`end` says. An interrupted copy fails that test, so it is refused in one line before transformers
reads it (and fails with a traceback, or worse, loads part of it). Cost: one small read per file.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from specmoe.backends.config_shape import check_config_shape
from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError
from specmoe.user_files import read_user_text

_HEADER_LENGTH_BYTES = 8
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit (safetensors refuses larger headers)
INDEX_FILE = "model.safetensors.index.json"


def safetensors_header(path: Path) -> dict[str, dict]:
    """The tensors a safetensors file declares ({name: {"dtype", "shape", "data_offsets"}}), after
    checking the file is complete; raises SpecmoeError naming the file and the fix otherwise."""
    fix = "copy or download it again"
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(_HEADER_LENGTH_BYTES)
        if len(head) < _HEADER_LENGTH_BYTES:
            raise SpecmoeError(f"{path}: {size} bytes, too short for a safetensors file; {fix}")
        (length,) = struct.unpack("<Q", head)
        if length > _MAX_HEADER_BYTES or _HEADER_LENGTH_BYTES + length > size:
            raise SpecmoeError(
                f"{path}: truncated or not a safetensors file (header of {length} bytes in a "
                f"{size}-byte file); {fix}"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SpecmoeError(f"{path}: unreadable safetensors header; {fix}") from None
    if not isinstance(header, dict):
        raise SpecmoeError(f"{path}: unreadable safetensors header; {fix}")
    tensors = {name: info for name, info in header.items() if name != "__metadata__"}
    data_bytes = size - _HEADER_LENGTH_BYTES - length
    try:
        needed = max((int(info["data_offsets"][1]) for info in tensors.values()), default=0)
    except (TypeError, KeyError, IndexError, ValueError):
        raise SpecmoeError(f"{path}: malformed safetensors header (tensor offsets); {fix}") from None
    if needed != data_bytes:
        state = "truncated" if needed > data_bytes else "longer than its header says"
        raise SpecmoeError(f"{path}: {state} ({data_bytes} data bytes, the header says {needed}); {fix}")
    return tensors


def check_safetensors_dir(model_dir: Path) -> dict[str, dict]:
    """Every tensor of a directory's safetensors weights, by name, with every file checked complete.

    A sharded checkpoint's index must name only files that exist; every *.safetensors file in the
    directory is checked either way (a stray partial file is a sign of an interrupted copy too).
    """
    index = model_dir / INDEX_FILE
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise SpecmoeError(
                f"{index}: not a valid safetensors index (weight_map); copy it again"
            ) from None
        missing = sorted(s for s in shards if not (model_dir / s).is_file())
        if missing:
            raise SpecmoeError(
                f"{model_dir}: {len(missing)} weight shard(s) named in {INDEX_FILE} are missing "
                f"(first: {missing[0]}); is the download complete?"
            )
    tensors: dict[str, dict] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        tensors.update(safetensors_header(file))
    return tensors


def read_config(path: Path) -> dict:
    """The model directory's config.json as a dict, refused in one line naming config.json when it is
    not UTF-8 JSON holding an object (transformers would fail with a TypeError, or blame the tokenizer)
    or its shape keys describe no network (`config_shape`)."""
    config_file = path / "config.json"
    try:
        config = json_value(read_user_text(config_file))
    except UnicodeDecodeError:
        raise SpecmoeError(f"'{config_file}' is not UTF-8 text; restore the model's config.json") from None
    except json.JSONDecodeError as err:
        where = f"({err.msg}, line {err.lineno})"
        raise SpecmoeError(
            f"'{config_file}' is not valid JSON {where}; restore the model's config.json"
        ) from None
    except OSError as err:
        raise SpecmoeError(
            f"'{config_file}' cannot be read ({err.strerror}); restore the model's config.json"
        ) from None
    if not isinstance(config, dict):
        kind = {list: "an array", str: "a string"}.get(type(config), "a scalar")
        raise SpecmoeError(f"'{config_file}' is not a JSON object ({kind}); restore the model's config.json")
    check_config_shape(config, f"'{config_file}'", "restore the model's own config.json")
    return config


FINGERPRINT_HEAD_BYTES = 1 << 20  # a safetensors or GGUF header and the first tensors
FINGERPRINT_BLOCKS = 16
FINGERPRINT_BLOCK_BYTES = 64 * 1024
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")


def weights_fingerprint(path: Path) -> str:
    """12 hex digits naming a model's weights, to tell whether the files at a path are still the ones
    a stored run measured.

    Over each weight file (a directory's, sorted by name; or the file itself): its name, its size,
    its first MiB (the header) and 16 blocks of 64 KiB spread evenly through it; and a directory's
    config.json. It reads about 2 MiB a file whatever the file's size, so it costs milliseconds;
    weights that were trained, converted or quantized again differ in every block. It is no
    checksum: one byte changed between two blocks goes unseen.
    """
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    digest = hashlib.sha256()
    if path.is_dir() and (path / "config.json").is_file():
        digest.update((path / "config.json").read_bytes())
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.name}\0{size}\0".encode())
        with file.open("rb") as handle:
            digest.update(handle.read(FINGERPRINT_HEAD_BYTES))
            for i in range(FINGERPRINT_BLOCKS):
                handle.seek(size * i // FINGERPRINT_BLOCKS)
                digest.update(handle.read(FINGERPRINT_BLOCK_BYTES))
    return digest.hexdigest()[:12]
