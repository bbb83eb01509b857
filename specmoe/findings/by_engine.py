"""The study's claims per engine: one verdict column per engine and weight type, with the cost
ratios that decide them beside each verdict.

Each engine's study pass (`specmoe.findings.plan.ENGINE_SETUPS`) decodes the same cells; its verdicts come
from the rules of `specmoe.findings.claims` unchanged. The cost ratios come from the engine's own
profiles (`profiles-<engine>/<model>-<weights>.json`), at batch 1 and 64 cached tokens:

    draft ÷ step     T_draft-xs(1, 1) / T_moe(1, 1): what one drafted token costs in target steps;
    verify(γ+1)      T_moe(1, γ + 1) / T_moe(1, 1): what verifying γ drafted tokens costs in steps;
    ÷ floor          T_moe(1, 1) / its bandwidth floor (`specmoe.findings.regime`).

With acceptance α and γ drafted tokens per round, SD's speedup is at most
(1 + αγ) / (γ · draft÷step + verify(γ+1)), so these ratios, not the MoE, set what SD can gain.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specmoe.findings.batch_claims import claim_e, claim_f
from specmoe.findings.cells import Cell
from specmoe.findings.claims import (
    B_EVIDENCES,
    CLAIM_KEYS,
    CLAIM_TITLES,
    Verdict,
    claim_a,
    claim_b,
    claim_c,
    claim_d,
)
from specmoe.findings.plan import ENGINE_SETUPS, EngineSetup
from specmoe.findings.regime import (
    GATES,
    RULE_GATES,
    Regime,
    bandwidth_regime,
    dense_amortisation,
    floor_hardware,
    step_over_floor,
)

NOT_MEASURED = "not measured"
# Which cost ratio each claim turns on (shown beside its verdicts).
_RATIO_OF = {"a": "draft", "b": "amortise", "c": "draft", "d": "verify", "e": "verify", "f": "verify"}


@dataclass(frozen=True)
class CostRatios:
    step_s: float  # T_moe(1, 1), seconds
    draft: float | None  # T_draft-xs(1, 1) / T_moe(1, 1)
    verify5: float | None  # T_moe(1, 5) / T_moe(1, 1)
    verify9: float | None  # T_moe(1, 9) / T_moe(1, 1)
    over_floor: float | None  # T_moe(1, 1) / bandwidth floor
    dense_draft: float | None  # T_draft-xs(1, 1) / T_dense-s(1, 1)
    dense_verify5: float | None  # T_dense-s(1, 5) / T_dense-s(1, 1)


def profiles_folder(engine: EngineSetup) -> str:
    return f"profiles-{engine.engine}"


def _times(out: Path, engine: EngineSetup, model: str) -> dict[int, float]:
    """{t: median seconds} at batch 1 from the engine's profile of `model` ({} when absent)."""
    path = out / profiles_folder(engine) / f"{model}-{engine.weights}.json"
    if not path.is_file():
        return {}
    profile = json.loads(path.read_text(encoding="utf-8"))
    return {p["tokens"]: p["median_s"] for p in profile["points"] if p["batch"] == 1}


def _over(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def cost_ratios(out: Path, engine: EngineSetup) -> CostRatios | None:
    """The engine's cost ratios from its batch-1 profiles; None without a MoE profile."""
    moe, draft, dense = (_times(out, engine, m) for m in ("moe", "draft-xs", "dense-s"))
    if 1 not in moe:
        return None
    floor = None
    hardware = floor_hardware(out)
    path = out / profiles_folder(engine) / f"moe-{engine.weights}.json"
    if hardware is not None:
        floor = step_over_floor(json.loads(path.read_text(encoding="utf-8")), hardware)
    return CostRatios(
        step_s=moe[1],
        draft=_over(draft.get(1), moe[1]),
        verify5=_over(moe.get(5), moe[1]),
        verify9=_over(moe.get(9), moe[1]),
        over_floor=floor,
        dense_draft=_over(draft.get(1), dense.get(1)),
        dense_verify5=_over(dense.get(5), dense.get(1)),
    )


def engine_regime(out: Path, engine: EngineSetup, gates: str = RULE_GATES) -> Regime:
    """The regime check (b) and (d) need, on the engine's own MoE profile in its study weights."""
    return bandwidth_regime(out, "moe", profiles_folder(engine), engine.weights, gates)


def engine_amortisation(out: Path, engine: EngineSetup) -> Regime:
    """(b)'s gate: whether the engine amortises a verify of a dense model not under test."""
    return dense_amortisation(out, profiles_folder(engine), engine.weights)


def gate_table(
    out: Path,
    step_cells: Callable[[Path, str], tuple[list[Cell], list]],
    sizes: dict[str, tuple[int, int]],
    family: Sequence[Cell],
) -> str:
    """(d), and (b) as rules v1 judged it (speedup pairs), on every engine under each of the MoE's
    regime gates, the rule's last: a verdict that moves with the gate is printed as depending on it."""
    head = "| engine | claim | " + " | ".join(GATES) + " |"
    lines = [head, "|---" * (len(GATES) + 2) + "|"]
    for engine in ENGINE_SETUPS:
        study, _ = step_cells(out, engine.study)
        if not study:
            continue
        regimes = [engine_regime(out, engine, gates) for gates in GATES]
        series_family = family if engine.runs_family else []
        amortisation = engine_amortisation(out, engine)
        for key, verdicts in (
            (
                "b",
                [claim_b(study, sizes, amortisation, regime, B_EVIDENCES[1]).verdict for regime in regimes],
            ),
            ("d", [claim_d(study, series_family, regime).verdict for regime in regimes]),
        ):
            moved = " (depends on the gate)" if len(set(verdicts)) > 1 else ""
            name = "(b) on speedup pairs (rules v1)" if key == "b" else f"({key})"
            lines.append(f"| {engine.label} | {name}{moved} | " + " | ".join(verdicts) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class EngineVerdicts:
    engine: EngineSetup
    verdicts: dict[str, str]  # claim key -> verdict (or NOT_MEASURED)
    regime: Regime  # the MoE's bandwidth and verify gates ((d), and (b) under rules v1)
    amortisation: Regime  # (b)'s gate: a dense model's verify amortised on this engine
    ratios: CostRatios | None
    runs: int  # study runs measured


def engine_verdicts(
    out: Path,
    engine: EngineSetup,
    step_cells: Callable[[Path, str], tuple[list[Cell], list]],
    sizes: dict[str, tuple[int, int]],
    family: Sequence[Cell],
    moesd: Sequence[Cell],
    predict,
) -> EngineVerdicts:
    """The six verdicts through one engine. The trained family ran through transformers only, so on
    other engines (c) and (d) rest on the study pass alone; (e) and (f) need the engine's moesd step,
    judged without the transformers fits' predictions."""
    study, rows = step_cells(out, engine.study)
    regime = engine_regime(out, engine)
    amortisation = engine_amortisation(out, engine)
    on_hf = engine.runs_family
    found: dict[str, Verdict | None] = {k: None for k in CLAIM_KEYS}
    if study:
        found["a"] = claim_a(study)
        found["b"] = claim_b(study, sizes, amortisation, regime)
        found["c"] = claim_c(study, family if on_hf else [])
        found["d"] = claim_d(study, family if on_hf else [], regime)
    sweep = moesd if on_hf else (step_cells(out, engine.moesd)[0] if engine.moesd else [])
    if sweep:
        found["e"] = claim_e(sweep, predict if on_hf else _no_prediction)
        found["f"] = claim_f(sweep, predict if on_hf else _no_prediction)
    verdicts = {k: NOT_MEASURED if v is None else v.verdict for k, v in found.items()}
    return EngineVerdicts(engine, verdicts, regime, amortisation, cost_ratios(out, engine), len(rows))


def _no_prediction(target: str, batch: int, gamma: int, top_k: int | None) -> None:
    return None


def _ratio_text(kind: str, ratios: CostRatios | None) -> str:
    if ratios is None:
        return ""
    if kind == "draft" and ratios.draft is not None:
        return f"draft ÷ step {ratios.draft:.2f}"
    if kind == "amortise" and ratios.verify5 is not None:
        dense = f", dense-s v(5) {ratios.dense_verify5:.1f}×" if ratios.dense_verify5 is not None else ""
        return f"MoE v(5) {ratios.verify5:.1f}×{dense}"
    if kind == "verify" and ratios.verify5 is not None:
        nine = f", v(9) {ratios.verify9:.1f}×" if ratios.verify9 is not None else ""
        return f"v(5) {ratios.verify5:.1f}×{nine}"
    return ""


def verdict_table(found: Sequence[EngineVerdicts]) -> str:
    """One row per claim, one column per engine: the verdict and the cost ratio it turns on."""
    lines = ["| claim | " + " | ".join(e.engine.label for e in found) + " |", "|---" * (len(found) + 1) + "|"]
    for key in CLAIM_KEYS:
        cells = []
        for engine in found:
            verdict = engine.verdicts[key]
            ratio = _ratio_text(_RATIO_OF[key], engine.ratios) if verdict != NOT_MEASURED else ""
            cells.append(f"**{verdict}**" + (f" · {ratio}" if ratio else ""))
        lines.append(f"| {CLAIM_TITLES[key]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def ratios_table(found: Sequence[EngineVerdicts]) -> str:
    """The cost ratios per engine, from its batch-1 profiles."""
    lines = [
        "| engine | MoE step T(1,1) | ÷ bandwidth floor | draft-xs ÷ MoE step | MoE verify(5) ÷ step "
        "| MoE verify(9) ÷ step | draft-xs ÷ dense-s step | dense-s verify(5) ÷ step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for engine in found:
        r = engine.ratios
        if r is None:
            lines.append(f"| {engine.engine.label} | no profile | | | | | | |")
            continue
        cells = [
            f"{r.step_s * 1e3:.2f} ms",
            _num(r.over_floor, ".1f") + ("×" if r.over_floor is not None else ""),
            _num(r.draft, ".2f"),
            _num(r.verify5, ".1f") + "×",
            _num(r.verify9, ".1f") + "×",
            _num(r.dense_draft, ".2f"),
            _num(r.dense_verify5, ".1f") + "×",
        ]
        lines.append(f"| {engine.engine.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def dependence(found: Sequence[EngineVerdicts]) -> str:
    """Which verdicts differ between the engines measured, and the measured reason for each."""
    measured = [e for e in found if e.runs]
    if len(measured) < 2:
        return "Only one engine's study pass is in the results folder, so nothing can be compared yet."
    differ = [
        k for k in CLAIM_KEYS if len({e.verdicts[k] for e in measured if e.verdicts[k] != NOT_MEASURED}) > 1
    ]
    same = [k for k in "abcd" if k not in differ]
    parts = []
    if differ:
        parts.append("Verdicts that differ between engines: " + ", ".join(f"({k})" for k in differ) + ".")
    else:
        parts.append("No verdict differs between the engines measured.")
    regimes = "; ".join(f"{e.engine.label}: {'present' if e.amortisation.ok else 'absent'}" for e in measured)
    parts.append(
        f"The amortisation (b) needs, a dense model's verify within a few steps, per engine — {regimes} "
        "(the cost-ratio table gives each engine's verify over step for the MoE and dense-s)."
    )
    if differ and same:
        parts.append("The same on every engine: " + ", ".join(f"({k})" for k in same) + ".")
    return " ".join(parts)


def q4_types(out: Path) -> str:
    """Tensors per ggml type of each profiled Q4_K_M file, from its profile."""
    parts = []
    for path in sorted((out / "profiles-llamacpp").glob("*-q4_k_m.json")):
        types = json.loads(path.read_text(encoding="utf-8"))["model"].get("tensor_types", {})
        parts.append(
            f"{path.stem.removesuffix('-q4_k_m')} " + ", ".join(f"{t} {n}" for t, n in types.items())
        )
    return "; ".join(parts) or "no Q4_K_M profile yet"


def engines_values(
    out: Path,
    step_cells: Callable[[Path, str], tuple[list[Cell], list]],
    sizes: dict[str, tuple[int, int]],
    family: Sequence[Cell],
    moesd: Sequence[Cell],
    predict,
) -> dict[str, str]:
    """The per-engine values of the findings document."""
    found = [engine_verdicts(out, e, step_cells, sizes, family, moesd, predict) for e in ENGINE_SETUPS]
    values = {
        "engines.table": verdict_table(found),
        "engines.ratios": ratios_table(found),
        "engines.depends": dependence(found),
        "engines.gates": gate_table(out, step_cells, sizes, family),
    }
    values["engines.q4_types"] = q4_types(out)
    for engine in found:
        key = engine.engine.name.replace("-", "_")
        values[f"engines.{key}.runs"] = str(engine.runs)
        values[f"engines.{key}.regime"] = engine.regime.why
        values[f"engines.{key}.amortisation"] = engine.amortisation.why
        for claim, verdict in engine.verdicts.items():
            values[f"engines.{key}.{claim}"] = verdict
    return values
