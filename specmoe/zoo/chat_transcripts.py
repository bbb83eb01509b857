"""The target's own answers to chat-formatted instructions, for distilling a draft of a chat model.

Speculative decoding asks a draft to guess, token by token, what the target writes after a prompt.
For an instruct model served through its chat template that is an assistant's answer, so the
draft learns from exactly that: instructions made offline, wrapped in the target's chat template
(as `specmoe.api.chat_prompt_ids` and `chat = true` suites do), answered greedily by the target,
with the target's top-k log-probabilities at every answer position kept as the soft labels.

Instructions come from the project's own text, never from the benchmark's prompts (those are the
evaluation): requests shaped like served traffic (`specmoe.zoo.chat_requests`), the questions of
`specmoe.zoo.synthetic` (the part before its answer) and the paragraphs of the package corpus, each
asked about with one of a few request templates per kind. Any instruction containing a built-in
prompt is dropped (`train_data.held_out_prompts`).

Generation is batched and left-padded: one forward of B sequences costs little more than one of a
single sequence at this size, and the answers (EOS included; like the benchmark, the target writes
on past it) come out as one tensor. Shapes: N instructions, P prompt tokens (left-padded to the
longest), R answer tokens, K kept log-probabilities per answer position.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specmoe.zoo import chat_requests, synthetic
from specmoe.zoo.tokenizer import corpus_files
from specmoe.zoo.train_data import held_out_prompts

# Where a synthetic document's question ends and its answer starts, by kind.
_ANSWER_MARKS = ("\nAnswer:", "\nSolution:", "\n\ndef ", "\n答：", "\n解答：")
# Requests wrapped around a corpus paragraph, by the corpus file's kind (its stem).
_REQUESTS: dict[str, tuple[str, ...]] = {
    "english": (
        "Summarize the following text in two sentences.\n\n{}",
        "What is the main idea of this passage?\n\n{}",
        "Explain this passage to a twelve-year-old.\n\n{}",
    ),
    "reasoning": (
        "{}",
        "Read the problem and solve it step by step.\n\n{}",
    ),
    "code": (
        "Explain what this Python code does.\n\n{}",
        "Add a docstring and comments to this code.\n\n{}",
        "Rewrite this code to be shorter.\n\n{}",
    ),
    "chinese": (
        "请用两句话总结下面这段话。\n\n{}",
        "下面这段话的主要意思是什么？\n\n{}",
        "{}\n\n请根据上文回答：作者想说明什么？",
    ),
}
# The order sources take turns in: half served-traffic requests, a quarter each of the others.
_MIX = ("traffic", "corpus", "traffic", "synthetic")
MAX_PARAGRAPH_CHARS = 600  # longer corpus paragraphs are cut: the prompt stays near benchmark length


def question_of(document: str) -> str:
    """The question of a synthetic document: its text before the first answer mark."""
    cut = min((i for i in (document.find(m) for m in _ANSWER_MARKS) if i > 0), default=len(document))
    return document[:cut].removeprefix("Question: ").removeprefix("Problem: ").removeprefix("问：").strip()


def _synthetic_questions(seed: int) -> Iterator[str]:
    """Questions of all four synthetic kinds in turn, endlessly."""
    streams = [synthetic.documents(kind, seed) for kind in synthetic.GENERATORS]
    while True:
        for stream in streams:
            yield question_of(next(stream))


def _corpus_requests(rng: random.Random) -> list[str]:
    """Every corpus paragraph once, inside a request template of its kind."""
    requests = []
    for path in corpus_files():
        templates = _REQUESTS.get(path.stem, ("{}",))
        for paragraph in path.read_text(encoding="utf-8").split("\n\n"):
            paragraph = paragraph.strip()[:MAX_PARAGRAPH_CHARS]
            if len(paragraph) >= 40:
                requests.append(rng.choice(templates).format(paragraph))
    return requests


def instructions(count: int, seed: int = 0) -> list[str]:
    """`count` distinct instructions in a seeded order: half requests shaped like served traffic
    (`chat_requests`), a quarter corpus requests, a quarter synthetic questions; none contains a
    built-in benchmark prompt."""
    rng = random.Random(seed)
    corpus = _corpus_requests(rng)
    rng.shuffle(corpus)
    held_out = held_out_prompts()
    questions = _synthetic_questions(seed)
    streams = {"traffic": chat_requests.requests(seed), "corpus": iter(corpus), "synthetic": questions}
    seen, out, turn = set(), [], 0
    while len(out) < count:
        text = next(streams[_MIX[turn % len(_MIX)]], None)
        turn += 1
        if text is None:  # the corpus ran out (the other two never do): questions take its turns
            text = next(questions)
        if text in seen or any(prompt in text for prompt in held_out):
            continue
        seen.add(text)
        out.append(text)
    return out


@dataclass(frozen=True)
class Transcripts:
    """Left-padded prompts followed by the target's greedy answers, and its soft labels."""

    tokens: torch.Tensor  # [N, P + R] token ids, pad (any id) where mask is 0
    mask: torch.Tensor  # [N, P + R] 1 for real tokens, 0 for left padding
    prompt_len: int  # P: answers start at this column
    label_ids: torch.Tensor  # [N, R, K] the target's top-k token ids at each answer position
    label_logprobs: torch.Tensor  # [N, R, K] their log-probabilities (of the full distribution)

    @property
    def answer_len(self) -> int:
        return self.label_ids.shape[1]


def left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """([N, P] ids, [N, P] mask): prompts right-aligned to the longest."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def positions(mask: torch.Tensor) -> torch.Tensor:
    """[N, T] RoPE positions of a left-padded batch: 0 at each row's first real token."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def _answer_batch(model, ids: torch.Tensor, mask: torch.Tensor, answer_len: int, top_k: int):
    """One batch's greedy answers ([b, R]) with the top-k ([b, R, K] ids and log-probs)."""
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True)
    next_pos = positions(mask)[:, -1:] + 1
    answer, label_ids, label_logprobs = [], [], []
    for step in range(answer_len):
        logprobs = F.log_softmax(out.logits[:, -1].float(), -1)  # [b, V]
        top = logprobs.topk(top_k, -1)
        label_ids.append(top.indices)
        label_logprobs.append(top.values)
        answer.append(top.indices[:, :1])  # greedy: the most likely token
        if step + 1 == answer_len:
            break
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
        out = model(
            input_ids=answer[-1],
            attention_mask=mask,
            position_ids=next_pos + step,
            past_key_values=out.past_key_values,
            use_cache=True,
        )
    return torch.cat(answer, 1), torch.stack(label_ids, 1), torch.stack(label_logprobs, 1)


def teacher_transcripts(
    model,
    prompts: list[list[int]],
    answer_len: int,
    pad_id: int,
    batch: int = 16,
    top_k: int = 32,
    progress: Callable[[str], None] | None = None,
) -> Transcripts:
    """The model's greedy answers to `prompts` (token ids, chat template applied), in batches."""
    ids, mask = left_padded(prompts, pad_id)
    # batches of similar length waste little on padding; rows go back to their order at the end
    order = sorted(range(len(prompts)), key=lambda row: (len(prompts[row]), row))
    answers, label_ids, label_logprobs = [], [], []
    for start in range(0, len(prompts), batch):
        rows = torch.tensor(order[start : start + batch])
        # each batch is padded to its own longest prompt, then re-padded to the global width
        width = int(mask[rows].sum(-1).max())
        got = _answer_batch(model, ids[rows, -width:], mask[rows, -width:], answer_len, top_k)
        answers.append(got[0])
        label_ids.append(got[1])
        label_logprobs.append(got[2])
        if progress is not None:
            progress(f"teacher answers: {min(start + batch, len(prompts))}/{len(prompts)}")
    back = torch.tensor(order).argsort()
    answer = torch.cat(answers)[back]
    return Transcripts(
        tokens=torch.cat([ids, answer], 1),
        mask=torch.cat([mask, torch.ones_like(answer)], 1),
        prompt_len=ids.shape[1],
        label_ids=torch.cat(label_ids)[back],
        label_logprobs=torch.cat(label_logprobs)[back],
    )


def answer_loss(
    draft, tokens: torch.Tensor, mask: torch.Tensor, prompt_len: int, label_ids, label_logprobs, hard_weight
) -> torch.Tensor:
    """Mean loss per answer position of a draft on a batch of transcripts, nats.

    Soft part: cross-entropy from the target's top-k distribution (renormalised over its k ids) to
    the draft's; it differs from KL(target || draft) on those ids only by the target's entropy, a
    constant. Hard part: cross-entropy on the target's greedy token, which is what greedy
    speculative decoding accepts or rejects. The output layer runs on answer positions only: it is
    most of a small draft's cost (a 49,152-word vocabulary).
    tokens, mask: [b, P + R]; label_ids, label_logprobs: [b, R, K].
    """
    hidden = draft.model(
        input_ids=tokens, attention_mask=mask, position_ids=positions(mask), use_cache=False
    ).last_hidden_state  # [b, P + R, H]
    answer_len = label_ids.shape[1]
    # position t predicts token t + 1: the last prompt column predicts the first answer token
    logprobs = F.log_softmax(draft.lm_head(hidden[:, prompt_len - 1 : prompt_len - 1 + answer_len]), -1)
    chosen = logprobs.gather(-1, label_ids)  # [b, R, K]
    soft = -(F.softmax(label_logprobs, -1) * chosen).sum(-1).mean()
    hard = -chosen[..., 0].mean()
    return (1 - hard_weight) * soft + hard_weight * hard
