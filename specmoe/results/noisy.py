"""What a run flagged noisy means to a reader of results: the busy-machine limit the noise guard
(`specmoe.bench.noise`) judges a run by, the switch that turns it off, and what to do about flagged
runs. A flagged row keeps its numbers (`RunRow.noisy`, the reason in `measure["noise"]`) and is left
out of every interval and verdict."""

from __future__ import annotations

OTHER_CPU_LIMIT = 0.25  # cores' worth of other processes' CPU during a run before it is disturbed
GUARD_ENV = "SPECMOE_NOISE_GUARD"  # "0" turns the guard off: loads are still recorded, never judged


# What to do about flagged runs, printed once under any table that lists them. A store keeps
# flagged runs as finished (a rerun skips them), hence the new store.
NOISE_FIX = (
    "to measure them undisturbed, run the suite again into a new store (--db) on cores nothing else "
    "uses, e.g. `taskset -c 2 specmoe bench run SUITE --db new.db --threads 1`; or set "
    f"{GUARD_ENV}=0 to keep every run (its numbers then include the disturbance)"
)
