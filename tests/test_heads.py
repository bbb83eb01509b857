"""Head drafters are lossless: an MTP module and an EAGLE-3 head, drafting from the target's hidden
states, give greedy SD token-identical to plain decoding in float64 (B = 1 and 3, eager, static
and compiled) on the study's hybrid MoE architecture, whose target rolls its linear-attention state
back while the head rolls its own cache back; and every head proposal is the one a from-scratch
run of the head over the committed text gives (a head fed stale hidden states fails that check).

The target is a random Qwen3.5-MoE hybrid over 8 tokens (`head_models.small_hybrid_moe`), so a
random head's proposals are accepted now and then (5-15%) and rejected at different positions in
different rows. Compiled runs use torch.compile's "eager" backend (graph capture without code
generation), as tests/test_compiled_path.py does.
"""

from __future__ import annotations

import pytest
import torch
from head_models import eagle3_dir, small_hybrid_moe, with_mtp

from specmoe.api import load_model
from specmoe.backends.hf_heads import STATE_LAYER
from specmoe.backends.hf_recurrent import LinearStates
from specmoe.backends.hf_static import StaticHFBackend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import Verified
from specmoe.decoding.heads import HeadDrafter
from specmoe.decoding.make_drafter import make_drafter
from specmoe.drafts import ModelDraft, MtpDraft
from specmoe.metrics import invariant_violations, totals

PROMPTS = [[1, 2, 3, 4, 5, 6, 7], [4, 1], [3]]  # ragged, one a single token
TOKENS = 16
KINDS = ["mtp", "eagle3"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    plain = small_hybrid_moe(root / "moe")
    model = load_model(plain, dtype="float64").model
    return {
        "plain": plain,
        "mtp": with_mtp(model, plain, root / "moe-mtp", seed=1),
        "eagle3": eagle3_dir(model, root / "eagle3", seed=2, layers=[1, 2, 4], draft_vocab=4),
    }


def _target(dirs, kind: str, path: str = "eager"):
    """The target a head of this kind drafts for, eager, static (eager code) or compiled."""
    path_dir = dirs["mtp" if kind == "mtp" else "plain"]
    if path == "eager":
        return load_model(path_dir, dtype="float64")
    # batched experts, as the compiled path runs them (the eager loop breaks graphs); the head's
    # MoE layer takes its target's
    eager = load_model(path_dir, dtype="float64", experts_implementation="batched_mm")
    options = {"compile": False} if path == "static" else {"compiler": "eager"}
    return StaticHFBackend(eager.model, eager.name, eager.device, **options)


def _drafter(dirs, kind: str, target, cls=HeadDrafter):
    if kind == "mtp":
        drafter = make_drafter(MtpDraft(), target)
    else:
        drafter = make_drafter(ModelDraft("eagle3"), target, load_model(dirs["eagle3"], dtype="float64"))
    if cls is not HeadDrafter:
        drafter.__class__ = cls
    return drafter


def _plain(target, prompts, **config):
    return [decode(target, [p], DecodeConfig(**config)).outputs[0].token_ids for p in prompts]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("path", "batch"), [("eager", 1), ("eager", 3), ("static", 3), ("compiled", 1), ("compiled", 3)]
)
def test_greedy_sd_with_a_head_is_token_identical(dirs, kind, path, batch):
    target = _target(dirs, kind, path)
    prompts = PROMPTS[:batch] if batch > 1 else PROMPTS[:1]
    expected = _plain(
        load_model(dirs["plain"], dtype="float64"), prompts, max_new_tokens=TOKENS, ignore_eos=True
    )
    config = DecodeConfig(max_new_tokens=TOKENS, gamma=3, ignore_eos=True)
    result = decode(target, prompts, config, _drafter(dirs, kind, target))
    assert [o.token_ids for o in result.outputs] == expected
    assert invariant_violations(result) == []
    count = totals(result)
    assert 0 < count.accepted < count.drafted  # proposals kept and rejected
    assert sum(r.state_s for r in result.rounds) > 0  # the hybrid target rolled its state back
    if path == "compiled":
        assert result.compile_s > 0


class _Recording(HeadDrafter):
    """Keeps every round's sequences and proposals."""

    def propose(self, sequences, gamma, params, generator):
        proposal = super().propose(sequences, gamma, params, generator)
        self.log.append(([list(s) for s in sequences], proposal.tokens.tolist()))
        return proposal


class _Stale(_Recording):
    """Hands the head the hidden states of the round before, as an engine that read them before the
    verify pass (or kept the last round's) would."""

    def feedback(self, verified: Verified) -> None:
        previous = self.previous if self.previous is not None else verified.hidden
        self.previous = verified.hidden
        super().feedback(Verified(verified.accepted, verified.next_token, previous))

    def retain(self, rows) -> None:
        super().retain(rows)
        self.previous = None


@torch.inference_mode()
def _from_scratch(drafter: HeadDrafter, target, sequence: list[int], gamma: int) -> list[int]:
    """The head's greedy proposals after `sequence`, from one fresh forward of the target over it and
    one of the head over every exact pair, then its own recursion: what the drafter must propose."""
    from transformers import DynamicCache

    head, model = drafter.head, target.model
    out = model(input_ids=torch.tensor([sequence[:-1]]), output_hidden_states=True)
    hidden = torch.stack([out.hidden_states[i] for i in head.hidden_layers], -2)  # [1, n - 1, K, Ht]
    pairs = torch.cat([head.features(hidden), head.embed(torch.tensor([sequence[1:]]))], -1)
    cache = DynamicCache(config=head.model.config)
    step = head.model(
        inputs_embeds=pairs, position_ids=torch.arange(pairs.shape[1])[None], past_key_values=cache
    )
    tokens = []
    for index in range(gamma):
        tokens.append(int(step.logits[0, -1].argmax()))
        state = step.hidden_states[STATE_LAYER][:, -1:]
        pair = torch.cat([state, head.embed(torch.tensor([[tokens[-1]]]))], -1)
        position = torch.tensor([[len(sequence) - 1 + index]])
        step = head.model(inputs_embeds=pair, position_ids=position, past_key_values=cache)
    return tokens


def _mismatches(dirs, kind: str, cls) -> tuple[int, int]:
    """(rounds whose proposals differ from the from-scratch head's, rounds checked)."""
    target = _target(dirs, kind)
    drafter = _drafter(dirs, kind, target, cls)
    drafter.log, drafter.previous = [], None
    decode(target, PROMPTS, DecodeConfig(max_new_tokens=TOKENS, gamma=3, ignore_eos=True), drafter)
    checked = wrong = 0
    for sequences, proposals in drafter.log:
        for sequence, proposed in zip(sequences, proposals, strict=True):
            if len(sequence) > 1:  # a one-token prompt's first round drafts from a zero state
                checked += 1
                wrong += proposed != _from_scratch(drafter, target, sequence, 3)
    return wrong, checked


@pytest.mark.parametrize("kind", KINDS)
def test_every_proposal_is_the_heads_own_over_the_committed_text(dirs, kind):
    wrong, checked = _mismatches(dirs, kind, _Recording)
    assert checked > 10 and wrong == 0


def test_a_head_fed_stale_hidden_states_fails_the_check(dirs):
    """The negative control: the check above must catch a hand-off of the wrong verify pass."""
    wrong, checked = _mismatches(dirs, "mtp", _Stale)
    assert wrong > checked // 2


@pytest.mark.parametrize("kind", KINDS)
def test_rows_finishing_early_leave_target_and_head_together(dirs, kind):
    reference = load_model(dirs["plain"], dtype="float64")
    eos = _plain(reference, PROMPTS, max_new_tokens=TOKENS, ignore_eos=True)[1][5]
    target = _target(dirs, kind)
    reference.eos_token_ids = target.eos_token_ids = frozenset({eos})
    expected = _plain(reference, PROMPTS, max_new_tokens=TOKENS)
    result = decode(
        target, PROMPTS, DecodeConfig(max_new_tokens=TOKENS, gamma=3), _drafter(dirs, kind, target)
    )
    assert [o.token_ids for o in result.outputs] == expected
    assert len({len(t) for t in expected}) > 1  # rows really left at different rounds


def test_without_the_targets_state_rollback_head_sd_would_differ(dirs, monkeypatch):
    """The lossless checks above can fail: with the hybrid target's rollback switched off, SD with a
    head leaves rejected tokens in the target's linear-attention state and its output changes."""
    target = _target(dirs, "mtp")
    expected = _plain(
        load_model(dirs["plain"], dtype="float64"), PROMPTS, max_new_tokens=TOKENS, ignore_eos=True
    )
    monkeypatch.setattr(LinearStates, "_readvance", lambda self, rows, keep: None)
    config = DecodeConfig(max_new_tokens=TOKENS, gamma=3, ignore_eos=True)
    result = decode(target, PROMPTS, config, _drafter(dirs, "mtp", target))
    assert [o.token_ids for o in result.outputs] != expected
