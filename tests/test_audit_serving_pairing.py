"""How the serving audit pairs SD runs with baselines: never by guess. vLLM results without
spec-decode counts have an unknown arm unless marked; two baselines of one setting, and SGLang files
of appended runs, are refused with the fix; `--append-result` files are read run by run.

Fixtures: tests/data/serving-results (its README cites the tools' sources)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specmoe.audit.inputs import audit_input, file_kind
from specmoe.audit.sglang import load_sglang_points
from specmoe.cli import main
from specmoe.errors import SpecmoeError

DATA = Path(__file__).parent / "data" / "serving-results"
VLLM = DATA / "vllm"
SGLANG = DATA / "sglang" / "bench-speculative.jsonl"


def by_id(rows):
    return {row.id: row for row in rows}


def result(name: str, **changes) -> dict:
    record = json.loads((VLLM / name).read_text())
    for key, value in changes.items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    return record


def write(path: Path, *records: dict, indent: int | None = None) -> Path:
    # As `vllm bench serve` writes them: json.dump of each run, "\n" between appended runs.
    path.write_text("\n".join(json.dumps(r, indent=indent) for r in records))
    return path


def test_a_result_without_counts_or_mark_has_an_unknown_arm(tmp_path):
    write(tmp_path / "legacy-plain.json", result("plain-c8.json", arm=None))
    shutil.copy(VLLM / "ngram-c8.json", tmp_path)
    rows = by_id(audit_input(tmp_path))
    legacy = rows["legacy-plain.json"]
    assert legacy.verdict == "unverifiable" and legacy.reason.startswith("arm unknown: no spec_decode_*")
    assert "--metadata arm=baseline" in legacy.reason
    # Not taken as the SD run's baseline: it could as well be an SD run whose /metrics scrape failed.
    sd = rows["ngram-c8.json"]
    assert sd.verdict == "unverifiable" and sd.speedup is None and "no baseline result of" in sd.reason


def test_a_marked_result_takes_its_mark_and_a_contradiction_is_invalid(tmp_path):
    write(tmp_path / "plain.json", result("plain-c8.json"))  # "arm": "baseline", as --metadata writes
    write(tmp_path / "sd-legacy.json", result("plain-c8.json", arm="sd", output_throughput=900.0))
    write(tmp_path / "wrong.json", result("ngram-c8.json", arm="baseline"))
    write(tmp_path / "typo.json", result("plain-c8.json", arm="plain"))
    rows = by_id(audit_input(tmp_path))
    assert rows["plain.json"].verdict == "consistent"
    legacy = rows["sd-legacy.json"]  # an SD run without counts: no bound to check
    assert legacy.verdict == "unverifiable" and "without spec_decode_num_drafts" in legacy.reason
    assert (
        rows["wrong.json"].verdict == "invalid"
        and "but it has spec_decode_* counts" in rows["wrong.json"].reason
    )
    assert rows["typo.json"].reason == 'invalid input: "arm": "plain" is none of baseline, sd'


def test_two_baselines_of_one_setting_are_refused_with_the_fix(tmp_path, capsys):
    for name in ("plain-c8.json", "ngram-c8.json"):
        shutil.copy(VLLM / name, tmp_path)
    write(tmp_path / "plain-c8-rerun.json", result("plain-c8.json", output_throughput=700.0))
    with pytest.raises(SpecmoeError, match=r"ngram-c8.json: the audited files hold 2 baselines of") as info:
        audit_input(tmp_path)
    message = str(info.value)
    assert "(plain-c8-rerun.json, plain-c8.json)" in message and "--baseline FILE" in message
    assert main(["audit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specmoe: error: ngram-c8.json:") and err.count("\n") == 1
    # The user's choice settles it.
    (row,) = [
        r for r in audit_input(tmp_path, baseline=tmp_path / "plain-c8.json") if r.id == "ngram-c8.json"
    ]
    assert row.verdict == "impossible" and row.baseline_tokens_per_s == 812.4


@pytest.mark.parametrize("indent", [None, 2])
def test_append_result_files_are_read_run_by_run(tmp_path, indent):
    runs = [result(n) for n in ("plain-c8.json", "ngram-c8.json", "plain-c32.json", "eagle3-c32.json")]
    path = write(tmp_path / "sweep.json", *runs, indent=indent)
    assert file_kind(path) == "vllm"
    rows = audit_input(path)
    assert [r.id for r in rows] == [f"sweep.json#{i}" for i in (1, 2, 3, 4)]
    assert [r.verdict for r in rows] == ["consistent", "impossible", "consistent", "consistent"]
    assert "sweep.json#1" in rows[1].reason and "sweep.json#3" in rows[3].reason  # each its own setting


def test_a_baseline_file_of_appended_runs_pairs_each_setting(tmp_path):
    baselines = write(
        tmp_path / "plain-sweep.json", result("plain-c8.json", arm=None), result("plain-c32.json")
    )
    sd = tmp_path / "sd"
    sd.mkdir()
    for name in ("ngram-c8.json", "eagle3-c32.json"):
        shutil.copy(VLLM / name, sd)
    rows = by_id(audit_input(sd, baseline=baselines))
    assert rows["ngram-c8.json"].baseline_tokens_per_s == 812.4
    assert "plain-sweep.json#2" in rows["eagle3-c32.json"].reason
    twice = write(tmp_path / "twice.json", result("plain-c8.json"), result("plain-c8.json"))
    with pytest.raises(SpecmoeError, match=r"--baseline .*twice.json holds 2 baselines of"):
        audit_input(sd / "ngram-c8.json", baseline=twice)


def test_sglang_lines_carry_no_model_and_pair_within_one_sweep():
    assert all("model_path" not in json.loads(line) for line in SGLANG.read_text().splitlines())
    rows = audit_input(SGLANG)
    assert "bench-speculative.jsonl:1)" in rows[1].reason  # the steps = 0 line it was paired with


def test_sglang_runs_appended_to_one_output_are_refused_with_the_fix(tmp_path, capsys):
    # bench_speculative.py opens --output in append mode: a second sweep (another model, say) lands
    # after the first, with nothing in its lines to tell the two apart.
    appended = tmp_path / "output.jsonl"
    appended.write_text(SGLANG.read_text() * 2)
    with pytest.raises(SpecmoeError) as info:
        audit_input(appended)
    message = str(info.value)
    assert message.startswith("output.jsonl: lines 1 and 8 both measure batch size 1, steps 0")
    assert "split the file into one file per run, or pass the baseline with --baseline FILE" in message
    assert main(["audit", str(appended)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    baseline = tmp_path / "plain.jsonl"
    baseline.write_text("".join(line + "\n" for line in SGLANG.read_text().splitlines()[:1]))
    rows = audit_input(appended, baseline=baseline)
    assert len(rows) == 14 and rows[1].baseline_tokens_per_s == pytest.approx(98.814)


def test_sglang_baseline_file_with_two_plain_lines_of_one_batch_is_refused(tmp_path):
    baseline = tmp_path / "plain.jsonl"
    first = SGLANG.read_text().splitlines()[0]
    baseline.write_text(f"{first}\n{first}\n")
    with pytest.raises(SpecmoeError, match=r"--baseline plain.jsonl: lines 1 and 2 are both steps = 0"):
        audit_input(SGLANG, baseline=baseline)
    assert len(load_sglang_points(baseline)) == 2
