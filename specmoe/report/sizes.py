"""Parameter counts of a run's target model, for the speedup-vs-active-parameters view.

Only zoo models have counts without loading anything: the run's config names the zoo preset and
model, and `specmoe.zoo.params.count_params` computes the counts from the shape alone (with the
run's top-k override, which changes the active count). Models given by path have no counts here;
the report then omits the figure that needs them and says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specmoe.errors import SpecmoeError
from specmoe.results.run_config import RunConfig
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import get_preset


@dataclass(frozen=True)
class ModelSize:
    total_params: int
    active_params: int  # used by one token's forward pass (see specmoe.zoo.params for the convention)
    is_moe: bool


def target_size(settings: RunConfig) -> ModelSize | None:
    """Counts of the run's target, or None when the config does not name a zoo model we can size."""
    model = settings.target_model
    if not isinstance(model, Mapping) or not model.get("zoo") or not model.get("zoo_preset"):
        return None
    top_k = settings.moe_top_k
    try:
        preset = get_preset(model["zoo_preset"])
        shape = preset.model(model["zoo"])
        if shape.is_moe and top_k is not None:
            preset = get_preset(model["zoo_preset"], top_k=top_k)
            shape = preset.model(model["zoo"])
    except SpecmoeError:
        # A preset or model this specmoe no longer knows: the counts are unknown, not an error.
        return None
    counts = count_params(shape, preset.vocab_size)
    return ModelSize(total_params=counts.total, active_params=counts.active, is_moe=shape.is_moe)


def is_moe_target(settings: RunConfig) -> bool:
    """MoE by its counts when known, else by the top-k the suite set (explicit only for MoE targets)."""
    size = target_size(settings)
    return size.is_moe if size is not None else settings.moe_top_k is not None
