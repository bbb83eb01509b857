"""Fit the forward-time model's constants to at most 21 timed points of a profile.

Residuals are relative, (model − measured) / measured, because times span an order of magnitude
across the grid and a 1 ms miss matters at 5 ms, not at 200 ms. `scipy.optimize.least_squares`
minimises them within bounds (all times ≥ 0, λ in [0.05, 10⁴] tokens, s in [1, 16], μ in [1, 64])
from a few starting knees and sharpnesses; the best start wins. Two forms are fitted, μ = 1 (the
roofline) and μ free, and the second is kept only when its AICc is lower (`fit_points`).
Uncertainties are the square roots of the diagonal of σ²·(JᵀJ)⁻¹ at the solution,
σ² = Σr² / (m − p): meaningful only with m > p points and for constants away from their bounds
(flagged `at_bound`).

Point choice: at most 21 points enter the fit (MoESD fits from about 21 measurements). When a
profile has more, a spread-out subset is picked deterministically (`select_points`): the grid's
corners first, then points that bring in batch sizes or token counts not yet covered, then
repeatedly the point farthest from those already chosen, in grid-index coordinates. The others
are held out and their errors reported in the fit, so a dense profile doubles as a validation set.
"""

from __future__ import annotations

import itertools
import math
import statistics
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from specmoe.errors import SpecmoeError
from specmoe.perf.files import SCHEMA, read_json
from specmoe.perf.model import Constants, MoEShape, forward_time

KIND = "specmoe-fit"
FIT_HINT = "make one with `specmoe model fit PROFILE --out FIT`"
MAX_POINTS = 21
FORM = "moesd-roofline-v2"
# v1 fits lack reread_tokens, which then defaults to 1: the same model, so they still read.
READABLE_FORMS = ("moesd-roofline-v1", FORM)

# Free constants and their bounds; the rest stay at their defaults (no KV term: see docs).
DENSE_FREE = ("overhead_s", "sequence_s", "dense_s", "knee_tokens", "sharpness")
MOE_FREE = (*DENSE_FREE, "expert_s")
BOUNDS = {
    "overhead_s": (0.0, np.inf),
    "sequence_s": (0.0, np.inf),
    "dense_s": (0.0, np.inf),
    "expert_s": (0.0, np.inf),
    "knee_tokens": (0.05, 1e4),
    "sharpness": (1.0, 16.0),
    "reread_tokens": (1.0, 64.0),
}
_START_KNEES = (1.0, 4.0, 16.0, 64.0)
_START_SHARPNESS = (1.5, 6.0)


def free_constants(shape: MoEShape, reread: bool = False) -> tuple[str, ...]:
    names = MOE_FREE if shape.is_moe else DENSE_FREE
    return (*names, "reread_tokens") if reread else names


def aicc(residuals: np.ndarray, parameters: int) -> float:
    """Akaike's criterion with the small-sample correction, for least squares: m·ln(RSS/m) + 2p +
    2p(p+1)/(m−p−1). It charges the extra constant what it is worth in fit; inf where m − p − 1 ≤ 0,
    so a form is never chosen on too few points to judge it."""
    m, p = residuals.size, parameters
    if m - p - 1 <= 0:
        return math.inf
    rss = max(float(residuals @ residuals), 1e-300)
    return m * math.log(rss / m) + 2 * p + 2 * p * (p + 1) / (m - p - 1)


def select_points(grid: list[tuple[int, int]], max_points: int = MAX_POINTS) -> list[tuple[int, int]]:
    """A spread-out subset of (B, t) points, deterministic: the grid's corners first, then, one at a
    time, the point that adds the most B or t values not yet covered, ties going to the point farthest
    from those chosen (in grid-index coordinates), further ties to the smallest (B, t)."""
    if len(grid) <= max_points:
        return sorted(grid)
    batches = sorted({b for b, _ in grid})
    tokens = sorted({t for _, t in grid})

    def coords(point: tuple[int, int]) -> np.ndarray:
        b, t = point
        return np.array(
            [batches.index(b) / max(len(batches) - 1, 1), tokens.index(t) / max(len(tokens) - 1, 1)]
        )

    def score(point: tuple[int, int], chosen: list[tuple[int, int]]) -> tuple[int, float]:
        new = all(b != point[0] for b, _ in chosen) + all(t != point[1] for _, t in chosen)
        return new, min(float(np.linalg.norm(coords(point) - coords(q))) for q in chosen)

    corners = [(b, t) for b in (batches[0], batches[-1]) for t in (tokens[0], tokens[-1])]
    chosen = [p for p in dict.fromkeys(corners) if p in grid][:max_points]
    while len(chosen) < max_points:
        remaining = [p for p in sorted(grid) if p not in chosen]
        chosen.append(max(remaining, key=lambda p: score(p, chosen)))  # max keeps the first of equals
    return sorted(chosen)


def _initial(points: list[dict], shape: MoEShape, knee: float, sharpness: float) -> dict[str, float]:
    """A start that splits the smallest pass's time: 30 % fixed cost, 70 % weight streaming (for an
    MoE, 20 % dense weights and 50 % its K experts)."""
    smallest = min(points, key=lambda p: p["batch"] * p["tokens"])["median_s"]
    start = {"overhead_s": 0.3 * smallest, "sequence_s": 0.0, "knee_tokens": knee, "sharpness": sharpness}
    if shape.is_moe:
        start |= {"dense_s": 0.2 * smallest, "expert_s": 0.5 * smallest / shape.top_k}
    else:
        start |= {"dense_s": 0.7 * smallest}
    return start


def fit_points(points: list[dict], shape: MoEShape, where: str = "profile") -> tuple[Constants, dict]:
    """Least-squares constants for `points` (dicts with batch, tokens, median_s); returns them and
    per-constant {value, std, at_bound}.

    Two forms compete: the roofline (μ = 1) and the same with μ free (`weight_cost`). The second
    is kept only when its AICc is lower, so a profile that bends like a roofline keeps the plain
    form and one whose kernel re-reads weights over its first rows (llama.cpp's few-row products,
    BLAS at 2–3 rows in float32) gets μ."""
    names = free_constants(shape)
    if len(points) < len(names):
        raise SpecmoeError(
            f"{where} has {len(points)} timed points but the {'MoE' if shape.is_moe else 'dense'} model has "
            f"{len(names)} constants; profile at least {len(names)} (B, t) points "
            "(e.g. --batch 1,2,4 --tokens 1,2,4)"
        )
    plain = _least_squares(points, shape, names)
    reread_names = free_constants(shape, reread=True)
    best, best_names = plain, names
    if len(points) > len(reread_names) + 1:
        reread = _least_squares(points, shape, reread_names)
        if aicc(reread.fun, len(reread_names)) < aicc(plain.fun, len(names)):
            best, best_names = reread, reread_names
    lower = np.array([BOUNDS[n][0] for n in best_names])
    upper = np.array([BOUNDS[n][1] for n in best_names])
    constants = Constants(**dict(zip(best_names, best.x, strict=True)))
    return constants, _uncertainty(best, best_names, lower, upper)


def _least_squares(points: list[dict], shape: MoEShape, names: tuple[str, ...]):
    batch = np.array([p["batch"] for p in points], dtype=float)
    tokens = np.array([p["tokens"] for p in points], dtype=float)
    measured = np.array([p["median_s"] for p in points], dtype=float)

    def residuals(x: np.ndarray) -> np.ndarray:
        constants = Constants(**dict(zip(names, x, strict=True)))
        return forward_time(constants, shape, batch, tokens) / measured - 1.0

    lower = np.array([BOUNDS[n][0] for n in names])
    upper = np.array([BOUNDS[n][1] for n in names])
    rereads = (1.0, 2.5, 6.0) if "reread_tokens" in names else (1.0,)
    best = None
    for knee, sharpness, reread in itertools.product(_START_KNEES, _START_SHARPNESS, rereads):
        start = _initial(points, shape, knee, sharpness) | {"reread_tokens": reread}
        x0 = np.clip([start[n] for n in names], lower, upper)
        result = least_squares(residuals, x0, bounds=(lower, upper), x_scale="jac", max_nfev=4000)
        if best is None or result.cost < best.cost:
            best = result
    return best


def _uncertainty(result, names, lower, upper) -> dict:
    m, p = result.fun.size, len(names)
    jac = result.jac
    sigma2 = 2.0 * result.cost / (m - p) if m > p else math.nan
    covariance = np.linalg.pinv(jac.T @ jac) * sigma2
    std = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    out = {}
    for i, name in enumerate(names):
        value = float(result.x[i])
        near = 1e-6 * max(1.0, abs(value))
        at_bound = bool(value - lower[i] <= near or (np.isfinite(upper[i]) and upper[i] - value <= near))
        out[name] = {
            "value": value,
            "std": None if math.isnan(std[i]) else float(std[i]),
            "at_bound": at_bound,
        }
    return out


def fit_profile(profile: dict, max_points: int = MAX_POINTS, where: str = "profile") -> dict:
    """Fit a profile (as loaded by `load_profile`); returns the fit JSON (a dict)."""
    if not 1 <= max_points <= MAX_POINTS:
        raise SpecmoeError(f"--max-points must be between 1 and {MAX_POINTS}, got {max_points}")
    info = profile["model"]
    shape = MoEShape(int(info.get("num_experts", 0)), int(info.get("top_k", 0)))
    by_point = {(p["batch"], p["tokens"]): p for p in profile["points"]}
    used = set(select_points(list(by_point), max_points))
    constants, parameters = fit_points([by_point[k] for k in sorted(used)], shape, where)
    rows = []
    for (b, t), point in sorted(by_point.items()):
        predicted = forward_time(constants, shape, b, t)
        rows.append(
            {
                "batch": b,
                "tokens": t,
                "measured_s": point["median_s"],
                "predicted_s": predicted,
                "rel_error": predicted / point["median_s"] - 1.0,
                "used": (b, t) in used,
            }
        )
    return {
        "schema": SCHEMA,
        "kind": KIND,
        "form": FORM,
        "model": info,
        "shape": {"num_experts": shape.num_experts, "top_k": shape.top_k},
        "context": profile.get("context", 0),
        "grid": {
            "batch": sorted({b for b, _ in by_point}),
            "tokens": sorted({t for _, t in by_point}),
        },
        "constants": constants.to_json(),
        "parameters": parameters,
        "points": rows,
        "quality": quality(rows),
        "source": where,
        "profiled": profile.get("created"),  # when the times were measured: a fit ages with them
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def quality(rows: list[dict]) -> dict:
    """Median and worst |relative error| over fitted and held-out points separately."""
    out = {}
    for label, used in (("fit", True), ("heldout", False)):
        errors = [abs(r["rel_error"]) for r in rows if r["used"] is used]
        out[f"{label}_points"] = len(errors)
        out[f"{label}_median_abs_rel"] = statistics.median(errors) if errors else None
        out[f"{label}_worst_abs_rel"] = max(errors) if errors else None
    return out


def fit_error(fit: dict) -> float:
    """The fit's median |relative error| on its held-out points (its fitted ones where none was
    held out): how far its times, and so anything composed from them, can be trusted."""
    quality = fit.get("quality") or {}
    return float(quality.get("heldout_median_abs_rel") or quality.get("fit_median_abs_rel") or 0.0)


def load_fit(path: Path) -> dict:
    fit = read_json(Path(path), (KIND,), FIT_HINT)
    if fit.get("form") not in READABLE_FORMS:
        raise SpecmoeError(
            f"'{path}' holds model form {fit.get('form')!r}, this specmoe reads {', '.join(READABLE_FORMS)}; "
            f"{FIT_HINT}"
        )
    constants = fit.get("constants")
    if not isinstance(constants, dict):
        raise SpecmoeError(f"'{path}' has no constants object; {FIT_HINT}")
    Constants.from_json(constants, f"'{path}'")  # every constant usable, checked before any formula
    check_fit_shape(fit, f"'{path}'")
    return fit


def check_fit_shape(fit: dict, where: str) -> None:
    """The fit's `model` (optional: a first-form fit has none) and `shape` objects: mappings; E and K whole
    numbers with (0, 0) a dense model and 1 <= K <= E an MoE one; an MoE model's fit with E > 0 (a
    shape of 0 experts would price it as dense: no prediction at all, so it is refused); byte
    counts whole and >= 0."""
    model, shape = fit.get("model", {}), fit.get("shape")
    if not isinstance(model, dict) or not isinstance(shape, dict):
        raise SpecmoeError(f"{where}: 'model' and 'shape' must be JSON objects; {FIT_HINT}")
    experts, top_k = shape.get("num_experts"), shape.get("top_k")
    for name, value in (("num_experts", experts), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecmoeError(
                f"{where}: shape.{name} must be a whole number >= 0, got {value!r}; {FIT_HINT}"
            )
    if (experts == 0) != (top_k == 0) or top_k > experts:
        raise SpecmoeError(
            f"{where}: shape has {experts} experts and top_k {top_k}; an MoE model needs "
            f"1 <= top_k <= num_experts, a dense one 0 and 0; {FIT_HINT}"
        )
    if experts == 0 and (model.get("is_moe") is True or (model.get("num_experts") or 0) != 0):
        raise SpecmoeError(
            f"{where}: the fit's model is an MoE model ({model.get('num_experts')} experts) but its "
            f"shape has 0 experts, which would price it as dense; {FIT_HINT}"
        )
    for key, value in model.items():
        if key.startswith("bytes_") and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise SpecmoeError(
                f"{where}: model.{key} must be a whole number of bytes >= 0, got {value!r}; {FIT_HINT}"
            )


def fitted_model(fit: dict, where: str = "fit") -> tuple[Constants, MoEShape]:
    shape = MoEShape(int(fit["shape"]["num_experts"]), int(fit["shape"]["top_k"]))
    return Constants.from_json(fit["constants"], where), shape
