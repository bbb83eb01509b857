"""What every command's parser shares: the parser class (one-line usage errors, defaults in `--help`),
the argument types that refuse a bad value while parsing, and the options naming how a model runs."""

from __future__ import annotations

import argparse
import math
import textwrap
from pathlib import Path
from typing import NoReturn

from specmoe.dtypes import DEFAULT_DTYPE, DTYPE_NAMES


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help with each option's default, except where it says nothing (None, off, empty) or the text
    already explains it; lines never break inside a hyphenated name."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # Names such as `serving-example` or `draft-xs` stay whole: a line broken at their hyphen
        # reads as two words and cannot be pasted back.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """argparse with usage errors in one line; the usage itself is one `--help` away. Subcommands'
    parsers are of this class too, so every `--help` shows defaults."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def nonempty_text(text: str) -> str:
    """A path or a name given on the command line: an empty one would read as the current folder
    (Path("") is "."), so it is refused here, in one line."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; pass the file's or folder's path")
    return text


def path_arg(text: str) -> Path:
    """A file or folder path given on the command line; an empty one is refused (`nonempty_text`)."""
    return Path(nonempty_text(text))


def utf8_text(text: str) -> str:
    """Command-line text that is not UTF-8 reaches Python as lone surrogates (PEP 383): refuse it
    here, in one line, rather than deep in a tokenizer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            "not valid UTF-8 text; pass UTF-8 (check the terminal's or the file's encoding)"
        ) from None
    return text


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


# argparse names the type function in its error for a value that is not a whole number
# ("invalid _positive_int value: 'x'"): the name users have always seen there stays.
non_negative_int.__name__ = "_positive_int"


def torch_seed(text: str) -> int:
    """A random seed torch can take (64 bits), refused here rather than after the models load."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not -(2**63) <= value < 2**64:
        raise argparse.ArgumentTypeError(
            f"{value} does not fit in 64 bits; pass a seed from 0 to {2**64 - 1}"
        )
    return value


def mebibytes(text: str) -> int:
    """A size in MiB >= 1: a whole number, also written as 1e3 (a float that is whole)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not value.is_integer() or value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of MiB >= 1, got {text!r}")
    return int(value)


def count(text: str) -> int:
    """A whole number >= 1 (prompts, tokens, repeats)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def number_list(text: str) -> str:
    """A comma-separated list of numbers, refused when blank: an empty --batch "" would otherwise read
    as the option left out and answer for the defaults. Its values are parsed where they are used."""
    if not text.strip(" ,"):
        raise argparse.ArgumentTypeError("empty; pass a list such as 1,4,16")
    return text


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dtype",
        choices=DTYPE_NAMES,
        default=DEFAULT_DTYPE,
        help="compute dtype, the one `bench quick` and suites use too (bfloat16 is faster on CPUs "
        "with bf16 support; float64 is exact)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    p.add_argument(
        "--experts-implementation",
        default=None,
        help="transformers MoE experts kernel: eager, batched_mm, grouped_mm, specmoe_gathered "
        "(the --compile default on CPU) or specmoe_sized (the eager default on a GPU)",
    )
    p.add_argument("--allow-pickle", action="store_true", help="allow .bin/.pt weights (can run code)")
    p.add_argument("--trust-remote-code", action="store_true", help="run a model's own Python code")
