"""Predicted target efficiency and SD speedup from forward times: fitted, measured or unfitted.

For each batch size B and draft length γ:

    η = T_T(B, 1) / T_T(B, γ + 1)                                   target efficiency
    S = composed speedup at per-position acceptance α             `specmoe.perf.compose`

S is `compose.expected_speedup`: the round as specmoe's loop runs it (γ draft forwards, the first
one or two tokens wide, and a verify pass over γ + 1 tokens) against plain decoding, at the expected
tokens per round (1 − α^{γ+1}) / (1 − α). `advise` and the check against measured runs use the same
function. Without a draft the drafting cost is 0 (a free drafter such as n-gram lookup), which makes
S an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from specmoe.errors import SpecmoeError
from specmoe.perf.compose import expected_speedup
from specmoe.perf.files import MAX_BATCH, MAX_GAMMA, check_context, parse_counts, parse_fractions, read_json
from specmoe.perf.fit import KIND as FIT_KIND
from specmoe.perf.fit import fitted_model, load_fit
from specmoe.perf.model import Constants, MoEShape, check_counts, forward_time
from specmoe.perf.profile import KIND as PROFILE_KIND
from specmoe.theory import target_efficiency

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class HostTier(Protocol):
    def time(self, batch: float, tokens: float, active: float | None = None) -> float: ...


@dataclass(frozen=True)
class ModelTimes:
    """Forward times from the model formula; `grid` is the profiled (B, t) range, None when unfitted."""

    label: str
    constants: Constants
    shape: MoEShape
    context: float
    fitted: bool
    grid: dict | None = None
    host: HostTier | None = None  # experts kept in host memory (`specmoe.perf.offload`); None: none
    scale: float = 1.0  # a measured step's factor on every pass (`setup.with_measured_step`, scaled)

    def time(self, batch: float, tokens: float, active: float | None = None) -> float:
        device = forward_time(self.constants, self.shape, batch, tokens, self.context, active)
        total = device if self.host is None else device + self.host.time(batch, tokens, active)
        return total if self.scale == 1.0 else self.scale * total

    def extrapolated(self, batch: float, tokens: float) -> bool:
        if self.grid is None:
            return False
        b, t = self.grid["batch"], self.grid["tokens"]
        return not (min(b) <= batch <= max(b) and min(t) <= tokens <= max(t))


@dataclass(frozen=True)
class ProfileTimes:
    """Measured T(B, t) of a draft profile, interpolated linearly in log B between measured B."""

    label: str
    table: dict[int, tuple[tuple[float, ...], tuple[float, ...]]]  # t -> (batch sizes, seconds)
    source: str = field(default="")

    def has(self, tokens: int) -> bool:
        return tokens in self.table

    def time(self, batch: float, tokens: float) -> float:
        check_counts(batch, tokens)
        if tokens not in self.table:
            raise SpecmoeError(
                f"draft profile '{self.source}' has no t = {tokens:g} points; profile the draft with "
                f"--tokens {tokens:g}, or pass its fit (`specmoe model fit`)"
            )
        batches, seconds = self.table[tokens]
        if not batches[0] <= batch <= batches[-1]:
            raise SpecmoeError(
                f"draft profile '{self.source}' covers B {batches[0]:g}..{batches[-1]:g}, "
                f"not {batch:g}; profile the draft at that batch size, or pass its fit "
                "(`specmoe model fit`) to extrapolate"
            )
        return float(np.interp(np.log(batch), np.log(batches), seconds))

    def extrapolated(self, batch: float, tokens: float) -> bool:
        return False


def profile_times(profile: dict, source: str) -> ProfileTimes:
    table = {}
    for tokens in sorted({p["tokens"] for p in profile["points"]}):
        points = sorted((p["batch"], p["median_s"]) for p in profile["points"] if p["tokens"] == tokens)
        batches, seconds = zip(*points, strict=True)
        table[tokens] = (tuple(map(float, batches)), tuple(seconds))
    if 1 not in table:
        raise SpecmoeError(
            f"draft profile '{source}' has no t = 1 points; profile the draft with --tokens 1,2"
        )
    return ProfileTimes(profile["model"].get("name", source), table, source)


def draft_step_s(draft, batch: float, gamma: int) -> float:
    """Mean seconds per draft step over one round of γ steps whose first step feeds two tokens.

    T_D(B, 2) + (γ − 1)·T_D(B, 1), over γ: the round after a fully accepted one (docs/decoding.md).
    Shown as `draft_s` beside predictions; the speedups themselves weigh the one- and two-token
    first steps by how often each happens (`specmoe.perf.compose`). A draft profile without t = 2
    points is charged γ·T_D(B, 1).
    """
    if draft is None:
        return 0.0
    step = draft.time(batch, 1)
    first = draft.time(batch, 2) if getattr(draft, "has", lambda t: True)(2) else step
    return (first + (gamma - 1) * step) / gamma


def charged_draft(draft):
    """The draft as compose sees it: a profile without t = 2 points is charged its t = 1 time."""
    if draft is None or getattr(draft, "has", lambda t: True)(2):
        return draft
    return _OneTokenOnly(draft)


@dataclass(frozen=True)
class _OneTokenOnly:
    draft: ProfileTimes

    def time(self, batch: float, tokens: float) -> float:
        return self.draft.time(batch, 1)


def fit_times(fit: dict, source: str, top_k: int | None = None) -> ModelTimes:
    constants, shape = fitted_model(fit, source)
    if top_k is not None:
        shape = with_top_k(shape, top_k, source)
    label = fit.get("model", {}).get("name", source) + (f" (top-{top_k})" if top_k is not None else "")
    return ModelTimes(label, constants, shape, float(fit.get("context", 0)), True, fit["grid"])


def with_top_k(shape: MoEShape, top_k: int, where: str) -> MoEShape:
    """The same experts routed top_k per token: the sparsity what-if (per-expert constants kept)."""
    if not shape.is_moe:
        raise SpecmoeError(f"--top-k applies to MoE models and {where} is dense; drop --top-k")
    if not 1 <= top_k <= shape.num_experts:
        raise SpecmoeError(f"--top-k must be in 1..{shape.num_experts} (the experts per layer), got {top_k}")
    return MoEShape(shape.num_experts, top_k)


def config_name(path: Path) -> str:
    """models/mixtral/config.json -> "mixtral"; perf-examples/mixtral-8x7b.json -> "mixtral-8x7b"."""
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def load_draft(path: Path):
    """A draft's T(B, 1): from a fit (model formula) or a profile (measured, interpolated)."""
    data = read_json(
        Path(path), (PROFILE_KIND, FIT_KIND), "pass a draft profile (`specmoe profile`) or its fit"
    )
    if data["kind"] == FIT_KIND:
        return fit_times(load_fit(path), str(path))
    return profile_times(data, str(path))


def predict_rows(target, draft, batches: list[int], gammas: list[int], alphas: list[float]) -> list[dict]:
    """One row per (B, γ): times in seconds, η, and S for each α (keys are α as text)."""
    rows = []
    for batch in batches:
        t1 = target.time(batch, 1)
        for gamma in gammas:
            verify = target.time(batch, gamma + 1)
            draft_s = draft_step_s(draft, batch, gamma)
            rows.append(
                {
                    "batch": batch,
                    "gamma": gamma,
                    "target_1_s": t1,
                    "target_verify_s": verify,
                    "draft_s": draft_s,
                    "efficiency": target_efficiency(t1, verify),
                    "speedup": {
                        f"{a:g}": expected_speedup(target, charged_draft(draft), a, gamma, batch)
                        for a in alphas
                    },
                    "extrapolated": target.extrapolated(batch, gamma + 1)
                    or (draft is not None and draft.extrapolated(batch, 2)),
                }
            )
    return rows


def predict(target, draft, batches, gammas, alphas) -> dict:
    batches = parse_counts(batches, "--batch", maximum=MAX_BATCH)
    gammas = parse_counts(gammas, "--gamma", maximum=MAX_GAMMA)
    alphas = parse_fractions(alphas, "--alpha")
    return {
        "target": target.label,
        "draft": draft.label if draft is not None else None,
        "fitted": getattr(target, "fitted", True),
        "context": getattr(target, "context", None),
        "rows": predict_rows(target, draft, batches, gammas, alphas),
    }


def predict_from_args(args) -> dict:
    """`specmoe model predict`: from a fit, or from first principles with --config and --hardware."""
    if args.config is not None or args.hardware is not None:
        return _predict_unfitted(args)
    if args.fit is None:
        raise SpecmoeError(
            "model predict needs a FIT file, or --config and --hardware for a first-principles estimate"
        )
    if args.draft_config is not None:
        raise SpecmoeError(
            "--draft-config goes with --config and --hardware; with a fit pass --draft PROFILE"
        )
    fit = load_fit(args.fit)
    if args.context is not None and args.context != fit.get("context"):
        raise SpecmoeError(
            f"the fit holds at the profiled context of {fit.get('context')} tokens, not {args.context}; "
            "profile at that context or drop --context"
        )
    target = fit_times(fit, str(args.fit), args.top_k)
    draft = load_draft(args.draft) if args.draft is not None else None
    return predict(target, draft, args.batch or fit["grid"]["batch"], args.gamma, args.alpha)


def _predict_unfitted(args) -> dict:
    if args.config is None or args.hardware is None:
        raise SpecmoeError("a first-principles estimate needs both --config config.json and --hardware FILE")
    if args.fit is not None or args.draft is not None:
        raise SpecmoeError(
            "a fit or measured draft belongs to the machine it was profiled on; with --config/--hardware "
            "pass the draft as --draft-config"
        )
    return predict_unfitted(
        args.config,
        args.hardware,
        args.draft_config,
        args.batch or DEFAULT_BATCHES,
        args.gamma,
        args.alpha,
        context=args.context,
        dtype=args.dtype,
        top_k=args.top_k,
        draft_dtype=args.draft_dtype,
        kv_dtype=args.kv_dtype,
        engine=args.engine,
    )


def predict_unfitted(
    config: Path,
    hardware_path: Path,
    draft_config: Path | None,
    batches,
    gammas,
    alphas,
    context: int | None = None,
    dtype: str | None = None,
    top_k: int | None = None,
    draft_dtype: str | None = None,
    kv_dtype: str | None = None,
    engine: str | None = None,
) -> dict:
    """A first-principles (UNFITTED) prediction from a config.json and a hardware file; `dtype`
    and `draft_dtype` are weight formats (`specmoe.perf.formats`), `engine` an engine profile."""
    from specmoe.perf.engines import engine_profile
    from specmoe.perf.firstprinciples import load_config, unfitted_model
    from specmoe.perf.hardware import load_hardware

    hardware = load_hardware(hardware_path)
    profile = engine_profile(engine, hardware.device) if engine else None
    context = check_context(512 if context is None else context)
    models = []
    for path, fmt in ((config, dtype), (draft_config, draft_dtype or dtype)):
        if path is None:
            models.append(None)
            continue
        arch = load_config(path, fmt, kv_dtype)
        constants, shape = unfitted_model(arch, hardware, str(hardware_path), profile)
        if path == config and top_k is not None:
            shape = with_top_k(shape, top_k, str(path))
        label = f"{config_name(Path(path))} ({arch.dtype}) on {hardware.name}"
        label += f" under {profile.name}" if profile else " (roofline alone, no engine overheads)"
        models.append(ModelTimes(label, constants, shape, context, False))
    target, draft = models
    return predict(target, draft, batches, gammas, alphas)
