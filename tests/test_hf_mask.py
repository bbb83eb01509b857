"""The eager backend hands transformers a ready mask (or none) that attends exactly where the 2D
mask did: no mask without padding or holes, a boolean 4D mask for SDPA, an additive one for eager
attention; SD through each equals plain greedy decoding in float64."""

from __future__ import annotations

import pytest
import torch

from specmoe.api import load_model
from specmoe.backends.hf import HFBackend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.decoding.oracle import OracleDrafter

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41], [99]]
# One length: no padding, so holes from ragged acceptance are what the decode masks hide. (With
# transformers' eager attention a left-padded prefill gives its pad positions NaN states, before
# and after this backend's masks: padded batches need SDPA.)
EVEN = [[11, 12, 13, 14, 15], [40, 41, 42, 43, 44], [95, 96, 97, 98, 99]]


def _masks(backend) -> list:
    """The attention_mask of every forward of `backend`'s model, as (kind, shape)."""
    seen = []

    def hook(_module, _args, kwargs):
        mask = kwargs.get("attention_mask")
        seen.append(None if mask is None else (mask.dtype, tuple(mask.shape)))

    backend.model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_sd_through_the_ready_masks_equals_plain_decoding(exact_models, tiny_zoo, attention):
    model = load_model(tiny_zoo / "dense-s", dtype="float64").model
    model.set_attn_implementation(attention)
    target = HFBackend(model, "dense-s", torch.device("cpu"))
    draft = exact_models["draft-xs"]
    prompts = PROMPTS if attention == "sdpa" else EVEN
    plain = DecodeConfig(max_new_tokens=20, ignore_eos=True)
    expected = [decode(exact_models["dense-s"], [p], plain).outputs[0].token_ids for p in prompts]
    # The oracle proposes the target's own tokens, each kept by a coin with P = 1/2: rows keep
    # different counts, so the cache gets holes.
    masks = _masks(target)
    config = DecodeConfig(max_new_tokens=12, gamma=4, ignore_eos=True)
    result = decode(target, prompts, config, OracleDrafter(draft, 0.5, expected))
    assert [o.token_ids for o in result.outputs] == [e[:12] for e in expected]
    ready = [m for m in masks[1:] if m is not None]  # after prefill's 2D mask; None while dense
    dtype = torch.bool if attention == "sdpa" else torch.float64
    assert ready and all(m[0] == dtype and len(m[1]) == 4 for m in ready)


def test_without_padding_or_holes_no_mask_is_passed(exact_models):
    target = HFBackend(exact_models["moe"].model, "moe", torch.device("cpu"))
    masks = _masks(target)
    config = DecodeConfig(max_new_tokens=6, gamma=3, ignore_eos=True)
    decode(target, PROMPTS[:1], config, ModelDrafter(exact_models["draft-xs"]))
    assert masks[1:] and all(m is None for m in masks[1:])  # B = 1 never has a hole
