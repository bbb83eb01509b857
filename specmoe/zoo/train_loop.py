"""One model's optimisation, as a trained zoo does it: init, optimizer, schedule, losses, and the
held-out loss of the weights as saved.

Each model starts from the zoo's routing-aware init (`specmoe.zoo.init`) with a near-uniform output
layer (logit std `TrainingPlan.init_logit_std`), trains in float32 with AdamW, and is saved in bf16;
its held-out loss is measured on the bf16 weights. MoE models train through
`specmoe.zoo.train_experts`. Targets learn the text (`train_target`); drafts are in
`specmoe.zoo.distill`.
"""

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, PreTrainedModel

from specmoe.zoo import train_experts
from specmoe.zoo.hf_config import hf_config
from specmoe.zoo.init import InitScales, init_weights
from specmoe.zoo.presets import ModelShape, TrainingPlan, ZooPreset
from specmoe.zoo.train_data import TrainingData

EVAL_BATCH = 32  # held-out windows per forward


@dataclass(frozen=True)
class TrainedModel:
    name: str
    weights: dict[str, torch.Tensor] = field(repr=False)  # bf16, transformers' in-memory names
    train_s: float  # wall seconds of this model's own forward, backward and optimizer steps
    train_cpu_s: float  # CPU seconds of the same (one thread: close to uncontended wall time)
    tokens: int  # training tokens seen (windows x seq_len)
    held_out_loss: float  # nats per token, bf16 weights, on the held-out windows
    teacher: str | None  # the model distilled from, None for targets

    def manifest(self) -> dict:
        return {
            "train_s": round(self.train_s, 2),
            "train_cpu_s": round(self.train_cpu_s, 2),
            "train_tokens": self.tokens,
            "held_out_loss": round(self.held_out_loss, 4),
            "teacher": self.teacher,
        }


class Clock:
    """Wall and CPU seconds accumulated over the blocks it times."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    @contextmanager
    def timing(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu


def initial_model(shape: ModelShape, zoo: ZooPreset, seed: int, plan: TrainingPlan) -> PreTrainedModel:
    """The zoo's routing-aware init with the plan's output-logit scale, float32, in training mode."""
    config = hf_config(shape, zoo)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    scales = InitScales(logit_std=plan.init_logit_std)
    model.load_state_dict(dict(init_weights(shapes, shape, seed, scales)), strict=True)
    if shape.is_moe:
        model.set_experts_implementation(train_experts.register())
    return model.train()


def optimizer_for(model: PreTrainedModel, plan: TrainingPlan) -> torch.optim.Optimizer:
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    vectors = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": matrices, "weight_decay": plan.weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=plan.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def learning_rate(step: int, plan: TrainingPlan) -> float:
    """Linear warm-up to plan.lr, then a cosine down to plan.final_lr_fraction of it."""
    warmup = min(plan.warmup_steps, plan.steps)
    if step < warmup:
        return plan.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, plan.steps - warmup)
    floor = plan.final_lr_fraction
    return plan.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def next_token_loss(logits: torch.Tensor, windows: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of positions 0..T-2 predicting tokens 1..T-1 (nats per token).

    logits: [B, T, V]; windows: [B, T].
    """
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), windows[:, 1:].flatten())


def update(
    model: PreTrainedModel, optimizer: torch.optim.Optimizer, loss: torch.Tensor, plan: TrainingPlan
) -> None:
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def target_loss(model: PreTrainedModel, windows: torch.Tensor, plan: TrainingPlan) -> torch.Tensor:
    is_moe = bool(getattr(model.config, "num_experts", 0))
    out = model(input_ids=windows, output_router_logits=is_moe, use_cache=False)
    loss = next_token_loss(out.logits, windows)
    if is_moe:
        loss = loss + plan.router_aux_weight * out.aux_loss
    return loss


def bf16_rounded(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The weights as the zoo saves them (bf16), by transformers' in-memory parameter names."""
    return {name: p.detach().to(torch.bfloat16) for name, p in model.named_parameters()}


def as_saved(model: PreTrainedModel, weights: dict[str, torch.Tensor]) -> PreTrainedModel:
    """model with its weights replaced by their bf16 rounding (kept in float32), in eval mode."""
    model.load_state_dict({name: t.to(torch.float32) for name, t in weights.items()}, strict=True)
    return model.eval()


@torch.no_grad()
def held_out_loss(model: PreTrainedModel, windows: torch.Tensor) -> float:
    """Mean next-token cross-entropy over the held-out windows, nats per token."""
    total = 0.0
    for start in range(0, windows.shape[0], EVAL_BATCH):
        batch = windows[start : start + EVAL_BATCH]
        total += (
            next_token_loss(model(input_ids=batch, use_cache=False).logits, batch).item() * batch.shape[0]
        )
    return total / windows.shape[0]


def finish(
    name: str,
    model: PreTrainedModel,
    clock: Clock,
    data: TrainingData,
    plan: TrainingPlan,
    teacher: str | None,
) -> TrainedModel:
    weights = bf16_rounded(model)
    loss = held_out_loss(as_saved(model, weights), data.held_out)
    tokens = plan.steps * plan.batch_size * plan.seq_len
    return TrainedModel(name, weights, clock.wall, clock.cpu, tokens, loss, teacher)


def train_target(
    shape: ModelShape, zoo: ZooPreset, seed: int, data: TrainingData, order: torch.Tensor
) -> TrainedModel:
    """A target trained on the text alone. order: [steps, batch_size] window indices."""
    plan = zoo.training
    model, clock = initial_model(shape, zoo, seed, plan), Clock()
    optimizer = optimizer_for(model, plan)
    for step, indices in enumerate(order):
        with clock.timing():
            set_lr(optimizer, learning_rate(step, plan))
            update(model, optimizer, target_loss(model, data.train[indices], plan), plan)
    return finish(shape.name, model, clock, data, plan, teacher=None)
