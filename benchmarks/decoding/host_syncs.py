"""Counting what a decode loop would make a GPU wait for, on any device, CPU included.

Not part of the package: this measures it (benchmarks/decoding/decode_overhead.py, tests/test_host_syncs.py).

On a CUDA GPU the host queues kernels and runs ahead of them, until it needs a value the device
computes or hands the device host memory to copy from. Those points drain the queue: the GPU idles
while the host does its Python work, and an eager step costs host time plus device time instead of
the larger of the two. They are the same calls on every device, so they can be counted on a CPU:

- *host reads*: `.item()`, `.tolist()`, `int()`, `float()`, `bool()` of a tensor (also the hidden
  `bool()` of `if tensor:` and `x and tensor`), `.nonzero()` (its output shape is data);
- *uploads*: a tensor made from Python data with a `device` named (`torch.tensor(rows, device=d)`):
  a blocking copy from pageable memory on CUDA;
- *async uploads*: host values sent by `specmoe.backends.slots.to_device`, which on CUDA copies
  through pinned memory without waiting (one copy op each there, none on a CPU; not a sync);
- *ops*: aten operators that compute (views excluded), about one kernel launch each on a GPU;
- *allocations*: ops whose output is new memory (an in-place write or a view is not), and its bytes;
- *Python calls* (`python_calls`, a separate run): Python functions entered, inside the forwards and
  out: the host's work per step, which no device can hide when the GPU waits for it.

Every count is attributed to a *region*: inside the forward of a model named in `models` ("model"),
or outside ("host loop": the decode loop, the backend's cache bookkeeping, transformers' `generate()`
loop). Counting costs time; never time a run while counting it.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_READS = {"tolist", "item", "__bool__", "__int__", "__float__", "__index__"}
_DATA_DEPENDENT = {"aten::nonzero", "aten::masked_select", "aten::unique_dim", "aten::_unique2"}
_NOT_OPS = {"aten::_local_scalar_dense", "aten::item", "aten::lift_fresh", "aten::detach", "aten::alias"}


@dataclass
class RegionCounts:
    """What one region did: host reads by kind, uploads, compute ops, allocations and their bytes."""

    reads: Counter = field(default_factory=Counter)
    uploads: int = 0
    async_uploads: int = 0
    ops: int = 0
    allocations: int = 0
    allocated_bytes: int = 0
    op_names: Counter = field(default_factory=Counter)

    @property
    def syncs(self) -> int:
        """Host reads plus uploads: every point where a GPU's queue would drain."""
        return sum(self.reads.values()) + self.uploads

    def as_dict(self, per: float = 1.0) -> dict:
        return {
            "syncs": self.syncs / per,
            "reads": {k: v / per for k, v in sorted(self.reads.items())},
            "uploads": self.uploads / per,
            "async_uploads": self.async_uploads / per,
            "ops": self.ops / per,
            "allocations": self.allocations / per,
            "allocated_mb": self.allocated_bytes / per / 1e6,
        }


class SyncCounter:
    """Counts host reads, uploads, ops and allocations per region while entered (`counting`)."""

    def __init__(self) -> None:
        self.regions: dict[str, RegionCounts] = {"model": RegionCounts(), "host loop": RegionCounts()}
        self.forwards = 0
        self._depth = 0  # > 0 inside a counted model's forward

    @property
    def region(self) -> RegionCounts:
        return self.regions["model" if self._depth else "host loop"]

    def enter_model(self, *_args, **_kwargs) -> None:
        self._depth += 1
        if self._depth == 1:
            self.forwards += 1

    def leave_model(self, *_args, **_kwargs) -> None:
        self._depth -= 1


class _Functions(TorchFunctionMode):
    def __init__(self, counter: SyncCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in _READS:
            self.counter.region.reads[name] += 1
        return func(*args, **(kwargs or {}))


class _Dispatch(TorchDispatchMode):
    def __init__(self, counter: SyncCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        region = self.counter.region
        if name in _NOT_OPS or func.is_view:
            return out
        region.ops += 1
        region.op_names[name] += 1
        if name in _DATA_DEPENDENT:
            region.reads["nonzero"] += 1
        inputs = {t.untyped_storage().data_ptr() for t in _tensors(args, kwargs)}
        for tensor in _tensors(out):
            if tensor.numel() and tensor.untyped_storage().data_ptr() not in inputs:
                region.allocations += 1
                region.allocated_bytes += tensor.numel() * tensor.element_size()
        return out


def _tensors(*trees) -> Iterator[torch.Tensor]:
    for tree in trees:
        if isinstance(tree, torch.Tensor):
            yield tree
        elif isinstance(tree, list | tuple):
            yield from _tensors(*tree)
        elif isinstance(tree, dict):
            yield from _tensors(*tree.values())


@contextlib.contextmanager
def counting(*models) -> Iterator[SyncCounter]:
    """Count while entered; work inside any of `models`' forwards goes to the "model" region."""
    counter = SyncCounter()
    hooks = []
    for model in models:
        hooks.append(model.register_forward_pre_hook(counter.enter_model))
        hooks.append(model.register_forward_hook(counter.leave_model))
    real_tensor, real_as_tensor = torch.tensor, torch.as_tensor

    def uploading(make):
        def wrapped(data, *args, **kwargs):
            if kwargs.get("device") is not None and not isinstance(data, torch.Tensor):
                counter.region.uploads += 1
            return make(data, *args, **kwargs)

        return wrapped

    torch.tensor, torch.as_tensor = uploading(real_tensor), uploading(real_as_tensor)
    restore = _count_async_uploads(counter)
    try:
        with _Functions(counter), _Dispatch(counter):
            yield counter
    finally:
        torch.tensor, torch.as_tensor = real_tensor, real_as_tensor
        restore()
        for hook in hooks:
            hook.remove()


def _count_async_uploads(counter: SyncCounter):
    """Wrap `slots.to_device` wherever a module imported it; returns the undo."""
    try:
        from specmoe.backends import slots
    except ImportError:  # a version of specmoe before it: every upload is a blocking one
        return lambda: None
    real = slots.to_device

    def counted(*args, **kwargs):
        counter.region.async_uploads += 1
        return real(*args, **kwargs)

    holders = [m for m in list(sys.modules.values()) if getattr(m, "to_device", None) is real]
    for module in holders:
        module.to_device = counted

    def restore() -> None:
        for module in holders:
            module.to_device = real

    return restore


@contextlib.contextmanager
def python_calls(*models) -> Iterator[dict]:
    """Count the Python function calls made while entered, by region: result["model"] (inside the
    models' forwards: transformers' own Python, its mask building included) and result["host
    loop"]. Without the counting modes above, whose own Python would be counted."""
    counter = SyncCounter()
    hooks = []
    for model in models:
        hooks.append(model.register_forward_pre_hook(counter.enter_model))
        hooks.append(model.register_forward_hook(counter.leave_model))
    result = {"model": 0, "host loop": 0}
    own = __file__

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code.co_filename != own:
            result["model" if counter._depth else "host loop"] += 1

    sys.setprofile(profile)
    try:
        yield result
    finally:
        sys.setprofile(None)
        for hook in hooks:
            hook.remove()
