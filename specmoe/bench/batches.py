"""The prompts one run decodes: batch `prompt_batch` of its set's selection, as text and as token ids.

Shared by the runner (what it decodes) and the preflight (whether every batch fits the context).
"""

from __future__ import annotations

from specmoe.errors import SpecmoeError
from specmoe.prompts import (
    Prompt,
    load_prompts,
    prompt_batch,
    prompts_digest,
    select_prompts,
    synthetic_prompt,
)
from specmoe.suite.types import RunSpec


def batch_prompts_of(spec: RunSpec) -> list[Prompt]:
    """The prompts run `spec` decodes: batch `prompt_batch` of its set's selection of `prompts`.

    Synthetic prompts (prompt_length) are numbered by seed: batch k holds seeds k·B … k·B + B − 1.
    """
    if spec.prompt_length is not None:
        seeds = range(spec.prompt_batch * spec.batch_size, (spec.prompt_batch + 1) * spec.batch_size)
        kind = f"len{spec.prompt_length}"
        return [Prompt(f"{kind}:{seed}", kind, "") for seed in seeds]
    selection = select_prompts(set_prompts(spec), spec.prompts)
    return prompt_batch(selection, spec.batch_size, spec.prompt_batch)


def set_prompts(spec: RunSpec) -> list[Prompt]:
    """Every prompt of the run's set, as the file holds them now, which must be what the run's key
    says it holds (`prompt_digest`): a file edited while its suite runs would otherwise be decoded
    as edited and stored under the key of what it held when the suite started."""
    assert spec.prompt_set is not None
    prompts = load_prompts(spec.prompt_set)
    if spec.prompt_digest is not None and prompts_digest(prompts) != spec.prompt_digest:
        raise SpecmoeError(
            f"prompt file {spec.prompt_set} changed while suite {spec.suite} ran (run {spec.run_id} is "
            "keyed by what it held when the suite started); the runs measured before the change are "
            "stored; run the suite again to measure the file as it is now"
        )
    return prompts


def prompt_ids(spec: RunSpec, tokenizer) -> list[list[int]]:
    """Token ids of the run's batch (`batch_prompts_of`)."""
    prompts = batch_prompts_of(spec)
    if spec.prompt_length is not None:
        first = spec.prompt_batch * spec.batch_size
        return [synthetic_prompt(tokenizer, spec.prompt_length, seed=first + i) for i in range(len(prompts))]
    if spec.chat:
        from specmoe.api import chat_prompt_ids

        return [chat_prompt_ids(tokenizer, p.text) for p in prompts]
    return [tokenizer.encode(p.text, add_special_tokens=False) for p in prompts]
