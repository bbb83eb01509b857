"""Prompts are the sampling unit: stratified selection, batches, per-prompt records and export."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter

import pytest
from tiny_suites import tiny_sd_suite

from specmoe.bench.plan import plan
from specmoe.bench.suite_run import run_suite
from specmoe.prompts import Prompt, load_prompts, prompt_batch, select_prompts
from specmoe.report.summary_table import format_summary
from specmoe.results.compare import compare
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite

# Spec-Bench's question.jsonl: 480 questions in 13 categories of unequal size (MT-Bench's eight
# categories of 10, then translation, summarization, QA, math reasoning and RAG of 80 each).
CATEGORIES = (
    *(f"mt_{c}" for c in ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "hum")),
    "translation",
    "summarization",
    "qa",
    "math_reasoning",
    "rag",
)


@pytest.fixture()
def spec_bench(tmp_path):
    path = tmp_path / "question.jsonl"
    lines, qid = [], 0
    for category in CATEGORIES:
        for i in range(10 if category.startswith("mt_") else 80):
            qid += 1
            turns = [f"{category} question {i}: tell me about item {qid}.", "and a second turn"]
            lines.append(json.dumps({"question_id": qid, "category": category, "turns": turns}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_spec_bench_file_has_480_prompts_in_13_categories(spec_bench):
    prompts = load_prompts(spec_bench)
    assert len(prompts) == 480
    assert len({p.category for p in prompts}) == 13
    assert prompts[0] == Prompt("1", "mt_writing", "mt_writing question 0: tell me about item 1.")


def test_26_prompts_take_two_from_every_category_evenly_spaced(spec_bench):
    picked = select_prompts(load_prompts(spec_bench), 26)
    assert len({p.id for p in picked}) == 26
    assert Counter(p.category for p in picked) == dict.fromkeys(CATEGORIES, 2)
    qa = [int(p.id) for p in picked if p.category == "qa"]
    assert qa[1] - qa[0] == 40  # spread through the category, not its first two
    assert select_prompts(load_prompts(spec_bench), 26) == picked  # deterministic


def test_builtin_sets_name_their_category():
    prompts = load_prompts("code")
    assert {p.category for p in prompts} == {"code"}
    assert [p.id for p in prompts[:2]] == ["code:0", "code:1"]
    assert select_prompts(prompts, None) == prompts


def test_every_batch_holds_b_prompts_and_copies_are_numbered():
    selection = [Prompt(str(i), "c", f"p{i}") for i in range(5)]
    assert [p.id for p in prompt_batch(selection, 2, 0)] == ["0", "1"]
    last = prompt_batch(selection, 2, 2)  # 5 prompts, B = 2: the third batch wraps to the start
    assert [p.id for p in last] == ["4", "0/2"] and last[1].text == "[2] p0"
    assert [p.id for p in prompt_batch(selection, 8, 0)][5:] == ["0/2", "1/2", "2/2"]


def test_a_suite_measures_26_prompts_of_all_13_categories_and_exports_them(spec_bench, tiny_zoo, tmp_path):
    defaults = {"prompts": 26, "max_new_tokens": 4, "prompt_set": spec_bench}
    suite = load_suite(tiny_sd_suite(tmp_path, "specbench", defaults))
    assert len(expand(suite)) == 52  # 26 batches of one prompt, two arms each
    blocks = plan(suite)
    assert len(blocks) == 26 and all(len(b.specs) == 2 for b in blocks)
    db = tmp_path / "r.db"
    rows = run_suite(suite, db, tiny_zoo, progress=False)
    (cell,) = compare(rows)
    assert (cell.units, cell.prompts) == (26, 26)
    assert cell.speedup.level == 0.95 and cell.speedup.n == 26
    by_category = compare(rows, by_category=True)
    assert sorted(c.category for c in by_category) == sorted(CATEGORIES)
    assert all(c.units == 2 and c.speedup.level is None for c in by_category)  # 2 units: a range
    assert "translation" in format_summary(rows, by_category=True)
    for row in rows:
        assert row.measure["started_at"] < row.measure["finished_at"]
        assert row.measure["block"] == row.config["baseline_key"] + f"-{row.repeat}"
    out = tmp_path / "prompts.csv"
    cli = [sys.executable, "-m", "specmoe.cli", "bench", "export", "--db", str(db), "--per-prompt"]
    done = subprocess.run([*cli, "--out", str(out)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"wrote {out}"
    with out.open(newline="", encoding="utf-8") as f:
        records = list(csv.DictReader(f))
    assert len(records) == 52
    sd = [r for r in records if r["arm"] == "sd"]
    assert len({r["prompt_id"] for r in sd}) == 26
    assert Counter(r["category"] for r in sd) == dict.fromkeys(CATEGORIES, 2)
    for record in sd:
        assert int(record["emitted"]) + int(record["truncated"]) == int(record["accepted"]) + int(
            record["rounds"]
        )
        assert record["noisy"] == "0" and float(record["tokens_per_s"]) > 0
