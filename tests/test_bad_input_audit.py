"""Audit and import inputs that must read as invalid rows, not numbers: a vLLM or SGLang result with
impossible counts, a NaN throughput, a rate past any float, a served run that decoded nothing, an
exported run with text for its throughput; and a study CSV a spreadsheet saved with a byte-order
mark, audited as without. The probes: docs/results/cpu/probes.md and probes-configs-batches-devices.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bad_input_files import STUDY

from specmoe.audit.inputs import audit_input
from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.results.store import Store

VLLM = Path(__file__).parent / "data" / "serving-results" / "vllm"


# --- audits of counts no tool writes ---------------------------------------------------------------


@pytest.mark.parametrize(
    "field", ["spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens"]
)
def test_a_vllm_result_with_a_negative_count_is_invalid(tmp_path, capsys, field):
    result = json.loads((VLLM / "eagle3-c8.json").read_text(encoding="utf-8"))
    result[field] = -1000
    (tmp_path / "sd.json").write_text(json.dumps(result), encoding="utf-8")
    assert (
        main(["audit", str(tmp_path / "sd.json"), "--baseline", str(VLLM / "plain-c8.json"), "--json"]) == 0
    )
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["verdict"] == "invalid" and f"{field} -1000 is negative" in row["reason"]


def test_an_sglang_point_of_batch_size_0_is_invalid(tmp_path, capsys):
    line = {"batch_size": 0, "steps": 0, "topk": 0, "num_draft_tokens": 0, "acc_length": 1.0, "speed": 98.8}
    (tmp_path / "bench.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert main(["audit", str(tmp_path / "bench.jsonl"), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["verdict"] == "invalid" and "batch_size 0" in row["reason"]


# --- throughput that is no throughput ----------------------------------------------------------


def test_a_served_run_that_decoded_nothing_is_no_row():
    from test_report_explain import served_spec

    from specmoe.bench.served_rows import served_row
    from specmoe.serving.load import RequestRecord, ServedRun
    from specmoe.serving.prometheus import SpecCounters

    spec = served_spec(False, 2, 0)
    one_token = tuple(
        RequestRecord(i, 0.0, 0.1 + i, 0.1 + i, 0.2 + i, 1, "usage", 1, "length", 0, None, None)
        for i in (0, 1)
    )
    run = ServedRun(one_token, SpecCounters(None, None, None, None, "none"))
    # Two one-token responses a second apart: decode time, no decoded token. Before: a 0 tok/s row.
    with pytest.raises(SpecmoeError, match="no response held 2 or more tokens"):
        served_row(spec, spec.target_model.server, run, None, {}, "2026-01-01T00:00:00Z")


def test_an_exported_run_with_text_for_its_throughput_is_one_line(tmp_path):
    import csv

    from test_summary_table import cell

    from specmoe.findings.results import read_export

    db, out = tmp_path / "r.db", tmp_path / "runs.csv"
    with Store(db) as store:
        for row in cell("c", 1, 1.5):
            store.add(row)
    assert main(["bench", "export", "--db", str(db), "--out", str(out)]) == 0
    with out.open(newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    records[0]["tokens_per_s"] = "fast"  # an export edited by hand
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    with pytest.raises(SpecmoeError, match=r"runs\.csv:2: run '.*' is malformed \(ValueError: .*'fast'"):
        read_export(out)


# --- audit rows a spreadsheet wrote, rates past any float ------------------------------------------


def test_a_study_csv_with_a_byte_order_mark_is_audited_as_without(tmp_path):
    text = STUDY.read_text(encoding="utf-8")
    plain, marked = tmp_path / "plain.csv", tmp_path / "marked.csv"
    plain.write_text(text, encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert audit_input(marked) == audit_input(plain)


def test_a_rate_past_any_float_or_below_zero_is_an_invalid_row(tmp_path):
    header, first, *_ = STUDY.read_text(encoding="utf-8").splitlines()
    columns = header.split(",")
    rows = []
    for column, value in (("tokens_per_sec", "1e309"), ("speedup_vs_baseline", "-1.5")):
        cells = first.split(",")
        cells[columns.index(column)] = value
        cells[columns.index("job_id")] = column
        rows.append(",".join(cells))
    path = tmp_path / "odd.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    verdicts = {r.id: (r.verdict, r.reason) for r in audit_input(path)}
    assert verdicts["tokens_per_sec"][0] == "invalid" and "tokens_per_sec" in verdicts["tokens_per_sec"][1]
    assert verdicts["speedup_vs_baseline"][0] == "invalid"


def test_a_nan_throughput_in_a_vllm_result_is_an_invalid_row(tmp_path):
    for name in ("plain-c8.json", "eagle3-c8.json"):
        data = json.loads((VLLM / name).read_text())
        if name.startswith("eagle3"):
            data["output_throughput"] = float("nan")  # json.dumps writes NaN, as Python tools do
        (tmp_path / name).write_text(json.dumps(data))
    row = next(r for r in audit_input(tmp_path) if r.id == "eagle3-c8.json")
    assert row.verdict == "invalid" and row.reason.startswith(
        "invalid input: output_throughput is not a finite number"
    )
