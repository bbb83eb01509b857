"""Checks of a GGUF file's layout before llama.cpp reads it, like `weights` does for safetensors.

A GGUF file (version 2 or 3, little-endian) is: magic "GGUF", a uint32 version, uint64 counts of
tensors and metadata pairs; the metadata pairs (a string key, a uint32 value type, the value); one
record per tensor (a string name, uint32 dimension count, uint64 dimensions, uint32 ggml type,
uint64 offset into the data section); then, at the next multiple of `general.alignment` (32 by
default), the data section. Strings are a uint64 byte length and the bytes.

An interrupted copy or download keeps the header and loses the tail, so the check is that the
header parses within the file and that every tensor's bytes (offset + its type's size for its
element count) end within it. Only the header is read: milliseconds, even for a file of gigabytes.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from specmoe.errors import SpecmoeError

_FIXED_VALUE_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_DEFAULT_ALIGNMENT = 32
_FIX = "copy or export it again"


class _Truncated(Exception):
    """The header runs past the end of the file."""


@dataclass(frozen=True)
class TensorExtent:
    """Where one tensor's bytes lie, from the header alone."""

    name: str
    ggml_type: int
    elements: int
    start: int  # absolute byte offset in the file


class _Reader:
    """Little-endian reads from a byte buffer, each checked against its end."""

    def __init__(self, data: mmap.mmap | bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.data):
            raise _Truncated
        self.pos += n
        return start

    def unpack(self, fmt: str) -> int:
        return struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> bytes:
        length = self.unpack("<Q")
        start = self.take(length)
        return bytes(self.data[start : start + length])

    def skip_value(self, kind: int) -> None:
        if kind in _FIXED_VALUE_BYTES:
            self.take(_FIXED_VALUE_BYTES[kind])
        elif kind == _STRING:
            self.take(self.unpack("<Q"))
        elif kind == _ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            if item in _FIXED_VALUE_BYTES:
                self.take(count * _FIXED_VALUE_BYTES[item])
            else:  # strings or nested arrays: each takes at least 8 bytes, so EOF bounds the loop
                for _ in range(count):
                    self.skip_value(item)
        else:
            raise ValueError(f"unknown metadata value type {kind}")


def tensor_extents(data: mmap.mmap | bytes) -> list[TensorExtent] | None:
    """The tensors a GGUF header declares, with absolute start offsets; None for a version this
    parser does not know (llama.cpp then judges the file itself). Raises _Truncated or ValueError."""
    reader = _Reader(data)
    reader.take(4)  # the magic, checked by the caller
    version = reader.unpack("<I")
    if version not in (2, 3):
        return None
    tensors, pairs = reader.unpack("<Q"), reader.unpack("<Q")
    alignment = _DEFAULT_ALIGNMENT
    for _ in range(pairs):
        key, kind = reader.string(), reader.unpack("<I")
        if key == b"general.alignment" and kind == _UINT32:
            alignment = reader.unpack("<I")
        else:
            reader.skip_value(kind)
    if alignment < 1:
        raise ValueError(f"general.alignment is {alignment}")
    records = []
    for _ in range(tensors):
        name = reader.string().decode("utf-8", errors="replace")
        dims = [reader.unpack("<Q") for _ in range(reader.unpack("<I"))]
        ggml_type, offset = reader.unpack("<I"), reader.unpack("<Q")
        elements = 1
        for dim in dims:
            elements *= dim
        records.append((name, ggml_type, elements, offset))
    data_start = -(-reader.pos // alignment) * alignment
    return [TensorExtent(n, t, e, data_start + o) for n, t, e, o in records]


def tensor_bytes(ggml_type: int, elements: int) -> int | None:
    """Bytes of `elements` values of a ggml type (blocks of a quantised type), from the gguf
    package's table; None when the package or the type is unknown here."""
    try:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ImportError, ValueError, KeyError):
        return None
    return -(-elements // block) * size


def check_gguf_layout(path: Path) -> None:
    """Raise SpecmoeError when the GGUF file's header or any tensor's bytes run past its end.
    The caller has checked the magic."""
    size = path.stat().st_size
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        try:
            extents = tensor_extents(data)
        except _Truncated:
            raise SpecmoeError(
                f"'{path}': truncated GGUF file (its header runs past the file's {size} bytes); {_FIX}"
            ) from None
        except ValueError as err:
            raise SpecmoeError(f"'{path}': damaged GGUF header ({err}); {_FIX}") from None
    for tensor in extents or []:
        length = tensor_bytes(tensor.ggml_type, tensor.elements) or 0  # unknown type: its start only
        end = tensor.start + length
        if end > size:
            raise SpecmoeError(
                f"'{path}': truncated GGUF file (tensor {tensor.name} ends at byte {end}, past the "
                f"file's {size} bytes); {_FIX}"
            )


__all__ = ["TensorExtent", "check_gguf_layout", "tensor_bytes", "tensor_extents"]
