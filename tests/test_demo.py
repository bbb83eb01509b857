"""`specmoe demo`: its suites hold configurations the performance model expects to pay and to lose
(from configs and this CPU's shipped hardware file, never from timings), the calls are printed
before measuring, the closing paragraph answers the two studies in the run's own numbers, and a
busy machine still gets every row, flagged. Rows are made here (no model runs)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_busy_machine import flagged
from test_summary_table import cell

from specmoe.cli.demo import demo_suites
from specmoe.perf.breakeven import Verdict
from specmoe.perf.hardware import load_hardware
from specmoe.report.demo_story import demo_story, prediction_lines
from specmoe.report.predicted import Prediction, predict_suite, prediction_text
from specmoe.report.story import accounts, sentence, tally
from specmoe.report.story_seeds import batch_claim, closing_lines, model_record
from specmoe.report.summary_table import build, format_text
from specmoe.suite.expand import expand
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import BENCH, MOE, TINY, get_preset

ROOT = Path(__file__).resolve().parent.parent
THIS_CPU = ROOT / "docs" / "results" / "cpu" / "findings" / "hw.json"  # `specmoe hw` on the reference CPU


@pytest.fixture(scope="module")
def hardware():
    return load_hardware(THIS_CPU)


@pytest.fixture(scope="module")
def predictions(hardware) -> dict[str, dict[str, Prediction]]:
    return {
        mode: {
            k: p for s in demo_suites(mode == "quick") for k, p in predict_suite(expand(s), hardware).items()
        }
        for mode in ("main", "quick")
    }


@pytest.mark.parametrize("mode", ["main", "quick"])
def test_the_demo_holds_a_configuration_predicted_to_pay_and_one_predicted_to_lose(predictions, mode):
    found = predictions[mode]
    pays = [p for p in found.values() if p.verdict is Verdict.GO]
    loses = [p for p in found.values() if p.verdict is Verdict.NO_GO]
    assert pays and loses, {str(p.spec.target) + str(p.spec.batch_size): p.verdict for p in found.values()}
    # Where each is expected is MoESD's account: the MoE at medium batch, a dense model at batch 1.
    assert {(p.spec.target, p.spec.batch_size) for p in pays} >= {("wide-moe", 16), ("wide-dense", 1)}
    assert ("wide-moe", 1) in {(p.spec.target, p.spec.batch_size) for p in loses if p.alpha and p.alpha < 0.1}


def test_every_sd_configuration_of_the_demo_has_a_prediction(predictions):
    sd = {s.cell_key for suite in demo_suites(False) for s in expand(suite) if s.arm == "sd"}
    assert set(predictions["main"]) == sd


def test_a_trained_drafts_acceptance_is_never_assumed(predictions):
    trained = [p for p in predictions["main"].values() if p.spec.draft == "draft-xs"]
    assert trained and all(p.speedup is None and p.alpha is None for p in trained)
    # tiny's draft-xs costs about a step of its MoE: even full acceptance loses, so the call is NO-GO
    assert all(p.verdict is Verdict.NO_GO and p.at_full < 1 for p in trained)
    text = prediction_text(trained[0])
    assert text.startswith("its acceptance is not known before it runs; expected to lose at any acceptance (")
    assert "× if every proposal were accepted)" in text


def test_the_calls_are_printed_with_their_inputs(predictions, hardware):
    lines = prediction_lines(predictions["quick"], hardware, 2, other_cpu=1.4)
    assert lines[0].startswith("Before measuring, what the MoESD performance model expects here")
    assert "31.0 GB/s with 2 threads" in lines[0] and "hf-eager-cpu" in lines[0]
    assert "read while other processes used 1.4 cores, so low" in lines[0]
    assert any("wide-moe + oracle:0.9, γ=4, B=16" in line and "expected to pay" in line for line in lines)


def test_the_wide_family_is_bandwidth_bound_and_built_from_bench_layers():
    wide = get_preset("wide")
    moe = wide.model(MOE)
    assert moe == replace(BENCH.model(MOE), num_layers=2)
    counts = count_params(moe, wide.vocab_size)
    # A step at B=1 reads its active weights, tens of MB in float32: far beyond a core's caches.
    assert counts.active * 4 > 64 * 2**20 and counts.total / counts.active > 8
    draft = count_params(wide.model("draft"), wide.vocab_size)
    assert draft.active < counts.active / 4


def test_the_trained_demo_family_is_tinys_moe_and_draft_xs():
    trained = get_preset("trained-demo")
    assert trained.models == (TINY.model(MOE), TINY.model("draft-xs"))
    assert trained.training is not None and trained.training.drafts == ("draft-xs",)


# --- the closing paragraph ------------------------------------------------------------------------


def _rows() -> list:
    """A run shaped like the demo's: the MoE and a dense target at B=1 and 16, the study's loss."""
    return (
        cell("m1", 6, 0.95, target="wide-moe", batch_size=1, draft="oracle:0.9")
        + cell("m16", 6, 1.25, target="wide-moe", batch_size=16, draft="oracle:0.9", group="h")
        + cell("d1", 6, 1.4, target="wide-dense", batch_size=1, draft="oracle:0.9", moe_top_k=None)
        + cell(
            "d16", 6, 1.1, target="wide-dense", batch_size=16, draft="oracle:0.9", moe_top_k=None, group="h"
        )
        + cell("s", 6, 0.3, target="wide-moe", draft="oracle:0.03")
    )


def _predictions(found) -> dict[str, Prediction]:
    """A call per configuration: pays for the B=16 MoE and B=1 dense, loses for the study's."""
    calls = {"m16": (1.8, Verdict.GO), "d1": (2.4, Verdict.GO), "s": (0.3, Verdict.NO_GO)}
    out = {}
    for account in found:
        key = str(account.config["cell_key"])
        speedup, call = calls.get(key.removesuffix("-sd"), (1.05, Verdict.DEPENDS))
        band = (speedup / 1.25, speedup * 1.25)
        out[key] = Prediction(None, "hf-eager-cpu", 0.9, speedup, band, 2.0, None, call)  # type: ignore[arg-type]
    return out


EXPERTS = {"wide-moe": (64, 4)}


def test_the_closing_paragraph_says_where_sd_paid_and_lost_and_why_beside_the_calls():
    found = accounts(_rows())
    lines = closing_lines(found, _predictions(found), EXPERTS, "the study's rows: 3 rows")
    text = "\n".join(lines)
    paid = lines.index("Where SD paid here, and why:")
    lost = lines.index("Where it lost, and why:")
    assert paid < lost and lines[-1] == "the study's rows: 3 rows"
    moe16 = next(line for line in lines[paid:lost] if "wide-moe + oracle:0.9, γ=4, B=16" in line)
    assert "1.25×" in moe16 and "(predicted 1.80×, expected to pay)" in moe16
    # verify amortisation against expert activation, from MoESD's uniform-routing count
    assert "where a step of B=16 wakes 41.2 of 64 experts a layer and the verify 63.6, 1.5× as many" in moe16
    dense = next(line for line in lines if "wide-dense + oracle:0.9, γ=4, B=1," in line)
    assert "a dense step already reads every weight" in dense
    assert "wide-moe + oracle:0.03" in "\n".join(lines[lost:])
    assert "MoESD's claim, that batch helps SD on a sparse MoE more than on a dense model, holds here" in text
    assert "matched 3 of 5 verdicts" in text  # the B=1 MoE was called too close and lost


def test_the_batch_claim_is_judged_from_each_targets_change_with_batch():
    def claim(moe: tuple[float, float], dense: tuple[float, float]) -> str:
        rows = (
            cell("m1", 6, moe[0], target="wide-moe", batch_size=1, draft="oracle:0.9")
            + cell("m16", 6, moe[1], target="wide-moe", batch_size=16, draft="oracle:0.9")
            + cell("d1", 6, dense[0], target="wide-dense", batch_size=1, draft="oracle:0.9")
            + cell("d16", 6, dense[1], target="wide-dense", batch_size=16, draft="oracle:0.9")
        )
        return batch_claim(accounts(rows), EXPERTS)[-1]

    assert "holds here:" in claim((0.9, 1.2), (1.4, 1.1))
    assert "holds only in part here" in claim((1.2, 1.1), (1.5, 1.0))
    assert "does not hold here" in claim((1.2, 1.0), (1.4, 1.3))
    assert batch_claim(accounts(cell("m", 6, 1.0, target="wide-moe")), EXPERTS) == []


def test_the_models_record_counts_matching_calls_and_its_error():
    found = accounts(_rows())
    (line,) = [x for x in model_record(found, _predictions(found)) if x]
    # m1 too close vs loses, m16 pays, d1 pays, d16 too close vs pays, s loses: 3 of 5
    assert line.startswith("The model's calls before measuring matched 3 of 5 verdicts")
    # predicted/measured − 1: +11%, +44%, +71%, −5%, 0%
    assert "a predicted speedup was a median 11% above the measured one (above it in 3 of 5)" in line


def test_a_busy_machine_still_gets_every_row_flagged():
    rows = flagged(cell("a", 6, 1.3)) + cell("b", 6, 0.8, gamma=2)
    found = accounts(rows, keep_noisy=True)
    busy = next(a for a in found if a.comparison.busy)
    assert busy.cost is not None and busy.comparison.speedup.value == pytest.approx(1.3)
    assert "(BUSY: all 12 runs flagged noisy, other processes used 1.00 cores while it ran" in sentence(busy)
    assert "SD pays (1.30×" in sentence(busy)
    assert "1 of these verdicts come from runs on a busy machine (BUSY)" in tally(found)
    text = format_text(build(rows, keep_noisy=True))
    assert "1.30×" in text and "BUSY" in text and "no number" not in text
    assert "no number" in format_text(build(rows))  # a study's table still leaves them out
    assert not any(a.comparison.busy for a in accounts(rows))


def test_the_demo_story_ends_in_the_closing_paragraph_and_the_audit(monkeypatch, tmp_path):
    import specmoe.zoo.manifest as manifest
    from specmoe.suite.shipped import STUDY_ROWS

    shapes = {"moe": {"experts": 64, "top_k": 4}, "dense": {"experts": 0, "top_k": 0}}
    monkeypatch.setattr(manifest, "load_manifest", lambda zoo: {"models": shapes})
    (wide,) = demo_suites(True)
    rows = [r for r in _rows() if r.config["target"] == "wide-moe"]
    lines = demo_story(rows, [wide], [tmp_path], {})
    assert any(line.startswith("What this run says about the two studies") for line in lines)
    assert any("wide-moe + oracle:0.9, γ=4, B = 1, 16: speedup 0.95×, 1.25×." in line for line in lines)
    if STUDY_ROWS.is_file():
        assert lines[-1].startswith(
            "The study's published rows (`specmoe audit docs/results/study-runs.csv`)"
        )
    assert not any("Shipped measurements" in line for line in lines)  # only this run's numbers


def test_a_round_that_did_not_pay_says_what_weighed_most():
    from specmoe.metrics import RoundCost
    from specmoe.report.story_seeds import lead

    (found,) = accounts(cell("a", 6, 0.6))
    low = replace(found, comparison=replace(found.comparison, acceptance_rate=0.01))
    assert lead(low) == "only 1% of proposals were accepted: "
    dear = replace(
        found, cost=RoundCost(4, 3.6, 1.2, 0.1), comparison=replace(found.comparison, acceptance_rate=0.6)
    )
    assert lead(dear) == "the drafts cost more than the verify: "
    (paid,) = accounts(cell("b", 6, 1.4))
    assert lead(replace(paid, cost=RoundCost(4, 3.6, 1.2, 0.1))) == ""


def test_quick_is_the_wide_suite_alone_and_shorter():
    (quick,) = demo_suites(True)
    main = demo_suites(False)
    assert [s.name for s in main] == ["quick", "wide"] and quick.name == "wide"
    assert get_preset(quick.zoo_preset).training is None  # nothing to train
    assert len(expand(quick)) < len(expand(main[1]))
    # Fewer prompts where the prompt is the unit, never fewer than an interval at 95% needs.
    assert all(g.prompts is None or g.prompts >= 5 for g in quick.groups)


def test_the_trained_family_trains_in_this_thread_while_the_wide_one_is_built_beside_it(monkeypatch):
    import threading

    import specmoe.bench.suite_zoo as suite_zoo
    from specmoe.cli.demo import prepare_zoos

    where = {}

    def fake(suite, zoo, progress=None):
        where[suite.zoo_preset] = threading.current_thread() is threading.main_thread()
        return Path(suite.zoo_preset)

    monkeypatch.setattr(suite_zoo, "prepare_zoo", fake)
    assert prepare_zoos(demo_suites(False)) == [Path("trained-demo"), Path("wide")]
    assert where == {"trained-demo": True, "wide": False}
