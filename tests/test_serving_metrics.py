"""Spec-decode counters from /metrics texts in the exposition formats vLLM and SGLang document."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmoe.errors import SpecmoeError
from specmoe.serving.prometheus import UNKNOWN, SpecCounters, counter_delta, parse_samples, snapshot
from specmoe.serving.servers import ENGINES, engine_metrics

DATA = Path(__file__).parent / "data" / "serving"
VLLM = ENGINES["vllm"]
SGLANG = ENGINES["sglang"]


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_vllm_counters_are_summed_over_engines_and_differenced_around_a_run():
    before, after = snapshot(read("vllm-before.txt"), VLLM), snapshot(read("vllm-after.txt"), VLLM)
    assert before.totals["vllm:spec_decode_num_drafts_total"] == 750  # engines 0 and 1
    counts = counter_delta(before, after, VLLM)
    assert counts == SpecCounters(
        rounds=190, drafted=570, accepted=340, accepted_by_position=(150, 120, 70), source="metrics"
    )
    # The counters agree with each other as vLLM defines them: every draft proposes 3 tokens, and
    # the per-position counts add up to the accepted total and never grow with the position.
    assert counts.drafted == 3 * counts.rounds
    assert sum(counts.accepted_by_position) == counts.accepted
    assert list(counts.accepted_by_position) == sorted(counts.accepted_by_position, reverse=True)


def test_vllm_created_timestamps_and_other_families_are_not_counted():
    samples = {name for name, _, _ in parse_samples(read("vllm-before.txt"))}
    assert "vllm:spec_decode_num_drafts_created" in samples  # present, but not a counter we read
    totals = snapshot(read("vllm-before.txt"), VLLM).totals
    assert set(totals) == set(VLLM.counters)


def test_counters_a_server_creates_during_the_run_start_at_zero():
    # A fresh vLLM with no SD traffic yet may not have exported the labelled counters.
    empty = snapshot("# HELP up x\n# TYPE up gauge\nup 1.0\n", VLLM)
    after = snapshot(read("vllm-before.txt"), VLLM)
    counts = counter_delta(empty, after, VLLM)
    assert (counts.rounds, counts.drafted, counts.accepted) == (750, 2250, 1300)


def test_a_server_without_spec_decode_counters_reports_unknown_not_zero():
    plain = snapshot('vllm:num_requests_running{engine="0",model_name="m"} 0.0\n', VLLM)
    assert counter_delta(plain, plain, VLLM) == UNKNOWN


def test_a_counter_that_went_down_means_a_restart_and_is_unknown():
    before, after = snapshot(read("vllm-after.txt"), VLLM), snapshot(read("vllm-before.txt"), VLLM)
    counts = counter_delta(before, after, VLLM)
    assert counts.rounds is None and counts.drafted is None and counts.accepted is None
    assert counts.accepted_by_position is None


def test_sglang_gauges_are_averaged_over_ranks_and_give_no_counts():
    snap = snapshot(read("sglang.txt"), SGLANG)
    assert snap.gauges == pytest.approx({"accept_length": 3.0, "accept_rate": 0.65})
    assert snap.totals == {}
    assert counter_delta(snap, snap, SGLANG) == UNKNOWN


def test_malformed_metrics_text_is_one_clear_error():
    with pytest.raises(SpecmoeError, match="malformed /metrics text") as err:
        parse_samples('vllm:spec_decode_num_drafts_total{engine="0" 12\n')
    assert "\n" not in str(err.value)


def test_engine_table_names_the_documented_metrics():
    assert VLLM.drafts == "vllm:spec_decode_num_drafts_total"
    assert VLLM.accepted_per_position == "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    assert dict(SGLANG.gauges)["accept_length"] == "sglang:spec_accept_length"
    llama = engine_metrics("llamacpp-server")
    assert llama.response_drafted == "timings.draft_n"
    assert llama.response_accepted == "timings.draft_n_accepted"
    with pytest.raises(SpecmoeError, match="unknown engine 'vlm'; available: vllm, sglang"):
        engine_metrics("vlm")
