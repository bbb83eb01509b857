"""Findings: the claim rules on made-up cells, the export reader, and the shipped document against the
shipped results (every value in docs/findings.md recomputed from the exported files)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from suite_files import TINY_ZOO, write_suite, zoo_models

from specmoe.errors import SpecmoeError
from specmoe.findings.batch_claims import claim_e, claim_f, inverted_u, u_shape
from specmoe.findings.cells import Cell
from specmoe.findings.claims import FAILS, HOLDS, UNSURE, claim_a, claim_b, claim_c, claim_d
from specmoe.findings.document import render, template, values
from specmoe.findings.regime import Regime
from specmoe.findings.results import parse_cell, read_export
from specmoe.results.store import Store, export

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "docs" / "results" / "cpu" / "findings"
DOC = ROOT / "docs" / "findings.md"


def cell(speedup: float, width: float = 0.02, **fields) -> Cell:
    base = dict(
        group="B",
        target="moe",
        draft="draft-xs",
        gamma=4,
        prompt="code",
        batch=1,
        top_k=None,
        preset="bench",
        acceptance=0.0,
        efficiency=0.5,
        repeats=10,
        level=0.95,
    )
    base.update(fields)
    return Cell(speedup=speedup, low=speedup - width, high=speedup + width, **base)


BOUND = Regime(True, "bandwidth-bound")
NOT_BOUND = Regime(False, "the step is 5.0× its bandwidth floor")


def no_predictions(target, batch, gamma, top_k):
    return None


TINY_SUITE = {
    "zoo": TINY_ZOO,
    "defaults": {"prompts": 1, "repeats": 2, "warmup": 0, "max_new_tokens": 6},
    "models": zoo_models("moe", "draft-xs"),
    "groups": [{"name": "g", "target": ["moe"], "draft": ["draft-xs", "ngram"], "gamma": [2]}],
}


@pytest.fixture(scope="module")
def tiny_run_db(tiny_zoo, tmp_path_factory) -> Path:
    from specmoe.bench.suite_run import run_suite
    from specmoe.suite.load import load_suite

    folder = tmp_path_factory.mktemp("findings")
    run_suite(load_suite(write_suite(folder, **TINY_SUITE)), folder / "t.db", tiny_zoo, progress=False)
    return folder / "t.db"


def test_claim_a_holds_only_when_low_acceptance_speedups_reach_the_studys_range():
    slow = [cell(0.3, gamma=g, prompt=p) for g in (4, 8) for p in ("code", "factual")]
    assert claim_a(slow).verdict == FAILS
    fast = [replace(c, speedup=1.2, low=1.15, high=1.25) for c in slow]
    assert claim_a(fast).verdict == HOLDS
    # High-acceptance cells are outside the claim: nothing left to judge.
    assert claim_a([replace(c, acceptance=0.5) for c in fast]).verdict == UNSURE
    assert claim_a(slow).values["n_slower"] == "4"


def test_claim_b_asks_which_target_amortises_a_verify_where_a_dense_model_does():
    sizes = {"moe": (100, 10), "dense-l": (30, 30), "dense-s": (13, 13)}
    moe = [cell(0.5, target="moe", gamma=g, efficiency=0.4) for g in (4, 8, 16)]
    dense = [cell(0.8, target="dense-l", group="D", gamma=g, efficiency=0.9) for g in (4, 8, 16)]
    # rules v2: the MoE, with more total params, amortises worse
    found = claim_b(moe + dense, sizes, BOUND, NOT_BOUND)
    assert found.verdict == FAILS and found.values["eff_dense_wins"] == "3"
    assert "γ=4" in found.values["decided_by"]
    better = [replace(c, efficiency=1.2) for c in moe]
    assert claim_b(better + dense, sizes, BOUND, NOT_BOUND).verdict == HOLDS
    tie = [replace(c, efficiency=0.85) for c in moe]
    assert claim_b(tie + dense, sizes, BOUND, NOT_BOUND).verdict == UNSURE  # within the margin
    assert claim_b(moe, sizes, BOUND, NOT_BOUND).verdict == UNSURE  # no pairs
    # where even a dense model's verify does not amortise, nothing can be told
    assert claim_b(moe + dense, sizes, NOT_BOUND, BOUND).verdict == UNSURE


def test_claim_b_under_rules_v1_compared_speedups_behind_the_moes_own_gates():
    sizes = {"moe": (100, 10), "dense-l": (30, 30), "dense-s": (13, 13)}
    moe = [cell(0.5, target="moe", gamma=g) for g in (4, 8, 16)]
    dense = [cell(0.8, target="dense-l", group="D", gamma=g) for g in (4, 8, 16)]
    v1 = "speedup pairs"
    assert claim_b(moe + dense, sizes, BOUND, BOUND, v1).verdict == FAILS
    faster = [replace(c, speedup=1.0, low=0.98, high=1.02) for c in moe]
    assert claim_b(faster + dense, sizes, BOUND, BOUND, v1).verdict == HOLDS
    assert claim_b(faster + dense, sizes, BOUND, NOT_BOUND, v1).verdict == UNSURE
    assert claim_b(faster + dense, sizes, BOUND, NOT_BOUND).values["verdict_speedup"] == UNSURE
    assert claim_b(faster + dense, sizes, BOUND, NOT_BOUND).values["regime"] == NOT_BOUND.why


def test_claim_c_needs_low_acceptance_pairs_and_counts_the_trained_family_apart():
    xs = [cell(0.5, draft="draft-xs", gamma=g) for g in (4, 8)]
    s = [cell(0.3, draft="draft-s", gamma=g) for g in (4, 8)]
    family = [cell(1.1, draft="draft-xs", acceptance=0.5), cell(1.4, draft="draft-s", acceptance=0.7)]
    found = claim_c(xs + s, family)
    assert found.verdict == HOLDS
    assert (found.values["family_xs_wins"], found.values["family_s_wins"]) == ("0", "1")
    assert claim_c([replace(c, acceptance=0.3) for c in xs + s], family).verdict == UNSURE


def test_claim_d_fails_on_one_significant_drop_and_holds_only_when_every_series_rises():
    rising = [cell(0.2 * g, gamma=g) for g in (4, 8, 16)]
    assert claim_d(rising, [], BOUND).verdict == HOLDS
    falling = [cell(1.0 / g, gamma=g, prompt="factual") for g in (4, 8, 16)]
    assert claim_d(rising + falling, [], BOUND).verdict == FAILS
    flat = [cell(1.0, width=0.5, gamma=g, prompt="chinese") for g in (4, 8, 16)]
    assert claim_d(rising + flat, [], BOUND).verdict == UNSURE
    assert claim_d(rising + falling, [], NOT_BOUND).verdict == UNSURE


def test_claim_d_is_refuted_by_arithmetic_whatever_the_regime():
    # γ = 8's rounds cost 1.6x γ = 4's; at 1% acceptance they emit at most 1.08 tokens: no gain possible
    slow = [
        cell(0.5, gamma=4, round_s=1.0, acceptance=0.01),
        cell(0.45, gamma=8, round_s=1.6, acceptance=0.01),
    ]
    assert claim_d(slow, [], NOT_BOUND).verdict == FAILS
    assert claim_d(slow, [], NOT_BOUND).values["refuted"] == "1"
    # at 50% acceptance a γ = 8 round may emit up to 5 tokens: arithmetic leaves it open
    open_ = [replace(c, acceptance=0.5) for c in slow]
    assert claim_d(open_, [], NOT_BOUND).verdict == UNSURE


def test_cells_without_a_confidence_interval_or_with_unstable_repeats_decide_nothing():
    fast, slow = cell(2.0), cell(1.0)
    assert fast.beats(slow)
    assert not replace(fast, level=None, repeats=2).beats(slow)  # a range from 2 units
    assert not fast.beats(replace(slow, level=None, repeats=4))
    assert not replace(fast, unstable=True).beats(slow)
    two_repeats = [replace(c, level=None, repeats=2) for c in (cell(0.5, gamma=4), cell(0.3, gamma=8))]
    assert claim_d(two_repeats, [], BOUND).verdict == UNSURE
    assert "range" in two_repeats[0].interval() and "95" not in two_repeats[0].interval()


def test_inverted_u_needs_an_inside_peak_above_both_ends():
    def series(values):
        return [
            cell(v, batch=b, group="batch", draft="oracle:0.9")
            for v, b in zip(values, (1, 4, 16, 64), strict=True)
        ]

    assert inverted_u(series([0.8, 1.2, 1.5, 0.9]))
    assert not inverted_u(series([1.5, 1.2, 1.0, 0.8]))  # falling: peak at the first batch
    assert not inverted_u(series([0.8, 0.81, 0.82, 0.80]))  # inside peak, within the intervals
    assert not inverted_u(series([0.8, 1.49, 1.5, 0.9]))  # the peak does not clear its neighbour
    assert u_shape(series([0.8, 1.49, 1.5, 0.9])) == UNSURE  # ... which says nothing either way
    assert u_shape(series([1.5, 1.2, 1.0, 0.8])) == FAILS  # monotone beyond the intervals


def test_claim_e_and_f_on_a_made_up_sweep():
    batches = (1, 4, 16, 64)
    moe = [
        cell(v, batch=b, group="batch", draft="oracle:0.9", top_k=4)
        for v, b in zip((0.8, 1.3, 1.6, 0.9), batches, strict=True)
    ]
    dense = [
        cell(v, batch=b, group="batch", draft="oracle:0.9", target="dense-s")
        for v, b in zip((1.2, 1.0, 0.9, 0.7), batches, strict=True)
    ]
    found = claim_e(moe + dense, no_predictions)
    assert (found.values["shape"], found.values["gain"], found.verdict) == (HOLDS, HOLDS, HOLDS)
    sparse = [
        cell(v, batch=b, group="sparsity", draft="oracle:0.9", top_k=1)
        for v, b in zip((1.2, 1.5, 1.8, 1.1), batches, strict=True)
    ]
    assert claim_f(moe + sparse, no_predictions).verdict == HOLDS  # pays at 4 batch sizes vs 2
    assert claim_f(moe, no_predictions).verdict == UNSURE  # one sparsity level: nothing to compare
    # A series still rising at the window's largest batch may pay beyond it: the window cannot tell.
    rising = [replace(c, speedup=c.speedup + 0.1 * i) for i, c in enumerate(sparse)]
    rising[-1] = replace(rising[-1], speedup=2.5, low=2.48, high=2.52)
    found = claim_f(moe + rising, no_predictions)
    assert (found.verdict, found.values["regime_ok"]) == (UNSURE, "no")


def test_export_reads_back_as_the_stored_rows(tmp_path, tiny_run_db):
    out = tmp_path / "runs.csv"
    export(tiny_run_db, out, "csv")
    with Store(tiny_run_db) as store:
        stored = store.rows()
    for got, want in zip(read_export(out), stored, strict=True):
        assert (got.config, got.env, got.counts, got.times) == (
            want.config,
            want.env,
            want.counts,
            want.times,
        )
        assert (got.tokens_per_s, got.acceptance_rate, got.arm) == (
            want.tokens_per_s,
            want.acceptance_rate,
            want.arm,
        )
        assert (got.noisy, got.measure) == (want.noisy, want.measure)


def test_keys_that_look_like_numbers_read_back_as_text():
    # A hex key of digits and one "e" parses as a float (here infinity); one of digits as an int.
    assert parse_cell("1234e56789012345", "config_key") == "1234e56789012345"
    assert parse_cell("1234567890123456", "cell_key") == "1234567890123456"
    assert parse_cell("0b2c8b33", "git_sha") == "0b2c8b33"
    assert parse_cell("", "config_key") is None
    assert parse_cell("1e3", "gamma") == 1000.0 and parse_cell("4", "gamma") == 4


def test_every_shipped_export_reads_back():
    for path in sorted(Path(__file__).parents[1].glob("docs/results/**/*.csv")):
        if "run_id,config_key" in path.read_text(encoding="utf-8").partition("\n")[0]:
            rows = read_export(path)
            assert all(isinstance(r.config["config_key"], str) for r in rows), path


def test_render_refuses_a_value_nobody_computed():
    with pytest.raises(SpecmoeError, match=r"nobody computed: a\.missing"):
        render("x {{a.missing}}", {})


def test_the_template_writes_no_measured_number_by_hand():
    # Numbers with a unit in the template are the studies' own claims, not measurements.
    allowed = {"1.18–1.30", "4", "95"}  # and the confidence level of every interval
    text = re.sub(r"\{\{[a-z0-9_.]+\}\}", "", template())
    found = set(re.findall(r"(\d+(?:\.\d+)?(?:–\d+(?:\.\d+)?)?)\s?[×%]", text))
    assert found <= allowed, found - allowed


def test_shipped_document_matches_the_shipped_results():
    assert (SHIPPED / "study.csv").is_file(), "run `specmoe findings` to produce the shipped results"
    found = values(SHIPPED)
    assert DOC.read_text(encoding="utf-8") == render(template(), found)
    shipped = (SHIPPED / "findings.json").read_text(encoding="utf-8")
    assert shipped == json.dumps(found, indent=1, ensure_ascii=False) + "\n"


def test_render_only_leaves_every_shipped_file_byte_identical(tmp_path):
    """`specmoe findings --render-only` on a copy of the results: a fixed point of every file it
    reads or writes (the document, findings.json, and everything else in the folder)."""
    import shutil

    from specmoe.findings.document import write_document

    for folder in ("findings", "real", "predictions"):
        shutil.copytree(SHIPPED.parent / folder, tmp_path / folder)
    out, doc = tmp_path / "findings", tmp_path / "findings.md"
    write_document(out, doc)
    assert doc.read_bytes() == DOC.read_bytes()
    for path in sorted(p for p in SHIPPED.rglob("*") if p.is_file()):
        assert (out / path.relative_to(SHIPPED)).read_bytes() == path.read_bytes(), path
    assert {p.relative_to(out) for p in out.rglob("*")} == {
        p.relative_to(SHIPPED) for p in SHIPPED.rglob("*")
    }


def test_the_document_discloses_every_pass_and_renders_no_missing_value_as_a_sentence():
    text = DOC.read_text(encoding="utf-8")
    assert "–." not in text and "– ." not in text
    assert "its runs predate the rules file" not in text
    chunks = re.split(r"\n\n|\n- |; Q4_K_M — ", text)  # paragraphs, list items, the two llama.cpp passes
    passes = [c for c in chunks if re.search(r"\b\d+ runs\b", c) and "audit" in c]
    assert len(passes) >= 6  # study, moesd, family, the llama.cpp passes, study-hybrid
    for chunk in passes:  # each says how many runs the noise guard left out
        assert "flagged noisy" in chunk, chunk


def test_duel_needs_half_the_pairs_and_more_wins_than_losses():
    from specmoe.findings.claims import duel

    assert duel(3, 1, 6) == HOLDS
    assert duel(1, 3, 6) == FAILS
    assert duel(2, 1, 6) == UNSURE  # under half the pairs decided its way
    assert duel(3, 3, 6) == UNSURE
    assert duel(0, 0, 0) == UNSURE


def test_the_bandwidth_regime_compares_the_one_token_step_with_its_floor(tmp_path):
    from specmoe.findings.regime import bandwidth_regime, step_over_floor

    model = {"dtype": "float32", "is_moe": True, "num_experts": 64, "top_k": 4}
    model |= {"bytes_dense": 100e6, "bytes_experts": 3.2e9}  # a token reads 100 MB + 4/64 of 3.2 GB
    hw = {"bandwidth_bytes_per_s": 30e9}  # floor: 300 MB / 30 GB/s = 10 ms
    profile = {"model": model, "points": [{"batch": 1, "tokens": 1, "median_s": 0.030}]}
    assert step_over_floor(profile, hw) == pytest.approx(3.0)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "moe-float32.json").write_text(json.dumps(profile))
    (tmp_path / "hw.json").write_text(json.dumps(hw))
    regime = bandwidth_regime(tmp_path)
    assert not regime.ok and "3.0× its bandwidth floor" in regime.why
    profile["points"][0]["median_s"] = 0.015
    (tmp_path / "profiles" / "moe-float32.json").write_text(json.dumps(profile))
    regime = bandwidth_regime(tmp_path)  # bandwidth-bound, but no verify point to show amortisation
    assert not regime.ok and "no 5-token verify" in regime.why
    profile["points"].append({"batch": 1, "tokens": 5, "median_s": 0.060})  # 4 steps for 5 tokens
    (tmp_path / "profiles" / "moe-float32.json").write_text(json.dumps(profile))
    regime = bandwidth_regime(tmp_path)
    assert not regime.ok and "4.0× a step" in regime.why
    profile["points"][-1]["median_s"] = 0.024  # a 5-token verify at 1.6 steps: amortised
    (tmp_path / "profiles" / "moe-float32.json").write_text(json.dumps(profile))
    assert bandwidth_regime(tmp_path).ok
    assert not bandwidth_regime(tmp_path / "nothing").ok


def test_b_s_gate_asks_a_dense_model_not_under_test_whether_the_engine_amortises(tmp_path):
    from specmoe.findings.regime import dense_amortisation

    model = {"dtype": "float32", "is_moe": False}
    points = [{"batch": 1, "tokens": 1, "median_s": 0.010}, {"batch": 1, "tokens": 5, "median_s": 0.011}]
    (tmp_path / "profiles").mkdir()
    path = tmp_path / "profiles" / "dense-s-float32.json"
    path.write_text(json.dumps({"model": model, "points": points}))
    found = dense_amortisation(tmp_path)
    assert found.ok and "1.10× a step" in found.why
    points[1]["median_s"] = 0.045  # a step per verified token: no target can show amortisation
    path.write_text(json.dumps({"model": model, "points": points}))
    assert not dense_amortisation(tmp_path).ok
    assert not dense_amortisation(tmp_path, model="dense-l").ok  # no profile: nothing to tell


def test_export_writes_home_paths_from_tilde(tmp_path, monkeypatch):
    from specmoe.results.export import flatten

    monkeypatch.setenv("HOME", str(tmp_path))
    flat = flatten("config", {"target_model": {"path": f"{tmp_path}/zoo/moe"}, "other": "/opt/x", "n": 3})
    assert flat == {"config.target_model.path": "~/zoo/moe", "config.other": "/opt/x", "config.n": 3}


def test_sensitivity_rescales_intervals_and_names_what_moves():
    from specmoe.findings.sensitivity import at_level, counted

    c = cell(1.0, width=0.1)  # 95%, 10 units
    wider, narrower = at_level(c, 0.99), at_level(c, 0.90)
    assert wider.low < c.low < narrower.low and wider.high > c.high > narrower.high
    assert (wider.low + wider.high) / 2 == pytest.approx(1.0) and wider.level == 0.99
    few = replace(c, level=None, repeats=3)
    assert at_level(few, 0.99) == few  # a range from few units stays a range
    assert counted(replace(c, unstable=True)).judged


def test_rules_are_data_with_a_hash_and_a_changed_file_is_refused(tmp_path):
    import json as _json

    from specmoe.errors import SpecmoeError
    from specmoe.findings.rules import RULES, check_rules, record_path, record_rules, rules_hash

    assert RULES["claims"]["low_acceptance"] == 0.04 and len(rules_hash()) == 12
    assert "study: no record" in check_rules(tmp_path, allow_change=False, steps=("study",))
    record_rules(tmp_path, "study")
    assert "these rules (recorded when it was measured)" in check_rules(tmp_path, False, ("study",))
    record = record_path(tmp_path, "study")
    record.write_text(_json.dumps({**_json.loads(record.read_text()), "hash": "000000000000"}))
    with pytest.raises(SpecmoeError, match="--rules-changed"):
        check_rules(tmp_path, allow_change=False, steps=("study",))
    assert "**Judged under changed rules**" in check_rules(tmp_path, allow_change=True, steps=("study",))


def test_a_verdict_lists_the_cells_it_rested_on_and_those_that_decided_nothing():
    from specmoe.findings.cells import decided_by

    judged = [cell(0.5, gamma=g, prompt="factual") for g in (4, 8)]
    few = replace(cell(0.5, gamma=16, prompt="factual"), level=None, repeats=3)
    shaky = replace(cell(0.5, gamma=16, prompt="code"), unstable=True)
    text = decided_by(judged, [few, shaky])
    # only what varies among the cells names them: γ and the prompt kind here
    assert text.startswith("2 judged cells: γ=4 factual, γ=8 factual")
    assert "decided nothing (2): γ=16 factual (3 units), γ=16 code (unstable repeats)" in text


def test_b_factors_each_speedup_into_its_costs_in_the_targets_own_steps():
    from specmoe.findings.claims import _cost_table

    # a round of 100 ms (40 drafting) over a 25 ms step: γc 1.6, v 2.4, ceiling 0.25, free drafting 1/2.4
    moe = replace(cell(0.25, target="moe"), step_s=0.025, round_s=0.100, draft_round_s=0.040)
    row = next(line for line in _cost_table([moe]).splitlines() if line.startswith("| moe"))
    assert row == "| moe | 4 | 0.25× | 1.60 | 2.40 | 0.25× | 1.00 | 0.42× |"


def test_findings_paths_come_from_the_checkout_around_the_current_folder(tmp_path, monkeypatch):
    from specmoe.findings.checkout import findings_paths, is_shipped_findings

    monkeypatch.chdir(ROOT / "docs")  # any folder of the checkout finds its document
    out, doc = findings_paths(None, None)
    assert out.resolve() == SHIPPED and doc.resolve() == DOC and is_shipped_findings(out)
    assert not is_shipped_findings(tmp_path)
    monkeypatch.chdir(tmp_path)  # outside a checkout: one line, unless both paths are given
    with pytest.raises(SpecmoeError, match=r"no specmoe checkout at or above .*pass --out and --doc"):
        findings_paths(tmp_path / "out", None)
    assert findings_paths(tmp_path / "out", tmp_path / "doc.md") == (tmp_path / "out", tmp_path / "doc.md")
