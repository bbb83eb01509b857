"""The experts an SD run's verify passes activated, from replaying the run untimed with its target's
routers traced.

The performance model charges a verify of n = B·(γ + 1) tokens N(n) = E·(1 − (1 − ρ)^n) experts per
MoE layer: the expectation for tokens that route independently, which is how a profile's random
tokens route. A run's own tokens need not: when the n-gram drafter finds no match it proposes the
last token γ times (docs/drafters.md), and copies of one token route alike, so the block reads about
K experts per layer, not N(γ + 1). Greedy SD is deterministic and its output is plain greedy
decoding's, so decoding a stored greedy run again gives the same rounds over the same tokens; with
the target's routers traced (`RouterTrace`, never in a timed run) it gives the experts each verify
activated, which the model check composes in place of N(n) (`Rounds.active`).

A replay is kept only when its counts (rounds, drafted, accepted, emitted) equal the stored run's;
otherwise it decoded something else and its routing says nothing about the run. Only transformers
MoE targets can be traced: llama.cpp exposes no hook on its expert selection.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from specmoe.backends.registry import BACKENDS, DEFAULT_BACKEND
from specmoe.backends.router_trace import distinct_experts_per_layer
from specmoe.bench.batches import prompt_ids
from specmoe.bench.runner import ModelPool, drafting
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.make_drafter import make_drafter
from specmoe.metrics import totals
from specmoe.results.run_row import RunRow
from specmoe.suite.types import RunSpec


@dataclass(frozen=True)
class Routed:
    """One stored run, replayed: experts per MoE layer its verify passes activated, on average."""

    run_id: str
    verify_passes: int
    active: float  # mean over verify passes and MoE layers of the distinct experts selected
    matches: bool  # the replay's counts equal the stored run's

    def to_json(self) -> dict:
        return asdict(self)


def replayable(row: RunRow) -> bool:
    """A greedy SD run of a transformers target with a model or n-gram draft: what a replay
    reproduces and can trace (an oracle draft would need the target's continuation first)."""
    settings = row.settings
    backend = BACKENDS.get(settings.target_field("backend") or DEFAULT_BACKEND.name)
    return (
        row.arm == "sd"
        and float(settings.temperature or 0.0) == 0.0
        and backend is not None
        and backend.traces_routers
        and not settings.target_field("gguf")
        and (settings.draft is None or settings.draft.dialed_acceptance is None)
    )


def replay(spec: RunSpec, pool: ModelPool, row: RunRow) -> Routed | None:
    """Decode `spec` again with the target's routers traced; None for a dense target."""
    target = pool.model(spec.target, spec.dtype, spec.device, spec.moe_top_k)
    trace = target.router_trace()
    if trace is None or not trace.is_moe:
        return None
    draft = spec.draft
    draft_model = None
    if spec.draft_model is not None:
        draft_model = pool.model(spec.draft_model.name, spec.dtype, spec.device)
    prompts = prompt_ids(spec, pool.tokenizer(spec.target))
    config = DecodeConfig(
        max_new_tokens=spec.max_new_tokens, seed=spec.repeat, ignore_eos=True, **drafting(spec)
    )
    trace.clear()
    with trace:
        result = decode(
            target, prompts, config, make_drafter(draft, target, draft_model, None, seed=spec.repeat)
        )
    verifies = trace.records[len(trace.records) - len(result.rounds) :]  # the prefill's forwards come first
    trace.clear()
    per_pass = [statistics.fmean(distinct_experts_per_layer([record])) for record in verifies]
    return Routed(row.run_id, len(per_pass), statistics.fmean(per_pass), totals(result) == row.counts)


def replay_rows(
    rows: Sequence[RunRow], specs: Sequence[RunSpec], pool: ModelPool, progress=print
) -> list[Routed]:
    """Every replayable row of `rows` that has its spec among `specs` (matched by run id)."""
    by_id = {s.run_id: s for s in specs}
    out = []
    for row in rows:
        spec = by_id.get(row.run_id)
        if spec is None or not replayable(row):
            continue
        routed = replay(spec, pool, row)
        if routed is not None:
            out.append(routed)
            progress(
                f"{row.run_id}: {routed.active:.2f} experts per layer per verify, matches={routed.matches}"
            )
    return out
