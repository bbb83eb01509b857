"""Drafts distilled from the target they will draft for.

Each draft's loss is `distill_weight` x KL(teacher || draft) at every position + (1 -
`distill_weight`) x cross-entropy, on batches that mix text windows with the teacher's own greedy
continuations of text (`teacher_windows` per batch, after `teacher_prefix` tokens of the window they
replace): speculative decoding asks a draft to guess how the target goes on when it writes, so the
drafts see it write. The teacher is the target as saved (bf16). All drafts train side by side, so
one teacher forward per batch serves them all. `distill_into` is that loop alone, for drafts
made elsewhere. (The SmolLM2 draft learns from the target's chat answers instead:
`specmoe.zoo.chat_transcripts`.)
"""

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from specmoe.zoo.presets import ModelShape, TrainingPlan, ZooPreset
from specmoe.zoo.tokenizer import EOS_TOKEN_ID
from specmoe.zoo.train_data import TrainingData
from specmoe.zoo.train_loop import (
    Clock,
    TrainedModel,
    as_saved,
    finish,
    initial_model,
    learning_rate,
    next_token_loss,
    optimizer_for,
    set_lr,
    update,
)

GENERATE_BATCH = 100  # sequences the teacher continues at once


def _distill_loss(logits: torch.Tensor, teacher_logprobs: torch.Tensor) -> torch.Tensor:
    """Mean KL(teacher || draft) per position, nats. logits, teacher_logprobs: [B, T - 1, V]."""
    draft_logprobs = F.log_softmax(logits, dim=-1)
    kl = F.kl_div(draft_logprobs, teacher_logprobs, log_target=True, reduction="sum")
    return kl / (logits.shape[0] * logits.shape[1])


@torch.no_grad()
def greedy_continuations(
    model: PreTrainedModel, prefixes: torch.Tensor, length: int, never: Sequence[int] = (EOS_TOKEN_ID,)
) -> torch.Tensor:
    """[N, length]: each prefix ([N, P]) followed by the model's greedy continuation.

    The `never` ids (EOS) are never chosen: training text never ends, so neither does text the
    teacher writes for it.
    """
    banned = list(never)
    rows = []
    for chunk in prefixes.split(GENERATE_BATCH):
        out = model(input_ids=chunk, use_cache=True)
        tokens = [chunk]
        for position in range(chunk.shape[1], length):
            logits = out.logits[:, -1]  # [b, V]
            logits[:, banned] = -math.inf
            tokens.append(logits.argmax(-1, keepdim=True))
            if position + 1 < length:
                out = model(input_ids=tokens[-1], past_key_values=out.past_key_values, use_cache=True)
        rows.append(torch.cat(tokens, 1))
    return torch.cat(rows)


def train_drafts(
    shapes: list[ModelShape],
    teacher: TrainedModel,
    zoo: ZooPreset,
    seed: int,
    data: TrainingData,
    order: torch.Tensor,
) -> tuple[dict[str, TrainedModel], Clock]:
    """Drafts distilled from the teacher side by side: one teacher forward per batch serves all."""
    plan = zoo.training
    teacher_model = as_saved(initial_model(zoo.model(teacher.name), zoo, seed, plan), teacher.weights)
    models = {s.name: initial_model(s, zoo, seed, plan) for s in shapes}
    clocks, teacher_clock = distill_into(models, teacher_model, data, order, plan)
    trained = {
        name: finish(name, model, clocks[name], data, plan, teacher=teacher.name)
        for name, model in models.items()
    }
    return trained, teacher_clock


def distill_into(
    models: dict[str, PreTrainedModel],
    teacher_model: PreTrainedModel,
    data: TrainingData,
    order: torch.Tensor,
    plan: TrainingPlan,
    never: Sequence[int] = (EOS_TOKEN_ID,),
) -> tuple[dict[str, Clock], Clock]:
    """Train `models` (in place) on the teacher, side by side, one batch of `order` per step; the
    teacher writes with the `never` ids banned. Returns each model's clock and the teacher's."""
    optimizers = {name: optimizer_for(model, plan) for name, model in models.items()}
    clocks, teacher_clock = {name: Clock() for name in models}, Clock()
    weight = plan.distill_weight
    text_rows = plan.batch_size - plan.teacher_windows
    with teacher_clock.timing():
        # The text windows each draft batch gives up, continued by the teacher after their prefix.
        prefixes = data.train[order[:, text_rows:].flatten(), : plan.teacher_prefix]
        written = greedy_continuations(teacher_model, prefixes, plan.seq_len, never)
        written = written.view(order.shape[0], plan.teacher_windows, plan.seq_len)
    for step, indices in enumerate(order):
        windows = torch.cat([data.train[indices[:text_rows]], written[step]])  # [batch_size, seq_len]
        with teacher_clock.timing(), torch.no_grad():
            teacher_logprobs = F.log_softmax(
                teacher_model(input_ids=windows, use_cache=False).logits[:, :-1], -1
            )
        for name, model in models.items():
            with clocks[name].timing():
                set_lr(optimizers[name], learning_rate(step, plan))
                logits = model(input_ids=windows, use_cache=False).logits
                loss = weight * _distill_loss(logits[:, :-1], teacher_logprobs)
                loss = loss + (1 - weight) * next_token_loss(logits, windows)
                update(model, optimizers[name], loss, plan)
    return clocks, teacher_clock
