"""Floating-point dtypes by the names users write (`--dtype`, a suite's `dtype`), defined once.

Plain data at import time: torch is imported only when a name is turned into a `torch.dtype`, so the
suite loader and the performance model can check names without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# name -> bytes per element; the order is the one error messages list them in.
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
DTYPE_NAMES: tuple[str, ...] = tuple(DTYPE_BYTES)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype called `name` (one of DTYPE_NAMES; the caller has checked it)."""
    import torch

    return getattr(torch, name)
