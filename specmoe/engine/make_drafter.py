"""The one place a drafter is built from a typed draft (`specmoe.drafts`)."""

from __future__ import annotations

from collections.abc import Sequence

from specmoe.backends.base import Backend
from specmoe.drafts import DraftSpec, NgramDraft, OracleDraft
from specmoe.engine.drafters import ModelDrafter
from specmoe.engine.ngram import NgramDrafter
from specmoe.engine.oracle import OracleDrafter


def make_drafter(
    draft: DraftSpec,
    target: Backend,
    model: Backend | None = None,
    continuations: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
) -> ModelDrafter | NgramDrafter | OracleDrafter:
    """The drafter for `draft` against `target`. `model` is the draft model for a ModelDraft and the
    cost model for an OracleDraft; `continuations` (the target's greedy continuation of each prompt)
    and `seed` are the oracle's."""
    if isinstance(draft, NgramDraft):
        return NgramDrafter(target, draft.min_n, draft.max_n)
    if model is None:
        raise ValueError(f"draft '{draft}' needs a loaded model")
    if isinstance(draft, OracleDraft):
        if continuations is None:
            raise ValueError(f"draft '{draft}' needs the target's continuations")
        return OracleDrafter(model, draft.acceptance, continuations, seed=seed)
    return ModelDrafter(model)
