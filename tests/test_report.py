"""`specmoe.report.write_report` on a synthetic results store: no models, a few seconds."""

from __future__ import annotations

import csv
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from specmoe.bench.spec_row import run_row
from specmoe.drafts import OracleDraft, draft_of
from specmoe.errors import SpecmoeError
from specmoe.metrics import RunCounts, RunTimes
from specmoe.report import write_report
from specmoe.report.intervals import mean_interval
from specmoe.report.slices import best_slice
from specmoe.results.store import RunRow, Store
from specmoe.suite.types import ModelSpec, RunSpec

EVIL = "<script>alert(1)</script>"
DRAWN = (
    "speedup_vs_active_params",
    "throughput",
    "acceptance_vs_gamma",
    "prompt_length",
    "speedup_vs_gamma",
    "speedup_vs_batch",
    "efficiency_vs_batch",
    "oracle_speedup",
    "accepted_length",
    "time_split",
    "acceptance_by_position",
    "decode_ms_per_token",
    "prefill_ttft",
    "gamma_batch_speedup",
)
TABLES = (
    "baseline_throughput",
    "sd_results",
    "draft_comparison",
    "decode_ms_per_token",
    "prefill_ttft",
    "gamma_batch_speedup",
)
MAX_NEW = 24


def _zoo(name: str, zoo: str) -> ModelSpec:
    return ModelSpec(name=name, zoo=zoo, path=None, zoo_preset="tiny", zoo_seed=0)


MODELS = {
    "moe": _zoo("moe", "moe"),
    "dense-l": _zoo("dense-l", "dense-l"),
    EVIL: _zoo(EVIL, "dense-s"),
    "draft-xs": _zoo("draft-xs", "draft-xs"),
    "draft-s": _zoo("draft-s", "draft-s"),
    "hf-local": ModelSpec(name="hf-local", zoo=None, path="/models/unknown-size"),
}


def spec(
    target: str,
    draft: str | None = None,
    gamma: int = 4,
    batch: int = 1,
    length: int | None = None,
    repeat: int = 0,
    group: str = "g",
) -> RunSpec:
    oracle = draft is not None and draft.startswith("oracle:")
    draft_model = None if draft is None else MODELS["draft-xs" if oracle else draft]
    return RunSpec(
        suite="synthetic",
        group=group,
        arm="baseline" if draft is None else "sd",
        target=target,
        draft=draft_of(draft),
        gamma=gamma if draft else 0,
        prompt_set=None if length else "factual",
        prompt_length=length,
        batch_size=batch,
        temperature=0.0,
        max_new_tokens=MAX_NEW,
        moe_top_k=2 if MODELS[target].zoo == "moe" else None,
        dtype="float32",
        device="cpu",
        repeat=repeat,
        warmup=0,
        target_model=MODELS[target],
        draft_model=draft_model,
        oracle_cost="draft-xs" if oracle else None,
    )


def simulate(s: RunSpec, acceptance: float) -> RunRow:
    """A plausible run: per-row rounds with i.i.d. acceptance, times from a simple cost model."""
    rng = random.Random(s.run_id)
    step_s = 0.002 * (3 if s.target == "dense-l" else 1) * (1 + 0.1 * s.batch_size) * (1 + 0.01 * s.repeat)
    trace, emitted_by_row, truncated = [], [0] * s.batch_size, 0
    drafts = 0 if s.draft is None else s.gamma  # tokens drafted per round: none without a draft
    while min(emitted_by_row) < MAX_NEW:
        rows = [i for i in range(s.batch_size) if emitted_by_row[i] < MAX_NEW]
        accepted = [_leading_successes(rng, acceptance, drafts) for _ in rows]
        emitted = []
        for row, a in zip(rows, accepted, strict=True):
            take = min(a + 1, MAX_NEW - emitted_by_row[row])
            truncated += a + 1 - take
            emitted_by_row[row] += take
            emitted.append(take)
        trace.append(
            {
                "rows": rows,
                "drafted": [drafts] * len(rows),
                "accepted": accepted,
                "emitted": emitted,
                "draft_s": 0.0003 * drafts,
                "verify_s": step_s * (1 + 0.08 * drafts * s.batch_size),
                "overhead_s": 0.0001,
            }
        )
    counts = {
        "rounds": sum(len(r["rows"]) for r in trace),
        "target_forwards": len(trace),
        "drafted": sum(sum(r["drafted"]) for r in trace),
        "accepted": sum(sum(r["accepted"]) for r in trace),
        "emitted": sum(emitted_by_row),
        "truncated": truncated,
    }
    parts = {k: sum(r[k] for r in trace) for k in ("draft_s", "verify_s", "overhead_s")}
    decode_s = sum(parts.values())
    times = {"prefill_s": 0.01, "decode_s": decode_s, **parts, "wall_s": 0.01 + decode_s}
    return run_row(
        s,
        env={"cpu": "Synthetic CPU", "cores": 2, "torch": "2.13.0", "git_sha": "abc1234", "device": "cpu"},
        counts=RunCounts.from_dict(counts),
        times=RunTimes.from_dict(times),
        tokens_per_s=counts["emitted"] / decode_s,
        rounds_trace=trace,  # both arms keep their rounds, as the runner stores them
        audit_verdict="pass",
        audit_reason="counts consistent",
        created_at="2026-01-01T00:00:00+00:00",
    )


def _leading_successes(rng: random.Random, p: float, gamma: int) -> int:
    n = 0
    while n < gamma and rng.random() < p:
        n += 1
    return n


def study_specs() -> list[RunSpec]:
    """Baseline + SD arms covering several γ, batch sizes, prompt lengths, two drafts and an oracle."""
    sd = []
    for target in ("moe", "dense-l", EVIL):
        sd += [spec(target, "draft-xs", gamma=g, group="gamma") for g in (2, 4, 8)]
    sd += [spec("moe", "draft-s", gamma=4, group="drafts")]
    sd += [spec(t, "draft-xs", batch=b, group="batch") for t in ("moe", "dense-l") for b in (2, 4)]
    sd += [spec("moe", "draft-xs", length=n, group="prompt") for n in (64, 256)]
    sd += [spec("moe", f"oracle:{p}", group="oracle") for p in (0.2, 0.6, 0.9)]
    sd += [spec("hf-local", "draft-xs", group="path-model")]
    arms = []
    for s in sd:
        for repeat in (0, 1):
            arms += [replace(s.baseline(), repeat=repeat), replace(s, repeat=repeat)]
    return arms


def acceptance_of(s: RunSpec) -> float:
    if isinstance(s.draft, OracleDraft):
        return s.draft.acceptance
    return 0.5 if s.draft == "draft-s" else 0.3


def build_store(db: Path, specs: list[RunSpec], failing: str | None = None) -> list[RunRow]:
    rows, seen = [], set()
    with Store(db) as store:
        for s in specs:
            if s.run_id in seen:  # the same work named by two groups is one run, as in the runner
                continue
            seen.add(s.run_id)
            row = simulate(s, acceptance_of(s))
            if row.run_id == failing:
                row = replace(row, audit_verdict="fail", audit_reason="speedup 9.000 exceeds 1 + alpha*gamma")
            store.add(row)
            rows.append(row)
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str, list[RunRow], str]:
    folder = tmp_path_factory.mktemp("report")
    failing = spec("moe", "draft-xs", gamma=8, repeat=1).run_id
    rows = build_store(folder / "results.sqlite", study_specs(), failing=failing)
    path = write_report(folder / "results.sqlite", folder / "out")
    return path, path.read_text(encoding="utf-8"), rows, failing


def test_every_figure_and_table_is_written_and_referenced(report):
    path, html, _, _ = report
    assert path.name == "report.html"
    for name in DRAWN:
        for ext in ("png", "svg"):
            file = path.parent / "figures" / f"{name}.{ext}"
            assert file.is_file() and file.stat().st_size > 0, file
            assert f'"figures/{name}.{ext}"' in html
    for name in TABLES:
        file = path.parent / "tables" / f"{name}.csv"
        assert file.is_file() and file.stat().st_size > 0
        assert f'"tables/{name}.csv"' in html
    assert len(list((path.parent / "figures").iterdir())) == 2 * len(DRAWN)


def test_user_strings_are_escaped(report):
    _, html, _, _ = report
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert EVIL not in html
    assert "<script" not in html  # the page runs no script at all


def test_failed_audit_is_listed_in_plain_words(report):
    _, html, rows, failing = report
    audit = html.split('<section id="audit">')[1].split("</section>")[0]
    assert f"1 of {len(rows)} runs failed their audit" in audit
    assert f"Run {failing}" in audit and "exceeds 1 + alpha*gamma" in audit


def test_views_without_data_are_listed_not_drawn(report):
    _, html, _, _ = report
    missing = html.split('<section id="not-available">')[1]
    assert "Activated experts vs tokens" in missing
    assert "Serving latency per arm</b>: no server runs" in missing
    serving = html.split('<section id="serving">')[1].split("</section>")[0]
    assert "No figure of this kind has data in this result set." in serving
    assert "Left out for lack of parameter counts: hf-local" in html


def test_environment_and_tables_carry_the_runs(report):
    path, html, rows, _ = report
    environment = html.split('<section id="environment">')[1].split("</section>")[0]
    assert "Synthetic CPU" in environment and "abc1234" in environment and f"{len(rows)} runs" in environment
    with (path.parent / "tables" / "sd_results.csv").open(encoding="utf-8") as f:
        records = list(csv.DictReader(f))
    assert len(records) == len({r.config_key for r in rows if r.arm == "sd"})
    assert all(float(r["speedup_low"]) <= float(r["speedup"]) <= float(r["speedup_high"]) for r in records)
    with (path.parent / "tables" / "draft_comparison.csv").open(encoding="utf-8") as f:
        drafts = list(csv.DictReader(f))
    assert {r["draft"] for r in drafts} == {"draft-xs", "draft-s"}
    assert sum(r["fastest"] == "True" for r in drafts) == 1


def test_baseline_only_store_omits_sd_views(tmp_path):
    specs = [spec(t, batch=b) for t in ("moe", "hf-local") for b in (1, 2)]
    rows = build_store(tmp_path / "r.sqlite", specs)
    html = write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text(encoding="utf-8")
    # A baseline's time per token and prompt phase are its own: those views show baselines alone too.
    drawn = {p.name for p in (tmp_path / "out" / "figures").iterdir()}
    assert drawn == {
        f"{v}.{ext}" for v in ("throughput", "decode_ms_per_token", "prefill_ttft") for ext in ("png", "svg")
    }
    assert f"All {len(rows)} runs pass every audit check" in html
    missing = html.split('<section id="not-available">')[1]
    for title in (
        "Speedup vs γ",
        "Speedup vs batch size",
        "Speculative decoding results",
        "Draft comparison",
    ):
        assert title in missing


def test_missing_or_empty_store_is_a_user_error(tmp_path):
    with pytest.raises(SpecmoeError, match="results store not found"):
        write_report(tmp_path / "absent.sqlite", tmp_path / "out")
    Store(tmp_path / "empty.sqlite").close()
    with pytest.raises(SpecmoeError, match="holds no runs"):
        write_report(tmp_path / "empty.sqlite", tmp_path / "out")


def test_best_slice_keeps_the_widest_setting_and_names_it():
    class Item:
        def __init__(self, **config):
            self.config = config

    items = [Item(target="a", gamma=g, batch_size=1) for g in (2, 4, 8)]
    items += [Item(target="a", gamma=g, batch_size=4) for g in (2, 4)] + [
        Item(target="b", gamma=4, batch_size=4)
    ]
    chosen = best_slice(items, x="gamma", series=("target",), min_x=2)
    assert [i.config["gamma"] for i in chosen.items] == [2, 4, 8]
    assert chosen.fixed["batch_size"] == 1
    assert (
        best_slice([Item(target="b", gamma=4, batch_size=4)], x="gamma", series=("target",), min_x=2) is None
    )


def test_mean_interval():
    assert mean_interval([5.0]).low == mean_interval([5.0]).high == 5.0
    interval = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert interval.low < interval.value == 2.5 < interval.high


def test_profile_adds_the_activated_experts_view(tmp_path):
    db = tmp_path / "r.db"
    build_store(db, study_specs())
    experts = [
        {"batch": 1, "tokens": t, "n_tokens": t, "distinct_mean": d, "expected": d}
        for t, d in ((1, 4.0), (4, 14.6))
    ]
    profile = tmp_path / "moe.profile.json"
    profile.write_text(
        json.dumps(
            {
                "kind": "specmoe-profile",
                "model": {"name": "moe", "num_experts": 64, "top_k": 4},
                "experts": experts,
                "points": [],
            }
        )
    )
    html = write_report(db, tmp_path / "out", [profile]).read_text(encoding="utf-8")
    assert (tmp_path / "out" / "figures" / "experts_vs_tokens.png").stat().st_size > 0
    assert '"figures/experts_vs_tokens.png"' in html
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SpecmoeError, match="not a `specmoe profile` output"):
        write_report(db, tmp_path / "out2", [bad])


def test_fits_add_model_curves_to_speedup_vs_batch(tmp_path):
    db = tmp_path / "r.db"
    build_store(db, study_specs())
    fits = Path(__file__).parents[1] / "docs" / "results" / "cpu" / "perf_fits"
    dtype = spec("moe").dtype
    targets = [fits / f"moe-{dtype}.json", fits / f"draft-xs-{dtype}.json"]
    html = write_report(db, tmp_path / "out", fits=targets).read_text(encoding="utf-8")
    assert "the fitted performance model" in html
    plain = write_report(db, tmp_path / "plain").read_text(encoding="utf-8")
    assert "the fitted performance model" not in plain
