"""How well a zoo draft guesses its target: greedy acceptance per prompt kind, through the decode loop.

Each prompt kind's built-in prompts (never trained on; see `specmoe.zoo.train_data`) decode as one
batch with the draft proposing `gamma` tokens per round and the target verifying them greedily.
The numbers are `specmoe.metrics`' definitions: acceptance rate = accepted / drafted proposals,
mean accepted length = accepted per sequence-round + 1, and acceptance by position j = the fraction
of sequence-rounds whose j-th proposal was kept.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specmoe import api
from specmoe.metrics import acceptance_by_position, acceptance_rate, mean_accepted_length, totals
from specmoe.prompts import BUILTIN_PROMPT_SETS, load_prompt_set
from specmoe.zoo.tokenizer import EOS_TOKEN_ID


@dataclass(frozen=True)
class KindAcceptance:
    kind: str
    prompts: int
    drafted: int
    accepted: int
    rounds: int  # sequence-rounds
    acceptance_rate: float
    mean_accepted_length: float
    by_position: tuple[float, ...]  # [gamma]
    eos_emitted: int  # EOS tokens the target produced (trained zoo models should never stop)


def greedy_acceptance(
    target: Path,
    draft: Path,
    gamma: int = 4,
    max_new_tokens: int = 64,
    kinds: Sequence[str] = BUILTIN_PROMPT_SETS,
    dtype: str = "float32",
) -> list[KindAcceptance]:
    """Greedy acceptance of `draft` against `target` (model directories) on each prompt kind."""
    tokenizer = api.load_tokenizer(target)
    target_model = api.load_model(target, dtype=dtype)
    drafter = api.ModelDrafter(api.load_model(draft, dtype=dtype))
    # ignore_eos: every sequence decodes max_new_tokens, so kinds are compared over equal lengths.
    config = api.DecodeConfig(max_new_tokens=max_new_tokens, gamma=gamma, ignore_eos=True)
    rows = []
    for kind in kinds:
        prompts = [tokenizer.encode(p, add_special_tokens=False) for p in load_prompt_set(kind)]
        result = api.decode(target_model, prompts, config, drafter=drafter)
        count = totals(result)
        rows.append(
            KindAcceptance(
                kind=kind,
                prompts=len(prompts),
                drafted=count.drafted,
                accepted=count.accepted,
                rounds=count.rounds,
                acceptance_rate=acceptance_rate(count.accepted, count.drafted),
                mean_accepted_length=mean_accepted_length(count.accepted, count.rounds),
                by_position=tuple(acceptance_by_position(result)),
                eos_emitted=sum(o.token_ids.count(EOS_TOKEN_ID) for o in result.outputs),
            )
        )
    return rows


def acceptance_by_gamma(
    target: Path,
    draft: str,
    gammas: Sequence[int] = (1, 2, 3, 4),
    max_new_tokens: int = 64,
    dtype: str = "float32",
) -> dict[str, float]:
    """Greedy acceptance (accepted / drafted over every built-in prompt, decoded as one batch) of a
    draft against its target at each γ: the draft a model directory, an EAGLE-3 head's directory,
    or "mtp" (the target's own module). Keyed by γ as text, as the manifest stores it."""
    from specmoe.decoding.make_drafter import make_drafter
    from specmoe.drafts import parse_draft

    tokenizer = api.load_tokenizer(target)
    target_model = api.load_model(target, dtype=dtype)
    spec = parse_draft(draft)
    model = None if spec.model_name is None else api.load_model(draft, dtype=dtype)
    prompts = [
        tokenizer.encode(p, add_special_tokens=False) for k in BUILTIN_PROMPT_SETS for p in load_prompt_set(k)
    ]
    rates = {}
    for gamma in gammas:
        config = api.DecodeConfig(max_new_tokens=max_new_tokens, gamma=gamma, ignore_eos=True)
        count = totals(api.decode(target_model, prompts, config, make_drafter(spec, target_model, model)))
        rates[str(gamma)] = round(acceptance_rate(count.accepted, count.drafted), 4)
    return rates


def overall_rate(rows: Sequence[KindAcceptance]) -> float:
    """Accepted / drafted over all kinds together (pooled counts, not a mean of rates)."""
    return acceptance_rate(sum(r.accepted for r in rows), sum(r.drafted for r in rows))
