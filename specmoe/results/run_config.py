"""A stored run's configuration as one typed value (`RunConfig`), parsed once when a row is made.

The store keeps a run's configuration as the JSON object `RunSpec.as_dict` wrote (`RunRow.config`),
and that object stays what is stored and exported, key for key. Readers that want one setting read
it here instead (`row.settings.gamma`), so a key's spelling, its default when a row lacks it, and the
parsing of the draft's canonical string are written once rather than at every `config.get(...)`.

Values are taken as the row holds them, never coerced: a table that prints `str(gamma)` must print
what it printed from the dict. The one exception is the gamma of a run without a draft, stored as 0
(`specmoe.drafts.stored_gamma`), which reads as None: wherever a run has a gamma it is >= 1. A key a
row lacks (rows stored by older versions, rows made in tests)
reads as None, as `config.get(key)` did; `compile`, `chat` and `prompt_batch` read as the values a
spec leaves out of its key (False, False, 0). Keys this view does not know stay in the dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from specmoe.drafts import DraftSpec, draft_of, gamma_of_stored
from specmoe.errors import SpecmoeError


@dataclass(frozen=True)
class RunConfig:
    """One run's settings, as `RunSpec` stored them (see `RunSpec` for each field's meaning).

    `draft` is the typed draft of the stored canonical string (None: the baseline arm);
    `target_model` and `draft_model` are the models' stored fields (`ModelSpec`), as dicts.
    """

    suite: str | None = None
    group: str | None = None
    arm: str | None = None
    target: str | None = None
    draft: DraftSpec | None = None
    gamma: int | None = None  # >= 1; None without a draft (stored as 0) or when the row lacks it
    prompt_set: str | None = None
    prompt_length: int | None = None
    batch_size: int | None = None
    temperature: float | None = None
    max_new_tokens: int | None = None
    moe_top_k: int | None = None
    dtype: str | None = None
    device: str | None = None
    repeat: int | None = None
    warmup: int | None = None
    target_model: Mapping[str, Any] | None = None
    draft_model: Mapping[str, Any] | None = None
    oracle_cost: str | None = None
    concurrency: int | None = None
    request_rate: float | str | None = None  # requests/s; "inf" (all at once) as stored
    requests: int | None = None
    prompts: int | None = None
    prompt_batch: int = 0
    compile: bool = False
    chat: bool = False
    prompt_digest: str | None = None
    note: str | None = None  # the suite's free-text label for the run's group
    # The keys `RunSpec.as_dict` derives; rows from outside the runner may lack them.
    config_key: str | None = None
    run_id: str | None = None
    baseline_key: str | None = None
    cell_key: str | None = None
    baseline_cell_key: str | None = None

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> RunConfig:
        """The view of a stored config; a draft string that does not parse raises ValueError (the
        store reports the row as malformed)."""
        values = {name: config[name] for name in _NAMES if name in config}
        if values.get("draft") is not None:
            try:
                values["draft"] = draft_of(str(values["draft"]))
            except SpecmoeError as err:
                raise ValueError(str(err)) from None
        values["gamma"] = gamma_of_stored(values.get("gamma"))
        for flag in ("compile", "chat"):
            values[flag] = bool(values.get(flag))
        values["prompt_batch"] = values.get("prompt_batch") or 0
        return cls(**values)

    @property
    def draft_name(self) -> str | None:
        """The draft's canonical string, as stored and keyed; None for the baseline arm."""
        return None if self.draft is None else str(self.draft)

    @property
    def oracle_p(self) -> float | None:
        """The per-position acceptance an "oracle:P" draft was set to; None for any other draft."""
        return None if self.draft is None else self.draft.dialed_acceptance

    @property
    def cell(self) -> str | None:
        """The configuration across prompt batches (`RunSpec.cell_key`); rows stored before batches
        existed have no cell key, and their config key is their cell."""
        return self.config_key if self.cell_key is None else self.cell_key

    @property
    def baseline_cell(self) -> str | None:
        """The baseline's cell; its config key for rows stored before batches existed."""
        return self.baseline_key if self.baseline_cell_key is None else self.baseline_cell_key

    def target_field(self, name: str) -> Any:
        """One stored field of the target model (`ModelSpec`: "zoo_preset", "gguf", ...), or None."""
        return (self.target_model or {}).get(name)

    def draft_field(self, name: str) -> Any:
        """One stored field of the model the drafter runs, or None (no such model, no such field)."""
        return (self.draft_model or {}).get(name)


_NAMES = tuple(f.name for f in fields(RunConfig))

__all__ = ["RunConfig"]
