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
# The dtype of `generate`, `profile`, `bench quick` and a suite's runs when none is named: one default,
# so that a profile's fit matches the runs of a suite made with the defaults (`bench report --fit`
# matches by model and dtype). float32 because it is safe everywhere: every CPU computes it natively
# (without bf16 matrix instructions bfloat16 is converted to float32 to multiply, and gains little or
# loses), and its rounding rarely flips the target's top token, so SD and plain decoding agree outside
# genuine near-ties. bfloat16 is faster on most CPUs with bf16 support (1.4-1.8x here, docs/decoding.md):
# ask for it with --dtype bfloat16.
DEFAULT_DTYPE = "float32"


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype called `name` (one of DTYPE_NAMES; the caller has checked it)."""
    import torch

    return getattr(torch, name)
