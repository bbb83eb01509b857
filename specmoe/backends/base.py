"""The backend protocol: the few operations the decode loops need from a model runtime.

Shape legend: B sequences in the batch, t new tokens per sequence in one block, V vocabulary,
K hidden-state layers asked for, H hidden size.

A backend holds one batch of sequences at a time and a cache of their past tokens. Each sequence has a
*cached length*: how many of its tokens the cache holds. The decode loop decides which tokens to feed;
the backend only caches, computes logits, and forgets what the decode loop tells it to forget.

Optional abilities are declared members, not probed: every backend has them, and `BackendBase`
gives each its default (no digest, nothing compiled, no recurrent state, no hidden states, nothing
to reserve, no rollback to choose, nothing that refuses SD or a batch). A backend that can do more
overrides the member.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch

from specmoe.errors import SpecmoeError


class HiddenAccess(enum.Enum):
    """Which hidden states a backend can hand back beside its logits (head drafters read them).

    Layer indices follow transformers' `hidden_states`: 0 is the embedding output, i the output of
    decoder layer i (the input of layer i + 1), and L, the number of decoder layers, the final
    hidden state after the model's last norm, which feeds the LM head.
    """

    NONE = "none"
    FINAL = "final"  # layer L only (llama.cpp's output embeddings)
    ALL = "all"  # any of 0..L


@runtime_checkable
class Backend(Protocol):
    """What the decode loop needs from a model runtime, and nothing more."""

    name: str
    vocab_size: int  # width of the logits, which must match between a draft and its target
    max_context: int  # the most positions one sequence may occupy (prompt + generated + lookahead)
    eos_token_ids: frozenset[int]
    device: torch.device
    num_layers: int  # decoder layers (L); 0 where the runtime does not say
    # Declared abilities and counters (defaults in `BackendBase`):
    vocab_digest: str | None  # sha256 of every token's text in id order, where the runtime exposes it
    tokenizer_digest: str | None  # sha256 of tokenizer.json's id -> token map (HF models)
    hidden_access: HiddenAccess
    compile_s: float  # seconds spent compiling new shapes, summed over the backend's life (0: eager)
    state_s: float  # seconds spent rolling back recurrent / linear-attention state (0: none)
    recurrent_rollback: str | None  # how a backend with a choice rolls recurrent state back (llama.cpp:
    # "snapshots" or "checkpoints"), recorded with each run; None where there is no choice
    rollback_refused: str | None  # why this model's cache cannot drop rejected draft tokens, in one
    # line naming the model: it decodes plainly, and SD on it is refused with this line; None: it can
    batch_refused: str | None  # why this model cannot decode several prompts at once (left-padded,
    # B > 1) exactly, in one line naming the model: B = 1 decodes; None: any batch does

    def reserve(self, tokens: int) -> None:
        """A row of the next batch may reach `tokens` tokens: a backend that sizes its cache ahead
        (the compiled path) compiles its graphs for one cache size. Others ignore it."""

    def capture_hidden(self, layers: tuple[int, ...]) -> None:
        """From now on every prefill and forward also keeps the hidden states at these layers
        (`HiddenAccess` numbering), read with `hidden()`; () stops. Refused in one line where
        `hidden_access` does not cover them."""

    def hidden(self) -> torch.Tensor:
        """The captured hidden states of the last prefill or forward: [B, t, K, H], K in the order
        `capture_hidden` named them. After prefill t is the widest prompt fed and rows are
        right-aligned: row i's n_i tokens sit at positions t - n_i .. t - 1, zeros before them."""

    def prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        """Start a new batch: cache every token of each prompt (prompts may differ in length or be empty)."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Cache `tokens` after each sequence's cached tokens and return logits for every new position.

        tokens: [B, t] token ids, one row per live sequence.
        returns: [B, t, V] logits; position j predicts the token after tokens[:, j].
        """

    def rollback(self, lengths: Sequence[int]) -> None:
        """Forget cached tokens so that sequence i keeps exactly its first lengths[i] tokens."""

    def retain(self, rows: Sequence[int]) -> None:
        """Keep only these batch rows (in this order); finished sequences leave the batch."""

    def cached_lengths(self) -> list[int]:
        """How many tokens each live sequence has in the cache."""

    def synchronize(self) -> None:
        """Block until queued device work has finished, so a clock read afterwards is honest."""

    def router_trace(self) -> RouterTraceLike | None:
        """The MoE router trace of this model, or None for dense models and runtimes that cannot trace."""


class BackendBase:
    """The declared abilities' defaults: a backend that lacks one inherits the answer here."""

    num_layers: int = 0
    vocab_digest: str | None = None
    tokenizer_digest: str | None = None
    hidden_access: HiddenAccess = HiddenAccess.NONE
    compile_s: float = 0.0
    state_s: float = 0.0
    recurrent_rollback: str | None = None
    rollback_refused: str | None = None
    batch_refused: str | None = None

    def reserve(self, tokens: int) -> None:
        return None

    def capture_hidden(self, layers: tuple[int, ...]) -> None:
        check_hidden_layers(self, layers)

    def hidden(self) -> torch.Tensor:
        # a bug: the decode loop asks first
        raise RuntimeError(f"backend '{self.name}' captures no hidden states")


def check_hidden_layers(backend: Backend, layers: tuple[int, ...]) -> None:
    """Refuse, in one line, hidden-state layers this backend cannot hand back."""
    if not layers:
        return
    access, top = backend.hidden_access, backend.num_layers
    if access is HiddenAccess.NONE:
        raise SpecmoeError(
            f"this draft reads the target's hidden states, which the {type(backend).__name__} of "
            f"'{backend.name}' cannot return; use the transformers backend for this target"
        )
    allowed = range(top + 1) if access is HiddenAccess.ALL else (top,)
    bad = [layer for layer in layers if layer not in allowed]
    if bad:
        which = f"layers 0 to {top}" if access is HiddenAccess.ALL else f"only its final layer ({top})"
        raise SpecmoeError(
            f"this draft reads the target's hidden states at layer(s) {bad}, but '{backend.name}' can "
            f"return {which}; use a draft made for this target"
        )


class RouterTraceLike(Protocol):
    """Records the experts each MoE layer selects while entered as a context manager.

    records[forward][layer] is a [tokens, K] tensor of selected expert ids. Tracing hooks cost
    time: use it for expert-traffic measurements, never inside timed runs.
    """

    records: list

    def __enter__(self) -> RouterTraceLike: ...

    def __exit__(self, *exc) -> None: ...

    def clear(self) -> None: ...
