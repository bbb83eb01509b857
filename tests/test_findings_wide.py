"""The moesd-wide findings pass: its zoo, rules, verdicts, predictions, command and document."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from specmoe.errors import SpecmoeError
from specmoe.findings.cells import Cell
from specmoe.findings.claims import FAILS, HOLDS, UNSURE
from specmoe.findings.regime import Regime
from specmoe.findings.wide import (
    DENSE,
    GAMMA,
    MOES,
    ORACLE,
    PayingRange,
    Step1,
    claim_e_wide,
    claim_f_wide,
    compare_ranges,
    marginal_bandwidth,
    paying_range,
    read_share,
    rise_and_fall,
)
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import MOE, WIDE, get_preset

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "docs" / "results" / "cpu" / "findings"


def test_wide_sparsity_holds_one_active_size_at_two_sparsities_and_both_dense_sizes():
    preset = get_preset("wide-sparsity")
    counts = {shape.name: count_params(shape, preset.vocab_size) for shape in preset.models}
    sparse, dense = preset.model("moe-e16"), preset.model(MOE)
    assert dense == WIDE.model(MOE)  # the demo's MoE, unchanged
    assert (sparse.top_k, sparse.moe_intermediate_size) == (dense.top_k, dense.moe_intermediate_size)
    assert sparse.top_k / sparse.num_experts == 4 * dense.top_k / dense.num_experts
    for name in ("moe-e16", MOE):  # the same active size, up to the router's E x H per layer
        router = preset.model(name).num_experts * preset.model(name).hidden_size * 2
        assert counts[name].active - router == counts["dense"].active
    assert counts["dense-total"].total == counts[MOE].total - 64 * 1024 * 2  # less the routers
    assert preset.model("draft") == WIDE.model("draft")


# --- rules on made-up cells ---------------------------------------------------------------------

BOUND = Regime(True, "bound by reading weights")
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def cell(speedup: float, batch: int, target: str = MOES[1], width: float = 0.02, **fields) -> Cell:
    base = dict(
        group="sweep",
        target=target,
        draft=ORACLE,
        gamma=GAMMA,
        prompt="code",
        batch=batch,
        top_k=None,
        preset="wide-sparsity",
        acceptance=0.6,
        efficiency=0.5,
        repeats=5,
        level=0.95,
    )
    base.update(fields)
    return Cell(speedup=speedup, low=speedup - width, high=speedup + width, **base)


def series(values, target: str = MOES[1], **fields) -> list[Cell]:
    return [cell(v, b, target, **fields) for v, b in zip(values, BATCHES, strict=False)]


def test_an_inverted_u_is_a_rise_and_a_fall_beyond_the_intervals_around_an_inside_peak():
    assert rise_and_fall(series([1.0, 1.1, 1.3, 1.5, 1.4, 1.2, 1.0])) == HOLDS
    # a fall with no rise beyond the intervals: the left side is within noise of the peak
    assert rise_and_fall(series([1.49, 1.48, 1.5, 1.47, 1.3])) == UNSURE
    assert rise_and_fall(series([1.0, 1.1, 1.2, 1.3, 1.4])) == UNSURE  # peak at the end: fall unseen
    assert rise_and_fall(series([1.6, 1.4, 1.2, 1.0])) == FAILS  # it only falls
    assert rise_and_fall(series([1.2, 1.21, 1.2])) == UNSURE  # flat within the intervals
    assert rise_and_fall(series([1.0, 1.5])) == UNSURE  # two points are no U
    wide = [replace(c, low=c.speedup - 1, high=c.speedup + 1) for c in series([1.0, 1.5, 1.0])]
    assert rise_and_fall(wide) == UNSURE
    few = [replace(c, level=None) for c in series([1.0, 1.5, 1.0])]
    assert rise_and_fall(few) == UNSURE  # ranges from fewer than five units decide nothing


def test_e_needs_the_u_and_the_gain_and_the_regime():
    u = [1.0, 1.1, 1.3, 1.5, 1.4, 1.2, 1.0]
    moes = [c for m in MOES for c in series(u, m)]
    behind = series([2.0, 1.8, 1.2, 1.0, 0.9, 0.8, 0.7], DENSE)
    ahead = series([2.0, 1.8, 1.6, 1.6, 1.6, 1.6, 1.6], DENSE)
    held = claim_e_wide([*moes, *behind], BOUND)
    assert held.verdict == HOLDS and held.values["wins"] == "8" and held.values["pairs"] == "10"
    assert claim_e_wide([*moes, *ahead], BOUND).verdict == FAILS  # the dense model gains more
    assert claim_e_wide([*moes, *behind], Regime(False, "overhead-bound")).verdict == UNSURE
    falling = [c for m in MOES for c in series([1.6, 1.4, 1.2, 1.1, 1.0, 0.9, 0.8], m)]
    assert claim_e_wide([*falling, *behind], BOUND).values["shape"] == FAILS


def test_f_compares_the_sparser_range_with_the_denser_only_where_the_window_closes_it():
    dense_closed = PayingRange((1, 2, 4), True)
    assert compare_ranges(PayingRange((4, 8, 16, 32, 64), False), dense_closed) == "wider"
    assert compare_ranges(PayingRange((4, 8), True), dense_closed) == "narrower"
    assert compare_ranges(PayingRange((8, 16, 32), True), dense_closed) == "same"
    assert compare_ranges(PayingRange((8, 16), False), dense_closed) == "undecided"  # may run on
    assert compare_ranges(PayingRange((8, 16, 32, 64), False), PayingRange((1, 2, 4), False)) == "undecided"
    # by the upper end instead, the same ranges read wider
    assert compare_ranges(PayingRange((8, 16, 32), True), dense_closed, "upper end") == "wider"
    assert paying_range(series([1.2, 1.3, 1.2, 1.0, 0.9])).closed
    assert not paying_range(series([1.2, 1.3, 1.4])).closed  # still rising at the window's end
    assert not paying_range(series([1.2, 1.5, 1.2])).closed  # still paying at the last batch
    sparse = series([0.9, 1.0, 1.2, 1.4, 1.6, 1.7, 1.5], MOES[-1])
    denser = series([1.3, 1.5, 1.4, 1.2, 1.0, 0.9, 0.8], MOES[0])
    assert claim_f_wide([*sparse, *denser], BOUND).verdict == HOLDS
    assert claim_f_wide([*sparse, *denser], Regime(False, "x")).verdict == UNSURE


def test_the_regime_gate_reads_the_dense_models_steps_as_a_read_bandwidth():
    small, large = Step1(DENSE, 0.010, 88e6, 10), Step1("dense-total", 0.060, 843e6, 10)
    bandwidth = marginal_bandwidth({DENSE: small, "dense-total": large})
    assert bandwidth == pytest.approx(755e6 / 0.050)
    assert read_share(small, bandwidth) == pytest.approx(88e6 / bandwidth / 0.010)
    assert marginal_bandwidth({DENSE: small}) is None
    assert marginal_bandwidth({DENSE: large, "dense-total": small}) is None


# --- predictions, records and the command -------------------------------------------------------


def test_the_shipped_prediction_prices_every_sd_cell_of_the_pass_before_it_runs():
    from specmoe.findings.plan import pass_step
    from specmoe.findings.wide_predictions import read_predictions
    from specmoe.suite.expand import expand
    from specmoe.suite.load import builtin_suite_path, load_suite

    record = read_predictions(SHIPPED, "moesd-wide")
    assert record is not None and record["hardware"]["device"] == "cpu"
    step = pass_step("moesd-wide")
    suite = load_suite(builtin_suite_path(step.suite), step.overrides)
    cells = {(s.target, str(s.draft), s.gamma, s.batch_size) for s in expand(suite) if s.arm == "sd"}
    priced = {(c["target"], c["draft"], c["gamma"], c["batch"]) for c in record["cells"]}
    assert priced == cells
    if (SHIPPED / "moesd-wide.csv").is_file():  # made before the runs it predicts
        from specmoe.findings.results import read_export

        first = min(r.measure["started_at"] for r in read_export(SHIPPED / "moesd-wide.csv"))
        assert record["made_at"] < first


def test_a_prediction_after_the_runs_and_runs_without_a_prediction_are_refused(tmp_path, monkeypatch):
    from specmoe.findings.run import predict_pass, run_pass

    with pytest.raises(SpecmoeError, match="--predict"):
        run_pass("moesd-wide", tmp_path, tmp_path / "doc.md")
    (tmp_path / "moesd-wide.csv").write_text("")
    with pytest.raises(SpecmoeError, match="would not precede them"):
        predict_pass("moesd-wide", tmp_path, SHIPPED / "hw.json")
    with pytest.raises(SpecmoeError, match="smoke run goes to another --out"):
        run_pass("moesd-wide", SHIPPED, tmp_path / "doc.md", smoke=True)


def test_a_pass_records_its_rules_and_refuses_to_mix_them(tmp_path):
    from specmoe.findings.rules import check_rules, record_path, record_rules, rules_hash

    assert "moesd-wide: no record" in check_rules(tmp_path, False, ("moesd-wide",))
    record_rules(tmp_path, "moesd-wide")
    assert f"moesd-wide: `{rules_hash()}`, these rules (recorded when it was measured)" in check_rules(
        tmp_path, False, ("moesd-wide",)
    )
    path = record_path(tmp_path, "moesd-wide")
    path.write_text(json.dumps({**json.loads(path.read_text()), "hash": "000000000000"}))
    with pytest.raises(SpecmoeError, match="--rules-changed"):
        check_rules(tmp_path, False, ("moesd-wide",))
    assert "**Judged under changed rules**" in check_rules(tmp_path, True, ("moesd-wide",))
    with pytest.raises(SpecmoeError, match="measure it anew"):
        record_rules(tmp_path, "moesd-wide")


def test_every_shipped_pass_says_which_rules_it_was_measured_under():
    from specmoe.findings.document import measured_steps
    from specmoe.findings.rules import read_record

    for step in measured_steps(SHIPPED):
        record = read_record(SHIPPED, step)
        assert record is not None, step
        assert record["how"] == "recorded when it was measured" or record["basis"], step


def test_the_cli_takes_predict_smoke_and_hw_only_with_a_pass(capsys):
    from specmoe.cli import main

    for args in (["--predict"], ["--smoke"], ["--pass", "moesd-wide", "--hw", "x.json"]):
        assert main(["findings", *args]) != 0
    assert "--pass" in capsys.readouterr().err
