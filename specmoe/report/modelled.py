"""The performance model beside measured runs: which fit belongs to a run, and at which acceptance.

`specmoe model fit` outputs given to the report (`--fit FILE`) are matched to runs by model name and
dtype, so fit the same model the suite ran. A target run at another top-k than its fit gets the
sparsity what-if (the fitted constants with only K changed, docs/perf-model.md). An n-gram draft is
modelled as free; an oracle draft pays its cost model's forwards and accepts with its dialed p.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from specmoe.report.results import SdResult
from specmoe.results.run_config import RunConfig
from specmoe.theory import per_token_alpha

MAX_ALPHA = 0.999  # sd_speedup's geometric sum is 0/0 at α = 1


@dataclass(frozen=True)
class FreeDraft:
    """A drafter whose steps cost nothing (n-gram lookup): the predicted speedup is an upper bound."""

    label: str

    def time(self, batch: float, tokens: float) -> float:
        return 0.0

    def extrapolated(self, batch: float, tokens: float) -> bool:
        return False


@dataclass(frozen=True)
class ModelledPair:
    target: Any  # specmoe.perf.predict.ModelTimes: .time(B, t) in seconds
    draft: Any  # ModelTimes or FreeDraft


def modelled_pair(settings: RunConfig, fits: Sequence[tuple[str, str, Any]]) -> ModelledPair | None:
    """The fitted target and draft of a run's configuration; None when a fit is missing."""
    from specmoe.perf.predict import with_top_k

    by_name = {(name, dtype): times for name, dtype, times in fits}
    target = by_name.get((settings.target, settings.dtype))
    if target is None:
        return None
    top_k = settings.moe_top_k
    if top_k and target.shape.num_experts and top_k != target.shape.top_k:
        target = replace(target, shape=with_top_k(target.shape, top_k, "report"))
    draft_name, spec = str(settings.draft_name), settings.draft
    if spec is not None and not spec.runs_model:
        return ModelledPair(target, FreeDraft(draft_name))
    cost_model = draft_name if spec is None else spec.cost_model(settings.oracle_cost)
    draft = by_name.get((cost_model, settings.dtype))
    return None if draft is None else ModelledPair(target, draft)


def unmatched_fit(name: str, dtype: str, configs: Sequence[RunConfig]) -> str:
    """Why a fit of model `name` in `dtype` draws nothing beside these runs' configurations, or ""
    when some run uses that model (as target, draft or oracle cost model) in that dtype."""
    used = {
        (model, config.dtype)
        for config in configs
        for model in (config.target, config.draft_name, config.oracle_cost)
        if model is not None
    }
    if (name, dtype) in used:
        return ""
    dtypes = sorted({str(d) for model, d in used if model == name})
    if dtypes:
        return (
            f"its model {name} was fitted in {dtype or 'an unrecorded dtype'} but the runs used it in "
            f"{', '.join(dtypes)}; profile it with --dtype {dtypes[0]} and fit that"
        )
    models = sorted({str(model) for model, _ in used})
    return f"no run uses its model {name}; the runs' models: {', '.join(models)}"


def pair_alpha(group: Sequence[SdResult]) -> float:
    """The per-position α of one target/draft pair: an oracle's dialed p, else the mean over the
    group's configurations of the α their measured acceptance rate implies (`per_token_alpha`)."""
    dialed = group[0].settings.oracle_p
    if dialed is not None:
        return min(dialed, MAX_ALPHA)
    alphas = [per_token_alpha(r.acceptance_rate, int(r.settings.gamma)) for r in group]
    return min(sum(alphas) / len(alphas), MAX_ALPHA)
