"""Prompts for benchmark runs: the built-in prompt sets, user JSONL files, and synthetic prompts of an
exact token length.

The four built-in sets mirror the study's four prompt kinds (short factual English, code generation,
long multi-step reasoning, Chinese). Each is a JSONL file in `prompt_sets/`, one `{"prompt": "..."}`
object per line, written for this project.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Protocol

from specmoe.errors import SpecmoeError

PROMPT_SETS_DIR = Path(__file__).parent / "prompt_sets"
# Fixed order: synthetic prompts concatenate the sets in this order, so it is part of their content.
BUILTIN_PROMPT_SETS: tuple[str, ...] = ("factual", "code", "reasoning", "chinese")
_FORMAT_HINT = 'each line must be {"prompt": "..."} or Spec-Bench\'s {"turns": ["...", ...]}'


class Tokenizer(Protocol):
    """The one tokenizer method synthetic prompts need (a transformers tokenizer has it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


def is_builtin(name: str) -> bool:
    return name in BUILTIN_PROMPT_SETS


def builtin_path(name: str) -> Path:
    return PROMPT_SETS_DIR / f"{name}.jsonl"


def load_prompt_set(name_or_path: str | Path) -> list[str]:
    """The prompts of a built-in set (by name) or of a JSONL file, in file order.

    A file may use plain `{"prompt": ...}` lines or Spec-Bench's question format
    (`{"question_id", "category", "turns": [...]}`), of which the first turn is taken. Blank lines
    are skipped.
    """
    name = str(name_or_path)
    path = builtin_path(name) if is_builtin(name) else Path(name_or_path).expanduser()
    if not path.is_file():
        raise SpecmoeError(
            f"unknown prompt set '{name}': not a built-in ({', '.join(BUILTIN_PROMPT_SETS)}) "
            "and no such file; give a built-in name or the path of a .jsonl file"
        )
    prompts = []
    for lineno, line in enumerate(_read_lines(path), start=1):
        if line.strip():
            prompts.append(_parse_line(line, path, lineno))
    if not prompts:
        raise SpecmoeError(f"{path}: no prompts in the file; {_FORMAT_HINT}")
    return prompts


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


def _parse_line(line: str, path: Path, lineno: int) -> str:
    try:
        record: Any = json.loads(line)
    except json.JSONDecodeError as err:
        raise SpecmoeError(f"{path}:{lineno}: invalid JSON ({err.msg}); {_FORMAT_HINT}") from None
    if isinstance(record, dict):
        turns = record.get("turns")
        if isinstance(turns, list) and turns and isinstance(turns[0], str):
            return turns[0]
        prompt = record.get("prompt")
        if "turns" not in record and isinstance(prompt, str):
            return prompt
    raise SpecmoeError(f"{path}:{lineno}: no prompt string in this line; {_FORMAT_HINT}")


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
    """The first `batch_size` prompts, cycling through the set when it is smaller than the batch.

    Each repeat is made distinct with a numbered prefix ("[2] ..."): identical prompts decode to
    identical sequences, and an MoE routing the same tokens B times activates the experts of one
    sequence, not of B, which would understate the batch's expert traffic.
    """
    if not prompts:
        raise SpecmoeError("cannot build a batch from an empty prompt set; add prompts to the set")
    if batch_size < 1:
        raise SpecmoeError(f"batch_size must be >= 1, got {batch_size}")
    n = len(prompts)
    return [prompts[i] if i < n else f"[{i // n + 1}] {prompts[i % n]}" for i in range(batch_size)]
