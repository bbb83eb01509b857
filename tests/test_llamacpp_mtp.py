"""A hybrid target's MTP layer through llama.cpp: the target hands its final hidden states back
(`HiddenAccess.FINAL`) as transformers computes them, llama.cpp's MTP context computes what the
checkpoint's MTP module computes, and greedy SD with it as the draft (`LlamaCppMtpDrafter`) gives
plain decoding's tokens under both recurrent rollbacks, its proposals those of a from-scratch MTP,
with a negative control (a head fed stale hidden states proposes otherwise).

The model is the random `hybrid` zoo's MoE given an MTP module (`hybrid_models.add_mtp`): random
for the reference checks, and one that agrees with its (damped) target about 40% of the time for
SD. Needs llama-cpp-python (skipped without it, failed under CI); the export's own checks are
tests/test_gguf_mtp.py's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hybrid_models import add_mtp, reference_mtp
from scipy.stats import chisquare
from test_gguf import require
from test_llamacpp import PROMPTS

from specmoe.api import load_model
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import Proposal
from specmoe.decoding.llamacpp_mtp import LlamaCppMtpDrafter, llamacpp_mtp_drafter
from specmoe.decoding.make_drafter import make_drafter
from specmoe.decoding.sampling import SamplingParams, probabilities
from specmoe.drafts import MtpDraft
from specmoe.errors import SpecmoeError
from specmoe.metrics import invariant_violations, totals
from specmoe.zoo import build_zoo
from specmoe.zoo.gguf import export_gguf

AGREE = 0.3  # add_mtp's agreement knob: the head then accepts 0.2-0.6 of its proposals at gamma 3


@pytest.fixture(scope="module")
def hybrid_zoo(tmp_path_factory) -> Path:
    return build_zoo("hybrid", tmp_path_factory.mktemp("hybrid") / "zoo")


@pytest.fixture(scope="module")
def random_head(hybrid_zoo, tmp_path_factory) -> Path:
    """The zoo MoE with a random MTP module (an HF directory)."""
    return add_mtp(hybrid_zoo / "moe", tmp_path_factory.mktemp("mtp") / "moe")


@pytest.fixture(scope="module")
def agreeing(hybrid_zoo, tmp_path_factory) -> dict[str, Path]:
    """f16 and f32 GGUFs of a target whose MTP head agrees with it part of the time."""
    require("gguf")
    root = tmp_path_factory.mktemp("agreeing")
    model = add_mtp(hybrid_zoo / "moe", root / "moe", seed=1, agree=AGREE)
    return {
        "f16": export_gguf(model, root / "moe-f16.gguf"),
        "f32": export_gguf(model, root / "moe-f32.gguf", "f32"),
    }


def llama(path: Path, **options):
    require("llama_cpp")
    return load_model(path, n_threads=1, **options)


# --- llama.cpp computes the checkpoint's MTP module ---------------------------------------------------


def test_llamacpp_hands_back_the_final_hidden_states_transformers_computes(random_head, tmp_path):
    """HiddenAccess.FINAL: after prefill right-aligned with zeros before each row, after a forward
    one per position (a 2-token block is decoded stepwise, a 4-token one whole)."""
    ours = llama(export_gguf(random_head, tmp_path / "moe.gguf", "f32"), cache_type="f32", flash_attn=False)
    reference = load_model(random_head, dtype="float32").model
    top = ours.num_layers
    ours.capture_hidden((top,))
    prefix = [p[:-1] for p in PROMPTS]  # 6, 2 and 0 tokens
    ours.prefill(prefix)
    after_prefill = ours.hidden()  # [B, W, 1, H]
    assert after_prefill.shape[:3] == (3, 6, 1)
    blocks = [torch.tensor([[p[-1], 5] for p in PROMPTS]), torch.tensor([[1, 2, 3, 4]] * 3)]
    after = [(ours.forward(block), ours.hidden())[1] for block in blocks]  # [B, t, 1, H] each
    for row, prompt in enumerate(PROMPTS):
        whole = [*prompt, 5, 1, 2, 3, 4]
        with torch.no_grad():
            want = reference.model(input_ids=torch.tensor([whole])).last_hidden_state[0]  # [n, H]
        n = len(prompt) - 1
        got = torch.cat([after_prefill[row, 6 - n :, 0], after[0][row, :, 0], after[1][row, :, 0]])
        assert (got - want).abs().max().item() < 1e-4
        assert not after_prefill[row, : 6 - n].any()
    ours.capture_hidden(())


def test_llamacpps_mtp_context_computes_the_checkpoints_mtp_module(random_head, tmp_path):
    """f32 GGUF, f32 cache: each entry (x_p, target hidden at p - 1) gives the logits and hidden state
    of `reference_mtp` (transformers' decoder layer with the checkpoint's mtp.* weights)."""
    from specmoe.backends.llamacpp_mtp import Entry

    target = llama(export_gguf(random_head, tmp_path / "moe.gguf", "f32"), cache_type="f32", flash_attn=False)
    prompt = PROMPTS[0]
    target.capture_hidden((target.num_layers,))
    target.prefill([prompt])
    hidden = target.hidden()[0, :, 0]  # [n, H]
    shifted = torch.cat([torch.zeros(1, hidden.shape[1]), hidden[:-1]])  # h_{p-1}, zeros at p = 0
    mtp = target.mtp_context()
    mtp.reset(1)
    entries = [Entry(0, p, token, shifted[p].numpy(), True) for p, token in enumerate(prompt)]
    logits, own = mtp.decode(entries)  # [n, V], [n, H]
    want_logits, want_hidden = reference_mtp(random_head, prompt, shifted)
    assert np.abs(logits - want_logits.numpy()).max() < 1e-3  # logits of magnitude ~5
    assert np.abs(own - want_hidden.numpy()).max() < 1e-4
    # only the last entry with an output: its row, not the first (llama.cpp's masked output would)
    mtp.reset(1)
    last, own_last = mtp.decode(
        [Entry(0, p, e.token, e.hidden, p == len(prompt) - 1) for p, e in enumerate(entries)]
    )
    assert np.abs(last[0] - logits[-1]).max() < 1e-4 and np.abs(own_last[0] - own[-1]).max() < 1e-4


# --- lossless SD with the MTP head ----------------------------------------------------------------------


def greedy(target, prompts, tokens):
    config = DecodeConfig(max_new_tokens=tokens, ignore_eos=True)
    return [decode(target, [p], config).outputs[0].token_ids for p in prompts]


@pytest.mark.parametrize(
    ("batch", "gamma", "rollback"),
    [
        (1, 1, "snapshots"),
        (1, 3, "checkpoints"),
        (1, 3, "snapshots"),
        (3, 3, "checkpoints"),
        (3, 4, "snapshots"),
    ],
)
def test_greedy_sd_with_the_mtp_head_equals_plain_decoding(agreeing, batch, gamma, rollback):
    target = llama(agreeing["f16"], recurrent_rollback=rollback)
    assert target.recurrent_rollback == rollback
    expected = greedy(target, PROMPTS, 32)
    config = DecodeConfig(max_new_tokens=32, gamma=gamma, ignore_eos=True)
    batches = [PROMPTS] if batch == 3 else [[p] for p in PROMPTS]  # B = 1: each prompt alone
    results = [decode(target, prompts, config, llamacpp_mtp_drafter(target)) for prompts in batches]
    assert [o.token_ids for r in results for o in r.outputs] == expected
    accepted = sum(totals(r).accepted for r in results)
    assert 0.2 <= accepted / sum(totals(r).drafted for r in results) <= 0.8
    for result in results:
        assert invariant_violations(result) == []
    states = target._states
    assert (states.by_snapshot > 0, states.by_checkpoint > 0) == (
        rollback == "snapshots",
        rollback != "snapshots",
    )


def test_rows_that_finish_early_leave_the_mtp_batch(agreeing):
    """A row that stops at an end-of-sequence token leaves target and head; the others go on."""
    target = llama(agreeing["f16"])
    stop = greedy(target, [PROMPTS[1]], 8)[0][4]  # the 5th token row 1 emits
    target.eos_token_ids = frozenset({stop})
    config = DecodeConfig(max_new_tokens=24, gamma=3)
    expected = [decode(target, [p], config).outputs[0].token_ids for p in PROMPTS]
    drafter = make_drafter(MtpDraft(), target)  # what `--draft mtp` builds for a .gguf target
    assert isinstance(drafter, LlamaCppMtpDrafter)
    result = decode(target, PROMPTS, config, drafter)
    assert [o.token_ids for o in result.outputs] == expected
    assert [o.finish_reason for o in result.outputs].count("eos") >= 1
    assert len(result.rounds[-1].rows) < 3


class _Recording(LlamaCppMtpDrafter):
    """Keeps each round's committed sequences and proposals."""

    def __init__(self, target) -> None:
        super().__init__(target)
        self.rounds: list[tuple[list[list[int]], list[list[int]]]] = []

    def propose(self, sequences, gamma, params, generator):
        proposal = super().propose(sequences, gamma, params, generator)
        self.rounds.append(([list(s) for s in sequences], proposal.tokens.tolist()))
        return proposal


class _Stale(_Recording):
    """Negative control: a head fed stale hidden states. After each verify pass every kept
    position gets the hidden state of the round's first one, not its own."""

    def feedback(self, verified) -> None:
        super().feedback(verified)
        self._pending = [[states[0]] * len(states) for states in self._pending]


def _from_scratch(target, sequence: list[int], gamma: int) -> list[int]:
    """What the MTP head proposes after `sequence` when everything is computed afresh: the target's
    hidden states from one prefill, one MTP decode of every entry, then gamma recursive steps."""
    from specmoe.backends.llamacpp_mtp import Entry

    target.capture_hidden((target.num_layers,))
    target.prefill([sequence[:-1]])
    hidden = target.hidden()[0, :, 0].numpy()  # [n - 1, H]
    shifted = [np.zeros(hidden.shape[1], np.float32), *hidden]
    mtp = target.mtp_context()
    mtp.reset(1)
    n = len(sequence)
    entries = [Entry(0, p, sequence[p], shifted[p], p == n - 1) for p in range(n)]
    proposals = []
    for step in range(gamma):
        logits, own = mtp.decode(entries)
        proposals.append(int(logits[0].argmax()))
        entries = [Entry(0, n + step, proposals[-1], own[0], True)]
    return proposals


@pytest.mark.parametrize("stale", [False, True], ids=["kept-in-step", "stale-hidden-states"])
def test_each_round_proposes_what_a_from_scratch_head_proposes(agreeing, stale):
    path, gamma = agreeing["f32"], 3
    target = llama(path, cache_type="f32", flash_attn=False)
    drafter = (_Stale if stale else _Recording)(target)
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=16, gamma=gamma, ignore_eos=True), drafter)
    assert [o.token_ids for o in result.outputs] == greedy(target, PROMPTS, 16)  # lossless either way
    fresh = llama(path, cache_type="f32", flash_attn=False)
    differing = [
        (sequence, proposed)
        for sequences, proposals in drafter.rounds
        for sequence, proposed in zip(sequences, proposals, strict=True)
        if proposed != _from_scratch(fresh, sequence, gamma)
    ]
    assert bool(differing) == stale, differing[:2]


# --- what is refused ---------------------------------------------------------------------------------


def test_a_target_without_an_mtp_layer_or_not_on_llamacpp_is_refused_in_one_line(hybrid_zoo, tmp_path):
    plain = llama(export_gguf(hybrid_zoo / "moe", tmp_path / "moe.gguf"))
    with pytest.raises(
        SpecmoeError, match=r"has no MTP layer \(qwen35moe.nextn_predict_layers is 0\)"
    ) as err:
        llamacpp_mtp_drafter(plain)
    assert "\n" not in str(err.value)
    with pytest.raises(SpecmoeError, match=r"needs a \.gguf target"):
        llamacpp_mtp_drafter(load_model(hybrid_zoo / "moe", dtype="float32"))


# --- sampling keeps the target's distribution ----------------------------------------------------------

SAMPLING = SamplingParams(temperature=1.0, top_k=4)  # 4 x 4 cells for the first two tokens


def _exact_joint(target, prompt: list[int]) -> dict[tuple[int, int], float]:
    """P(x1, x2) of plain sampling for each possible pair (top-k leaves 16), from the target's logits."""
    joint = {}
    target.prefill([prompt[:-1]])
    first = probabilities(target.forward(torch.tensor([prompt[-1:]]))[:, -1], SAMPLING)[0]  # [V]
    for x1 in first.nonzero().flatten().tolist():
        target.prefill([prompt])
        second = probabilities(target.forward(torch.tensor([[x1]]))[:, -1], SAMPLING)[0]
        for x2 in second.nonzero().flatten().tolist():
            joint[(x1, x2)] = (first[x1] * second[x2]).item()
    return joint


class _Misreporting(LlamaCppMtpDrafter):
    """Negative control: samples its proposals as it should but reports a flat distribution over the
    same top-k tokens, so the verifier's rejection rule corrects against the wrong draft distribution.
    (Reporting a point mass would not do: the rule is exact for a claimed point mass.)"""

    def propose(self, sequences, gamma, params, generator):
        proposal = super().propose(sequences, gamma, params, generator)
        flat = (proposal.probs > 0).float()  # [B, G, V]
        return Proposal(proposal.tokens, flat / flat.sum(-1, keepdim=True))


@pytest.mark.parametrize("drafter", [LlamaCppMtpDrafter, _Misreporting], ids=["mtp", "misreporting"])
def test_sampling_sd_with_the_mtp_head_keeps_the_target_distribution(agreeing, drafter):
    target = llama(agreeing["f16"], n_ctx=64)
    prompt, draws, batch = PROMPTS[0], 3000, 250
    joint = _exact_joint(target, prompt)
    cells = sorted(joint)
    counts = dict.fromkeys(cells, 0)
    for seed in range(draws // batch):
        config = DecodeConfig(max_new_tokens=2, gamma=2, sampling=SAMPLING, seed=seed, ignore_eos=True)
        for out in decode(target, [prompt] * batch, config, drafter(target)).outputs:
            counts[tuple(out.token_ids)] += 1  # a pair outside the cells fails here (KeyError)
    expected = np.array([joint[c] for c in cells]) * draws
    pvalue = chisquare(
        np.array([counts[c] for c in cells]), expected * sum(counts.values()) / expected.sum()
    ).pvalue
    # under exact preservation p < 1e-3 once in a thousand seeds; the control lands far below
    assert (pvalue > 1e-3) == (drafter is LlamaCppMtpDrafter), pvalue
