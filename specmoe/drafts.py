"""What drafts the tokens of a speculative run, as one typed value parsed once from its spelling.

Spellings (a suite's `draft` values, `specmoe generate --draft`), and the canonical string each one
is stored and keyed under (the results store's run keys contain it, so it must never change):

    draft-xs, path/to/model    ModelDraft(name)            "draft-xs"
    ngram                      NgramDraft(1, 3)            "ngram:1-3"
    ngram:MIN-MAX              NgramDraft(MIN, MAX)        "ngram:MIN-MAX"
    oracle:P                   OracleDraft(P)              "oracle:" + repr(P), e.g. "oracle:0.6"
    mtp                        MtpDraft()                  "mtp"

An MTP draft is the target's own multi-token-prediction module, read from the target's checkpoint
(`mtp.*`), so it names no model of its own. An EAGLE-3 head is a model directory like any draft
model (a ModelDraft): what it is shows in its config.json when it loads (`specmoe.decoding.make_drafter`).

An oracle draft proposes the target's own continuation, each token accepted with probability P, and
pays for the forward passes of a real model (a suite's `oracle_cost`): that cost model is a setting of
the run, not part of the draft's spelling. `specmoe.decoding.make_drafter` is the one place a drafter
is built; this module imports no torch, so the results store can parse a stored draft without it.

`specmoe.perf.drafts.priced_as` maps each kind to the kind the performance model prices it as (its
list also holds drafters only `advise` prices: EAGLE-1/2, Medusa, DFlash).

A draft is parsed once, where a suite or a command line is read, and travels typed from there; code
dispatches on its type, never on its spelling. A draft equals, hashes and sorts as its canonical
string (`draft_spelling`), so a typed draft meets the stored rows, dict keys and sets that hold the
spelling: `ModelDraft("draft-xs") == "draft-xs"`, `NgramDraft(1, 3) == "ngram:1-3"`.

Each kind answers the questions a caller would otherwise ask of its type, so a new kind is written
here (and in `specmoe.decoding.make_drafter`) rather than in every module that handles drafts:

- `model_name`: the model (a [models] entry or a path) the draft is: a ModelDraft's name, else None.
- `runs_model`: whether drafting runs a model's forwards (a model, an oracle or the target's MTP
  module, not an n-gram).
- `needs_cost_model`: whether a run names the model it pays for (an oracle's `oracle_cost`).
- `dialed_acceptance`: the acceptance an oracle is set to; None where acceptance is measured.
- `cost_model(oracle_cost)`: the separate model whose forwards drafting runs: a ModelDraft's name,
  an oracle's `oracle_cost`, None for an n-gram or an MTP module (which lives in the target).
- `key(model_identity)`: the draft's part of a run's key (stored: never change it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from specmoe.errors import SpecmoeError

NGRAM = "ngram"
MTP = "mtp"
ORACLE_PREFIX = "oracle:"
DEFAULT_MIN_N = 1  # n-gram lengths, in tokens, that "ngram" alone means
DEFAULT_MAX_N = 3
NGRAM_DEFAULT = (DEFAULT_MIN_N, DEFAULT_MAX_N)
_NGRAM_RE = re.compile(r"ngram:(\d+)-(\d+)")


class _Spelled:
    """Equality, hash and order by the canonical spelling (`str`), which is unique to each value."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Spelled | str):
            return str(self) == str(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: object) -> bool:
        if isinstance(other, _Spelled | str):
            return str(self) < str(other)
        return NotImplemented


@dataclass(frozen=True, eq=False)
class ModelDraft(_Spelled):
    """A draft model, named as the user named it (a suite model name or a path)."""

    name: str
    runs_model: ClassVar[bool] = True
    needs_cost_model: ClassVar[bool] = False
    dialed_acceptance: ClassVar[float | None] = None

    def __str__(self) -> str:
        return self.name

    @property
    def model_name(self) -> str:
        return self.name

    def cost_model(self, oracle_cost: str | None) -> str:
        return self.name

    def key(self, model_identity: Any) -> Any:
        return model_identity


@dataclass(frozen=True, eq=False)
class NgramDraft(_Spelled):
    """Prompt-lookup drafting from n-grams of MIN..MAX tokens; runs no model."""

    min_n: int
    max_n: int
    model_name: ClassVar[str | None] = None
    runs_model: ClassVar[bool] = False
    needs_cost_model: ClassVar[bool] = False
    dialed_acceptance: ClassVar[float | None] = None

    def __str__(self) -> str:
        return f"{NGRAM}:{self.min_n}-{self.max_n}"

    def cost_model(self, oracle_cost: str | None) -> None:
        return None

    def key(self, model_identity: Any) -> dict[str, list[int]]:
        return {"ngram": [self.min_n, self.max_n]}


@dataclass(frozen=True, eq=False)
class OracleDraft(_Spelled):
    """The target's own continuation, each token accepted with probability `acceptance`."""

    acceptance: float
    model_name: ClassVar[str | None] = None
    runs_model: ClassVar[bool] = True
    needs_cost_model: ClassVar[bool] = True

    def __str__(self) -> str:
        # repr, so "oracle:0.60" and "oracle:0.6" are one run.
        return f"{ORACLE_PREFIX}{self.acceptance!r}"

    @property
    def dialed_acceptance(self) -> float:
        return self.acceptance

    def cost_model(self, oracle_cost: str | None) -> str | None:
        return oracle_cost

    def key(self, model_identity: Any) -> dict[str, Any]:
        # "draws": each paired unit draws its own accept/reject coins (`oracle_seed`); runs stored
        # before that shared one stream per repeat and keep their older keys apart.
        return {"oracle": self.acceptance, "cost": model_identity, "draws": "per-unit"}


@dataclass(frozen=True, eq=False)
class MtpDraft(_Spelled):
    """The target's own multi-token-prediction module (one decoder layer and its fusion, sharing the
    target's embeddings and LM head), run recursively for gamma > 1."""

    model_name: ClassVar[str | None] = None
    runs_model: ClassVar[bool] = True
    needs_cost_model: ClassVar[bool] = False
    dialed_acceptance: ClassVar[float | None] = None

    def __str__(self) -> str:
        return MTP

    def cost_model(self, oracle_cost: str | None) -> None:
        return None

    def key(self, model_identity: Any) -> dict[str, str]:
        # The module's weights are the target's checkpoint, which the run key names already.
        return {"head": MTP}


DraftSpec = ModelDraft | NgramDraft | OracleDraft | MtpDraft


def is_reserved_name(name: str) -> bool:
    """Whether a model may not be called `name`: it reads as (or like) a draft spelling."""
    return name.startswith("oracle") or name in (NGRAM, MTP)


def parse_draft(text: str) -> DraftSpec:
    """The draft a spelling names; a bad n-gram or oracle spelling raises a one-line SpecmoeError
    (without a location: callers that know the file and key add it)."""
    if text == NGRAM or text.startswith(NGRAM + ":"):
        return _parse_ngram(text)
    if text.startswith(ORACLE_PREFIX):
        return _parse_oracle(text)
    if text == MTP:
        return MtpDraft()
    return ModelDraft(text)


def draft_of(text: str | None) -> DraftSpec | None:
    """The draft of a stored or planned run's "draft" (its canonical string); None: no draft."""
    return None if text is None else parse_draft(text)


def draft_spelling(draft: DraftSpec | None) -> str | None:
    """The canonical string a draft is stored, keyed and shown under; None: no draft."""
    return None if draft is None else str(draft)


def stored_gamma(gamma: int | None) -> int:
    """A run's gamma as keyed and stored. A run without a draft has none (None); keys and stored
    configs have always spelled that 0, so it stays 0 there and existing stores keep matching and
    resuming. The one place None becomes 0; `gamma_of_stored` is the way back."""
    return 0 if gamma is None else gamma


def gamma_of_stored(gamma: int | None) -> int | None:
    """A stored gamma as a run's: the 0 of a run without a draft (`stored_gamma`) reads as None."""
    return None if gamma == 0 else gamma


def _parse_ngram(text: str) -> NgramDraft:
    if text == NGRAM:
        low, high = NGRAM_DEFAULT
    else:
        match = _NGRAM_RE.fullmatch(text)
        low, high = (int(match[1]), int(match[2])) if match else (0, 0)
    if not 1 <= low <= high:
        raise SpecmoeError(
            f"bad n-gram draft '{text}'; write ngram or ngram:MIN-MAX with 1 <= MIN <= MAX, "
            'e.g. "ngram:1-3"'
        )
    return NgramDraft(low, high)


def _parse_oracle(text: str) -> OracleDraft:
    try:
        acceptance = float(text[len(ORACLE_PREFIX) :])
    except ValueError:
        acceptance = -1.0
    if not 0.0 <= acceptance <= 1.0:  # also rejects nan
        raise SpecmoeError(f"bad oracle draft '{text}'; write oracle:P with P in [0, 1], e.g. \"oracle:0.6\"")
    return OracleDraft(acceptance)
