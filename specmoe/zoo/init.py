"""Routing-aware, deterministic random initialisation of zoo weights.

Why not transformers' default init (every matrix N(0, 0.02)): the embedding rows are then tiny next
to what attention adds, and attention at random init averages the values of the whole context, so
every position's residual stream is nearly the same vector. Every token then picks nearly the same
experts, a verification pass over n tokens reads barely more expert weights than one token does,
and MoE speculative decoding looks far cheaper than it is on a trained model.

What this init does instead (the scales are `InitScales`; docs/zoo.md has the measurements):
- Token embeddings ~ N(0, 1): token identity dominates the residual stream, so the router input
  of different tokens points in independent random directions.
- Every projection that reads the (RMS-normalised, unit-rms) residual has std 1/sqrt(fan_in), so
  its outputs have unit scale; the projections that write back into the residual (o_proj,
  down_proj) are scaled so that all 2L branches together add about `branch_rms` to a stream of rms
  1: layers shape the output without drowning the token signal the routers rely on.
- Router rows are random directions of equal norm. Equal norms make experts exchangeable, so each
  is picked by a fraction K/E of tokens and n independent tokens touch
  N(n) = E * (1 - (1 - K/E)^n) distinct experts on average, the balanced-routing reference.
- lm_head ~ N(0, logit_std^2 / H): logits have std ~3, about 4 nats of next-token entropy over a
  2048-token vocabulary (uniform would be 7.6): peaked enough that sampling is not noise, flat
  enough that sampled and greedy decoding differ. Its EOS row is zero, so a random model
  essentially never chooses to stop and benchmark lengths are set by max_new_tokens.
- Untied embeddings: with lm_head = embedding, the residual (dominated by the current token's
  embedding) would score the current token highest and greedy decoding would repeat it forever.

Every tensor draws from its own `torch.Generator` seeded by (seed, model, parameter name), so the
result does not depend on parameter order and any single tensor can be regenerated alone (the
tests check a bench router without building the bench model).
"""

import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from specmoe.zoo.presets import ModelShape
from specmoe.zoo.tokenizer import EOS_TOKEN_ID

# rms of silu(g) * u for independent g, u ~ N(0, 1): the scale of a SwiGLU hidden activation when
# gate and up projections have unit-scale outputs.
SWIGLU_RMS = 0.5965


@dataclass(frozen=True)
class InitScales:
    embedding_std: float = 1.0
    router_logit_std: float = 2.0  # std of router logits for a unit-rms input; top-k is scale-free
    branch_rms: float = 0.7  # rms that all residual branches add together, relative to embeddings
    logit_std: float = 3.0  # std of output logits


DEFAULT_SCALES = InitScales()


def tensor_seed(seed: int, model_name: str, param_name: str) -> int:
    digest = hashlib.sha256(f"{seed}/{model_name}/{param_name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _normal(shape: tuple[int, ...], std: float, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float32) * std


def _branch_std(shape: ModelShape, fan_in: int, input_rms: float, scales: InitScales) -> float:
    # 2L branches of equal rms, assumed uncorrelated, add up to branch_rms.
    per_branch = scales.branch_rms / math.sqrt(2 * shape.num_layers)
    return per_branch / (input_rms * math.sqrt(fan_in))


InitRule = Callable[[tuple[int, ...], ModelShape, InitScales, torch.Generator], torch.Tensor]


def _embedding(dims, shape, scales, gen):
    return _normal(dims, scales.embedding_std, gen)


def _lm_head(dims, shape, scales, gen):
    weight = _normal(dims, scales.logit_std / math.sqrt(dims[-1]), gen)
    weight[EOS_TOKEN_ID] = 0.0
    return weight


def _ones(dims, shape, scales, gen):
    return torch.ones(dims, dtype=torch.float32)


def _zeros(dims, shape, scales, gen):
    return torch.zeros(dims, dtype=torch.float32)


def _conv(dims, shape, scales, gen):
    """A depthwise causal conv [C, 1, K] over unit-scale channels: unit-scale outputs."""
    return _normal(dims, 1.0 / math.sqrt(dims[-1]), gen)


def _a_log(dims, shape, scales, gen):
    """log A of each value head, A ~ U(0.01, 16) as transformers draws it: decays per token from
    about 0.99 (long memory) to about 0 (none), so heads keep memories of many lengths."""
    return (0.01 + 15.99 * torch.rand(dims, generator=gen, dtype=torch.float32)).log()


def _reader(dims, shape, scales, gen):
    """Projections of a unit-rms input (q, k, v, gate, up): unit-scale outputs."""
    return _normal(dims, 1.0 / math.sqrt(dims[-1]), gen)


def _attention_writer(dims, shape, scales, gen):
    # Attention outputs are convex mixtures of unit-rms values: rms <= 1.
    return _normal(dims, _branch_std(shape, dims[-1], 1.0, scales), gen)


def _mlp_writer(dims, shape, scales, gen):
    return _normal(dims, _branch_std(shape, dims[-1], SWIGLU_RMS, scales), gen)


def _router(dims, shape, scales, gen):
    """[E, H] rows of equal norm: a unit-rms input (norm sqrt(H)) gives logits of std router_logit_std."""
    weight = torch.randn(dims, generator=gen, dtype=torch.float32)
    weight = weight / weight.norm(dim=-1, keepdim=True)
    return weight * scales.router_logit_std


# Parameter-name suffix -> rule. Every parameter of Qwen3 / Qwen3-MoE must match exactly one; an
# unknown name (say, after a transformers rename) is an error, not a silent default.
RULES: dict[str, InitRule] = {
    "embed_tokens.weight": _embedding,
    "lm_head.weight": _lm_head,
    "layernorm.weight": _ones,  # input_layernorm, post_attention_layernorm
    "q_norm.weight": _ones,
    "k_norm.weight": _ones,
    "model.norm.weight": _ones,
    "q_proj.weight": _reader,
    "k_proj.weight": _reader,
    "v_proj.weight": _reader,
    "o_proj.weight": _attention_writer,
    "mlp.gate_proj.weight": _reader,
    "mlp.up_proj.weight": _reader,
    "mlp.down_proj.weight": _mlp_writer,
    "mlp.experts.gate_up_proj": _reader,  # [E, 2 * I, H]
    "mlp.experts.down_proj": _mlp_writer,  # [E, H, I]
    "mlp.gate.weight": _router,  # [E, H]
    # Qwen3.5 / Qwen3.5-MoE (hybrid): gated-DeltaNet layers and the MoE's shared expert
    "linear_attn.in_proj_qkv.weight": _reader,
    "linear_attn.in_proj_z.weight": _reader,  # the output gate
    "linear_attn.in_proj_b.weight": _reader,  # beta = sigmoid(b): the write strength
    "linear_attn.in_proj_a.weight": _reader,  # the decay's input
    "linear_attn.conv1d.weight": _conv,
    "linear_attn.dt_bias": _ones,
    "linear_attn.A_log": _a_log,
    "linear_attn.norm.weight": _ones,  # a plain gated RMSNorm
    "linear_attn.out_proj.weight": _mlp_writer,  # reads norm(x) * silu(z), like a SwiGLU hidden
    "mlp.shared_expert.gate_proj.weight": _reader,
    "mlp.shared_expert.up_proj.weight": _reader,
    "mlp.shared_expert.down_proj.weight": _mlp_writer,
    "mlp.shared_expert_gate.weight": _reader,  # sigmoid(unit scale): about half the shared output
}
# Qwen3.5's RMSNorms scale by (1 + weight): their neutral weight is zero.
ZERO_CENTERED_NORMS = ("layernorm.weight", "q_norm.weight", "k_norm.weight", "model.norm.weight")


def rule_for(param_name: str, shape: ModelShape | None = None) -> InitRule:
    matches = [suffix for suffix in RULES if param_name.endswith(suffix)]
    if len(matches) != 1:
        raise KeyError(f"no unique init rule for parameter '{param_name}' (matches: {matches})")
    if shape is not None and shape.is_hybrid and matches[0] in ZERO_CENTERED_NORMS:
        return _zeros
    return RULES[matches[0]]


def init_tensor(
    param_name: str,
    dims: tuple[int, ...],
    shape: ModelShape,
    seed: int,
    scales: InitScales = DEFAULT_SCALES,
) -> torch.Tensor:
    """One parameter, float32, from its own generator: the same arguments give the same bits."""
    generator = torch.Generator().manual_seed(tensor_seed(seed, shape.name, param_name))
    return rule_for(param_name, shape)(dims, shape, scales, generator)


def init_weights(
    param_shapes: dict[str, tuple[int, ...]],
    shape: ModelShape,
    seed: int,
    scales: InitScales = DEFAULT_SCALES,
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, float32 tensor) for every parameter; a generator so the caller can cast each tensor to
    bf16 as it comes and peak memory stays near one model in bf16."""
    for param_name, dims in param_shapes.items():
        yield param_name, init_tensor(param_name, dims, shape, seed, scales)
