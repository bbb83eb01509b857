"""Hostile input through the command line, beyond tests/test_bad_input_cli.py: numbers out of any range,
symlink loops, files that are JSON of the wrong shape, a store edited by hand, suites too large to
run, and two builds of one zoo at once.

The command-line cases run as test_bad_input_cli's do (`_run_case`: `specmoe` in a subprocess, in
parallel, once per session) and must end in one line `specmoe...: error: ...` on stderr, exit
status 2, no traceback, no "unexpected" (an unexpected error is a bug that hid as a one-liner), and
no store: a suite refused before its first run leaves no store file behind, not even an empty one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from test_bad_input_cli import Case, Outcome, _run_case, _stored_runs, _suite
from test_summary_table import cell

from specmoe.report.summary_json import to_json
from specmoe.report.summary_table import build, format_text
from specmoe.results.store import Store


def _stored_run(folder: Path) -> Path:
    """A store holding two runs, the first with a config column that is not JSON (edited by hand)."""
    db = folder / "edited.db"
    with Store(db) as store:
        for row in cell("c", 1, 1.5):
            store.add(row)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET config = '{not json' WHERE seq = (SELECT MIN(seq) FROM runs)")
    conn.close()
    return db


def _cases(zoo: Path, folder: Path) -> dict[str, Case]:
    good = zoo / "draft-xs"
    models = {}
    for name, text in (("config-array", "[]"), ("config-not-json", "{not json")):
        models[name] = folder / name
        shutil.copytree(good, models[name])
        (models[name] / "config.json").write_text(text)
    bad_zoo = folder / "bad-zoo"
    shutil.copytree(zoo, bad_zoo)
    (bad_zoo / "zoo.json").write_text("{not json")
    array_zoo = folder / "array-zoo"
    array_zoo.mkdir()
    (array_zoo / "zoo.json").write_text("[]")
    loop = folder / "loop.jsonl"
    os.symlink(folder / "loop2.jsonl", loop)
    os.symlink(loop, folder / "loop2.jsonl")
    edited = _stored_run(folder)

    def generate(*args: str) -> tuple[str, ...]:
        return ("generate", "--target", str(good), "--max-new-tokens", "4", "--prompt", "hi", *args)

    def run(name: str, *args: str, **kw) -> tuple[str, ...]:
        path = _suite(folder, name, good, good, **kw)
        return ("bench", "run", path, "--db", str(folder / f"{name}.db"), "--quiet", *args)

    grid = {"batch_size": list(range(1, 65)), "draft": ["ngram"], "gamma": list(range(1, 3001))}
    return {
        "generate-seed-2**70": Case(generate("--seed", str(2**70)), "does not fit in 64 bits"),
        "hw-read-mib-1e15": Case(("hw", "--read-mib", "1e15"), "--read-mib 1000000000000000 does not fit"),
        "profile-names-the-option": Case(
            ("profile", "--model", str(good), "--repeats", "0", "--out", str(folder / "p.json")),
            "argument --repeats: must be >= 1, got 0",
        ),
        "model-config-array": Case(
            ("generate", "--target", str(models["config-array"]), "--prompt", "hi"),
            "config.json' is not a JSON object (an array)",
        ),
        "model-config-not-json": Case(
            ("generate", "--target", str(models["config-not-json"]), "--prompt", "hi"),
            "config.json' is not valid JSON",
        ),
        "zoo-manifest-not-json": Case(
            ("generate", "--zoo", str(bad_zoo), "--target", "draft-xs", "--prompt", "hi"),
            "zoo.json is not valid UTF-8 JSON",
        ),
        "zoo-manifest-array": Case(("zoo", "list", "--zoo", str(array_zoo)), "zoo.json is not a JSON object"),
        "store-config-not-json": Case(
            ("bench", "summary", "--db", str(edited)), "has a malformed column config"
        ),
        # suites refused before their first run: no store file is created
        "suite-threads-0": Case(run("threads", "--threads", "0"), "must be >= 1, got 0", "threads"),
        "suite-temperature-inf": Case(
            run("inf", defaults={"temperature": math.inf}),
            "defaults.temperature: temperature must be a finite number, got inf",
            "inf",
        ),
        "suite-prompts-symlink-loop": Case(
            run("loop", prompts=str(loop)), "is a symlink loop or unreadable", "loop"
        ),
        "suite-batch-2**40": Case(
            run("batch", first={"batch_size": [2**40]}),
            f"batch_size {2**40} is above the limit of 4096 sequences, in group 'first'",
            "batch",
        ),
        "suite-prompts-1000000": Case(
            run("prompts", defaults={"prompts": 1000000}),
            "prompts = 1000000 is above the limit of 100000 per grid point",
            "prompts",
        ),
        "suite-grid-3000x64": Case(
            run("grid", first=grid),
            "the suite would measure",
            "grid",
        ),
    }


@pytest.fixture(scope="module")
def outcomes(tiny_zoo, tmp_path_factory) -> tuple[Path, dict[str, Case], dict[str, Outcome]]:
    folder = tmp_path_factory.mktemp("hostile")
    cases = _cases(tiny_zoo, folder)
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        results = dict(zip(cases, pool.map(_run_case, cases.values()), strict=True))
    return folder, cases, results


CASE_IDS = [
    "generate-seed-2**70", "hw-read-mib-1e15", "profile-names-the-option",
    "model-config-array", "model-config-not-json", "zoo-manifest-not-json", "zoo-manifest-array",
    "store-config-not-json",
    "suite-threads-0", "suite-temperature-inf", "suite-prompts-symlink-loop",
    "suite-batch-2**40", "suite-prompts-1000000", "suite-grid-3000x64",
]  # fmt: skip


@pytest.mark.parametrize("name", CASE_IDS)
def test_hostile_input_is_one_line_exit_2_and_leaves_no_store(outcomes, name):
    folder, cases, results = outcomes
    case, result = cases[name], results[name]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "unexpected" not in lines[0], lines[0]
    assert "tokenizer" not in lines[0], lines[0]  # a broken config.json is not the tokenizer's fault
    assert lines[0].startswith("specmoe") and ": error: " in lines[0], lines[0]
    assert case.expect in lines[0], lines[0]
    if case.db is not None:  # here: the suite's name, whose store must not exist at all
        assert not (folder / f"{case.db}.db").exists()


def test_every_hostile_case_is_listed(outcomes):
    assert sorted(outcomes[1]) == sorted(CASE_IDS)


def test_the_malformed_run_is_named_with_its_store(outcomes):
    folder, _, results = outcomes
    line = results["store-config-not-json"].stderr.strip()
    assert "run 'c-base-0-0'" in line and str(folder / "edited.db") in line
    assert _stored_runs(folder / "edited.db") == 2  # reading refused, nothing deleted


# --- a configuration whose runs were all flagged noisy stays in the summary --------------------


def test_a_configuration_with_every_run_noisy_is_a_row_without_a_number():
    rows = cell("clean", 3, 1.5) + [replace(r, noisy=True) for r in cell("noisy", 3, 2.0, moe_top_k=2)]
    table = build(rows)
    by_top_k = {c.config["moe_top_k"]: c for c in table.comparisons}
    assert by_top_k[2].no_number == "all 6 runs flagged noisy: no number" and by_top_k[2].units == 0
    assert by_top_k[4].no_number == "" and by_top_k[4].speedup.value == pytest.approx(1.5)
    text = format_text(table)
    row = next(line for line in text.splitlines() if "all 6 runs flagged noisy: no number" in line)
    assert "2.00×" not in text and "nan" not in row
    record = {r["top_k"]: r for r in to_json(table)["rows"]}
    assert record[2]["speedup"] is None and record[2]["no_number"] == "all 6 runs flagged noisy: no number"
    assert record[2]["sd_tokens_per_s"] is None and record[4]["no_number"] is None
    json.dumps(to_json(table), allow_nan=False)  # no NaN reaches the JSON


def test_a_cell_with_one_noisy_run_in_every_pair_says_how_many():
    rows = cell("half", 2, 1.5)
    rows = [replace(r, noisy=True) if r.arm == "sd" else r for r in rows]
    (only,) = build(rows).comparisons
    assert only.no_number == "2 of 4 runs, one in every pair, flagged noisy: no number"


# --- the size of a suite, counted before it runs -------------------------------------------------


def test_the_run_count_is_what_the_suite_lists_or_an_upper_bound():
    from specmoe.suite.expand import expand
    from specmoe.suite.load import builtin_suite_path, load_suite
    from specmoe.suite.size import check_size

    for name in ("family", "quick", "study"):
        suite = load_suite(builtin_suite_path(name))
        listed = len(expand(suite))
        counted = check_size(suite)
        # Equal but for runs two groups share (a baseline), which each group counts.
        assert listed <= counted <= 2 * listed, name
    assert check_size(load_suite(builtin_suite_path("family"))) == len(
        expand(load_suite(builtin_suite_path("family")))
    )


# --- two builds of one zoo at once ------------------------------------------------------------------


def test_two_builds_of_one_zoo_at_once_build_it_once(tmp_path, monkeypatch):
    import specmoe.zoo.build as build_module

    built: list[Path] = []
    inner = build_module._build

    def counting(out_dir, *args, **kwargs):
        built.append(out_dir)
        return inner(out_dir, *args, **kwargs)

    monkeypatch.setattr(build_module, "_build", counting)
    out = tmp_path / "cache" / "tiny-seed0"
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def build() -> None:
        start.wait()
        try:
            build_module.build_zoo("tiny", out, seed=0)
        except BaseException as err:  # a thread cannot raise into the test: kept for the assertion
            errors.append(err)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert built == [out]  # the second waited for the lock, then reused the first's zoo
    assert (out / "zoo.json").is_file() and not (out / ".zoo-build.json").exists()
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".tiny-seed0.zoo-lock", "tiny-seed0"]
