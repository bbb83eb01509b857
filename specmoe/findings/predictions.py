"""The performance model's predictions the findings set beside measurements: fitted on this CPU's
profiles, and from first principles (unfitted) for hardware the findings were not measured on."""

from __future__ import annotations

from pathlib import Path

from specmoe.findings.batch_claims import ALPHA, Predict
from specmoe.perf.fit import load_fit
from specmoe.perf.predict import fit_times, load_draft, predict_rows, predict_unfitted

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


# Hardware the studies ran on or target, and public model shapes near theirs (docs/perf-examples).
ELSEWHERE = (
    ("M2 Ultra", "m2-ultra.json"),
    ("H200", "h200-sxm.json"),
)
MOE_CONFIG = "qwen2-57b-a14b.json"
DENSE_CONFIG = "dense-8b.json"
DRAFT_CONFIG = "qwen2-0.5b.json"
BATCHES = (1, 4, 16, 64, 256)


def unfitted_table(examples: Path, gamma: int = 4, alphas: tuple[float, ...] = (0.0, 0.8)) -> str:
    """Predicted SD speedup by batch size, target and hardware, from nominal hardware figures and
    config.json shapes alone (UNFITTED: no measurement enters it)."""
    header = "| hardware | target | α | " + " | ".join(f"B={b}" for b in BATCHES) + " |"
    lines = [header, "|---" * (len(BATCHES) + 3) + "|"]
    for label, hardware in ELSEWHERE:
        for name, config in (("MoE (Qwen2-57B-A14B shape)", MOE_CONFIG), ("dense 8B", DENSE_CONFIG)):
            rows = predict_unfitted(
                examples / config,
                examples / hardware,
                examples / DRAFT_CONFIG,
                list(BATCHES),
                [gamma],
                list(alphas),
            )["rows"]
            for alpha in alphas:
                speedups = [f"{row['speedup'][f'{alpha:g}']:.2f}×" for row in rows]
                lines.append(f"| {label} | {name} | {alpha:g} | " + " | ".join(speedups) + " |")
    return "\n".join(lines)
