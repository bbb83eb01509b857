"""Auditing foreign result sets: the bound on CSV rows, llama.cpp log parsing, the study CSV."""

import csv
import shutil
from pathlib import Path

import pytest

from specmoe.audit.foreign import (
    TOLERANCE,
    AuditRow,
    audit_csv,
    audit_logs,
    audit_path,
    format_rows,
    judge,
    rows_to_json,
    summarise,
)
from specmoe.audit.llamacpp_logs import (
    BenchLog,
    ModelId,
    PlainDecodeLog,
    SpeculativeLog,
    UnrecognisedLog,
    parse_log,
)
from specmoe.errors import SpecmoeError

LOGS = Path(__file__).parent / "data" / "llamacpp"
STUDY_CSV = Path("/work/shared/data/study-runs.csv")

COLUMNS = [
    "job_id",
    "machine",
    "target_model",
    "draft_model",
    "draft_len",
    "tokens_per_sec",
    "draft_acceptance_rate",
    "speedup_vs_baseline",
]


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in COLUMNS})
    return path


def sd_row(job_id: str, **fields: str) -> dict[str, str]:
    return {"job_id": job_id, "machine": "m", "target_model": "moe", "draft_model": "small", **fields}


def small_csv(tmp_path: Path) -> Path:
    """One SD row claiming 1.1× at α = 0.5, γ = 4: well within its 3× bound."""
    row = sd_row("x", draft_len="4", draft_acceptance_rate="0.5", speedup_vs_baseline="1.1")
    return write_csv(tmp_path / "r.csv", [row])


def by_id(rows: list[AuditRow]) -> dict[str, AuditRow]:
    return {row.id: row for row in rows}


# --- the bound on CSV rows --------------------------------------------------------------------


def test_judge_uses_the_tolerance():
    assert judge(1.04, 1.04) == "consistent"
    assert judge(1.04 * (1 + TOLERANCE) - 1e-9, 1.04) == "consistent"
    assert judge(1.04 * (1 + TOLERANCE) + 1e-6, 1.04) == "impossible"


def test_csv_impossible_consistent_and_unverifiable_rows(tmp_path):
    path = write_csv(
        tmp_path / "runs.csv",
        [
            {"job_id": "base", "machine": "m", "target_model": "moe", "draft_model": "none", "draft_len": "0",
             "tokens_per_sec": "50.0", "speedup_vs_baseline": "1.0"},
            sd_row("tiny-alpha", draft_len="16", tokens_per_sec="62.5", draft_acceptance_rate="0.002",
                   speedup_vs_baseline="1.25"),
            sd_row("good-draft", draft_len="4", tokens_per_sec="75", draft_acceptance_rate="0.6",
                   speedup_vs_baseline="1.5"),
            sd_row("no-alpha", draft_len="8", tokens_per_sec="60", speedup_vs_baseline="1.2"),
            sd_row("derived", draft_len="8", tokens_per_sec="60", draft_acceptance_rate="0.01"),
            sd_row("percent", draft_len="4", tokens_per_sec="60", draft_acceptance_rate="2.6"),
            sd_row("placeholder", draft_len="8", tokens_per_sec="60", draft_acceptance_rate="1.0"),
            sd_row("no-baseline", target_model="other", draft_len="8", tokens_per_sec="60",
                   draft_acceptance_rate="0.01"),
        ],
    )  # fmt: skip
    rows = by_id(audit_csv(path))

    assert rows["base"].verdict == "consistent" and rows["base"].bound == 1.0

    impossible = rows["tiny-alpha"]
    assert impossible.verdict == "impossible"
    assert impossible.bound == pytest.approx(1.032)
    assert impossible.claimed_speedup == pytest.approx(1.25)
    assert "1.25× at α = 0.20%, γ = 16" in impossible.reason and "1 + αγ = 1.03×" in impossible.reason

    consistent = rows["good-draft"]
    assert consistent.verdict == "consistent" and consistent.bound == pytest.approx(3.4)

    assert rows["no-alpha"].verdict == "unverifiable" and "acceptance" in rows["no-alpha"].reason

    derived = rows["derived"]  # 60 t/s over the 50 t/s baseline: 1.2× against 1 + 0.01·8
    assert derived.claimed_speedup == pytest.approx(1.2)
    assert derived.verdict == "impossible" and "50.00 t/s" in derived.reason

    assert rows["percent"].verdict == "unverifiable" and "outside [0, 1]" in rows["percent"].reason
    assert rows["placeholder"].verdict == "unverifiable" and "placeholder" in rows["placeholder"].reason
    assert rows["no-baseline"].verdict == "unverifiable" and "no baseline row" in rows["no-baseline"].reason


def test_csv_baseline_without_a_claim_is_unverifiable(tmp_path):
    path = write_csv(
        tmp_path / "runs.csv",
        [
            {
                "job_id": "b",
                "target_model": "t",
                "draft_model": "none",
                "draft_len": "0",
                "tokens_per_sec": "5",
            }
        ],
    )
    assert audit_csv(path)[0].verdict == "unverifiable"


def test_csv_missing_column_is_a_one_line_error(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("job_id,tokens_per_sec\nx,1\n", encoding="utf-8")
    with pytest.raises(SpecmoeError, match="missing column") as err:
        audit_csv(path)
    assert "\n" not in str(err.value)


# --- the study's published CSV ----------------------------------------------------------------

needs_study = pytest.mark.skipif(not STUDY_CSV.is_file(), reason="study CSV not present on this machine")


@needs_study
def test_study_csv_verdict_counts():
    rows = audit_csv(STUDY_CSV)
    assert len(rows) == 306
    assert summarise(rows) == {"consistent": 162, "impossible": 126, "unverifiable": 18, "invalid": 0}


@needs_study
def test_study_moe_gamma16_small_draft_rows_are_all_impossible():
    source = {r["job_id"]: r for r in csv.DictReader(STUDY_CSV.open(encoding="utf-8"))}
    rows = audit_csv(STUDY_CSV)
    headline = [
        row
        for row in rows
        if source[row.id]["target_model"].startswith("moe")
        and source[row.id]["draft_model"] == "draft_0.8b"
        and source[row.id]["draft_len"] == "16"
    ]
    assert len(headline) == 24
    assert all(row.verdict == "impossible" for row in headline)
    assert all(row.bound < 1.1 and row.claimed_speedup > 1.2 for row in headline)
    # the claims are the paper's Table 5 (1.26× for Q4, 1.30× for Q8), rebuilt from tokens_per_sec
    q4 = [row.claimed_speedup for row in headline if source[row.id]["target_model"] == "moe_q4"]
    assert sum(q4) / len(q4) == pytest.approx(1.26, abs=0.005)


@needs_study
def test_study_baselines_never_impossible_and_suite_f_unverifiable():
    rows = audit_csv(STUDY_CSV)
    assert not [r for r in rows if r.bound == 1.0 and r.verdict != "consistent"]
    suite_f_sd = [r for r in rows if r.id.startswith("F_sd_")]
    assert len(suite_f_sd) == 18 and all(r.verdict == "unverifiable" for r in suite_f_sd)


# --- llama.cpp log parsing ----------------------------------------------------------------------


def test_parse_speculative_log_reads_summary_and_perf_blocks():
    log = parse_log((LOGS / "spec-moe-q4-g16.log").read_text(encoding="utf-8"))
    assert isinstance(log, SpeculativeLog) and log.tool == "llama-speculative"
    assert log.target == ModelId("Qwen3.5-35B-A3B-Q4_K_M.gguf", "qwen35moe 35B.A3B Q4_K - Medium")
    assert (log.decoded.tokens, log.decoded.seconds, log.decoded.tokens_per_s) == (257, 3.687, 69.705)
    assert log.encoded.tokens_per_s == 295.082
    assert (log.n_draft, log.n_predict, log.n_drafted, log.n_accept) == (16, 257, 3952, 9)
    assert log.accept_percent == 0.228
    assert log.acceptance == pytest.approx(9 / 3952)
    assert log.draft_perf.eval_runs == 4200 and log.draft_perf.eval_ms == 1180.44
    # the target's verify batches are filed under prompt eval; eval holds one single-token pass
    assert log.target_perf.prompt_eval_tokens == 4233 and log.target_perf.eval_runs == 1


def test_parse_speculative_simple_log_with_empty_target_eval():
    log = parse_log((LOGS / "spec-qwen25-7b-g4.log").read_text(encoding="utf-8"))
    assert isinstance(log, SpeculativeLog) and log.tool == "llama-speculative-simple"
    assert log.target.path == "Qwen2.5-7B-Instruct-Q4_K_M.gguf"  # the target, not the draft loaded after it
    assert log.target.desc == "qwen2 7B Q4_K - Medium"
    assert log.acceptance == pytest.approx(182 / 300)
    assert log.target_perf.eval_runs == 0 and log.target_perf.eval_tokens_per_s is None
    assert log.draft_perf.eval_tokens_per_s == pytest.approx(384.615, rel=1e-4)


def test_parse_speculative_log_with_timestamps_and_common_perf_print():
    log = parse_log((LOGS / "spec-moe-q8-g8.log").read_text(encoding="utf-8"))
    assert isinstance(log, SpeculativeLog)
    assert log.target == ModelId("Qwen3.5-35B-A3B-Q8_0.gguf", "qwen35moe 35B.A3B Q8_0")
    assert (log.n_draft, log.n_predict, log.n_drafted, log.n_accept) == (8, 257, 1880, 19)
    assert log.decoded.tokens_per_s == 60.9
    assert log.target_perf.prompt_eval_tokens == 2166 and log.target_perf.eval_runs == 1


def test_parse_llama_bench_markdown_and_json():
    md = parse_log((LOGS / "bench-moe-q4.md").read_text(encoding="utf-8"))
    assert isinstance(md, BenchLog)
    assert [(r.test, r.tokens_per_s, r.is_decode) for r in md.results] == [
        ("pp512", 1502.37, False),
        ("tg256", 55.30, True),
    ]
    assert md.results[1].model.desc == "qwen35moe 35B.A3B Q4_K - Medium"
    js = parse_log((LOGS / "bench-moe-q8.json").read_text(encoding="utf-8"))
    assert isinstance(js, BenchLog) and js.results[1].test == "tg256"
    assert js.results[1].model.path == "Qwen3.5-35B-A3B-Q8_0.gguf"
    assert js.results[1].tokens_per_s == pytest.approx(49.948893)


def test_parse_llama_bench_older_markdown_csv_and_depth():
    older = """| model | size | params | backend | ngl | test | t/s |
| --- | ---: | ---: | --- | --: | --- | ---: |
| llama 7B mostly Q4_0 | 3.56 GiB | 6.74 B | CUDA | 99 | tg 128 | 132.19 ± 0.55 |
| llama 7B mostly Q4_0 | 3.56 GiB | 6.74 B | CUDA | 99 | pp512+tg128 | 400.10 ± 1.00 |
| llama 7B mostly Q4_0 | 3.56 GiB | 6.74 B | CUDA | 99 | tg128 @ d512 | 116.71 ± 0.60 |
"""
    log = parse_log(older)
    assert [(r.test, r.is_decode) for r in log.results] == [
        ("tg128", True),
        ("pp512+tg128", False),
        ("tg128 @ d512", True),
    ]
    as_csv = (
        "build_commit,model_filename,model_type,n_prompt,n_gen,n_depth,avg_ts,stddev_ts\n"
        '"8cf427ff","models/q.gguf","qwen2 7B Q4_K - Medium","0","128","0","119.915244","0.430617"\n'
    )
    log = parse_log(as_csv)
    assert isinstance(log, BenchLog) and log.results[0].test == "tg128"
    assert log.results[0].model == ModelId("q.gguf", "qwen2 7B Q4_K - Medium")


def test_parse_plain_decode_log():
    log = parse_log((LOGS / "plain-qwen25-7b.log").read_text(encoding="utf-8"))
    assert isinstance(log, PlainDecodeLog)
    assert log.decoded.tokens_per_s == 62.14
    assert log.perf.eval_tokens_per_s == pytest.approx(63.987, rel=1e-4)


def test_parse_unknown_text_is_not_guessed():
    assert isinstance(parse_log((LOGS / "vllm-serving.txt").read_text(encoding="utf-8")), UnrecognisedLog)
    assert isinstance(parse_log(""), UnrecognisedLog)
    assert isinstance(parse_log("throughput: 55.3 tokens per second"), UnrecognisedLog)


def test_parse_zero_drafted_gives_no_acceptance():
    text = "decoded   64 tokens in    1.000 seconds, speed:   64.000 t/s\nn_draft   = 8\nn_predict = 64\n"
    text += "n_drafted = 0\nn_accept  = 0\naccept    = -nan%\n"
    log = parse_log(text)
    assert isinstance(log, SpeculativeLog) and log.acceptance is None


# --- auditing a folder of logs -----------------------------------------------------------------


def test_audit_logs_on_the_sample_folder():
    rows = by_id(audit_logs(LOGS))
    q4 = rows["spec-moe-q4-g16.log"]
    assert q4.verdict == "impossible"
    assert q4.speedup == pytest.approx(69.705 / 55.30)
    assert q4.baseline_tokens_per_s == 55.30 and q4.end_to_end_tokens_per_s == 69.705
    assert q4.bound == pytest.approx(257 / 248)  # the exact per-round count beats 1 + αγ here
    assert "bench-moe-q4.md" in q4.reason

    q8 = rows["spec-moe-q8-g8.log"]  # paired with the llama-bench JSON through the GGUF file name
    assert q8.verdict == "impossible" and q8.speedup == pytest.approx(60.9 / 49.948893)

    dense = rows["spec-qwen25-7b-g4.log"]  # paired with the plain decode log; faster of its two rates
    assert dense.verdict == "consistent"
    assert dense.baseline_tokens_per_s == pytest.approx(255 / 3.9852)
    assert dense.bound == pytest.approx(1 + 182 / 300 * 4)

    assert rows["vllm-serving.txt"].verdict == "unverifiable"
    assert rows["vllm-serving.txt"].reason == "unrecognised format"
    assert rows["bench-moe-q4.md:2:tg256"].baseline_tokens_per_s == 55.30
    counts = summarise(list(rows.values()))
    assert counts == {"consistent": 6, "impossible": 2, "unverifiable": 1, "invalid": 0}


def test_sd_log_without_a_baseline_is_unverifiable(tmp_path):
    shutil.copy(LOGS / "spec-moe-q4-g16.log", tmp_path)
    (row,) = audit_logs(tmp_path)
    assert row.verdict == "unverifiable" and "no baseline" in row.reason
    assert row.bound == pytest.approx(257 / 248) and row.speedup is None


def test_audit_path_dispatches_and_rejects_other_paths(tmp_path):
    assert audit_path(LOGS) == audit_logs(LOGS)
    csv_path = small_csv(tmp_path)
    assert audit_path(csv_path)[0].verdict == "consistent"
    for bad in [tmp_path / "missing", LOGS / "vllm-serving.txt"]:
        with pytest.raises(SpecmoeError) as err:
            audit_path(bad)
        assert "\n" not in str(err.value) and str(bad) in str(err.value)
    with pytest.raises(SpecmoeError):
        audit_logs(csv_path)


# --- output ---------------------------------------------------------------------------------------


def test_rows_to_json_keeps_log_fields_for_log_rows_only(tmp_path):
    csv_rows = audit_csv(small_csv(tmp_path))
    as_json = rows_to_json(csv_rows + audit_logs(LOGS))
    first, log_row = as_json["rows"][0], as_json["rows"][1]
    assert set(first) == {"id", "verdict", "reason", "claimed_speedup", "bound"}
    assert {"tool", "end_to_end_tokens_per_s", "acceptance", "speedup"} <= set(log_row)


def test_format_rows_has_a_summary_line():
    text = format_rows(audit_logs(LOGS))
    assert text.splitlines()[0].split()[:4] == ["id", "verdict", "claimed", "bound"]
    assert text.splitlines()[-1] == "9 rows: 6 consistent, 2 impossible, 1 unverifiable, 0 invalid"


# --- impossible inputs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"tokens_per_sec": "-5"}, "tokens_per_sec '-5' is not a finite number > 0"),
        ({"tokens_per_sec": "0"}, "tokens_per_sec '0' is not a finite number > 0"),
        ({"tokens_per_sec": "nan"}, "tokens_per_sec 'nan' is not a finite number > 0"),
        ({"speedup_vs_baseline": "inf"}, "speedup_vs_baseline 'inf' is not a finite number > 0"),
        ({"speedup_vs_baseline": "1e308"}, "speedup_vs_baseline 1e308 is implausibly large"),
        ({"draft_len": "0"}, "draft_len '0' on a row with draft 'small'; SD drafts >= 1 token"),
        ({"draft_acceptance_rate": "-0.1"}, "draft_acceptance_rate '-0.1' is not a finite number >= 0"),
    ],
)
def test_impossible_inputs_are_invalid_not_judged(tmp_path, fields, reason):
    row = {**sd_row("x", draft_len="4", draft_acceptance_rate="0.5", speedup_vs_baseline="1.1"), **fields}
    (audited,) = audit_csv(write_csv(tmp_path / "r.csv", [row]))
    assert audited.verdict == "invalid" and audited.bound is None
    assert audited.reason.startswith("invalid input: ") and reason in audited.reason


def test_invalid_baselines_do_not_enter_the_baseline_mean(tmp_path):
    base = {"job_id": "b", "machine": "m", "target_model": "moe", "draft_model": "none"}
    rows = [
        {**base, "tokens_per_sec": "10"},
        {**base, "job_id": "b2", "tokens_per_sec": "-1e9"},
        sd_row("x", draft_len="4", draft_acceptance_rate="0.5", tokens_per_sec="12"),
    ]
    audited = by_id(audit_csv(write_csv(tmp_path / "r.csv", rows)))
    assert audited["b2"].verdict == "invalid"
    assert audited["x"].claimed_speedup == pytest.approx(1.2)


def test_a_csv_with_a_byte_order_mark_reads_like_one_without(tmp_path):
    plain = small_csv(tmp_path)
    with_bom = tmp_path / "bom.csv"
    with_bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert audit_csv(with_bom) == audit_csv(plain)
