"""The MoESD performance model: measure a device and a model, fit T(B, t), predict SD speedups.

Modules, one concept each:
    hardware        memory bandwidth and matmul FLOP/s, measured (`specmoe hw`) or from a JSON file
    profile         timed forward passes T(B, t) through the backend protocol, plus expert counts
    structure       a network's shape from a Hugging Face config (E, K, widths, weight counts)
    model           the formula T(B, t) with its constants (roofline G, N(n), expert load)
    fit             least-squares constants from at most 21 timed points
    firstprinciples constants from a hardware file and a config, without any timing (UNFITTED)
    predict         target efficiency and SD speedup tables from any of the above
    advise          the best draft and γ per batch size, or a plain "SD will not pay"
See docs/perf-model.md.
"""

from specmoe.perf.model import Constants, MoEShape, forward_time, roofline

__all__ = ["Constants", "MoEShape", "forward_time", "roofline"]
