"""The audit on vLLM and SGLang serving-benchmark results, and `--baseline` pairing for every reader.

Fixtures: tests/data/serving-results (its README names the fields each reader relies on)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specmoe.audit.foreign import audit_logs, summarise
from specmoe.audit.inputs import audit_input, file_kind
from specmoe.audit.sglang import load_sglang_points
from specmoe.cli import main
from specmoe.errors import SpecmoeError

DATA = Path(__file__).parent / "data"
VLLM = DATA / "serving-results" / "vllm"
SGLANG = DATA / "serving-results" / "sglang" / "bench-speculative.jsonl"
LOGS = DATA / "llamacpp"


def by_id(rows):
    return {row.id: row for row in rows}


def test_file_kinds_come_from_content():
    assert file_kind(VLLM / "plain-c8.json") == "vllm"
    assert file_kind(SGLANG) == "sglang"
    assert file_kind(LOGS / "bench-moe-q8.json") == "llamacpp"  # llama-bench JSON: a list
    assert file_kind(LOGS / "spec-moe-q4-g16.log") == "llamacpp"


def test_vllm_folder_pairs_by_model_concurrency_and_rate():
    rows = by_id(audit_input(VLLM))
    eagle = rows["eagle3-c8.json"]
    assert eagle.verdict == "consistent" and eagle.tool == "vllm-bench-serve"
    assert eagle.bound == pytest.approx(1 + 56160 / 36000)
    assert eagle.speedup == pytest.approx(1520.7 / 812.4) and eagle.baseline_tokens_per_s == 812.4
    assert eagle.acceptance == pytest.approx(0.52)
    ngram = rows["ngram-c8.json"]
    assert ngram.verdict == "impossible" and ngram.bound == pytest.approx(1.12)
    assert "plain-c8.json" in ngram.reason and "mean TPOT" in ngram.reason
    assert "plain-c32.json" in rows["eagle3-c32.json"].reason  # the baseline at its own concurrency
    assert summarise(list(rows.values())) == {
        "consistent": 4,
        "impossible": 1,
        "unverifiable": 0,
        "invalid": 0,
    }


def test_a_lone_vllm_result_needs_a_baseline(tmp_path):
    (row,) = audit_input(VLLM / "eagle3-c8.json")
    assert row.verdict == "unverifiable" and "pass one of the same setting with --baseline" in row.reason
    (row,) = audit_input(VLLM / "ngram-c8.json", baseline=VLLM / "plain-c8.json")
    assert row.verdict == "impossible" and row.baseline_tokens_per_s == 812.4


def test_vllm_counts_that_cannot_happen_are_invalid(tmp_path):
    record = json.loads((VLLM / "eagle3-c8.json").read_text())
    record["spec_decode_accepted_tokens"] = record["spec_decode_draft_tokens"] + 1
    (tmp_path / "bad.json").write_text(json.dumps(record))
    shutil.copy(VLLM / "plain-c8.json", tmp_path)
    rows = by_id(audit_input(tmp_path))
    assert rows["bad.json"].verdict == "invalid"
    assert rows["bad.json"].reason.startswith("invalid input: 108001 accepted tokens of 108000 drafted")


def test_sglang_points_against_steps_zero():
    rows = audit_input(SGLANG)
    assert [r.verdict for r in rows] == [
        "consistent", "consistent", "impossible", "consistent", "consistent", "invalid", "unverifiable",
    ]  # fmt: skip
    impossible = rows[2]
    assert impossible.id == "bench-speculative.jsonl:3:bs1-s5-k4-n8"
    assert impossible.speedup == pytest.approx(383.634 / 98.814) and impossible.bound == 3.61
    assert "steps + 1 = 2" in rows[5].reason


def test_sglang_baseline_from_another_file(tmp_path):
    lines = SGLANG.read_text().splitlines()
    sd_only = tmp_path / "sd.jsonl"
    sd_only.write_text("\n".join(line for line in lines if '"steps": 0' not in line) + "\n")
    assert {r.verdict for r in audit_input(sd_only)} == {"unverifiable", "invalid"}
    rows = audit_input(sd_only, baseline=SGLANG)
    assert [r.verdict for r in rows] == ["consistent", "impossible", "consistent", "invalid", "unverifiable"]


def test_sglang_bad_line_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        SGLANG.read_text().splitlines()[0]
        + '\n{"batch_size": "1", "steps": 0, "acc_length": 1, "speed": 2}\n'
    )
    with pytest.raises(SpecmoeError, match=r"bad\.jsonl:2: not a bench_speculative record"):
        load_sglang_points(bad)


def test_llamacpp_log_paired_through_baseline_when_alone(tmp_path):
    alone = tmp_path / "spec.log"
    shutil.copy(LOGS / "spec-moe-q4-g16.log", alone)
    (row,) = audit_input(alone)
    assert row.verdict == "unverifiable" and "no baseline for target" in row.reason
    (row,) = audit_input(alone, baseline=LOGS / "bench-moe-q4.md")
    folder_row = by_id(audit_logs(LOGS))["spec-moe-q4-g16.log"]
    assert (row.verdict, row.speedup, row.bound) == (folder_row.verdict, folder_row.speedup, folder_row.bound)


def test_baseline_errors_are_one_line(tmp_path):
    cases = [
        (VLLM / "ngram-c8.json", VLLM / "eagle3-c8.json", "this result ran speculative decoding"),
        (VLLM / "ngram-c8.json", SGLANG, "is a sglang result but the audited path holds vllm"),
        (VLLM / "ngram-c8.json", tmp_path / "none.json", "no such file"),
        (LOGS / "spec-moe-q4-g16.log", LOGS / "vllm-serving.txt", "no plain decode rate in it"),
        (
            DATA.parent.parent / "docs" / "results" / "study-runs.csv",
            VLLM / "plain-c8.json",
            "does not apply",
        ),
    ]
    for path, baseline, message in cases:
        with pytest.raises(SpecmoeError, match=message) as info:
            audit_input(path, baseline)
        assert "\n" not in str(info.value)


def test_cli_audit_with_baseline(capsys):
    code = main(["audit", str(VLLM / "ngram-c8.json"), "--baseline", str(VLLM / "plain-c8.json"), "--json"])
    assert code == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["verdict"] == "impossible" and row["tool"] == "vllm-bench-serve"
    assert main(["audit", str(VLLM / "ngram-c8.json"), "--baseline", str(SGLANG)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specmoe: error: --baseline") and err.count("\n") == 1
