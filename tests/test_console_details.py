"""What a user reads: --help with defaults, the shipped suites, text without special tokens, export to
stdout, an audit that can fail a CI job, summary rows in grid order, progress lines that fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_foreign import sd_row, write_csv
from test_summary_table import cell

from specmoe.api import display_text, load_tokenizer
from specmoe.bench.progress import MAX_LINE, ArmResult, block_line
from specmoe.cli import DESCRIPTION, main
from specmoe.report.summary_table import build, format_text
from specmoe.results.store import Store
from specmoe.suite.shipped import shipped_suites


def help_text(capsys, *command: str) -> str:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def test_help_shows_defaults_and_explains_every_option(capsys):
    run = help_text(capsys, "bench", "run")
    assert "results store (SQLite); resumes (default: results.db)" in run
    assert "(default: local)" in run
    predict = help_text(capsys, "model", "predict")
    assert "per-token acceptance probabilities, comma-separated (default: 0.6,0.8)" in predict
    assert "(default: None)" not in predict and "(default: False)" not in predict
    generate = help_text(capsys, "generate")
    assert "(default: float32)" in generate and "(default: 64)" in generate


def test_bench_run_help_lists_every_shipped_suite(capsys):
    suites = shipped_suites()
    assert len(suites) == len(list((Path(__file__).parents[1] / "specmoe" / "suites").glob("*.toml"))) >= 8
    assert f"a shipped suite: {', '.join(suites)}" in help_text(capsys, "bench", "run")


def test_the_top_level_help_speaks_to_users(capsys):
    text = help_text(capsys)
    assert " ".join(DESCRIPTION.split()) in text
    assert "Each subcommand parses" not in text


def test_displayed_text_leaves_special_tokens_out(tiny_zoo):
    tokenizer = load_tokenizer(tiny_zoo / "moe")
    ids = [*tokenizer.encode("the cat", add_special_tokens=False), tokenizer.eos_token_id]
    assert tokenizer.eos_token in tokenizer.decode(ids)  # the raw decode keeps it
    shown = display_text(tokenizer, ids)
    assert tokenizer.eos_token not in shown and shown.strip()


def test_export_to_stdout_writes_no_file_named_dash(tmp_path, monkeypatch, capsys):
    db = tmp_path / "r.db"
    with Store(db) as store:
        for row in cell("a", 2, 1.2):
            store.add(row)
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "export", "--db", str(db), "--out", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run_id,") and len(out.strip().splitlines()) == 1 + 4
    assert not (tmp_path / "-").exists()
    assert main(["bench", "export", "--db", str(db), "--out", "-", "--format", "parquet"]) == 2
    assert "Parquet is binary" in capsys.readouterr().err


def test_audit_fail_on_impossible_exits_non_zero(tmp_path, capsys):
    impossible = sd_row("x", draft_len="16", draft_acceptance_rate="0.002", speedup_vs_baseline="1.25")
    path = write_csv(tmp_path / "runs.csv", [impossible])
    assert main(["audit", str(path)]) == 0  # a report by default
    assert main(["audit", str(path), "--fail-on", "impossible"]) == 1
    assert "1 of 1 rows are impossible (--fail-on)" in capsys.readouterr().err
    fine = write_csv(tmp_path / "ok.csv", [sd_row("y", draft_len="4", draft_acceptance_rate="0.5",
                                                   speedup_vs_baseline="1.1")])  # fmt: skip
    assert main(["audit", str(fine), "--fail-on", "impossible"]) == 0


def test_summary_rows_follow_target_draft_gamma_and_batch_not_measurement_order():
    rows = (
        cell("c", 2, 1.0, target="moe", gamma=8)
        + cell("d", 2, 1.0, target="dense", gamma=4)
        + cell("e", 2, 1.0, target="moe", gamma=2, batch_size=4)
        + cell("f", 2, 1.0, target="moe", gamma=2, batch_size=1)
    )
    table = build(rows)
    order = [(c.config["target"], c.config["gamma"], c.config["batch_size"]) for c in table.comparisons]
    assert order == [("dense", 4, 1), ("moe", 2, 1), ("moe", 2, 4), ("moe", 8, 1)]
    body = format_text(table).splitlines()
    assert [line.split()[0] for line in body if line.startswith(("moe ", "dense "))] == [
        "dense",
        "moe",
        "moe",
        "moe",
    ]


def test_a_progress_line_with_many_arms_and_a_long_name_fits():
    arms = [ArmResult(f"draft-xs g={g}", 40.0 + g, (40.0 + g) / 40.0) for g in range(1, 13)]
    where = "g: " + "/home/someone/models/" + "a-very-long-model-directory-name" * 4 + " B=1 factual"
    line = block_line(3, 96, where, 40.0, arms, elapsed=65.0, eta=600.0)
    assert len(line) <= MAX_LINE
    assert "12 SD arms 41.0-52.0 tok/s 1.02-1.30× (best draft-xs g=12)" in line
    assert line.startswith("[3/96] g: /home") and line.endswith("about 10 min 00 s left")
    assert "…" in line and "B=1 factual" in line
