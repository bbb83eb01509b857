"""A head drafter's model as the transformers backends run it: one decoder layer over its own cache.

Shape legend: B rows, t positions, H the head's hidden size, E = 2H its input vectors, K the target
hidden-state layers the head reads, Ht the target's hidden size, V the target's vocabulary.

An MTP module (`mtp_head`) and an EAGLE-3 head (`eagle3_head`) are both a small causal LM whose
position i reads a pair: a hidden state standing for the target's at position i, and the token
at position i + 1; from them it predicts the token at i + 2. The pair comes in as one input
vector [state ; token embedding] (E = 2H), so the head is a model over `inputs_embeds` and either
transformers backend runs it unchanged: its own ragged KV cache, rolled back by masking, compiled
on the static path like any model (`HFBackend.forward_embeds`, `StaticHFBackend.forward_embeds`;
`hf_head_runtime` picks the backend beside a target).

The state of a pair is the target's own (`Head.features` of the hidden states the target handed
over) for every position the target verified, and the head's own output (`HeadOutput`'s
`hidden_states[1]`) for the positions it drafts past them, as vLLM runs both heads: an MTP
module feeds back its normed output, an EAGLE-3 head its output before the final norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

STATE_LAYER = 1  # the head's `hidden_states` index of the state its next step reads


@dataclass
class HeadOutput:
    """What a head's forward returns, in transformers' field names (`hf_model.stacked_hidden`)."""

    logits: torch.Tensor  # [B, t, V] over the target's vocabulary
    hidden_states: tuple[torch.Tensor | None, torch.Tensor]  # (None, state [B, t, H])


@dataclass(frozen=True)
class Head:
    """A head bound to its target: its model, and how it reads the target.

    `features` maps the target hidden states at `hidden_layers` ([..., K, Ht]) to the head's state
    ([..., H]); `embed` maps token ids to the vectors the head pairs with them ([..., H]).
    """

    kind: str  # "mtp" or "eagle3", for messages
    model: nn.Module  # a causal LM over [B, t, E] input vectors returning `HeadOutput`
    hidden_layers: tuple[int, ...]
    features: nn.Module
    embed: nn.Module
    tokenizer_digest: str | None = None


class FinalLayer(nn.Module):
    """An MTP module's features: the target's final hidden state as it is ([..., 1, H] -> [..., H])."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden[..., 0, :]
