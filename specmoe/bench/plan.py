"""The order a suite is measured in: blocks of paired arms, back to back, in a seeded random order.

A *block* is one prompt batch in one repeat of one baseline configuration: the baseline arm and every
SD arm compared against it (different drafts, γ), all decoding the same prompts. A runner measures a
block's arms one right after the other, so a speedup's two tokens/s come seconds apart rather than
after every other baseline of the suite, and drift of the machine (thermal state, other load,
caches) is shared by both arms of a pair instead of landing on one of them. Within a block the arms
run in an order drawn afresh for every block (seeded by the block's baseline run id, so the same
suite always runs in the same order), so no arm is always first — or always right after a warm-up.

Blocks run repeat by repeat (`expand`'s order): every configuration's repeat 0 before any repeat 1,
so repeats of one batch are minutes apart and a suite cut short holds whole repeats.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass

from specmoe.suite.expand import expand
from specmoe.suite.types import RunSpec, Suite


@dataclass(frozen=True)
class Block:
    """The arms measured back to back on one prompt batch in one repeat, in measurement order."""

    specs: tuple[RunSpec, ...]

    @property
    def baseline_id(self) -> str:
        """The run id of the baseline the block's arms pair with (stored already, or in the block)."""
        return self.specs[0].baseline().run_id

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(s.run_id for s in self.specs)


def plan(suite: Suite) -> list[Block]:
    """Every spec of the suite grouped into blocks, in measurement order."""
    return blocks(expand(suite))


def blocks(specs: Iterable[RunSpec]) -> list[Block]:
    """Group specs by the baseline run they pair with; blocks keep the order of their baselines'
    first appearance, and the arms of each block are shuffled with a seed from its baseline run id.

    A block whose baseline is not among `specs` (already stored) still forms: its SD arms are
    measured together, and compared with the stored baseline.
    """
    grouped: dict[str, list[RunSpec]] = {}
    for spec in specs:
        grouped.setdefault(spec.baseline().run_id, []).append(spec)
    return [Block(tuple(arm_order(key, arms))) for key, arms in grouped.items()]


def arm_order(seed_key: str, arms: list[RunSpec]) -> list[RunSpec]:
    """The arms in a random order drawn from `seed_key` (sha256, so it does not depend on the Python
    process's hash seed)."""
    ordered = sorted(arms, key=lambda s: (s.arm, s.run_id))  # the shuffle's input must not vary
    random.Random(int(hashlib.sha256(seed_key.encode()).hexdigest(), 16)).shuffle(ordered)
    return ordered
