"""The performance model's predictions the findings set beside measurements: fitted on this CPU's
profiles, and from first principles (unfitted) for hardware the findings were not measured on."""

from __future__ import annotations

from pathlib import Path

from specmoe.findings.batch_claims import ALPHA, Predict
from specmoe.perf.fit import load_fit
from specmoe.perf.predict import fit_times, load_draft, predict_rows

FIT_FILES = {"moe": "moe-float32.json", "dense-s": "dense-s-float32.json"}  # `Profile.name`s
DRAFT_FIT = "draft-xs-float32.json"  # the oracle drafts pay draft-xs's forward passes


def fitted_predictor(fits: Path) -> Predict:
    """Speedup predicted by this CPU's fits (float32, as the moesd suite runs) at the oracle's α;
    a predictor that returns None when the fits are absent."""
    paths = {t: fits / name for t, name in FIT_FILES.items()}
    if not (fits / DRAFT_FIT).is_file() or not all(p.is_file() for p in paths.values()):
        return lambda target, batch, gamma, top_k: None
    loaded = {t: load_fit(p) for t, p in paths.items()}
    draft = load_draft(fits / DRAFT_FIT)

    def predict(target: str, batch: int, gamma: int, top_k: int | None) -> float | None:
        if target not in loaded:
            return None
        times = fit_times(loaded[target], str(paths[target]), top_k)
        return predict_rows(times, draft, [batch], [gamma], [ALPHA])[0]["speedup"][f"{ALPHA:g}"]

    return predict


# Hardware the studies ran on or target, each with the engine it would run and the weights it holds.
ELSEWHERE = (
    ("M2 Ultra", "m2-ultra.json", "llamacpp-metal", "q4_k_m", "q8_0"),
    ("H200", "h200-sxm.json", "vllm", "bfloat16", "bfloat16"),
)
DENSE_CONFIG = "dense-8b.json"
BATCHES = (1, 4, 16, 64, 256)


def unfitted_table(examples: Path, gamma: int = 4, alphas: tuple[float, ...] = (0.0, 0.8)) -> str:
    """Predicted SD speedup by batch size, target and hardware for the study's own configuration
    (its MoE target and 0.8B draft, shapes matched to its parameter counts) and a dense 8B, from
    nominal hardware figures, config shapes and each engine's profile (UNFITTED: no measurement of
    these models enters it). Each engine's band is printed with it."""
    from dataclasses import replace

    from specmoe.perf.drafts import DraftMethod
    from specmoe.perf.engines import engine_profile
    from specmoe.perf.firstprinciples import load_config
    from specmoe.perf.hardware import load_hardware
    from specmoe.perf.setup import configured_setup

    header = "| hardware, engine (band) | target | α | " + " | ".join(f"B={b}" for b in BATCHES) + " |"
    lines = [header, "|---" * (len(BATCHES) + 3) + "|"]
    for label, hardware, engine, weights, draft_weights in ELSEWHERE:
        hw = load_hardware(examples / hardware)
        profile = engine_profile(engine, hw.device)
        draft = load_config(examples / STUDY_DRAFTS["0.8B"], draft_weights)
        for name, config in (("Qwen3.5-35B-A3B", STUDY_TARGET), ("dense 8B", DENSE_CONFIG)):
            target = replace(load_config(examples / config, weights), name=name)
            setup = configured_setup(target, hw, profile, DraftMethod.MODEL, draft)
            for alpha in alphas:
                speedups = [f"{setup.speedup(alpha, gamma, b):.2f}×" for b in BATCHES]
                lines.append(
                    f"| {label}, {engine} (×/÷ {profile.uncertainty:g}) | {name} {weights} | {alpha:g} | "
                    + " | ".join(speedups)
                    + " |"
                )
    return "\n".join(lines)


# The study's own setup (its target in the published shape, docs/perf-examples/qwen3.5-35b-a3b.json,
# not the 128-expert top-2 routing the study describes; its drafts shaped to the parameter counts it
# reports, docs/perf-examples/qwen3.5-*-study.json) and what it reported: per target, plain tok/s;
# per (target, draft, γ), its acceptance rate and speedup (the study's Tables 4 and 5).
STUDY_TARGET = "qwen3.5-35b-a3b.json"
STUDY_DRAFTS = {"0.8B": "qwen3.5-0.8b-study.json", "2B": "qwen3.5-2b-study.json"}
STUDY_PLAIN = {"q4_k_m": 55.3, "q8_0": 49.9}  # tok/s
STUDY_SD = {  # (weights, draft, γ) -> (acceptance rate, speedup)
    ("q4_k_m", "0.8B", 4): (0.026, 1.15),
    ("q4_k_m", "0.8B", 8): (0.011, 1.18),
    ("q4_k_m", "0.8B", 16): (0.002, 1.26),
    ("q4_k_m", "2B", 4): (0.040, 1.03),
    ("q4_k_m", "2B", 8): (0.017, 1.05),
    ("q4_k_m", "2B", 16): (0.009, 1.12),
    ("q8_0", "0.8B", 4): (0.027, 1.15),
    ("q8_0", "0.8B", 8): (0.010, 1.22),
    ("q8_0", "0.8B", 16): (0.002, 1.30),
    ("q8_0", "2B", 4): (0.036, 1.03),
    ("q8_0", "2B", 8): (0.020, 1.09),
    ("q8_0", "2B", 16): (0.009, 1.16),
}


def study_setup_table(examples: Path, hardware: str = "m2-ultra.json", engine: str = "llamacpp-metal") -> str:
    """The study's own configuration priced from first principles and the engine profile (UNFITTED:
    no measurement of these models enters it), beside what the study reported: plain decode speed,
    and SD speedup at the acceptance it reported, with the profile's band and the 1 + αγ bound."""
    from dataclasses import replace

    from specmoe.perf.drafts import DraftMethod
    from specmoe.perf.engines import engine_profile
    from specmoe.perf.firstprinciples import load_config
    from specmoe.perf.hardware import load_hardware
    from specmoe.perf.setup import configured_setup
    from specmoe.theory import per_token_alpha

    hw = load_hardware(examples / hardware)
    profile = engine_profile(engine, hw.device)
    band = profile.uncertainty
    lines = [
        "| target | draft | γ | acceptance (study) | speedup (study) | 1 + αγ | predicted | band |",
        "|---|---|---|---|---|---|---|---|",
    ]
    plain: dict[str, float] = {}
    beyond = slower = 0
    for (weights, draft_name, gamma), (rate, reported) in STUDY_SD.items():
        target = replace(load_config(examples / STUDY_TARGET, weights), name="Qwen3.5-35B-A3B")
        draft = load_config(examples / STUDY_DRAFTS[draft_name], "q8_0")
        setup = configured_setup(target, hw, profile, DraftMethod.MODEL, draft)
        plain[weights] = 1.0 / (setup.target.time(1, 1) + setup.plain_host_s)
        predicted = setup.speedup(float(per_token_alpha(rate, gamma)), gamma, 1)
        beyond += reported > 1 + rate * gamma
        slower += predicted * band < 1.0
        lines.append(
            f"| MoE {weights.upper()} | {draft_name} Q8_0 | {gamma} | {100 * rate:.1f}% | {reported:.2f}× | "
            f"{1 + rate * gamma:.2f}× | {predicted:.2f}× | {predicted / band:.2f}–{predicted * band:.2f}× |"
        )
    speeds = "; ".join(
        f"{weights.upper()} {plain[weights]:.0f} tok/s predicted, {STUDY_PLAIN[weights]:g} reported"
        for weights in STUDY_PLAIN
    )
    rows = len(STUDY_SD)
    return (
        "\n".join(lines)
        + f"\n\nOf the {rows} reported speedups, {beyond} exceed the 1 + αγ bound beside them; the model "
        f"predicts a slowdown, its band's upper end included, for {slower} of {rows}. Plain decoding at "
        f"batch 1: {speeds}."
    )
