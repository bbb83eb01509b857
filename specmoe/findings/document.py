"""The findings document: every value computed from the shipped exports, then set into the template.

`values(out, study_csv, examples)` reads only files under `out` (the exported CSVs, the fits, the
wall-time log), the study's published CSV and the hardware/config examples, so a test can recompute
the document from what the repository ships and compare it with docs/findings.md byte for byte.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections import Counter
from importlib import resources
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.findings.batch_claims import claim_e, claim_f
from specmoe.findings.by_engine import engine_amortisation, engine_regime, engines_values
from specmoe.findings.cells import Cell, cells
from specmoe.findings.claims import (
    CLAIM_KEYS,
    CLAIM_TITLES,
    LOW_ACCEPTANCE,
    UNSURE,
    claim_a,
    claim_b,
    claim_c,
    claim_d,
    extreme,
    pct,
    x,
)
from specmoe.findings.hybrid import STEP as HYBRID_STEP
from specmoe.findings.hybrid import hybrid_values
from specmoe.findings.mtp import STEP as MTP_STEP
from specmoe.findings.mtp_doc import mtp_values
from specmoe.findings.notes import notes_values
from specmoe.findings.plan import ENGINE_SETUPS, SCALES
from specmoe.findings.predictions import fitted_predictor, study_setup_table, unfitted_table
from specmoe.findings.real import real_values
from specmoe.findings.regime import floor_hardware
from specmoe.findings.results import read_export
from specmoe.findings.rules import check_rules
from specmoe.findings.wide import STEP as WIDE_STEP
from specmoe.findings.wide_doc import left_out, runs_line, wide_values
from specmoe.suite.shipped import STUDY_ROWS as STUDY_CSV
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import get_preset

# The hardware and model examples as the package ships them (docs/perf-examples links to them).
EXAMPLES = Path(str(resources.files("specmoe.perf").joinpath("examples")))
_PLACEHOLDER = re.compile(r"\{\{([a-z0-9_.]+)\}\}")


def template() -> str:
    return resources.files("specmoe.findings").joinpath("template.md").read_text(encoding="utf-8")


def render(text: str, values: dict[str, str]) -> str:
    missing = sorted({m for m in _PLACEHOLDER.findall(text) if m not in values})
    if missing:
        raise SpecmoeError(f"findings template names values nobody computed: {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def _step_cells(out: Path, name: str) -> tuple[list[Cell], list]:
    path = out / f"{name}.csv"
    if not path.is_file():
        return [], []
    rows = read_export(path)
    return cells(rows), rows


def _sizes(preset: str) -> dict[str, tuple[int, int]]:
    zoo = get_preset(preset)
    out = {}
    for shape in zoo.models:
        counts = count_params(shape, zoo.vocab_size)
        out[shape.name] = (counts.total, counts.active)
    return out


def _run_values(name: str, rows: list) -> dict[str, str]:
    verdicts = Counter(r.audit_verdict for r in rows)
    units = sorted({c.repeats for c in cells(rows)})
    envs = {(r.env.get("cpu"), r.env.get("torch_threads"), r.env.get("torch")) for r in rows}
    noisy = [r for r in rows if r.noisy]
    return {
        f"{name}.runs": str(len(rows)),
        f"{name}.pass": str(verdicts.get("pass", 0)),
        f"{name}.fail": str(verdicts.get("fail", 0)),
        f"{name}.left_out": left_out(noisy, Counter(r.arm for r in noisy)),
        f"{name}.envs": "; ".join(
            f"{cpu}, {threads} thread(s), torch {torch}" for cpu, threads, torch in sorted(envs, key=str)
        ),
        f"{name}.tokens": ", ".join(sorted({str(r.settings.max_new_tokens) for r in rows})),
        f"{name}.repeats": str(max((r.repeat for r in rows), default=-1) + 1),
        f"{name}.dtype": ", ".join(sorted({str(r.settings.dtype) for r in rows})),
        f"{name}.units": (f"{units[0]}–{units[-1]}" if len(units) > 1 else str(units[0])) if units else "–",
    }


def change_values(out: Path, found: dict[str, str]) -> dict[str, str]:
    """The verdict table before (out/unpaired-two-repeats/findings.json) and now, with what decided
    the change."""
    path = out / "unpaired-two-repeats" / "findings.json"
    before = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    lines = ["| claim | first findings | now | why |", "|---|---|---|---|"]
    for key in CLAIM_KEYS:
        was, now = before.get(f"{key}.verdict", "–"), found[f"{key}.verdict"]
        regime = found.get(f"{key}.regime", "")
        if key == "b":
            why = (
                "rules v2 judge it on the verify amortisation it names, the MoE's target efficiency against "
                f"dense-l's ({found['b.eff_dense_wins']} of {found['b.eff_pairs']} pairs favour dense-l); "
                f"under v1's speedup pairs it reads {found['b.verdict_speedup']}"
            )
        elif key == "d" and found.get("d.refuted", "0") != "0":
            why = (
                f"settled by arithmetic: the 1 + αγ bound refutes {found['d.refuted']} of "
                f"{found['d.series']} γ series at their measured acceptance and round cost, "
                "whatever the regime"
            )
        elif regime and now == UNSURE and found.get(f"{key}.regime_ok") == "no":
            why = "regime check: " + regime
        elif was == now:
            why = "the same verdict, now from confidence intervals over every prompt"
        elif now == UNSURE:
            why = "too few cells differ beyond their intervals now that each interval is a real one"
        else:
            why = "the intervals over every prompt decide it the other way"
        lines.append(f"| {CLAIM_TITLES[key]} | {was} | **{now}** | {why} |")
    return {"changes.table": "\n".join(lines)}


def study_audit_values(study_csv: Path) -> dict[str, str]:
    """The study's own published rows through `specmoe audit`, and the speedups it claims at low
    acceptance on its MoE target."""
    from specmoe.audit.foreign import audit_path

    audited = audit_path(study_csv)
    verdicts = Counter(row.verdict for row in audited)
    with Path(study_csv).open(newline="", encoding="utf-8") as handle:
        published = {r["job_id"]: r for r in csv.DictReader(handle)}
    claimed, low_verdicts, impossible_by_target = [], Counter(), Counter()
    for row in audited:
        source = published.get(row.id, {})
        rate = source.get("draft_acceptance_rate") or ""
        moe = source.get("target_model", "").startswith("moe")
        if row.verdict == "impossible":
            impossible_by_target["moe" if moe else "dense"] += 1
        moe_sd = moe and source.get("draft_model") != "none"
        if moe_sd and rate and float(rate) < LOW_ACCEPTANCE and row.claimed_speedup is not None:
            claimed.append(row.claimed_speedup)
            low_verdicts[row.verdict] += 1
    return {
        "audit.rows": str(len(audited)),
        "audit.consistent": str(verdicts.get("consistent", 0)),
        "audit.impossible": str(verdicts.get("impossible", 0)),
        "audit.unverifiable": str(verdicts.get("unverifiable", 0)),
        "audit.low_n": str(len(claimed)),
        "audit.low_impossible": str(low_verdicts.get("impossible", 0)),
        "audit.low_possible": str(len(claimed) - low_verdicts.get("impossible", 0)),
        "audit.impossible_moe": str(impossible_by_target.get("moe", 0)),
        "audit.impossible_dense": str(impossible_by_target.get("dense", 0)),
        "audit.low_min": extreme(claimed, min, x),
        "audit.low_max": extreme(claimed, max, x),
    }


def study_gamma_values(study_csv: Path) -> dict[str, str]:
    """The study's own median acceptance rate on its MoE target at γ = 4 and 16, and the most a round
    can emit there (1 + rate·γ), from its published rows."""
    with Path(study_csv).open(newline="", encoding="utf-8") as handle:
        rows = [
            r
            for r in csv.DictReader(handle)
            if r.get("target_model", "").startswith("moe")
            and r.get("draft_model") != "none"
            and r.get("draft_acceptance_rate")
        ]
    found: dict[str, str] = {}
    for gamma in (4, 16):
        rates = [float(r["draft_acceptance_rate"]) for r in rows if r.get("draft_len") == str(gamma)]
        rate = statistics.median(rates) if rates else float("nan")
        found[f"studyrate.g{gamma}"] = pct(rate)
        found[f"studyrate.bound{gamma}"] = f"{1 + rate * gamma:.2f}"
    return found


def sensitivity_values(out: Path, study, family, moesd, predict, wide, wide_rows) -> dict[str, str]:
    """Every verdict under each variant of its rule (`specmoe.findings.sensitivity`), the
    moesd-wide pass's beside the others where it has runs."""
    from specmoe.findings.regime import GATES
    from specmoe.findings.sensitivity import Inputs, WideInputs, sensitivity_table
    from specmoe.findings.wide import GATES as WIDE_GATES
    from specmoe.findings.wide import wide_regime

    regimes = {gate: engine_regime(out, ENGINE_SETUPS[0], gate) for gate in GATES}
    amortisation = engine_amortisation(out, ENGINE_SETUPS[0])
    hardware = floor_hardware(out)
    wide_inputs = (
        WideInputs(wide, {gate: wide_regime(wide_rows, gate, hardware) for gate in WIDE_GATES})
        if wide_rows
        else None
    )
    table, moved = sensitivity_table(
        Inputs(study, family, moesd, _sizes("bench"), regimes, amortisation, predict), wide_inputs
    )
    found = {"sensitivity.table": table}
    for key, names in moved.items():
        found[f"{key}.depends"] = "depends on: " + ", ".join(names) if names else "stable"
    for key in ("wide_e", "wide_f"):
        found.setdefault(f"{key}.depends", "not measured")
    return found


def rule_values() -> dict[str, str]:
    """The regime gates' thresholds and the bench MoE's verify-over-step expert reads, as the rules
    and the zoo define them (the template writes no number by hand)."""
    from specmoe.findings.regime import AMORTISED, BANDWIDTH_BOUND, VERIFY_TOKENS
    from specmoe.theory import expected_active_experts
    from specmoe.zoo.presets import MOE, get_preset

    moe = get_preset("bench").model(MOE)
    active = expected_active_experts(VERIFY_TOKENS, moe.num_experts, moe.top_k)
    return {
        "rules.bandwidth_bound": f"{BANDWIDTH_BOUND:g}",
        "rules.amortised": f"{AMORTISED:g}",
        "rules.verify_tokens": str(VERIFY_TOKENS),
        "moe.verify_experts": f"{active:.1f}",
        "moe.experts": str(moe.num_experts),
        "moe.top_k": str(moe.top_k),
        "moe.verify_reads": f"{active / moe.top_k:.1f}",
    }


def values(out: Path, study_csv: Path = STUDY_CSV, examples: Path = EXAMPLES) -> dict[str, str]:
    study, study_rows = _step_cells(out, "study")
    moesd, moesd_rows = _step_cells(out, "moesd")
    family, family_rows = _step_cells(out, "family")
    predict = fitted_predictor(out / "fits")
    regime = engine_regime(out, ENGINE_SETUPS[0])  # the study pass's engine, transformers bf16
    found: dict[str, str] = {}
    for key, verdict in (
        ("a", claim_a(study)),
        ("b", claim_b(study, _sizes("bench"), engine_amortisation(out, ENGINE_SETUPS[0]), regime)),
        ("c", claim_c(study, family)),
        ("d", claim_d(study, family, regime)),
        ("e", claim_e(moesd, predict)),
        ("f", claim_f(moesd, predict)),
    ):
        found.update({f"{key}.{name}": value for name, value in verdict.values.items()})
    for name, rows in (("study", study_rows), ("moesd", moesd_rows), ("family", family_rows)):
        found.update(_run_values(name, rows))
    wide, wide_rows = _step_cells(out, WIDE_STEP)
    every = [*study_rows, *moesd_rows, *family_rows]
    found["noise.runs"] = str(len(every))
    found["noise.noisy"] = str(sum(r.noisy for r in every))
    found.update(change_values(out, found))
    found.update(study_audit_values(study_csv))
    found.update(study_gamma_values(study_csv))
    found.update(rule_values())
    found.update(sensitivity_values(out, study, family, moesd, predict, wide, wide_rows))
    found["rules.line"] = check_rules(out, allow_change=True, steps=measured_steps(out))
    found.update(notes_values(out, study_rows, moesd_rows, moesd, predict))
    found.update(engines_values(out, _step_cells, _sizes("bench"), family, moesd, predict))
    found.update(_engine_run_values(out))
    found.update(real_values(out.parent / "real"))
    found.update(hybrid_values(*_step_cells(out, HYBRID_STEP)))
    found.update(wide_values(out, wide, wide_rows, floor_hardware(out)))
    found.update(mtp_values(out, *_step_cells(out, MTP_STEP)))
    found["elsewhere.table"] = unfitted_table(examples)
    found["elsewhere.study"] = study_setup_table(examples)
    wall = json.loads((out / "wall_time.json").read_text()) if (out / "wall_time.json").is_file() else {}
    found["wall.minutes"] = f"{sum(wall.values()) / 60:.0f}"
    found["wall.steps"] = ", ".join(f"{k} {v / 60:.0f} min" for k, v in wall.items())
    found["pct.low"] = f"{100 * LOW_ACCEPTANCE:g}%"
    return found


def _engine_run_values(out: Path) -> dict[str, str]:
    """Runs, audit and thread counts of the llama.cpp study passes."""
    found: dict[str, str] = {}
    for engine in ENGINE_SETUPS:
        if engine.runs_family:  # its runs are the study's own, summed up elsewhere
            continue
        key = engine.name.replace("-", "_")
        _, rows = _step_cells(out, engine.study)
        found[f"{key}.summary"] = runs_line(rows) if rows else "not measured"
        _, sweep = _step_cells(out, engine.moesd) if engine.moesd else ([], [])
        found[f"{key}.moesd_summary"] = runs_line(sweep) if sweep else "not measured"
    return found


def measured_steps(out: Path) -> tuple[str, ...]:
    """The plan's steps whose exports are in `out`, in the order the plan measures them."""
    names = dict.fromkeys(step.name for scale in SCALES.values() for step in scale)
    return tuple(name for name in names if (Path(out) / f"{name}.csv").is_file())


def write_document(out: Path, doc: Path, study_csv: Path = STUDY_CSV, rules_changed: bool = False) -> Path:
    check_rules(out, rules_changed, measured_steps(out))  # refuses other rules before anything is written
    found = values(out, study_csv)
    (out / "findings.json").write_text(
        json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    doc.write_text(render(template(), found), encoding="utf-8")
    return doc
