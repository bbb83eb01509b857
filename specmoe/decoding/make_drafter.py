"""The one place a drafter is built from a typed draft (`specmoe.drafts`)."""

from __future__ import annotations

from collections.abc import Sequence

from specmoe.backends.base import Backend
from specmoe.backends.eagle3_head import Eagle3Checkpoint
from specmoe.decoding.drafters import Drafter, ModelDrafter
from specmoe.decoding.heads import HeadDrafter
from specmoe.decoding.llamacpp_mtp import llamacpp_mtp_drafter
from specmoe.decoding.ngram import NgramDrafter
from specmoe.decoding.oracle import OracleDrafter
from specmoe.drafts import DraftSpec, MtpDraft, NgramDraft, OracleDraft
from specmoe.errors import SpecmoeError


def make_drafter(
    draft: DraftSpec,
    target: Backend,
    model: Backend | Eagle3Checkpoint | None = None,
    continuations: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
) -> Drafter:
    """The drafter for `draft` against `target`. `model` is the draft model for a ModelDraft (an
    EAGLE-3 head's directory loads as an `Eagle3Checkpoint`, drafted from the target's hidden
    states) and the cost model for an OracleDraft; `continuations` (the target's greedy
    continuation of each prompt) and `seed` are the oracle's."""
    from specmoe.backends.hf_head_runtime import eagle3_for, is_transformers, mtp_for

    if isinstance(draft, NgramDraft):
        return NgramDrafter(target, draft.min_n, draft.max_n)
    if isinstance(draft, MtpDraft):
        if not is_transformers(target):  # a .gguf target: llama.cpp's own MTP context
            return llamacpp_mtp_drafter(target)
        return HeadDrafter(*mtp_for(target), target.vocab_size, target.max_context)
    if model is None:
        raise ValueError(f"draft '{draft}' needs a loaded model")
    if isinstance(draft, OracleDraft):
        if continuations is None:
            raise ValueError(f"draft '{draft}' needs the target's continuations")
        return OracleDrafter(model, draft.acceptance, continuations, seed=seed)
    if isinstance(model, Eagle3Checkpoint):
        if not is_transformers(target):
            raise SpecmoeError(
                f"an EAGLE-3 head drafts for a transformers target; '{target.name}' is not one"
            )
        return HeadDrafter(*eagle3_for(model, target), target.vocab_size, target.max_context)
    return ModelDrafter(model)
