"""The prompts one run decodes: batch `prompt_batch` of its set's selection, as text and as token ids.

Shared by the runner (what it decodes) and the preflight (whether every batch fits the context).
"""

from __future__ import annotations

from specmoe.bench.suite import RunSpec
from specmoe.prompts import Prompt, load_prompts, prompt_batch, select_prompts, synthetic_prompt


def batch_prompts_of(spec: RunSpec) -> list[Prompt]:
    """The prompts run `spec` decodes: batch `prompt_batch` of its set's selection of `prompts`.

    Synthetic prompts (prompt_length) are numbered by seed: batch k holds seeds k·B … k·B + B − 1.
    """
    if spec.prompt_length is not None:
        seeds = range(spec.prompt_batch * spec.batch_size, (spec.prompt_batch + 1) * spec.batch_size)
        kind = f"len{spec.prompt_length}"
        return [Prompt(f"{kind}:{seed}", kind, "") for seed in seeds]
    selection = select_prompts(load_prompts(spec.prompt_set), spec.prompts)
    return prompt_batch(selection, spec.batch_size, spec.prompt_batch)


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
