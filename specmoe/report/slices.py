"""Which configurations one figure shows, and how configurations are named in it.

A figure plots y against one axis (x) with one line per series; every other axis must then hold a
single value, or points measured under different settings would share a line. `best_slice` picks,
among the combinations of those other axes present in the results, the one that gives the figure
the most points, and returns the values it holds fixed so the caption can state them.

The target axis is the model together with its top-k: the same MoE run at another top-k is another
model for every view.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from specmoe.suite.types import GRID_AXES

# The axes of a suite grid, moe_top_k folded into "target" and request_rate left to the serving
# tables. Concurrency is the requests in flight of a server run (None for local runs, which have
# batch_size instead). "prompts" is a group setting, not a grid axis, but two groups that decode
# different selections of one set (10 prompts, 16) are different measurements: it is told apart
# wherever it varies, and says nothing where a run decodes the whole set.
AXES = (*(a for a in GRID_AXES if a not in ("moe_top_k", "request_rate")), "prompts")
# Axes a baseline configuration has no value for.
SD_ONLY_AXES = ("draft", "gamma")


class Configured(Protocol):
    @property
    def config(self) -> dict[str, Any]: ...


T = TypeVar("T", bound=Configured)


@dataclass(frozen=True)
class Slice(Generic[T]):
    items: tuple[T, ...]
    fixed: dict[str, Any]  # axis -> value, for every axis that is neither x nor a series axis


def axis_value(config: dict[str, Any], axis: str) -> Any:
    if axis == "target":
        return (config.get("target"), config.get("moe_top_k"))
    return config.get(axis)


def best_slice(items: Iterable[T], x: str, series: Sequence[str], min_x: int = 1) -> Slice[T] | None:
    """The largest set of items that differ only in x and the series axes.

    Series with fewer than `min_x` distinct x values are dropped (a "y vs x" line needs two points);
    None when nothing is left. Ties go to the combination seen first, so the choice is stable.
    """
    rest = [a for a in AXES if a != x and a not in series]
    groups: dict[str, list[T]] = defaultdict(list)
    for item in items:
        groups[_key(item.config, rest)].append(item)
    best: list[T] = []
    for group in groups.values():
        kept = _series_with_enough_x(group, x, series, min_x)
        if len(kept) > len(best):
            best = kept
    if not best:
        return None
    return Slice(items=tuple(best), fixed={a: axis_value(best[0].config, a) for a in rest})


def _series_with_enough_x(group: list[T], x: str, series: Sequence[str], min_x: int) -> list[T]:
    xs: dict[str, set[str]] = defaultdict(set)
    for item in group:
        xs[_key(item.config, series)].add(_key(item.config, [x]))
    return [item for item in group if len(xs[_key(item.config, series)]) >= min_x]


def _key(config: dict[str, Any], axes: Iterable[str]) -> str:
    return json.dumps([axis_value(config, a) for a in axes], sort_keys=True, default=str)


# Every table of the report lists its rows in this order, as `specmoe bench summary` does: target,
# draft, γ, batch size, then the other axes; figures that list configurations follow it too.
SORT_FIRST = ("target", "draft", "gamma", "batch_size")
SORT_AXES = (*SORT_FIRST, *(a for a in AXES if a not in SORT_FIRST))


def sort_key(config: dict[str, Any], axes: Sequence[str] = SORT_AXES) -> tuple:
    """A configuration's place in the report's tables: by `axes` in order, numbers by value before
    text, an unset value last, except that no draft (a baseline) comes before its target's drafts."""
    key: list[tuple] = []
    for axis in axes:
        value = axis_value(config, axis)
        if axis == "draft":
            key.append((value is not None, _value_order(value)))
        else:
            key.append(_value_order(value))
    return tuple(key)


def sorted_by_config(items: Iterable[T], axes: Sequence[str] = SORT_AXES) -> list[T]:
    """Items in the report's row order (`sort_key`); ties keep their order."""
    return sorted(items, key=lambda item: sort_key(item.config, axes))


def _value_order(value: Any) -> tuple:
    """Numbers before text and by value; tuples (a target and its top-k) item by item; None last."""
    if isinstance(value, tuple):
        return tuple(_value_order(v) for v in value)
    if value is None:
        return (2, 0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, str(value))


def group_by(items: Iterable[T], axes: Sequence[str]) -> list[list[T]]:
    """Items grouped by their values on `axes`, groups and members in first-seen order."""
    groups: dict[str, list[T]] = defaultdict(list)
    for item in items:
        groups[_key(item.config, axes)].append(item)
    return list(groups.values())


def varying_axes(configs: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """Axes taking more than one value across the configs (draft and γ: across SD configs only)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for config in configs:
        is_sd = config.get("draft") is not None
        for axis in AXES:
            if is_sd or axis not in SD_ONLY_AXES:
                seen[axis].add(_key(config, [axis]))
    return tuple(a for a in AXES if len(seen[a]) > 1)


def format_axis(axis: str, value: Any) -> str:
    """One axis value in words, with its unit."""
    return _FORMATS.get(axis, lambda v: f"{axis}={v}")(value)


def _target(value: tuple[str, int | None]) -> str:
    name, top_k = value
    return str(name) if top_k is None else f"{name} (top-{top_k})"


# A run has either a prompt set or a synthetic prompt length; the unset one says nothing.
def _prompt_set(value: str | None) -> str:
    return "" if value is None else f"prompt set {value}"


def _prompt_length(value: int | None) -> str:
    return "" if value is None else f"prompt {value} tokens"


_FORMATS: dict[str, Callable[[Any], str]] = {
    "target": _target,
    "draft": lambda v: "no draft" if v is None else str(v),
    "gamma": lambda v: f"γ={v}",
    "prompt_set": _prompt_set,
    "prompt_length": _prompt_length,
    "batch_size": lambda v: f"B={v}",
    "prompts": lambda v: "" if v is None else f"{v} prompts",
    "concurrency": lambda v: "" if v is None else f"concurrency {v}",
    "temperature": lambda v: f"temperature {v}",
    "max_new_tokens": lambda v: f"{v} new tokens",
    "dtype": str,
    "device": str,
}


def label(config: dict[str, Any], axes: Sequence[str]) -> str:
    """The config's values on `axes`, e.g. "moe (top-2) · draft-xs · γ=4"."""
    return " · ".join(filter(None, (format_axis(a, axis_value(config, a)) for a in axes)))


def describe_fixed(fixed: dict[str, Any], varying: Sequence[str]) -> str:
    """The fixed values worth stating: those of axes that vary somewhere in the result set."""
    return ", ".join(filter(None, (format_axis(a, v) for a, v in fixed.items() if a in varying)))
