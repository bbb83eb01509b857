"""What `specmoe findings` measures: which shipped suites, at which scale.

`full` runs the shipped suites as written (hours on a CPU). `cpu` is a shorter pass of the same
designs that fits about an hour on one CPU core: the groups the claims rest on, fewer tokens and
batch sizes, two repeats (the least that gives a confidence interval). Every setting a pass
changes is stored in each run's config, so the exported rows say what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specmoe.bench.overrides import SuiteOverrides
from specmoe.errors import SpecmoeError


@dataclass(frozen=True)
class Step:
    name: str  # also the name of the step's store and export files
    suite: str  # a shipped suite's name
    overrides: SuiteOverrides = field(default_factory=SuiteOverrides)


@dataclass(frozen=True)
class Profile:
    """A `specmoe profile` of one bench-zoo model, fitted after for the predictions."""

    model: str
    batches: tuple[int, ...]
    tokens: tuple[int, ...]
    dtype: str = "float32"  # as the moesd suite runs
    context: int = 64
    repeats: int = 3

    @property
    def name(self) -> str:
        return f"{self.model}-{self.dtype}"


# The moesd suite's batch range, so its speedups are predicted inside the profiled grid. Targets
# get verify widths up to γ + 1 = 5; the draft needs 1 and 2 tokens (a round's first draft step
# carries two).
_PROFILE_BATCHES = (1, 2, 4, 8, 16, 32, 64)
PROFILES = (
    Profile("moe", _PROFILE_BATCHES, (1, 2, 3, 5)),
    Profile("dense-s", _PROFILE_BATCHES, (1, 2, 3, 5)),
    Profile("draft-xs", _PROFILE_BATCHES, (1, 2)),
)

_CPU = (
    Step(
        "moesd",
        "moesd",
        SuiteOverrides(
            settings=(
                ("batch.draft", ["oracle:0.9"]),
                ("batch.gamma", [2, 4]),
                ("batch.batch_size", [1, 4, 16, 32, 64]),
                ("sparsity.batch_size", [1, 4, 16, 64]),
            ),
        ),
    ),
    Step(
        "study",
        "study",
        SuiteOverrides(settings=(("max_new_tokens", 32), ("repeats", 2)), groups=("B", "D")),
    ),
    Step("family", "family"),
)

_FULL = (Step("moesd", "moesd"), Step("study", "study"), Step("family", "family"))

SCALES: dict[str, tuple[Step, ...]] = {"cpu": _CPU, "full": _FULL}


def plan(scale: str) -> tuple[Step, ...]:
    if scale not in SCALES:
        raise SpecmoeError(f"unknown findings scale '{scale}'; available: {', '.join(SCALES)}")
    return SCALES[scale]
