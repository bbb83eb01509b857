"""The MoESD performance model: measure a device and a model, fit T(B, t), predict SD speedups.

Modules, one concept each:
    hardware        memory bandwidth and matmul FLOP/s, measured (`specmoe hw`) or from a JSON file
    profile         timed forward passes T(B, t) through the backend protocol, plus expert counts
    structure       a network's shape from a Hugging Face config (E, K, widths, weight counts)
    model           the formula T(B, t) with its constants (roofline G, N(n), expert load)
    fit             least-squares constants from at most 21 timed points
    formats         weight and KV-cache formats: bits per weight with block scales (GGUF, MLX, int4, fp8)
    engines         engine profiles (engines.toml): what an engine adds to the roofline, with sources
    constants       every number of the GPU profiles with its prior, fit range and fitted value
                    (constants.toml); examples/ holds example configs and hardware files
    firstprinciples constants from a hardware file, a config and an engine, without any timing (UNFITTED)
    drafts          what a drafter costs by kind: a model, n-gram, EAGLE/EAGLE-3 and MTP heads, Medusa
    compose         an SD decode's seconds from forward times; chain and tree rounds
    breakeven       acceptance as α, rate and τ; the break-even acceptance; the verdict rule
    setup           a target, drafter, hardware and engine priced from configs (SDSetup)
    predict         target efficiency and SD speedup tables from any of the above
    advise          the best draft and γ per batch size, or a plain "SD will not pay"; from configs:
                    break-even acceptance and GO / NO-GO / DEPENDS ON ACCEPTANCE (advise_cli)
    drift           does a fit still describe this machine? a few of its points timed again
    floor           a forward's bandwidth floor: the weights it touches, read once
    gguf_bytes      what a profile needs from a GGUF file: weight type, MoE shape, weight bytes
    rollback        what rolling back a hybrid's linear-attention state adds to a round, by engine method
    offload         routed experts kept in host memory (llama.cpp's --n-cpu-moe), priced on the host
    advise_cli      `specmoe advise --config ...`: the arguments turned into an SDSetup and its advice
    emit            `advise --emit`: the best draft length per batch size in an engine's own syntax
    files           the model's JSON files; terminal: plain-text renderings for the terminal
See docs/perf-model.md.
"""

from specmoe.perf.model import Constants, MoEShape, forward_time, roofline

__all__ = ["Constants", "MoEShape", "forward_time", "roofline"]
