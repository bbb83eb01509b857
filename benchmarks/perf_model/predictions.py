"""End-to-end SD speedups predicted by the performance model against the findings' measured cells,
and `advise`'s γ against the measured best γ. Not a test: writes a table (Markdown + JSON).

    python -m benchmarks.perf_model.predictions \\
        --runs docs/results/cpu/findings/study.csv --runs docs/results/cpu/findings/moesd.csv \\
        --runs docs/results/cpu/findings/family.csv \\
        --fits docs/results/cpu/predictions/fits --fits docs/results/cpu/findings/fits \\
        --out docs/results/cpu/predictions

`--runs` takes stores (`.db`, with round traces: the exact schedule) or exported CSV files (counts
only: the schedule estimated from them); `--fits` folders of fits named as
`specmoe.findings.model_check.ModelLibrary` expects. `--profile` first measures (resuming) the
profiles in PROFILES that the findings' own fits do not cover and fits them into the first --fits
folder; run it under one thread on a quiet core. `--replay` first decodes again, untimed and with
the target's routers traced, every greedy n-gram SD run of a transformers MoE at B = 1 in the runs
of a findings step (the study), and records the experts its verify passes activated in `--routing`
(resuming); `--routing` alone reads them. n-gram runs only: a drafter with no match proposes one
token γ times, a block the profiles' random tokens do not resemble, while a draft model's proposals
route much as random tokens do (a draft-s run at γ = 8 traced 27.7 experts per layer per verify
against N(9) = 28.2), and replaying those would cost about as long as the runs. Run it with the
runs' thread count (one), since a bfloat16 decode with another split can differ and a replay whose
counts differ is not used. How the prediction is composed: `specmoe/findings/model_check.py`,
`specmoe/findings/routing.py` and docs/perf-model.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from specmoe.findings.model_check import (
    AdviceCheck,
    Checked,
    ModelLibrary,
    check_advice,
    check_rows,
    is_free_drafter,
    read_rows,
)

ENGINES = {"hf": "transformers", "llamacpp": "llama.cpp"}
GOAL_MEDIAN, GOAL_WORST = 0.10, 0.25


@dataclass(frozen=True)
class Planned:
    """One `specmoe profile` the predictions need beyond the findings' own (bench zoo, float32)."""

    preset: str
    model: str
    dtype: str
    batches: tuple[int, ...]
    tokens: tuple[int, ...]
    top_k: int | None = None
    repeats: int = 5

    @property
    def name(self) -> str:
        top = f"-top{self.top_k}" if self.top_k else ""
        return f"{self.preset}-{self.model}{top}-{self.dtype}"


_TARGET_T = (1, 2, 3, 5, 9)  # verify widths γ + 1 of the study (γ 4, 8), and the knee's neighbourhood
PROFILES = (
    # study: bench zoo in bfloat16 at B = 1
    Planned("bench", "moe", "bfloat16", (1, 2, 4), _TARGET_T),
    Planned("bench", "dense-l", "bfloat16", (1, 2, 4), _TARGET_T),
    Planned("bench", "draft-xs", "bfloat16", (1, 2, 4), (1, 2)),
    Planned("bench", "draft-s", "bfloat16", (1, 2, 4), (1, 2)),
    # family: the trained zoo in float32 at B = 1, γ up to 16
    Planned("trained", "moe", "float32", (1, 2, 4), (*_TARGET_T, 17)),
    Planned("trained", "draft-xs", "float32", (1, 2, 4), (1, 2)),
    Planned("trained", "draft-s", "float32", (1, 2, 4), (1, 2)),
    # moesd's sparsity sweep: the MoE rerouted to top-k 1 and 8 (the top-4 fit is the findings')
    Planned("bench", "moe", "float32", (1, 4, 16, 64), (1, 2, 5), top_k=1, repeats=3),
    Planned("bench", "moe", "float32", (1, 4, 16, 64), (1, 2, 5), top_k=8, repeats=3),
)


def measure_profiles(fits: Path, context: int = 64) -> None:
    from specmoe.bench.suite_zoo import default_zoo_dir
    from specmoe.perf.files import write_json
    from specmoe.perf.fit import fit_profile
    from specmoe.perf.profile import profile_model
    from specmoe.zoo import resolve_model

    profiles = fits.parent / "profiles"
    for plan in PROFILES:
        profile_path = profiles / f"{plan.name}.json"
        if not profile_path.is_file():
            print(f"== profile {plan.name}", flush=True)
            profile = profile_model(
                resolve_model(plan.model, default_zoo_dir(plan.preset, 0)),
                list(plan.batches),
                list(plan.tokens),
                context=context,
                dtype=plan.dtype,
                repeats=plan.repeats,
                moe_top_k=plan.top_k,
            )
            write_json(profile_path, profile)
        fit_path = fits / f"{plan.name}.json"
        if not fit_path.is_file():
            write_json(fit_path, fit_profile(json.loads(profile_path.read_text()), where=str(profile_path)))


def replay_routing(paths: list[Path], out: Path) -> None:
    """Replay the B = 1 runs of `paths` named as a findings step into `out` (run id -> Routed),
    saving after each run so an interrupted replay resumes."""
    from specmoe.bench.runner import ModelPool
    from specmoe.bench.suite_run import plan_specs
    from specmoe.bench.suite_zoo import prepare_zoo
    from specmoe.findings.plan import plan
    from specmoe.findings.routing import replay_rows
    from specmoe.suite.load import builtin_suite_path, load_suite

    done = json.loads(out.read_text()) if out.is_file() else {}
    steps = {s.name: s for s in plan("cpu")}
    for path in paths:
        step = steps.get(path.stem)
        if step is None:
            continue
        suite = load_suite(builtin_suite_path(step.suite), step.overrides)
        rows = [
            r
            for r in read_rows(path)
            if r.run_id not in done
            and int(r.config["batch_size"]) == 1
            and is_free_drafter(str(r.config["draft"]))
        ]
        pool = ModelPool(suite, prepare_zoo(suite, None))
        for routed in replay_rows(rows, plan_specs(suite), pool):
            done[routed.run_id] = routed.to_json()
            out.write_text(json.dumps(done, indent=1, sort_keys=True) + "\n")


def read_routing(path: Path | None) -> dict[str, float]:
    """Run id -> experts per MoE layer per verify, for the replays that reproduced their run."""
    if path is None or not path.is_file():
        return {}
    return {k: v["active"] for k, v in json.loads(path.read_text()).items() if v["matches"]}


def summary(cells: list[Checked]) -> dict[str, dict]:
    out = {}
    for engine in sorted({c.engine for c in cells}):
        errors = [abs(c.error) for c in cells if c.engine == engine]
        median, worst = statistics.median(errors), max(errors)
        profiled = [
            abs(c.from_profiles / c.measured - 1) for c in cells if c.engine == engine and c.from_profiles
        ]
        out[engine] = {
            "cells": len(errors),
            "median_abs_error": median,
            "worst_abs_error": worst,
            "within_10": sum(e <= GOAL_MEDIAN for e in errors),
            "within_25": sum(e <= GOAL_WORST for e in errors),
            "goal_met": median <= GOAL_MEDIAN and worst <= GOAL_WORST,
            "from_profiles": {
                "cells": len(profiled),
                "median_abs_error": statistics.median(profiled) if profiled else None,
                "worst_abs_error": max(profiled, default=None),
            },
        }
    return out


def leaves_out(cell: Checked) -> str:
    """What the composition leaves out, from where its parts disagree with the run (cells off by > 10%)."""
    if abs(cell.error) <= GOAL_MEDIAN:
        return ""
    parts = [("verify passes", cell.verify_error), ("plain steps", cell.plain_error)]
    if cell.draft_error is not None:
        parts.append(("draft passes", cell.draft_error))
    name, worst = max(parts, key=lambda p: abs(p[1]))
    where = f"{name} {worst:+.0%}"
    moe = cell.target.startswith("moe")
    if cell.draft.startswith("ngram") and name == "verify passes" and moe and cell.routed is None:
        return (
            f"{where}: an n-gram block repeats one token when nothing matches, and repeated tokens "
            "route to one token's experts; not traced here, so the fit charges N(γ + 1)"
        )
    if cell.routed is not None and name == "verify passes" and cell.top_k:
        load = cell.top_k * cell.batch * (cell.gamma + 1) / cell.routed
        return (
            f"{where}: traced, the block loads each activated expert with {load:.0f} tokens, where the "
            "profiles' random tokens load about one at this width: the fit extrapolates expert compute"
        )
    profiled = None if cell.from_profiles is None else cell.from_profiles / cell.measured - 1
    if cell.engine == "transformers" and cell.dtype == "float32" and cell.target.startswith("dense"):
        return (
            f"{where}: float32 BLAS is slower at 3 rows than at 5 on this CPU, which neither of the "
            "fit's forms follows (docs/perf-model.md)"
        )
    if profiled is not None and abs(profiled) <= GOAL_MEDIAN:
        return (
            f"{where}: the fit, not the composition (from profiles {profiled:+.0%}): its form does "
            "not follow this kernel's cost over these shapes"
        )
    if moe and cell.routed is None:
        return f"{where}: the fit against the runs at equal shapes (runs route their tokens, profiles random)"
    return f"{where}: the fit against the runs at equal shapes (the profile timed them slower or faster)"


def _experts(cell: Checked) -> str:
    if cell.routed is not None:
        return f"{cell.routed:.1f} traced"
    return "N(n)" if cell.target.startswith("moe") else "–"


def _profiled(cell: Checked) -> str:
    if cell.from_profiles is None:
        return "–"
    return f"{cell.from_profiles:.2f}× ({cell.from_profiles / cell.measured - 1:+.1%})"


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def markdown(cells: list[Checked], advice: list[AdviceCheck], totals: dict[str, dict]) -> str:
    lines = [
        "<!-- Written by benchmarks/perf_model/predictions.py; do not edit. -->",
        "# Reconstruction given the measured schedule: composed against measured SD speedups",
        "",
        "Not a prediction: fitted forward times composed with each run's own measured acceptance, "
        "round schedule, host time and (traced n-gram cells) routing, and the fits were revised "
        "against these same cells; out-of-sample predictions are in out-of-sample.md "
        "(docs/perf-model.md). Error: predicted ÷ measured − 1. Parts: the composed "
        "seconds of the SD arm's verify and draft passes and of the plain arm's steps against the "
        "runs' own clocks. From profiles: the same composition from the profiled (measured) forward "
        "times instead of the fits, where a profile holds the run's shapes; it separates what the "
        "fit misses from what the composition misses. Verify experts: where the runs were replayed "
        "with their routers traced (`--replay`), the experts per MoE layer their verify passes "
        "activated, which the prediction uses in place of N(n); N(n) where not traced.",
        "",
        "| engine | cells | median abs. error | worst abs. error | within 10% | within 25% "
        "| goal (≤ 10% / ≤ 25%) | from profiles: cells, median, worst |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for engine, t in totals.items():
        p = t["from_profiles"]
        profiled = (
            f"{p['cells']}, {p['median_abs_error']:.1%}, {p['worst_abs_error']:.1%}" if p["cells"] else "–"
        )
        lines.append(
            f"| {engine} | {t['cells']} | {t['median_abs_error']:.1%} | {t['worst_abs_error']:.1%} | "
            f"{t['within_10']} | {t['within_25']} | {'met' if t['goal_met'] else 'missed'} | {profiled} |"
        )
    lines += [
        "",
        "| engine | suite | target | draft | dtype | γ | B | top-k | prompts | acceptance | measured "
        "| predicted | error | verify | draft | plain | host share | verify experts | from profiles "
        "| what the model leaves out |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        lines.append(
            f"| {c.engine} | {c.suite} | {c.target} | {c.draft} | {c.dtype} | {c.gamma} | {c.batch} | "
            f"{_num(c.top_k, 'd')} | {c.prompt} | {c.acceptance:.1%} | {c.interval()} | "
            f"{c.predicted:.2f}× | {c.error:+.1%} | {c.verify_error:+.1%} | "
            f"{_num(c.draft_error, '+.1%')} | {c.plain_error:+.1%} | {c.host_share:.1%} | "
            f"{_experts(c)} | {_profiled(c)} | {leaves_out(c)} |"
        )
    lines += [
        "",
        "## advise against the measured best γ",
        "",
        "advise chooses among the γ values measured, given the fits, the group's per-position "
        "acceptance α and its measured host seconds; lost: 1 − measured speedup at the advised γ ÷ "
        "measured speedup at the best γ.",
        "",
        "| engine | suite | target | draft | dtype | B | top-k | prompts | α | γ measured | advised γ | "
        "advised, predicted | measured best γ | speedup lost | SD pays: advise / measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in advice:
        engine, suite, target, draft, dtype, batch, top_k, prompt = a.group
        gammas = ", ".join(map(str, a.gammas))
        pays = f"{'yes' if a.predicted >= 1 else 'no'} / {'yes' if a.best_low > 1 else 'no'}"
        lines.append(
            f"| {engine} | {suite} | {target} | {draft} | {dtype} | {batch} | {_num(top_k, 'd')} | "
            f"{prompt} | {a.alpha:.3f} | {gammas} | {a.advised} | {a.predicted:.2f}× | {a.best} | "
            f"{a.lost:.1%} | {pays} |"
        )
    followed = [a for a in advice if a.advised == a.best]
    lines += [
        "",
        f"advise named the measured best γ in {len(followed)} of {len(advice)} groups; "
        f"the most it lost was {max((a.lost for a in advice), default=0.0):.1%}. SD pays (measured): the "
        "best γ's interval lies above 1×; (advise): its predicted speedup at the advised γ is ≥ 1×, "
        "else it says to decode without a draft.",
        "",
        *baselines(cells, advice),
        "",
    ]
    return "\n".join(lines)


def baselines(cells: list[Checked], advice: list[AdviceCheck]) -> list[str]:
    """advise against rules that need no model: always the smallest γ measured, always γ = 4 (or
    the measured γ nearest it). Scored like advise: groups where the pick is the measured best, and
    the most speedup a pick lost."""
    measured = {(c.group, c.gamma): c.measured for c in cells}
    rules = {
        "advise": lambda a: a.advised,
        "always the smallest γ": lambda a: min(a.gammas),
        "always γ = 4": lambda a: min(a.gammas, key=lambda g: (abs(g - 4), g)),
    }
    lines = ["| rule | best γ named | most speedup lost |", "|---|---|---|"]
    for name, pick in rules.items():
        lost = [1 - measured[(a.group, pick(a))] / measured[(a.group, a.best)] for a in advice]
        named = sum(pick(a) == a.best for a in advice)
        lines.append(f"| {name} | {named} of {len(advice)} | {max(lost, default=0.0):.1%} |")
    return lines


def engine_of(config: dict) -> str:
    """The engine, with the GGUF weight type for llama.cpp: "llama.cpp Q8_0"."""
    model = config.get("target_model") or {}
    backend = model.get("backend") or "hf"
    name = ENGINES.get(backend, backend)
    return f"{name} {model['gguf'].upper()}" if model.get("gguf") else name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=Path, action="append", required=True, help="a store (.db) or CSV export"
    )
    parser.add_argument("--fits", type=Path, action="append", required=True, help="a folder of fits")
    parser.add_argument(
        "--profiles",
        type=Path,
        action="append",
        help="a folder of profiles (default: each --fits folder with 'fits' replaced by 'profiles')",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for predictions.md and .json")
    parser.add_argument("--profile", action="store_true", help="measure missing profiles first")
    parser.add_argument("--routing", type=Path, help="traced experts per verify of replayed runs (JSON)")
    parser.add_argument("--replay", action="store_true", help="replay the runs into --routing first")
    args = parser.parse_args()
    if args.replay and args.routing is None:
        parser.error("--replay writes to --routing FILE; name one")
    if args.profile:
        args.fits[0].mkdir(parents=True, exist_ok=True)
        measure_profiles(args.fits[0])
    if args.replay:
        replay_routing(args.runs, args.routing)
    routing = read_routing(args.routing)
    library = ModelLibrary(args.fits)
    profiled = ModelLibrary(
        args.profiles or [f.parent / f.name.replace("fits", "profiles") for f in args.fits], True
    )
    cells: list[Checked] = []
    for path in args.runs:
        rows = read_rows(path)
        engines = {engine_of(r.config) for r in rows}
        for engine in sorted(engines):
            subset = [r for r in rows if engine_of(r.config) == engine]
            cells += check_rows(subset, library, engine, profiled, routing)
    cells.sort(key=lambda c: (c.engine, c.suite, c.target, c.draft, c.batch, c.top_k or 0, c.prompt, c.gamma))
    advice = check_advice(cells, library)
    totals = summary(cells)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "runs": [p.name for p in args.runs],
        "summary": totals,
        "cells": [
            {**{k: v for k, v in vars(c).items() if k != "config"}, "error": c.error}
            | {"leaves_out": leaves_out(c)}
            for c in cells
        ],
        "advice": [vars(a) for a in advice],
    }
    (args.out / "predictions.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    (args.out / "predictions.md").write_text(markdown(cells, advice, totals))
    for engine, t in totals.items():
        print(
            f"{engine}: {t['cells']} cells, median |error| {t['median_abs_error']:.1%}, "
            f"worst {t['worst_abs_error']:.1%}; advise named the best γ in "
            f"{sum(a.advised == a.best for a in advice if a.group[0] == engine)} of "
            f"{sum(a.group[0] == engine for a in advice)} groups"
        )
    print(f"wrote {args.out / 'predictions.md'} and predictions.json")


if __name__ == "__main__":
    main()
