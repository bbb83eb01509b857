"""Prompts for benchmark runs: the built-in prompt sets, user JSONL files, and synthetic prompts of an
exact token length.

The four built-in sets mirror the study's four prompt kinds (short factual English, code generation,
long multi-step reasoning, Chinese). Each is a JSONL file in `prompt_sets/`, one `{"prompt": "..."}`
object per line, written for this project.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specmoe.canonical import json_value, short_key
from specmoe.errors import SpecmoeError

PROMPT_SETS_DIR = Path(__file__).parent / "prompt_sets"
# Fixed order: synthetic prompts concatenate the sets in this order, so it is part of their content.
BUILTIN_PROMPT_SETS: tuple[str, ...] = ("factual", "code", "reasoning", "chinese")
_FORMAT_HINT = 'each line must be {"prompt": "..."}, {"text": "..."} or Spec-Bench\'s {"turns": ["...", ...]}'


class Tokenizer(Protocol):
    """The one tokenizer method synthetic prompts need (a transformers tokenizer has it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


def prompt_label(prompt_set: str | None, prompt_length: int | None = None) -> str:
    """What a run's prompts are called in tables and progress lines: a built-in set's name, a
    file's name without folder or .jsonl, or len<N> for synthetic prompts of N tokens."""
    if prompt_length:
        return f"len{prompt_length}"
    return str(prompt_set).replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".jsonl")


def is_builtin(name: str) -> bool:
    return name in BUILTIN_PROMPT_SETS


def builtin_path(name: str) -> Path:
    return PROMPT_SETS_DIR / f"{name}.jsonl"


@dataclass(frozen=True)
class Prompt:
    """One prompt of a set, with what the per-prompt records and breakdowns need."""

    id: str  # Spec-Bench's question_id, else "<set>:<0-based line index>"
    category: str  # Spec-Bench's category, else the set's name (a built-in's name or the file's stem)
    text: str


def load_prompts(name_or_path: str | Path) -> list[Prompt]:
    """The prompts of a built-in set (by name) or of a JSONL file, in file order.

    A file may use plain `{"prompt": ...}` or `{"text": ...}` lines (`prompt` wins when a line has
    both) or Spec-Bench's question format (`{"question_id", "category", "turns": [...]}`), of which
    the first turn is taken. Blank lines are skipped.
    """
    name = str(name_or_path)
    path = builtin_path(name) if is_builtin(name) else Path(name_or_path).expanduser()
    if not path.is_file():
        raise SpecmoeError(
            f"unknown prompt set '{name}': not a built-in ({', '.join(BUILTIN_PROMPT_SETS)}) "
            "and no such file; give a built-in name or the path of a .jsonl file"
        )
    set_name = name if is_builtin(name) else path.stem
    prompts = []
    for lineno, line in enumerate(_read_lines(path), start=1):
        if line.strip():
            prompts.append(_parse_line(line, path, lineno, set_name, len(prompts)))
    if not prompts:
        raise SpecmoeError(f"{path}: no prompts in the file; {_FORMAT_HINT}")
    return prompts


def prompt_set_digest(name_or_path: str | Path) -> str | None:
    """16 hex digits identifying what a prompt file holds (each prompt's id, category and text, in
    order), or None for a built-in set, whose content ships with the package and is named by it.

    The digest is of the prompts as parsed, not of the bytes: re-saving a file with other line
    endings or key order is the same work, while any edit to a prompt is new work.
    """
    if is_builtin(str(name_or_path)):
        return None
    return prompts_digest(load_prompts(name_or_path))


def prompts_digest(prompts: list[Prompt]) -> str:
    """`prompt_set_digest` of prompts already read."""
    return short_key([[p.id, p.category, p.text] for p in prompts])


def load_prompt_set(name_or_path: str | Path) -> list[str]:
    """The prompt texts of a set, in file order (see `load_prompts`)."""
    return [prompt.text for prompt in load_prompts(name_or_path)]


def _read_lines(path: Path) -> list[str]:
    """The file's lines as text; bytes that are not UTF-8 are named by line, not by byte offset."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise SpecmoeError(f"{path}: cannot read the prompt set ({err.strerror}); check the file") from None
    lines = []
    for lineno, raw in enumerate(data.splitlines(), start=1):
        try:
            lines.append(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
        except UnicodeDecodeError as err:
            raise SpecmoeError(
                f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
                "save the file as UTF-8"
            ) from None
    return lines


def _parse_line(line: str, path: Path, lineno: int, set_name: str, index: int) -> Prompt:
    try:
        record: Any = json_value(line)
    except json.JSONDecodeError as err:
        raise SpecmoeError(f"{path}:{lineno}: invalid JSON ({err.msg}); {_FORMAT_HINT}") from None
    if isinstance(record, dict):
        text = None
        turns = record.get("turns")
        if isinstance(turns, list) and turns and isinstance(turns[0], str):
            text = turns[0]
        elif "turns" not in record and isinstance(record.get("prompt"), str):
            text = record["prompt"]
        elif "turns" not in record and "prompt" not in record and isinstance(record.get("text"), str):
            text = record["text"]  # the field plain-text corpora and many JSONL exports use
        if text is not None:
            qid = record.get("question_id")
            category = record.get("category")
            return Prompt(
                id=str(qid) if qid is not None else f"{set_name}:{index}",
                category=str(category) if category is not None else set_name,
                text=text,
            )
    raise SpecmoeError(f"{path}:{lineno}: no prompt string in this line; {_FORMAT_HINT}")


def select_prompts(prompts: list[Prompt], count: int | None) -> list[Prompt]:
    """`count` prompts of the set, stratified by category; all of them when count is None or covers
    the set. Deterministic: the same set and count always give the same prompts, in file order.

    Categories share the count round-robin (in order of first appearance) until each has its quota
    or is used up, so 26 prompts of Spec-Bench's 13 categories take 2 from each however unequal the
    categories' sizes; within a category the picks are evenly spaced through its prompts.
    """
    if count is None or count >= len(prompts):
        return list(prompts)
    by_category: dict[str, list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_category.setdefault(prompt.category, []).append(index)
    members = list(by_category.values())
    quotas = [0] * len(members)
    while sum(quotas) < count:
        for c, indices in enumerate(members):
            if quotas[c] < len(indices) and sum(quotas) < count:
                quotas[c] += 1
    picked = [
        indices[math.floor((j + 0.5) * len(indices) / quota)]
        for indices, quota in zip(members, quotas, strict=True)
        for j in range(quota)
    ]
    return [prompts[i] for i in sorted(picked)]


def selection_size(set_size: int, count: int | None) -> int:
    """Prompts a grid point decodes: `count`, or the whole set when None. A count above the set's
    size reads the set cyclically, later passes with numbered copies (`prompt_batch`), so a batch
    sweep can measure as many distinct batches at B = 64 as at B = 1."""
    return set_size if count is None else count


def batch_count(selected: int, batch_size: int) -> int:
    """Batches that measure `selected` prompts B at a time: ⌈selected / B⌉ (one when B exceeds them)."""
    return max(1, math.ceil(selected / batch_size))


def prompt_batch(selection: list[Prompt], batch_size: int, index: int) -> list[Prompt]:
    """Batch `index` of the selection: prompts index·B … index·B + B − 1, reading cyclically.

    Every batch holds exactly B prompts, so a batch size is measured at that size: the last batch is
    filled from the start of the selection, and a batch larger than the selection cycles through it.
    A prompt's second and later appearances get a numbered prefix ("[2] ...") and id suffix ("/2"):
    identical prompts decode to identical sequences, and an MoE routing the same tokens B times
    activates the experts of one sequence, not of B, which would understate the batch's expert traffic.
    """
    if not selection:
        raise SpecmoeError("cannot build a batch from an empty prompt set; add prompts to the set")
    if batch_size < 1:
        raise SpecmoeError(f"batch_size must be >= 1, got {batch_size}")
    n = len(selection)
    batch = []
    for position in range(index * batch_size, (index + 1) * batch_size):
        prompt, copy = selection[position % n], position // n + 1
        if copy > 1:
            prompt = Prompt(f"{prompt.id}/{copy}", prompt.category, f"[{copy}] {prompt.text}")
        batch.append(prompt)
    return batch


def original_id(prompt_id: str) -> str:
    """The id of the prompt a numbered copy repeats ("factual:3/2" -> "factual:3"); any other id as
    it is. The inverse of the id suffix `prompt_batch` gives copies (so an id of a user's own that
    ends in "/<number>" reads as a copy too)."""
    head, sep, tail = prompt_id.rpartition("/")
    return head if sep and head and tail.isdigit() and int(tail) >= 2 else prompt_id


def synthetic_prompt(tokenizer: Tokenizer, length: int, seed: int = 0) -> list[int]:
    """Token ids of exactly `length` tokens cut from the built-in prompt text.

    The built-in sets are joined into one text, tokenized once, and read cyclically from an offset
    chosen by `seed` (seed 0 starts at the first factual prompt), so the same tokenizer, length and
    seed always give the same ids. The offset comes from sha256 rather than `random` so it does not
    depend on the Python version.
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise SpecmoeError(f"synthetic prompt length must be an integer >= 1, got {length!r}")
    ids = list(tokenizer.encode(_source_text(), add_special_tokens=False))
    if not ids:
        raise SpecmoeError("the tokenizer encoded the built-in prompt text to no tokens; check the tokenizer")
    start = 0 if seed == 0 else int(hashlib.sha256(str(seed).encode()).hexdigest(), 16) % len(ids)
    return [ids[(start + i) % len(ids)] for i in range(length)]


def _source_text() -> str:
    # The trailing separator keeps the cycle's seam looking like a prompt boundary, not a run-on word.
    return "".join(f"{prompt}\n\n" for name in BUILTIN_PROMPT_SETS for prompt in load_prompt_set(name))


def batch_prompts(prompts: list[str], batch_size: int) -> list[str]:
    """The first `batch_size` prompt texts, cycling with numbered prefixes (see `prompt_batch`)."""
    selection = [Prompt(str(i), "", text) for i, text in enumerate(prompts)]
    return [p.text for p in prompt_batch(selection, batch_size, 0)]
