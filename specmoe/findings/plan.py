"""What `specmoe findings` measures: which shipped suites, at which scale.

`full` runs the shipped suites as written (hours on a CPU). `cpu` is a shorter pass of the same
designs that fits about an hour and a half on one CPU core: the groups the claims rest on, fewer
tokens, drafts, γ values and batch sizes, and never fewer than five paired units per cell (the least
that gives a confidence interval; ten at batch size 1). Every setting a pass
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

# The cpu pass measures every prompt of a set as a paired unit (`prompts = 10`: the sets' 9-10
# prompts, the 9-prompt reasoning set topped up with one numbered copy), and trims the grid instead:
# study groups B and D only, drafts draft-xs, draft-s and n-gram, dense-l as D's target (the one
# claim b compares), γ 4 and 8, 32 new tokens, one repeat; moesd's batch sweep at oracle 0.9, γ 2
# and 4, B 1-64 in four steps, five repeats so that every batch size has at least five units (B = 64
# decodes all ten prompts, with copies, per batch); the sparsity sweep at top-k 1, 4 and 8, B 1, 16
# and 64.
_CPU = (
    Step(
        "moesd",
        "moesd",
        SuiteOverrides(
            settings=(
                ("batch.draft", ["oracle:0.9"]),
                ("batch.gamma", [2, 4]),
                ("batch.batch_size", [1, 4, 16, 64]),
                ("sparsity.batch_size", [1, 16, 64]),
                ("sparsity.moe_top_k", [1, 4, 8]),
                ("repeats", 5),
            ),
        ),
    ),
    Step(
        "study",
        "study",
        SuiteOverrides(
            settings=(
                ("max_new_tokens", 32),
                ("repeats", 1),
                ("prompts", 10),
                ("B.draft", ["draft-xs", "draft-s", "ngram"]),
                ("D.target", ["dense-l"]),
                ("gamma", [4, 8]),
            ),
            groups=("B", "D"),
        ),
    ),
    Step("family", "family", SuiteOverrides(settings=(("repeats", 1), ("prompts", 10)))),
)

_FULL = (Step("moesd", "moesd"), Step("study", "study"), Step("family", "family"))

SCALES: dict[str, tuple[Step, ...]] = {"cpu": _CPU, "full": _FULL}


def plan(scale: str) -> tuple[Step, ...]:
    if scale not in SCALES:
        raise SpecmoeError(f"unknown findings scale '{scale}'; available: {', '.join(SCALES)}")
    return SCALES[scale]
