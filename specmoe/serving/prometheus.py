"""Speculative-decoding counters from a server's Prometheus `/metrics` text.

A run reads the counters just before its first request and just after its last response; its
counts are the differences. Counters are server-wide: requests from anyone else during the run are
counted too, so a benchmark should have the server to itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from specmoe.errors import SpecmoeError
from specmoe.serving.servers import EngineMetrics


@dataclass(frozen=True)
class Snapshot:
    """Counter totals at one moment: sample name -> sum over label sets; per-position totals."""

    totals: dict[str, float]
    per_position: dict[int, float]
    gauges: dict[str, float]  # recorded name -> mean over label sets


@dataclass(frozen=True)
class SpecCounters:
    """A run's speculative-decoding counts; None where the server does not report one."""

    rounds: int | None  # sequence-rounds that verified a draft
    drafted: int | None
    accepted: int | None
    accepted_by_position: tuple[int, ...] | None  # accepted draft tokens at position 1, 2, ...
    source: str  # "metrics", "responses" or "none"


UNKNOWN = SpecCounters(None, None, None, None, "none")


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of every sample in a Prometheus text exposition."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        hint = "pip install -c constraints.txt -e '.[serve]'"
        raise SpecmoeError(f"reading a server's /metrics needs prometheus_client: {hint}") from None
    try:
        return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    except ValueError as err:
        raise SpecmoeError(f"malformed /metrics text ({err}); is this a Prometheus endpoint?") from None


def snapshot(text: str, engine: EngineMetrics) -> Snapshot:
    """The engine's counters and gauges in one `/metrics` text; names it lacks are left out."""
    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    gauge_values: dict[str, list[float]] = {}
    gauge_names = dict((sample, name) for name, sample in engine.gauges)
    for name, labels, value in parse_samples(text):
        if name in engine.counters:
            totals[name] = totals.get(name, 0.0) + value
        elif name == engine.accepted_per_position and "position" in labels:
            position = int(labels["position"])
            per_position[position] = per_position.get(position, 0.0) + value
        elif name in gauge_names:
            gauge_values.setdefault(gauge_names[name], []).append(value)
    gauges = {name: sum(values) / len(values) for name, values in gauge_values.items()}
    return Snapshot(totals, per_position, gauges)


def counter_delta(before: Snapshot, after: Snapshot, engine: EngineMetrics) -> SpecCounters:
    """Counts between two snapshots. A counter absent from both is unknown (None); one that only
    appears after started at 0 (servers create labelled counters lazily); one that went down means
    the server restarted, and is unknown."""

    def delta(name: str | None) -> int | None:
        if name is None or name not in after.totals:
            return None
        value = after.totals[name] - before.totals.get(name, 0.0)
        return round(value) if value >= 0 else None

    positions = None
    if after.per_position:
        width = max(after.per_position) + 1
        diffs = [after.per_position.get(p, 0.0) - before.per_position.get(p, 0.0) for p in range(width)]
        positions = tuple(round(d) for d in diffs) if min(diffs) >= 0 else None
    counts = SpecCounters(
        rounds=delta(engine.drafts),
        drafted=delta(engine.draft_tokens),
        accepted=delta(engine.accepted_tokens),
        accepted_by_position=positions,
        source="metrics",
    )
    known = (counts.rounds, counts.drafted, counts.accepted, counts.accepted_by_position)
    return counts if any(v is not None for v in known) else UNKNOWN
