"""A suite's size, checked before anything runs or is stored.

A typo in a suite file (batch_size = 2**40, prompts = 1000000, a 3000-value axis) otherwise sits
silent: expanding the grid into run specs, or building one batch of 2**40 prompts, takes hours or
all the memory before the first progress line. The runs are counted here with arithmetic on the
axes' lengths, never by listing them, and an absurd suite is refused in one line with the count.

The limits sit far above any real experiment and far below what hangs:
- batch_size 4096: serving engines run a few hundred sequences at once (vLLM's max_num_seqs defaults
  to 256), the shipped suites at most 64; a larger batch measures a KV cache that fits no machine.
- prompts 100,000 per grid point: Spec-Bench has 480 prompts, MT-Bench 80; a larger count only
  re-reads a set with numbered copies (`specmoe.prompts.prompt_batch`).
- 100,000 runs: at the CPU's fastest (a fraction of a second a run, plus warm-ups and checks) that is
  days of measuring, and the store's spec list alone takes minutes to build.
"""

from __future__ import annotations

import logging
import math

from specmoe.errors import SpecmoeError
from specmoe.prompts import batch_count, load_prompts, selection_size
from specmoe.suite.types import GRID_AXES, Group, Suite

log = logging.getLogger(__name__)

MAX_BATCH_SIZE = 4096
MAX_PROMPTS = 100_000
MAX_RUNS = 100_000
# Grid axes counted apart from the product of the others: the arms (drafts × γ, plus the baseline)
# and the prompt batches (which depend on the set, the prompt length and the batch size).
_COUNTED_APART = ("draft", "gamma", "prompt_set", "prompt_length", "batch_size")


def check_size(suite: Suite) -> int:
    """Raise SpecmoeError when a group's batch size or prompt count, or the suite's number of runs,
    is beyond the limits above; return the number of runs (an upper bound: a run shared by two
    groups is counted in each)."""
    set_sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    for group in suite.groups:
        where = f"in group '{group.name}' of {suite.path}"
        if max(group.batch_size) > MAX_BATCH_SIZE:
            raise SpecmoeError(
                f"batch_size {max(group.batch_size)} is above the limit of {MAX_BATCH_SIZE} sequences, "
                f"{where}; give batch sizes of at most {MAX_BATCH_SIZE}"
            )
        if group.prompts is not None and group.prompts > MAX_PROMPTS:
            raise SpecmoeError(
                f"prompts = {group.prompts} is above the limit of {MAX_PROMPTS} per grid point, {where}; "
                f'give a smaller count, or "all" for the whole set'
            )
        counts[group.name] = _group_runs(group, set_sizes)
    total = sum(counts.values())
    if total > MAX_RUNS:
        largest = max(counts, key=lambda name: counts[name])
        raise SpecmoeError(
            f"the suite would measure {total} runs, above the limit of {MAX_RUNS}, in {suite.path} "
            f"(group '{largest}': {counts[largest]}); shrink its axes, prompts or repeats, or split it"
        )
    return total


def _group_runs(group: Group, set_sizes: dict[str, int]) -> int:
    """Runs of one group, as `specmoe.suite.expand.expand` lists them: per grid point, one
    baseline and one SD run per (draft, gamma), each for every prompt batch and repeat."""
    others = math.prod(len(group.axis(name)) for name in GRID_AXES if name not in _COUNTED_APART)
    arms = 1 + len(group.draft) * len(group.gamma) if group.draft else 1
    batches = 0
    for prompt_set in group.prompt_set:
        for length in group.prompt_length:
            for batch_size in group.batch_size:
                batches += _batches(group, prompt_set, length, batch_size, set_sizes)
    return group.repeats * arms * others * batches


def _batches(group: Group, prompt_set: str | None, length: int | None, batch_size: int, sizes: dict) -> int:
    """Prompt batches of one grid point (`expand._batches`); a served group counts one."""
    if group.served:
        return 1
    if length is not None or prompt_set is None:
        return batch_count(group.prompts or batch_size, batch_size)
    if prompt_set not in sizes:
        sizes[prompt_set] = len(load_prompts(prompt_set))
    return batch_count(selection_size(sizes[prompt_set], group.prompts), batch_size)


def warn_copies(suite: Suite) -> list[str]:
    """Say, once per group and prompt set, when `prompts` asks for more prompts than the set holds:
    the rest are numbered copies (`specmoe.prompts.prompt_batch`), measured and labelled as such in
    the summaries, but no new draws from the prompt kind, so an interval over them is narrower than
    the set's prompts allow. Valid (a batch sweep may want it), so said rather than refused."""
    sizes: dict[str, int] = {}
    lines = []
    for group in suite.groups:
        if group.prompts is None or group.served:
            continue
        for name in group.prompt_set:
            if name is None:
                continue
            if name not in sizes:
                sizes[name] = len(load_prompts(name))
            size = sizes[name]
            if group.prompts > size:
                copies = group.prompts - size
                lines.append(
                    f"group '{group.name}' of {suite.path}: prompts = {group.prompts} but prompt set {name} "
                    f"holds {size}, so {copies} of the {group.prompts} prompts each grid point measures are "
                    f"numbered copies, not new prompts, and intervals over them look surer than {size} "
                    f"prompt(s) allow; for an interval over prompts keep prompts <= {size} and raise repeats"
                )
    for line in lines:
        log.warning("%s", line)
    return lines
