"""Train a zoo family on text, deterministically, on one CPU thread.

Why train at all: with random weights a draft agrees with its target by chance only (acceptance
near 0). A trained family agrees on easy tokens and not on hard ones, so acceptance depends on the
prompt kind and the draft's size, as with real models.

How (the numbers are the preset's `TrainingPlan`):
1. Each model starts from the zoo's routing-aware init (`specmoe.zoo.init`) with a near-uniform
   output layer, and sees the same batches in the same order (`train_data.batch_order`).
2. The targets (`moe`, `dense-s`, `dense-l`) learn the text: next-token cross-entropy, plus a small
   load-balancing loss for the MoE so its routing stays spread over the experts.
3. The drafts learn from the teacher (`moe`, rounded to bf16 as it is saved and benchmarked) by
   distillation: mostly KL(teacher || draft) on every position, some cross-entropy, on the text and
   on the teacher's own greedy continuations of it (what a draft must guess when the target
   writes). They train side by side, so each batch costs one teacher forward for all of them.
4. The preset's head drafters (an MTP module, an EAGLE-3 head) learn from the frozen teacher's
   hidden states and next-token distributions (`train_heads`).

Reproducibility: one intra-op thread, deterministic algorithms, no dropout, and the only random
draws (the init, the batch order) from explicit generators seeded by the zoo seed; the same seed,
text and library versions on the same machine give bit-identical weights. The thread count and the
deterministic flag are restored on exit.

Two cores train two models at once: the targets other than the teacher, then the heads (once the
teacher is trained), train in a second process (each model still on one thread, from its own
seeded generators, so its weights are the same bits) while this one trains the teacher and then
the drafts. With one CPU available (`taskset`, a container's quota) everything trains here, one
model after another.

Modules: train_data (the text), train_loop (one model's optimisation, targets), distill (drafts),
train_experts (the MoE's training forward), synthetic (generated text).
"""

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
from tokenizers import Tokenizer

from specmoe.zoo.distill import train_drafts
from specmoe.zoo.presets import ModelShape, TrainingPlan, ZooPreset
from specmoe.zoo.train_data import TrainingData, batch_order, training_data
from specmoe.zoo.train_heads import TrainedHead, train_head
from specmoe.zoo.train_loop import Clock, TrainedModel, as_saved, initial_model, train_target


@dataclass(frozen=True)
class TrainedFamily:
    models: dict[str, TrainedModel]
    plan: TrainingPlan
    data: TrainingData = field(repr=False)
    teacher_s: float  # wall seconds of the teacher forwards that distillation needs
    teacher_cpu_s: float
    total_s: float  # the whole training, data preparation and held-out evaluation included
    total_cpu_s: float
    heads: dict[str, TrainedHead] = field(default_factory=dict)

    def manifest(self) -> dict:
        """The manifest's "training" entry (per-model numbers go in each model's entry)."""
        return {
            "plan": asdict(self.plan),
            "data": self.data.manifest(),
            "threads": 1,
            "teacher_forward_s": round(self.teacher_s, 2),
            "teacher_forward_cpu_s": round(self.teacher_cpu_s, 2),
            "total_s": round(self.total_s, 2),
            "total_cpu_s": round(self.total_cpu_s, 2),
        }


@contextmanager
def reproducible() -> Iterator[None]:
    """One intra-op thread and deterministic kernels while training; the caller's settings after."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def train_family(
    zoo: ZooPreset,
    seed: int,
    tokenizer: Tokenizer,
    progress: Callable[[str], None] | None = None,
) -> TrainedFamily:
    """Every model of a trained preset, targets first (the teacher among them), then the drafts."""
    plan = zoo.training
    if plan is None:
        raise ValueError(f"preset '{zoo.name}' has no training plan")
    total = Clock()
    trained: dict[str, TrainedModel] = {}
    others = [s for s in zoo.models if s.name not in plan.drafts and s.name != plan.teacher]
    with reproducible(), total.timing(), _second_process(others or plan.heads) as pool:
        data = training_data(plan, tokenizer)
        order = batch_order(data.train.shape[0], plan.steps, plan.batch_size, seed)
        elsewhere: Future | None = None
        if pool is not None:
            elsewhere = pool.submit(_train_targets, others, zoo, seed, data, order)
        trained[plan.teacher] = train_target(zoo.model(plan.teacher), zoo, seed, data, order)
        _report(progress, trained[plan.teacher])
        heads_elsewhere: Future | None = None
        if pool is not None and plan.heads:  # queued behind the other targets
            heads_elsewhere = pool.submit(_train_heads, trained[plan.teacher], zoo, seed, data, order)
        if elsewhere is None:  # one CPU: the other targets here, before the drafts
            for shape in others:
                trained[shape.name] = train_target(shape, zoo, seed, data, order)
                _report(progress, trained[shape.name])
        drafts = [shape for shape in zoo.models if shape.name in plan.drafts]
        distilled, teacher_clock = train_drafts(drafts, trained[plan.teacher], zoo, seed, data, order)
        for model in distilled.values():
            _report(progress, model)
        trained.update(distilled)
        worker_cpu = 0.0
        if elsewhere is not None:
            models, worker_cpu = elsewhere.result()
            for model in models:
                _report(progress, model)
                trained[model.name] = model
        if heads_elsewhere is not None:
            heads, heads_cpu = heads_elsewhere.result()
            worker_cpu += heads_cpu
        else:
            heads, _ = _train_heads(trained[plan.teacher], zoo, seed, data, order)
        for head in heads.values():
            _report_head(progress, head)
    ordered = {name: trained[name] for name in zoo.model_names}
    # CPU seconds of both processes: this one's clock cannot see the worker's.
    total_cpu = total.cpu + worker_cpu
    return TrainedFamily(
        ordered, plan, data, teacher_clock.wall, teacher_clock.cpu, total.wall, total_cpu, heads
    )


@contextmanager
def _second_process(shapes: list[ModelShape]) -> Iterator[ProcessPoolExecutor | None]:
    """A worker process for `shapes` when this process may use two CPUs or more; None otherwise."""
    if not shapes or _usable_cpus() < 2:
        yield None
        return
    # spawn, not fork: a forked copy of a process that has started torch's thread pools can hang.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):  # Linux: the CPUs this process may run on
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _train_targets(
    shapes: list[ModelShape], zoo: ZooPreset, seed: int, data: TrainingData, order: torch.Tensor
) -> tuple[list[TrainedModel], float]:
    """Targets trained one after another in a worker process, as `train_family` would train them,
    and the worker's CPU seconds for them."""
    clock = Clock()
    with reproducible(), clock.timing():
        models = [train_target(shape, zoo, seed, data, order) for shape in shapes]
    return models, clock.cpu


def _train_heads(
    teacher: TrainedModel, zoo: ZooPreset, seed: int, data: TrainingData, order: torch.Tensor
) -> tuple[dict[str, TrainedHead], float]:
    """The preset's heads distilled from the teacher as saved (bf16), one after another, and the
    CPU seconds they took (wherever they ran)."""
    clock = Clock()
    plan = zoo.training
    shape = zoo.model(plan.teacher)
    with reproducible(), clock.timing():
        model = as_saved(initial_model(shape, zoo, seed, plan), teacher.weights)
        heads = {name: train_head(name, model, shape, zoo, seed, data, order) for name in plan.heads}
    return heads, clock.cpu


def _report_head(progress: Callable[[str], None] | None, head: TrainedHead) -> None:
    if progress is not None:
        agreement = ", ".join(f"{a:.2f}" for a in head.held_out_agreement)
        progress(
            f"distilled the {head.name} head: {head.train_s:.0f} s, held-out agreement by step {agreement}"
        )


def _report(progress: Callable[[str], None] | None, model: TrainedModel) -> None:
    if progress is not None:
        source = f"distilled from {model.teacher}" if model.teacher else "trained"
        progress(
            f"{source} {model.name}: {model.train_s:.0f} s, {model.tokens:,} tokens, "
            f"held-out loss {model.held_out_loss:.3f}"
        )
