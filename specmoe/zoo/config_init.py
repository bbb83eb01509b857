"""Routing-aware random weights for any transformers causal LM, by the role each tensor plays.

The presets' init (`specmoe.zoo.init`) names every parameter of Qwen3 and Qwen3-MoE. A config from
elsewhere (OLMoE, DeepSeek-V2, Qwen3-Next, GPT-OSS, Llama, ...) has parameters no table lists, so
the same scales (`InitScales`) are given here by role, read off the module tree and the tensor:

  role       which tensors                                        init
  embedding  `get_input_embeddings().weight`                      N(0, 1)
  output     `get_output_embeddings().weight`, when untied         N(0, logit_std^2 / H)
  router     weights of the routers `RouterTrace` recognises       rows of equal norm: logits of std
                                                                  router_logit_std on a unit-rms input
  writer     matrices that add into the residual stream (names     all 2L branches together add rms
             ending in WRITER_SUFFIXES, fused experts' down_proj)  branch_rms to a stream of rms 1
  reader     every other matrix of an nn.Linear or of fused        N(0, 1 / fan_in): unit-scale outputs
             experts ([E, ., .] under `.experts.`)
  kept       vectors (norm gains, biases, A_log, dt_bias, sinks),  transformers' own init, seeded
             convolutions, position tables

Why these scales: `specmoe.zoo.init` (token identity dominates each router's input, so different
tokens pick independent experts; docs/zoo.md measures it). The rows of the output table past the
tokenizer's last id, and EOS's row, are zero: those logits are 0 where the others spread with std 3,
so greedy decoding writes only tokens with text and never stops early (docs/zoo.md, "Config-built
models"). With tied embeddings the input table is the output table: N(0, 1), those rows zero too;
the residual stream is then dominated by the current token's own row, which would score itself
highest (greedy decoding would repeat its input forever), so the final norm's gains get random
signs of size logit_std / sqrt(H): the self-score becomes a random-sign sum, no larger than a
typical logit, and logits keep a std of about logit_std.

A fused-experts tensor is [E, a, b] with the hidden size H in one of a, b (transformers lays most out
[E, out, in], GPT-OSS [E, in, out]): a reader's fan-in is H, a writer's the other dimension.

Every tensor this module sets draws from its own generator on the model's device, seeded by (seed,
the source's digest, the parameter name): independent of parameter order, and two configs never
share a stream, so a draft and its target are not correlated by construction. The same arguments
give the same bits on the same device type and torch version; CPU and CUDA streams differ.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from specmoe.backends.router_trace import find_routers
from specmoe.zoo.init import DEFAULT_SCALES, SWIGLU_RMS, InitScales, tensor_seed
from specmoe.zoo.tokenizer import EOS_TOKEN_ID, VOCAB_SIZE

# Residual writers: attention outputs (o_proj; out_proj of OPT and of linear attention) and MLP
# outputs (down_proj; OPT's fc2). Matched on the parameter name's end, as `specmoe.zoo.init` does.
ATTENTION_WRITERS = ("o_proj.weight", "out_proj.weight")
MLP_WRITERS = ("down_proj.weight", "experts.down_proj", "fc2.weight")
EXPERTS_MARK = ".experts."


@torch.no_grad()
def init_routing_aware(
    model: nn.Module,
    seed: int,
    stream: str,
    tokenizer_size: int = VOCAB_SIZE,
    scales: InitScales = DEFAULT_SCALES,
) -> dict[str, int]:
    """Set the model's embedding, output, router, writer and reader tensors in place; `stream` keeps
    two sources apart (their digests). Returns how many tensors each role set, for the manifest."""
    config = model.config
    hidden = int(config.hidden_size)
    layers = int(config.num_hidden_layers)
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings().weight
    routers = {id(module.weight) for _, module in find_routers(model)}
    linears = {id(m.weight): m for m in model.modules() if isinstance(m, nn.Linear)}
    roles: dict[str, int] = {}

    def generator(name: str) -> torch.Generator:
        return torch.Generator(device=embedding.device).manual_seed(tensor_seed(seed, stream, name))

    for name, param in model.named_parameters():
        role = _role(name, param, embedding, output, routers, linears)
        roles[role] = roles.get(role, 0) + 1
        if role == "embedding":
            param.normal_(0.0, scales.embedding_std, generator=generator(name))
            if param is output:  # tied: the table also scores the next token
                _silence(param, tokenizer_size)
        elif role == "output":
            param.normal_(0.0, scales.logit_std / math.sqrt(param.shape[-1]), generator=generator(name))
            _silence(param, tokenizer_size)
        elif role == "router":
            rows = torch.empty(param.shape, dtype=torch.float32, device=param.device)
            rows.normal_(0.0, 1.0, generator=generator(name))
            param.copy_(rows / rows.norm(dim=-1, keepdim=True) * scales.router_logit_std)
        elif role == "writer":
            fan_in = _fan_in(param, hidden, reads_hidden=False, linear=linears.get(id(param)))
            input_rms = SWIGLU_RMS if name.endswith(MLP_WRITERS) else 1.0
            std = scales.branch_rms / math.sqrt(2 * layers) / (input_rms * math.sqrt(fan_in))
            param.normal_(0.0, std, generator=generator(name))
        elif role == "reader":
            fan_in = _fan_in(param, hidden, reads_hidden=True, linear=linears.get(id(param)))
            param.normal_(0.0, 1.0 / math.sqrt(fan_in), generator=generator(name))
    if output is embedding:
        roles["final-norm"] = _tied_final_norm(model, hidden, scales, generator("final-norm"))
    return roles


FINAL_NORM_NAMES = ("norm", "final_layer_norm", "ln_f")


def _tied_final_norm(model: nn.Module, hidden: int, scales: InitScales, generator: torch.Generator) -> int:
    """Random-sign gains for the decoder's final norm (see the module doc); 0 if it has none this
    knows. A norm whose fresh gains are zeros computes x * (1 + gain) (Qwen3-Next, Gemma): its
    stored gain is the wanted one minus 1."""
    decoder = model.get_decoder()
    norm = next((getattr(decoder, n) for n in FINAL_NORM_NAMES if hasattr(decoder, n)), None)
    gain = getattr(norm, "weight", None)
    if gain is None or gain.shape != (hidden,):
        return 0
    offset = 1.0 if bool((gain == 0).all()) else 0.0
    signs = torch.randint(0, 2, gain.shape, generator=generator, device=gain.device) * 2 - 1
    gain.copy_(signs * scales.logit_std / math.sqrt(hidden) - offset)
    return 1


def _role(
    name: str,
    param: torch.Tensor,
    embedding: torch.Tensor,
    output: torch.Tensor,
    routers: set[int],
    linears: dict[int, nn.Linear],
) -> str:
    if param is embedding:  # with tied embeddings this is also the output table
        return "embedding"
    if param is output:
        return "output"
    if id(param) in routers:
        return "router"
    is_experts = EXPERTS_MARK in name and param.dim() == 3
    if param.dim() < 2 or not (is_experts or id(param) in linears):
        return "kept"
    if name.endswith(ATTENTION_WRITERS + MLP_WRITERS):
        return "writer"
    return "reader"


def _fan_in(param: torch.Tensor, hidden: int, reads_hidden: bool, linear: nn.Linear | None) -> int:
    """Inputs each output of the tensor sums over: a Linear's in_features; for fused experts
    [E, a, b], H for a reader and the dimension that is not H for a writer."""
    if linear is not None:
        return int(linear.in_features)
    a, b = param.shape[1], param.shape[2]
    if reads_hidden:
        return hidden
    return a if b == hidden else b


def _silence(table: torch.Tensor, tokenizer_size: int) -> None:
    """Zero the rows of ids past the tokenizer's last one, and EOS's row: as output rows their logit
    is 0, far below the top of the others; as input rows nothing reads them."""
    table[tokenizer_size:] = 0.0
    table[EOS_TOKEN_ID] = 0.0
