"""Closed-form MoESD theory: expert activation under top-K routing and SD speedup algebra.

Pure functions on floats and numpy arrays; inputs out of range raise `SpecmoeError`. Modules:
`moe` (distinct experts under top-K routing, the load per expert) and `speedup` (tokens per round,
the speedup and its timing-free bound, target efficiency).
"""

from specmoe.theory.moe import expected_active_experts, full_activation_threshold, mean_expert_load
from specmoe.theory.speedup import (
    expected_tokens_per_round,
    mean_emitted_per_round,
    per_token_alpha,
    sd_speedup,
    speedup_bound_no_timing,
    speedup_bound_timed,
    speedup_from_emitted,
    target_efficiency,
)

__all__ = [
    "expected_active_experts",
    "expected_tokens_per_round",
    "full_activation_threshold",
    "mean_emitted_per_round",
    "mean_expert_load",
    "per_token_alpha",
    "sd_speedup",
    "speedup_bound_no_timing",
    "speedup_bound_timed",
    "speedup_from_emitted",
    "target_efficiency",
]
