"""SD is lossless on sliding-window models: gpt-oss (sliding and full layers alternating, attention
sinks, MoE, eager attention), Mistral with a sliding window (every layer slides) and Cohere 2
(sliding and full layers, sdpa attention), eager and through the static cache, with a window
(8 tokens) far shorter than prompt + decode.

The drafts are their targets with noise on every weight, so they agree often but not always: rows
reject at different positions, roll back by different counts and leave holes in the batch's
slots, which the window must be counted across (`hf_sliding`).
"""

from __future__ import annotations

import pytest
import torch
from hybrid_models import draw_weights

from specmoe.api import load_model
from specmoe.backends import hf_sliding
from specmoe.backends.hf_mask import DeviceMask
from specmoe.backends.hf_static import StaticHFBackend
from specmoe.backends.slots import SlotMap
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.errors import SpecmoeError
from specmoe.metrics import acceptance_rate, invariant_violations, totals

VOCAB = 96
WINDOW = 8
NEW = 32
PROMPTS = [[11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21], [40, 41], [90, 91, 92, 93, 94]]  # ragged
NOISE = {"gpt_oss": 0.01, "mistral": 0.01, "cohere2": 0.01}  # draft = target + N(0, NOISE²) on every matrix
FAMILIES = list(NOISE)


def sliding_config(family: str, **fields):
    from transformers import AutoConfig

    base = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=16,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        sliding_window=WINDOW,
    )
    base.update(fields)
    if family == "gpt_oss":
        extra = dict(
            num_local_experts=4,
            num_experts_per_tok=2,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
        return AutoConfig.for_model("gpt_oss", **base, **extra)
    if family == "cohere2":  # sdpa attention over sliding and full layers
        mixed = dict(
            layer_types=["sliding_attention", "full_attention"], bos_token_id=None, eos_token_id=None
        )
        return AutoConfig.for_model("cohere2", **base, **mixed)
    return AutoConfig.for_model(family, **base)


def save_sliding(family: str, path, noise: float = 0.0, seed: int = 0):
    """A random model of the family (seeded); noise > 0 perturbs it into a draft of the seed-0 one."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(sliding_config(family))
    draw_weights(model, noise, seed)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sliding")
    return {
        family: (
            save_sliding(family, root / family),
            save_sliding(family, root / f"{family}-draft", NOISE[family], seed=1),
        )
        for family in FAMILIES
    }


def _plain(target, prompts):
    """Each prompt alone, plain greedy decoding: no padding, no hole, no draft."""
    config = DecodeConfig(max_new_tokens=NEW, ignore_eos=True)
    return [list(decode(target, [p], config).outputs[0].token_ids) for p in prompts]


def _static(path, compiled: bool = False):
    eager = load_model(path, dtype="float64")
    return StaticHFBackend(eager.model, eager.name, eager.device, compile=compiled, compiler="eager")


def _sd(target, draft, prompts):
    return decode(
        target, prompts, DecodeConfig(max_new_tokens=NEW, gamma=3, ignore_eos=True), ModelDrafter(draft)
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_plain_decoding_is_the_models_own(model_dirs, family):
    """specmoe's plain decoding equals transformers' `generate` (its own sliding caches and masks)."""
    target = load_model(model_dirs[family][0], dtype="float64")
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        out = target.model.generate(ids, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
        assert list(_plain(target, [prompt])[0]) == out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_sd_is_exact_with_a_sliding_window(model_dirs, family, batch):
    target_dir, draft_dir = model_dirs[family]
    target, draft = load_model(target_dir, dtype="float64"), load_model(draft_dir, dtype="float64")
    prompts = PROMPTS[:batch]
    expected = _plain(target, prompts)
    result = _sd(target, draft, prompts)
    assert [list(o.token_ids) for o in result.outputs] == expected
    counts = totals(result)
    assert 0.2 <= acceptance_rate(counts.accepted, counts.drafted) <= 0.9  # drafts sometimes rejected
    assert invariant_violations(result) == []


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_sd_is_exact_through_the_static_cache(model_dirs, family):
    target_dir, draft_dir = model_dirs[family]
    expected = _plain(load_model(target_dir, dtype="float64"), PROMPTS)
    result = _sd(_static(target_dir), _static(draft_dir), PROMPTS)
    assert [list(o.token_ids) for o in result.outputs] == expected


def test_greedy_sd_is_exact_through_compiled_graphs(model_dirs):
    target_dir, draft_dir = model_dirs["gpt_oss"]
    expected = _plain(load_model(target_dir, dtype="float64"), PROMPTS)
    result = _sd(_static(target_dir, compiled=True), _static(draft_dir, compiled=True), PROMPTS)
    assert [list(o.token_ids) for o in result.outputs] == expected


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static"])
def test_a_window_counted_in_slots_would_differ(model_dirs, monkeypatch, static):
    """The negative control: counting the window in physical slots (holes and padding included)
    instead of each row's tokens lets SD diverge from plain decoding, so the tests above can fail."""
    target_dir, draft_dir = model_dirs["gpt_oss"]
    expected = _plain(load_model(target_dir, dtype="float64"), PROMPTS)
    monkeypatch.setattr(hf_sliding, "key_positions", lambda valid: _slot_index(valid))
    for module in ("specmoe.backends.hf_mask", "specmoe.backends.hf_static"):
        monkeypatch.setattr(f"{module}.key_positions", lambda valid: _slot_index(valid))
    load = _static if static else (lambda path: load_model(path, dtype="float64"))
    result = _sd(load(target_dir), load(draft_dir), PROMPTS)
    assert [list(o.token_ids) for o in result.outputs] != expected


def test_without_the_window_sd_would_differ(model_dirs, monkeypatch):
    """The other negative control: with the window dropped from the mask, every layer attends to the
    whole past, and decoding is no longer the model's."""
    target_dir, draft_dir = model_dirs["gpt_oss"]
    expected = _plain(load_model(target_dir, dtype="float64"), PROMPTS)
    monkeypatch.setattr("specmoe.backends.hf_mask.windowed", lambda allowed, keys, queries, window: allowed)
    result = _sd(load_model(target_dir, dtype="float64"), load_model(draft_dir, dtype="float64"), PROMPTS)
    assert [list(o.token_ids) for o in result.outputs] != expected


def _slot_index(valid: torch.Tensor) -> torch.Tensor:
    return torch.arange(valid.shape[-1], device=valid.device).expand(valid.shape)


def test_the_window_is_counted_in_tokens_across_holes():
    """Row 0 holds tokens at slots 0, 1, 3, 4 (slot 2 is a hole); with a window of 3 the query at
    slot 4 (its fourth token) sees its second, third and fourth tokens: slots 1, 3 and 4."""
    valid = torch.tensor([[True, True, False, True, True]])  # [B, W]
    allowed = valid[:, None, None, :].clone()  # [B, 1, t, W], t = 1
    keys = hf_sliding.key_positions(valid)
    sliding = hf_sliding.windowed(allowed, keys, keys[:, 4:5], window=3)
    assert sliding[0, 0, 0].tolist() == [False, True, False, True, True]


def test_sd_on_a_chunked_attention_model_is_still_refused(tmp_path):
    from transformers import AutoModelForCausalLM

    config = sliding_config("mistral", sliding_window=None)
    config.attention_chunk_size = 4  # transformers' caches then drop keys chunk by chunk
    path = tmp_path / "chunked"
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    # Plain decoding needs no rollback, so the model loads; speculative decoding on it is refused.
    message = load_model(path, dtype="float64").rollback_refused
    assert "chunked attention" in message and "refused" in message and "\n" not in message


def test_an_attention_kernel_that_takes_no_mask_is_refused(model_dirs):
    """flash and flex attention would get a padding mask and slide over slots: refused in one line."""
    target = load_model(model_dirs["gpt_oss"][0], dtype="float64")
    target.model.config._attn_implementation = "flex_attention"
    with pytest.raises(SpecmoeError, match="sdpa or eager attention") as refused:
        DeviceMask(SlotMap(), target.model, target.device, hf_sliding.sliding_window(target.model.config))
    assert "\n" not in str(refused.value)
