"""The study-hybrid-mtp findings pass: its rules, step, predictions and document section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmoe.metrics import RunCounts, RunTimes
from specmoe.results.store import RunRow, Store, export

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "docs" / "results" / "cpu" / "findings"


def test_the_rules_load_and_name_the_pass_arms():
    from specmoe.findings.mtp import DRAFTS, MTP, PARITY
    from specmoe.findings.rules import RULES

    assert RULES["mtp"]["prefer"] == "ratio interval" and RULES["mtp"]["gate"] == "an arm excludes 1"
    assert (MTP, DRAFTS, PARITY) == ("mtp", ("draft-xs", "draft-s"), 1.0)


def test_the_verdict_needs_the_gate_and_an_interval_clear_of_parity():
    from specmoe.findings.mtp import PREFER_DRAFT, PREFER_MTP, UNSURE, prefer
    from specmoe.stats import Estimate

    assert prefer(Estimate(1.2, 1.1, 1.3, 10, 0.95), True)[0] == PREFER_MTP
    assert prefer(Estimate(0.8, 0.7, 0.9, 10, 0.95), True)[0] == PREFER_DRAFT
    assert prefer(Estimate(1.0, 0.9, 1.1, 10, 0.95), True)[0] == UNSURE
    assert prefer(Estimate(1.2, 1.1, 1.3, 3, None), True)[0] == UNSURE  # a range decides nothing
    assert "regime gate" in prefer(Estimate(1.2, 1.1, 1.3, 10, 0.95), False)[1]


def test_a_rules_file_that_only_adds_sections_judges_earlier_passes_as_before(tmp_path):
    from specmoe.findings.rules import RULES, check_rules, record_path, record_rules

    record_rules(tmp_path, "moesd-wide")
    path = record_path(tmp_path, "moesd-wide")
    old = {k: v for k, v in RULES.items() if k != "mtp"}
    path.write_text(json.dumps({**json.loads(path.read_text()), "hash": "000000000000", "rules": old}))
    assert "the file has changed since in [mtp]" in check_rules(tmp_path, False, ("moesd-wide",))
    changed = {**RULES, "wide": {**RULES["wide"], "gamma": 2}}
    path.write_text(json.dumps({**json.loads(path.read_text()), "rules": changed}))
    with pytest.raises(Exception, match="--rules-changed"):
        check_rules(tmp_path, False, ("moesd-wide",))


def arm(spec) -> str:
    return spec.draft_model.zoo if spec.draft_model is not None else str(spec.draft)


def test_the_step_is_a_pass_with_a_smoke_version_of_the_same_suite():
    from specmoe.findings.plan import pass_step, plan
    from specmoe.suite.expand import expand
    from specmoe.suite.load import builtin_suite_path, load_suite

    full, smoke = pass_step("study-hybrid-mtp"), pass_step("study-hybrid-mtp", smoke=True)
    assert full.suite == smoke.suite == "study-hybrid-mtp" and full.threads == 1
    assert "study-hybrid-mtp" in {s.name for s in plan("cpu")}
    specs = expand(load_suite(builtin_suite_path(full.suite), full.overrides))
    sd = {(s.target_model.backend, arm(s), s.gamma, s.batch_size) for s in specs if s.arm == "sd"}
    arms = ("mtp", "draft-xs", "draft-s")
    assert sd == {
        (k, d, g, b) for k in ("hf", "llamacpp") for d in arms for g in (1, 2, 3, 4) for b in (1, 4)
    }
    assert len(specs) == 390


def test_the_shipped_prediction_prices_every_sd_cell_of_the_pass():
    from specmoe.findings.plan import pass_step
    from specmoe.findings.wide_predictions import read_predictions
    from specmoe.suite.expand import expand
    from specmoe.suite.load import builtin_suite_path, load_suite

    record = read_predictions(SHIPPED, "study-hybrid-mtp")
    assert record is not None and record["hardware_file"] == "hw.json"
    step = pass_step("study-hybrid-mtp")
    suite = load_suite(builtin_suite_path(step.suite), step.overrides)
    cells = {(s.target, str(s.draft), s.gamma, s.batch_size) for s in expand(suite) if s.arm == "sd"}
    assert {(c["target"], c["draft"], c["gamma"], c["batch"]) for c in record["cells"]} == cells
    assert set(record["verdicts"]) == {"hf B1", "hf B4", "llamacpp B1", "llamacpp B4"}
    assert {c["engine"] for c in record["cells"]} == {"hf-eager-cpu", "llamacpp-cpu"}


def test_the_section_says_not_measured_without_runs(tmp_path):
    from specmoe.findings.mtp_doc import mtp_values

    found = mtp_values(tmp_path, [], [])
    assert found["mtp.runs"] == found["mtp.cost"] == "not measured"
    assert "| transformers float32 | 1, 4 | – | – | – | not measured |" in found["mtp.calls"]
    assert "| llama.cpp | mtp | 4 | not measured | not measured |" in found["mtp.table"]
    assert found["mtp.rollback"] == "not measured"
    assert found["mtp.model_verdicts"] == "none"


# --- a tiny fake pass: 5 units at B = 1, MTP twice as fast as plain, draft-xs 1.5x, draft-s 1.2x ---

SPEED = {"mtp": 2.0, "draft-xs": 1.5, "draft-s": 1.2}


def _row(arm: str, draft: str | None, unit: int) -> RunRow:
    key = f"{arm}-{draft}-1"
    config = {
        "suite": "study-hybrid-mtp", "group": "mtp-B1", "target": "moe", "draft": draft or "",
        "dtype": "float32", "gamma": 1 if draft else None, "batch_size": 1, "moe_top_k": None,
        "prompt_set": "factual", "cell_key": key, "config_key": key, "baseline_cell": "baseline-None-1",
        "target_model": {"backend": "hf", "zoo_preset": "hybrid-trained"},
    }  # fmt: skip
    tokens = 24
    plain = 0.1 * tokens * (1 + 0.03 * unit)
    decode = plain / SPEED[draft] if draft else plain
    rounds = tokens // 2 if draft else tokens
    counts = {"rounds": rounds, "target_forwards": rounds, "drafted": rounds if draft else 0,
              "accepted": rounds if draft else 0, "emitted": tokens, "truncated": 0}  # fmt: skip
    parts = {
        "draft_s": 0.2 * decode,
        "verify_s": 0.6 * decode,
        "overhead_s": 0.1 * decode,
        "state_s": 0.1 * decode,
    }
    if not draft:
        parts = {"draft_s": 0.0, "verify_s": decode, "overhead_s": 0.0}
    return RunRow(
        run_id=f"{key}-{unit}", config_key=key, baseline_key="baseline-None-1", suite="study-hybrid-mtp",
        group="mtp-B1", arm=arm, repeat=unit, config=config, env={"cpu": "test"},
        counts=RunCounts.from_dict(counts),
        times=RunTimes.from_dict({"prefill_s": 0.01, "decode_s": decode, "wall_s": decode + 0.01, **parts}),
        tokens_per_s=tokens / decode, acceptance_rate=None, rounds_trace=[],
        audit_verdict="pass", audit_reason="", created_at="2026-01-01T00:00:00+00:00",
    )  # fmt: skip


def test_the_section_renders_from_a_tiny_export(tmp_path):
    from specmoe.findings.document import _step_cells
    from specmoe.findings.mtp_doc import mtp_values

    rows = [_row("baseline", None, u) for u in range(5)]
    rows += [_row("sd", d, u) for u in range(5) for d in SPEED]
    with Store(tmp_path / "study-hybrid-mtp.db") as store:
        for row in rows:
            store.add(row)
    export(tmp_path / "study-hybrid-mtp.db", tmp_path / "study-hybrid-mtp.csv", "csv")
    found = mtp_values(tmp_path, *_step_cells(tmp_path, "study-hybrid-mtp"))
    line = next(x for x in found["mtp.calls"].splitlines() if x.startswith("| transformers float32 | 1 |"))
    assert "**MTP** (ratio interval above 1)" in line and "draft-xs γ=1" in line
    assert "| 1.33 (95% CI, n=5) |" in line  # 2.0 / 1.5, paired by unit
    assert "| transformers float32 | 4 |" in found["mtp.calls"]
    assert "| llama.cpp | 1, 4 | – | – | – | not measured |" in found["mtp.calls"]
    assert "| transformers float32 | 1 | mtp, γ=1 |" in found["mtp.cost"] and "state" in found["mtp.cost"]
    assert found["mtp.rollback"] == "not measured"  # no llama.cpp runs
    assert "5 runs" not in found["mtp.runs"] and "20 runs" in found["mtp.runs"]
