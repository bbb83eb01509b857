"""What a drafter costs per round, by kind, from the target's shape and the engine.

    model    a separate draft model (its own config and weight format), γ forwards per round
    ngram    prompt lookup: no forward at all, the engine's `ngram_s` of host search per round
    eagle    EAGLE-1/2 head: one decoder layer of the target's width (its attention and a dense MLP
             of the target's `intermediate_size`), an fc layer fusing the last hidden state with
             the token embedding (2H → H), and the target's LM head over its vocabulary; γ
             forwards per round
    eagle3   EAGLE-3 head: the same layer, an fc fusing three of the target's hidden states
             (3H → H), and an LM head over its own smaller vocabulary (`draft_vocab`, 32,000 in the
             published Llama-3.1 heads); γ forwards per round
    mtp      a multi-token-prediction module (DeepSeek-V3, Qwen3-Next): one layer exactly like the
             target's (an MoE layer when the target is MoE), a 2H → H projection and the shared
             LM head; γ forwards per round
    medusa   γ heads, each a residual block (H → H) and its own LM head, all run once per round
    dflash   a block drafter (DFlash, DFlash2): one non-causal forward of a small transformer over a
             block of BLOCK positions (the last token and BLOCK − 1 masks) proposes BLOCK − 1 tokens
             at once, conditioned on the target's hidden states from a few of its layers; the
             target verifies the whole block. Priced from the draft's config (--draft-config) or,
             without one, z-lab's layout at the target's width: 5 layers, each the target's
             attention and a 3H-wide MLP, an fc over 5 tapped hidden states (5H → H) and the
             target's LM head (z-lab/dflash, tests/fixtures/dflash2-config.json: 5 layers of
             hidden 6656 and intermediate 19968 = 3 × 6656, block 16, 5 target layers; its README
             runs SGLang with --speculative-num-draft-tokens 16 and vLLM with
             num_speculative_tokens 15). `--draft dflash:BLOCK` sets the block (default 16)

The drafts a run names (`specmoe.drafts`: a model, an n-gram, an oracle, the target's MTP module)
are priced as one of these kinds by `priced_as`, the one link between the two: a run's draft keeps
its own type, and the model prices the kind `priced_as` gives. `eagle`, `medusa` and `dflash` are
priced only (`PRICED_ONLY`): the decode loop has no drafter for them.

The head's features come from the verify pass the target runs anyway, so they cost nothing here.
A tree drafter (`tree_width` > 1) feeds that many tokens per row at each step; `RoundShape` in
`specmoe.perf.compose` carries it and the tree's verified size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from specmoe.drafts import DraftSpec, ModelDraft, MtpDraft, NgramDraft, OracleDraft
from specmoe.errors import SpecmoeError
from specmoe.perf.structure import Architecture


class DraftMethod(StrEnum):
    MODEL = "model"
    NGRAM = "ngram"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    MTP = "mtp"
    MEDUSA = "medusa"
    DFLASH = "dflash"

    @classmethod
    def parse(cls, text: str, where: str = "--draft") -> DraftMethod:
        key = str(text).strip().lower().replace("-", "")
        key = {"eagle1": "eagle", "eagle2": "eagle", "promptlookup": "ngram", "pld": "ngram"}.get(key, key)
        try:
            return cls(key)
        except ValueError:
            raise SpecmoeError(
                f"{where}: unknown draft method '{text}'; one of {', '.join(m.value for m in cls)} "
                "(a draft model goes with --draft-config)"
            ) from None

    @property
    def is_head(self) -> bool:
        return self in (DraftMethod.EAGLE, DraftMethod.EAGLE3, DraftMethod.MTP, DraftMethod.MEDUSA)


# Kinds `advise` prices that no run drafts with: the decode loop has no drafter for them.
PRICED_ONLY = frozenset({DraftMethod.EAGLE, DraftMethod.MEDUSA, DraftMethod.DFLASH})


def priced_as(draft: DraftSpec, eagle3_head: bool = False) -> DraftMethod:
    """The kind a run's draft is priced as. A model draft is a separate model unless its directory
    holds an EAGLE-3 head, which only its config.json says (`eagle3_head`,
    `specmoe.backends.eagle3_head.is_eagle3`); an oracle pays for the forwards of its cost model, so
    it is priced as that model; an n-gram draft is prompt lookup."""
    match draft:
        case MtpDraft():
            return DraftMethod.MTP
        case NgramDraft():
            return DraftMethod.NGRAM
        case OracleDraft():
            return DraftMethod.MODEL
        case ModelDraft():
            return DraftMethod.EAGLE3 if eagle3_head else DraftMethod.MODEL
    raise TypeError(f"not a draft: {draft!r}")


DFLASH_BLOCK = 16  # z-lab's DFlash drafts (the -b16 checkpoints; SGLang's num-draft-tokens 16)
DFLASH_LAYERS = 5  # z-lab's DFlash2 fixture config: num_hidden_layers 5
DFLASH_TAPPED = 5  # target layers whose hidden states the draft reads (target_layer_ids)
MAX_BLOCK = 64


@dataclass(frozen=True)
class Drafter:
    """What `--draft` names: a method and, for a block drafter, its block size."""

    method: DraftMethod
    block: int | None = None  # positions per block (BLOCK − 1 proposals); block drafters only

    @classmethod
    def parse(cls, text: str, where: str = "--draft") -> Drafter:
        """ "eagle3", "mtp", "dflash", "dflash:8", ... (a block only after a block drafter)."""
        name, colon, size = str(text).partition(":")
        method = DraftMethod.parse(name, where)
        if method is not DraftMethod.DFLASH:
            if colon:
                raise SpecmoeError(
                    f"{where}: only a block drafter takes a block size (dflash:16), got '{text}'"
                )
            return cls(method)
        if not colon:
            return cls(method, DFLASH_BLOCK)
        try:
            block = int(size)
        except ValueError:
            block = 0
        if not 2 <= block <= MAX_BLOCK:
            raise SpecmoeError(
                f"{where}: a DFlash block is 2..{MAX_BLOCK} positions (dflash:16), got '{size}'"
            )
        return cls(method, block)

    @property
    def proposals(self) -> int | None:
        """γ of a block drafter: the block less the position it starts from."""
        return None if self.block is None else self.block - 1


EAGLE3_DRAFT_VOCAB = 32000


def head_architecture(
    target: Architecture, method: DraftMethod, gamma: int, draft_vocab: int | None = None
) -> Architecture:
    """The weights one forward of a head reads, as an Architecture in the target's formats."""
    h = target.hidden
    norms = 2 * h
    if method is DraftMethod.MEDUSA:
        return _head(target, f"medusa x{gamma}", gamma * (h * h + h * target.vocab), layers=1)
    if method is DraftMethod.MTP:
        projection = 2 * h * h + norms
        if target.is_moe:
            per_layer_dense = (target.params_dense - target.vocab * h - h) / max(target.layers, 1)
            return replace(
                _head(target, "mtp", int(per_layer_dense) + projection + target.vocab * h, layers=1),
                moe_layers=1,
                num_experts=target.num_experts,
                top_k=target.top_k,
                params_per_expert=target.params_per_expert // max(target.moe_layers, 1),
            )
        layer = target.params_attention + target.params_layer_ffn + norms
        return _head(target, "mtp", layer + projection + target.vocab * h, layers=1)
    if method is DraftMethod.DFLASH:
        layer = target.params_attention + 9 * h * h + norms  # a 3H-wide gated MLP: 3 · H · 3H
        fc = DFLASH_TAPPED * h * h
        return _head(target, "dflash", DFLASH_LAYERS * layer + fc + target.vocab * h, layers=DFLASH_LAYERS)
    if not target.params_layer_ffn:
        raise SpecmoeError(
            f"{method.value}: the target config has no intermediate_size to size the head's MLP; add it"
        )
    layer = target.params_attention + target.params_layer_ffn + norms
    if method is DraftMethod.EAGLE3:
        vocab = draft_vocab or EAGLE3_DRAFT_VOCAB
        return _head(target, "eagle3", layer + 3 * h * h + vocab * h, layers=1)
    return _head(target, "eagle", layer + 2 * h * h + target.vocab * h, layers=1)


def _head(target: Architecture, name: str, params: int, layers: int) -> Architecture:
    """A `layers`-deep dense network of `params` weights with the target's attention cache."""
    full = max(target.attention_layers, 1)
    return replace(
        target,
        name=name,
        layers=layers,
        moe_layers=0,
        num_experts=0,
        top_k=0,
        params_dense=int(params),
        params_per_expert=0,
        kv_elements_per_token=target.kv_elements_per_token // full * layers,
        attention_flops_per_token=target.attention_flops_per_token // full * layers,
        state_bytes=0,
        attention_layers=layers,
    )


def with_fc(draft: Architecture, tapped: int = DFLASH_TAPPED) -> Architecture:
    """A block draft from its own config, with the fc that fuses the target's tapped hidden states
    (tapped·H → H), which a config's shape keys do not count."""
    return replace(draft, params_dense=draft.params_dense + tapped * draft.hidden * draft.hidden)


@dataclass(frozen=True)
class BlockPerRound:
    """A block drafter (one forward over `block` positions per round) seen through compose, which
    charges γ one-token draft steps: each step is charged 1/γ of the block's forward."""

    times: object
    gamma: int
    block: int

    def time(self, batch: float, tokens: float) -> float:
        return self.times.time(batch, self.block) / self.gamma


@dataclass(frozen=True)
class OncePerRound:
    """A drafter that runs one forward per round (Medusa's heads) seen through compose, which
    charges γ draft steps: each step is charged 1/γ of the forward."""

    times: object
    gamma: int

    def time(self, batch: float, tokens: float) -> float:
        return self.times.time(batch, tokens) / self.gamma
