"""specmoe: run, measure, explain and predict speculative decoding on MoE and dense models."""

__version__ = "0.1.0"
