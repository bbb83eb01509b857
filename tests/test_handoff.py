"""The verify -> draft hand-off: what a head drafter is told after each verify pass, and the hidden
states both transformers backends hand back beside their logits (float64, tiny zoo)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch

import specmoe.decoding
from specmoe.api import load_model
from specmoe.backends.base import BackendBase, HiddenAccess, check_hidden_layers
from specmoe.backends.hf_static import StaticHFBackend
from specmoe.decoding import decode as decode_module
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter, Verified
from specmoe.errors import SpecmoeError

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41, 42], [7]]


def _reference(model, prompt: list[int], layers: tuple[int, ...]) -> torch.Tensor:
    """[n, K, H]: the hidden states of one prompt, fed alone and whole."""
    out = model(input_ids=torch.tensor([prompt]), output_hidden_states=True)
    return torch.stack([out.hidden_states[i][0] for i in layers], 1)


@pytest.mark.parametrize("static", [False, True])
def test_prefill_and_forward_hand_back_the_hidden_states_of_each_position(exact_models, tiny_zoo, static):
    target = exact_models["moe"]
    if static:
        eager = load_model(tiny_zoo / "moe", dtype="float64", experts_implementation="batched_mm")
        target = StaticHFBackend(eager.model, "moe", eager.device, compile=False)
    layers = (0, 1, target.num_layers)
    target.capture_hidden(layers)
    prefix = [p[:-1] for p in PROMPTS]
    target.prefill(prefix)
    hidden = target.hidden()  # [B, W, K, H], right-aligned
    width = max(len(p) for p in prefix)
    assert hidden.shape[:3] == (3, width, 3)
    block = torch.tensor([[p[-1], 5] for p in PROMPTS])  # [B, 2]: the last prompt token, then one more
    target.forward(block)
    after = target.hidden()  # [B, 2, K, H]
    for row, prompt in enumerate(PROMPTS):
        n = len(prompt) - 1
        whole = _reference(target.model, [*prompt, 5], layers)  # [n + 2, K, H]
        torch.testing.assert_close(hidden[row, width - n :], whole[:n])
        assert not hidden[row, : width - n].any()  # left padding is zeros
        torch.testing.assert_close(after[row], whole[n:])
    target.capture_hidden(())


class _Recording(ModelDrafter):
    """A model drafter that reads the target's final hidden state and keeps what it was handed."""

    def __init__(self, backend, layers: tuple[int, ...]) -> None:
        super().__init__(backend)
        self.hidden_layers = layers
        self.begun: torch.Tensor | None = None
        self.verified: list[Verified] = []

    def begin(self, prompts, hidden=None) -> None:
        self.begun = hidden
        super().begin(prompts, hidden)

    def feedback(self, verified: Verified) -> None:
        self.verified.append(verified)
        super().feedback(verified)


def test_decode_hands_the_drafter_each_verify_pass_and_its_hidden_states(exact_models):
    target, draft = exact_models["moe"], exact_models["draft-xs"]
    gamma, top = 3, target.num_layers
    drafter = _Recording(draft, (top,))
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=12, gamma=gamma, ignore_eos=True), drafter)
    assert drafter.begun is not None and drafter.begun.shape[:3] == (3, 6, 1)
    assert len(drafter.verified) == len(result.rounds)
    for verified, record in zip(drafter.verified, result.rounds, strict=True):
        rows = len(record.rows)
        assert verified.accepted == record.accepted
        assert len(verified.next_token) == rows
        assert verified.hidden is not None and verified.hidden.shape[:3] == (rows, 1 + gamma, 1)
    config = DecodeConfig(max_new_tokens=12, ignore_eos=True)
    plain = [decode(target, [p], config).outputs[0] for p in PROMPTS]
    assert [o.token_ids for o in result.outputs] == [o.token_ids for o in plain]


def test_a_drafter_that_needs_hidden_states_a_backend_cannot_give_is_refused_in_one_line(exact_models):
    class _Blind(BackendBase):
        name = "blind"

    with pytest.raises(SpecmoeError, match="cannot return") as err:
        check_hidden_layers(_Blind(), (4,))
    assert "\n" not in str(err.value)
    target = exact_models["moe"]
    with pytest.raises(SpecmoeError, match=f"layers 0 to {target.num_layers}"):
        check_hidden_layers(target, (target.num_layers + 1,))
    drafter = _Recording(exact_models["draft-xs"], (target.num_layers + 5,))
    with pytest.raises(SpecmoeError, match="hidden states at layer"):
        decode(target, PROMPTS, DecodeConfig(max_new_tokens=4, gamma=2), drafter)
    final_only = _Blind()
    final_only.hidden_access, final_only.num_layers = HiddenAccess.FINAL, 8
    with pytest.raises(SpecmoeError, match=r"only its final layer \(8\)"):
        check_hidden_layers(final_only, (3,))


def test_the_decode_loop_fits_a_screen_and_the_engine_probes_nothing():
    source = inspect.getsource(decode_module.decode)
    assert len(source.splitlines()) <= 60
    for path in Path(specmoe.decoding.__file__).parent.glob("*.py"):
        calls = [
            node.func.id
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        ]
        assert "getattr" not in calls and "hasattr" not in calls, path.name
