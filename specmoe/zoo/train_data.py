"""The text a trained zoo learns from, cut into token windows, with held-out windows set aside.

Everything is available offline: the package's own corpus (`specmoe/zoo/corpus/*.txt`: English
prose and facts, reasoning problems, Python code, Chinese prose), text the package generates in the
shapes of the four benchmark prompt kinds (`specmoe.zoo.synthetic`), and text every Python
installation carries: the standard library's reference documentation (`pydoc_data/topics.py`, the
text `help()` prints) and a fixed list of standard-library modules as Python code. The standard
library differs between Python versions, so each source's sha256 is recorded and the same weights
are only expected from the same Python.

Held out, never trained on:
- every `held_out_every`-th window of every source (for each model's held-out loss), and
- the benchmark prompts: any paragraph containing a built-in prompt (`specmoe/prompt_sets`) is
  dropped, so acceptance measured on those prompts is measured on text the models never saw.

Documents are joined with blank lines, never with EOS: the models never learn to stop, like the
random zoo's, and benchmark lengths stay set by max_new_tokens.
"""

import importlib.util
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from specmoe.canonical import sha256_text
from specmoe.prompts import BUILTIN_PROMPT_SETS, load_prompt_set
from specmoe.zoo import synthetic
from specmoe.zoo.presets import TrainingPlan
from specmoe.zoo.tokenizer import corpus_files

# Pure-Python modules present in every CPython 3.11+ install, ordered from plain to intricate code;
# read in this order until the plan's code budget is reached.
STDLIB_MODULES: tuple[str, ...] = (
    "textwrap",
    "bisect",
    "heapq",
    "colorsys",
    "fractions",
    "statistics",
    "string",
    "calendar",
    "shlex",
    "fnmatch",
    "glob",
    "queue",
    "graphlib",
    "reprlib",
    "pprint",
    "difflib",
    "csv",
    "random",
    "dataclasses",
    "functools",
    "contextlib",
    "copy",
    "enum",
    "base64",
    "ipaddress",
    "argparse",
    "datetime",
    "pathlib",
)


@dataclass(frozen=True)
class SourceRecord:
    """What one source contributed; recorded in the manifest."""

    name: str  # "package:english.txt", "generated:reasoning", "stdlib:pydoc_data/topics.py", ...
    sha256: str  # of the text as read or generated
    tokens: int  # tokens taken from it (training and held-out windows; the cut-off remainder excluded)
    train_windows: int  # before repetition
    held_out_windows: int


@dataclass(frozen=True)
class TrainingData:
    train: torch.Tensor  # [N, seq_len] token ids, package windows repeated, unshuffled
    held_out: torch.Tensor  # [M, seq_len]
    sources: tuple[SourceRecord, ...]

    def manifest(self) -> dict:
        return {
            "python": sys.version.split()[0],
            "sources": [vars(s) for s in self.sources],
            "train_windows": int(self.train.shape[0]),
            "held_out_windows": int(self.held_out.shape[0]),
        }


def held_out_prompts() -> tuple[str, ...]:
    return tuple(prompt for kind in BUILTIN_PROMPT_SETS for prompt in load_prompt_set(kind))


def without_prompts(text: str, prompts: tuple[str, ...]) -> str:
    """text minus every paragraph (blank-line separated) that contains one of the prompts."""
    return "\n\n".join(p for p in text.split("\n\n") if p.strip() and not any(q in p for q in prompts))


def _windows(ids: list[int], seq_len: int, offset: int = 0) -> torch.Tensor:
    """[n, seq_len]: consecutive windows from ids[offset:]; a remainder shorter than a window is dropped."""
    usable = (len(ids) - offset) // seq_len * seq_len
    return torch.tensor(ids[offset : offset + usable], dtype=torch.long).view(-1, seq_len)


def _split(windows: torch.Tensor, every: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, held-out): every `every`-th window (the last of each group) is held out."""
    held = torch.arange(windows.shape[0]) % every == every - 1
    return windows[~held], windows[held]


def _repeat(train: torch.Tensor, repeats: int) -> torch.Tensor:
    """The training windows `repeats` times, each pass cut at a different offset, so repeated text
    is seen at different positions and with different left context."""
    ids = train.flatten().tolist()
    seq_len = train.shape[1]
    return torch.cat([_windows(ids, seq_len, r * seq_len // repeats) for r in range(repeats)])


def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _pydoc_topics() -> Iterator[tuple[str, str]]:
    spec = importlib.util.find_spec("pydoc_data.topics")
    if spec is None or spec.origin is None:  # some distributions strip it; the mixture does without
        return
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[key] for key in sorted(topics))
    yield "stdlib:pydoc_data/topics.py", text


def _stdlib_modules() -> Iterator[tuple[str, str]]:
    root = _stdlib_dir()
    for module in STDLIB_MODULES:
        path = root / f"{module}.py"
        if path.is_file():
            yield f"stdlib:{module}.py", path.read_text(encoding="utf-8")


def _take(
    named_texts: Iterator[tuple[str, str]], budget: int, tokenizer: Tokenizer, prompts: tuple[str, ...]
) -> Iterator[tuple[str, str, list[int]]]:
    """(name, text, ids) from each source in turn until `budget` tokens are taken; the last is cut."""
    left = budget
    for name, text in named_texts:
        if left <= 0:
            return
        ids = tokenizer.encode(without_prompts(text, prompts)).ids[:left]
        left -= len(ids)
        yield name, text, ids


def _generated(
    kind: str, budget: int, tokenizer: Tokenizer, prompts: tuple[str, ...]
) -> tuple[str, list[int]]:
    """(text, ids): generated documents of one kind, at least `budget` tokens, ids cut to the budget."""
    stream, docs, ids = synthetic.documents(kind), [], []
    while len(ids) < budget:
        docs.extend(next(stream) for _ in range(max(16, len(docs))))  # doubling: few encode calls
        text = without_prompts("\n\n".join(docs), prompts)
        ids = tokenizer.encode(text).ids
    return text, ids[:budget]


def _sources(
    plan: TrainingPlan, tokenizer: Tokenizer, prompts: tuple[str, ...]
) -> Iterator[tuple[str, str, list[int], int]]:
    """(name, text, ids, repeats) for every source, in a fixed order."""
    for path in corpus_files():
        text = path.read_text(encoding="utf-8")
        yield (
            f"package:{path.name}",
            text,
            tokenizer.encode(without_prompts(text, prompts)).ids,
            plan.package_repeats,
        )
    for kind in synthetic.GENERATORS:
        text, ids = _generated(kind, plan.generated_tokens, tokenizer, prompts)
        yield f"generated:{kind}", text, ids, 1
    for name, text, ids in _take(_pydoc_topics(), plan.stdlib_docs_tokens, tokenizer, prompts):
        yield name, text, ids, 1
    for name, text, ids in _take(_stdlib_modules(), plan.stdlib_code_tokens, tokenizer, prompts):
        yield name, text, ids, 1


def training_data(plan: TrainingPlan, tokenizer: Tokenizer) -> TrainingData:
    """The windows every model of a trained preset sees; the same files give the same tensors."""
    prompts = held_out_prompts()
    train, held_out, records = [], [], []
    for name, text, ids, repeats in _sources(plan, tokenizer, prompts):
        source_train, source_held = _split(_windows(ids, plan.seq_len), plan.held_out_every)
        train.append(_repeat(source_train, repeats) if repeats > 1 else source_train)
        held_out.append(source_held)
        tokens = (source_train.shape[0] + source_held.shape[0]) * plan.seq_len
        records.append(
            SourceRecord(name, sha256_text(text), tokens, source_train.shape[0], source_held.shape[0])
        )
    return TrainingData(torch.cat(train), torch.cat(held_out), tuple(records))


def batch_order(n_windows: int, steps: int, batch_size: int, seed: int) -> torch.Tensor:
    """[steps, batch_size] window indices: shuffled epochs, one after another, from one seeded
    generator, so every model of a family sees the same batches in the same order."""
    generator = torch.Generator().manual_seed(seed)
    needed = steps * batch_size
    epochs = [torch.randperm(n_windows, generator=generator) for _ in range(-(-needed // n_windows))]
    return torch.cat(epochs)[:needed].view(steps, batch_size)
