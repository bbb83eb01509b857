"""How many distinct experts n tokens touch: the balanced-routing reference and measurements.

Shape legend: L sparse layers, N the largest token count measured.

Verifying n draft tokens on an MoE target reads the weights of every expert any of them selects.
If each token picked K of E experts independently and uniformly, the expected number of distinct
experts per layer would be

    N(n) = E * (1 - (1 - K/E)^n)

(each expert is missed by one token with probability 1 - K/E). Trained routers are close to this
on ordinary text; the zoo's init is built to match it (see `specmoe.zoo.init`).
"""

import torch
from transformers import PreTrainedModel

from specmoe.backends.router_trace import RouterTrace, indices_per_layer


def expected_distinct_experts(num_experts: int, top_k: int, n_tokens: int) -> float:
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** n_tokens)


def _distinct_prefix_counts(per_layer: list[torch.Tensor], n_max: int) -> torch.Tensor:
    """[L, n_max]: distinct experts among the first n tokens, for n = 1..n_max."""
    counts = torch.zeros(len(per_layer), n_max)
    for layer, ids in enumerate(per_layer):  # ids: [T, K]
        seen: set[int] = set()
        for n in range(n_max):
            seen.update(ids[n].tolist())
            counts[layer, n] = len(seen)
    return counts


@torch.no_grad()
def measure_prefill_distinct(
    model: PreTrainedModel, vocab_size: int, n_max: int = 64, trials: int = 16, seed: int = 0
) -> torch.Tensor:
    """Mean distinct experts per layer over the first n positions of uniformly random token
    sequences, [L, n_max] (column n-1 is n tokens). Token 0 (EOS) is never drawn."""
    generator = torch.Generator().manual_seed(seed)
    total = torch.zeros(0)
    for _ in range(trials):
        input_ids = torch.randint(1, vocab_size, (1, n_max), generator=generator)
        with RouterTrace(model) as trace:
            model(input_ids.to(model.device))
        counts = _distinct_prefix_counts(indices_per_layer(trace.records), n_max)
        total = counts if total.numel() == 0 else total + counts
    return total / trials


@torch.no_grad()
def measure_decode_distinct(
    model: PreTrainedModel,
    vocab_size: int,
    context: int = 32,
    n_max: int = 32,
    trials: int = 8,
    seed: int = 0,
    greedy: bool = False,
) -> torch.Tensor:
    """Mean distinct experts per layer over the first n tokens decoded one at a time after a
    random context, [L, n_max]. Tokens are sampled at temperature 1 unless `greedy`: greedy
    decoding from random weights falls into cycles, and a repeated token reuses its experts."""
    generator = torch.Generator().manual_seed(seed)
    total = torch.zeros(0)
    for _ in range(trials):
        input_ids = torch.randint(1, vocab_size, (1, context), generator=generator).to(model.device)
        out = model(input_ids, use_cache=True)
        with RouterTrace(model) as trace:
            for _ in range(n_max):
                next_token = _pick(out.logits[:, -1], greedy, generator)  # [1, 1]
                out = model(next_token, past_key_values=out.past_key_values, use_cache=True)
        counts = _distinct_prefix_counts(indices_per_layer(trace.records), n_max)
        total = counts if total.numel() == 0 else total + counts
    return total / trials


def _pick(logits: torch.Tensor, greedy: bool, generator: torch.Generator) -> torch.Tensor:
    # logits: [1, vocab]
    if greedy:
        return logits.argmax(-1, keepdim=True)
    probs = logits.float().softmax(-1).cpu()
    return torch.multinomial(probs, 1, generator=generator).to(logits.device)
