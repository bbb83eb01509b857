"""What the performance model expects of a suite's SD configurations before any of them runs.

Inputs are what exists before measuring: each zoo model's config (its preset's shape), the
configuration (draft, γ, batch, dtype, new tokens), a hardware file (`specmoe hw`, or the probe
`specmoe demo` takes) and the engine profile of the backend and device the runs use
(`specmoe.perf.engines`). Forward times come from first principles (`perf.firstprinciples`) and
the speedup from the expected round (`perf.compose.expected_speedup`, the composition `advise`
prints), with the profile's ×/÷ band and `perf.breakeven.verdict`'s rule:

    GO       an oracle's dialed acceptance pays even at the band's pessimistic end
    NO-GO    even full acceptance stays below 1× multiplied by the profile's largest shortfall (the
             band where it has none: this machine's profiles), or the dialed one does
    DEPENDS  the band holds 1×, or a model draft whose acceptance nothing knows before it runs

A model draft's acceptance is unknown until it runs, so its prediction is the acceptance at which
it would break even (none when even full acceptance does not pay), never a speedup.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from specmoe.perf.breakeven import Acceptance, Verdict, breakeven_alpha, from_alpha, verdict
from specmoe.perf.compose import expected_speedup
from specmoe.perf.engines import EngineProfile, engine_profile, load_engines
from specmoe.perf.firstprinciples import first_principles_constants
from specmoe.perf.hardware import Hardware
from specmoe.perf.model import MoEShape
from specmoe.perf.predict import ModelTimes
from specmoe.perf.structure import Architecture
from specmoe.suite.types import ModelSpec, RunSpec, zoo_shape

PROMPT_TOKENS = 64  # a built-in prompt's typical length: the context is this plus half the new tokens


@dataclass(frozen=True)
class Prediction:
    """The model's call on one SD configuration, made before it ran."""

    spec: RunSpec  # the configuration's first SD run (any repeat and batch: the same work)
    engine: str
    alpha: float | None  # the per-position acceptance scored; None: a model draft's, unknown
    speedup: float | None  # at `alpha`; None without one
    band: tuple[float, float] | None  # speedup ×/÷ the engine profile's uncertainty
    at_full: float  # the speedup if every proposal were accepted
    breakeven: Acceptance | None  # the acceptance it needs; None when none pays
    verdict: Verdict

    @property
    def pays(self) -> bool:
        return self.verdict is Verdict.GO

    @property
    def loses(self) -> bool:
        return self.verdict is Verdict.NO_GO


def engine_for(spec: RunSpec) -> str | None:
    """The shipped engine profile that describes how the run's target executes, or None. Profiles
    are named after the backend (`perf/engines.toml`): its mode where it can compile, then the
    device: `hf-eager-cpu`, `hf-compiled` (CUDA), `llamacpp-cpu`, `llamacpp-cuda` (any GPU)."""
    info = spec.target_model.backend_info
    if info is None:  # a served model
        return None
    cpu = spec.device == "cpu"
    if not info.can_compile:
        name = f"{info.name}-cpu" if cpu else f"{info.name}-cuda"
    elif cpu or spec.device.startswith("cuda"):
        mode = f"{info.name}-compiled" if spec.compile else f"{info.name}-eager"
        name = f"{mode}-cpu" if cpu else mode
    else:
        return None
    return name if name in _shipped_profiles() else None


@cache
def _shipped_profiles() -> frozenset[str]:
    return frozenset(load_engines())


def predictable(spec: RunSpec) -> bool:
    """An SD arm of zoo models run by a backend with an engine profile, drafted by a model or an
    oracle paying a zoo model's forwards: what `predict` can price from configs."""
    cost = spec.draft_model
    return (
        spec.arm == "sd"
        and spec.target_model.zoo is not None
        and spec.target_model.gguf is None
        and cost is not None
        and cost.zoo is not None
        and spec.draft is not None
        and spec.draft.runs_model
        and engine_for(spec) is not None
    )


def zoo_architecture(model: ModelSpec, dtype: str, top_k: int | None = None) -> Architecture:
    """A zoo model's shape as the performance model reads it, from the config its preset builds
    (`top_k` overrides its experts per token)."""
    from specmoe.perf.structure import parse_architecture
    from specmoe.zoo.hf_config import hf_config
    from specmoe.zoo.presets import get_preset

    assert model.zoo_preset is not None
    config = hf_config(zoo_shape(model), get_preset(model.zoo_preset)).to_dict()
    if top_k:
        config["num_experts_per_tok"] = top_k
    return parse_architecture(config, model.name, dtype)


def model_times(model: ModelSpec, spec: RunSpec, hardware: Hardware, engine: EngineProfile) -> ModelTimes:
    """First-principles forward times of a zoo model in the run's dtype (and top-k, for its target)."""
    top_k = spec.moe_top_k if model is spec.target_model else None
    arch = zoo_architecture(model, spec.dtype, top_k)
    constants = first_principles_constants(arch, hardware, model.name, engine)
    context = PROMPT_TOKENS + spec.max_new_tokens / 2
    return ModelTimes(model.name, constants, MoEShape(arch.num_experts, arch.top_k), context, False)


def predict(spec: RunSpec, hardware: Hardware) -> Prediction:
    """The model's call on one SD configuration (`predictable(spec)` must hold)."""
    name = engine_for(spec)
    assert name is not None and spec.draft_model is not None
    engine = engine_profile(name, hardware.device)
    target = model_times(spec.target_model, spec, hardware, engine)
    draft = model_times(spec.draft_model, spec, hardware, engine)
    batch, gamma = spec.batch_size, spec.gamma
    host = engine.round_s + engine.round_seq_s * batch

    def speedup(alpha: float) -> float:
        return expected_speedup(
            target, draft, alpha, gamma, batch, host, engine.step_s, new_tokens=spec.max_new_tokens
        )

    at_full = speedup(1.0)
    found = breakeven_alpha(speedup)
    breakeven = None if found is None else from_alpha(found, gamma)
    factor = engine.uncertainty
    alpha = None if spec.draft is None else spec.draft.dialed_acceptance
    if alpha is not None:
        value = speedup(alpha)
        band = (value / factor, value * factor)
        call = verdict(at_full, value, factor, engine.shortfall)
        return Prediction(spec, name, alpha, value, band, at_full, breakeven, call)
    call = verdict(at_full, None, factor, engine.shortfall)
    return Prediction(spec, name, None, None, None, at_full, breakeven, call)


def predict_suite(specs: Iterable[RunSpec], hardware: Hardware) -> dict[str, Prediction]:
    """One Prediction per SD configuration the model can price, by cell key, in suite order."""
    found: dict[str, Prediction] = {}
    for spec in specs:
        if spec.cell_key not in found and predictable(spec):
            found[spec.cell_key] = predict(spec, hardware)
    return found


def prediction_text(p: Prediction) -> str:
    """ "1.62× [1.30, 2.03] at 90% per-position acceptance: expected to pay" and the like."""
    if p.speedup is not None and p.band is not None:
        return f"{p.speedup:.2f}× [{p.band[0]:.2f}, {p.band[1]:.2f}] at α = {p.alpha:.2f}: {CALLS[p.verdict]}"
    return f"its acceptance is not known before it runs; {acceptance_call(p)}"


def acceptance_call(p: Prediction) -> str:
    """The call on a draft of unknown acceptance: what it needs, or that no acceptance will do."""
    full = f"{p.at_full:.2f}× if every proposal were accepted"
    if p.verdict is Verdict.NO_GO:
        return f"expected to lose at any acceptance ({full})"
    if p.breakeven is None:
        return f"too close to call even at full acceptance ({full}, within the band of 1×)"
    return f"expected to pay above {p.breakeven.rate:.0%} of proposals accepted ({full})"


CALLS = {
    Verdict.GO: "expected to pay",
    Verdict.NO_GO: "expected to lose",
    Verdict.DEPENDS: "too close to call",
}
