"""A tiny random model over a 6-token vocabulary, and the exact two-token distribution it defines.

Sampling tests compare empirical counts of (x1, x2) against this exact joint distribution.
"""

from __future__ import annotations

import torch

from specmoe.api import load_model
from specmoe.decoding.sampling import SamplingParams, probabilities

VOCAB = 6


def small_vocab_model(path, seed: int, layers: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        eos_token_id=0,
    )
    model = Qwen3ForCausalLM(config)
    for param in model.parameters():
        torch.nn.init.normal_(param, std=0.4)
    model.save_pretrained(path)
    return load_model(path, dtype="float64")


def exact_joint(target, prompt: list[int], params: SamplingParams) -> torch.Tensor:
    """P(x1, x2 | prompt) under the target, flattened [VOCAB * VOCAB], from the decode loop's transform."""
    target.prefill([prompt[:-1]])
    first = probabilities(target.forward(torch.tensor([[prompt[-1]]]))[0, -1], params)
    joint = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    for x1 in range(VOCAB):
        target.prefill([prompt])
        second = probabilities(target.forward(torch.tensor([[x1]]))[0, -1], params)
        joint[x1] = first[x1] * second
    return joint.flatten()
