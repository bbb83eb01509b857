"""Hostile files and options given to the commands in process: suite files, stores, exports, audit
inputs, performance-model files, generate's options and the environment. Servers:
tests/test_bad_input_serving.py; Ctrl-C and a locked store: tests/test_bad_input_runs.py. The table
of all fifty, with what each did before: docs/results/cpu/probes.md.

Each refused input runs `specmoe.cli.main` in this process (no interpreter start per case), in a
thread, so an input that hangs fails its case after a bound instead of hanging the session. It must
end in exit status 2 and one line `specmoe...: error: ...` on stderr, without a traceback or
"unexpected" (a bug that hid as a one-liner), and nothing stored: a suite refused before its first
run leaves no store file behind.
"""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from suite_files import TINY_ZOO, suite_toml

from specmoe.cli import main

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "perf-examples"
FIT = REPO / "docs" / "results" / "cpu" / "perf_fits" / "moe-float32.json"
PROFILE = REPO / "docs" / "results" / "cpu" / "perf_profiles" / "moe-float32.json"
STUDY = REPO / "docs" / "results" / "study-runs.csv"
VLLM = Path(__file__).parent / "data" / "serving-results" / "vllm"
BOUND_S = 120  # far beyond any case here; a case still running then has hung


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]  # after `specmoe`
    expect: str  # a part of the one stderr line
    db: Path | None = None  # a store that must not exist afterwards


def suite_text(
    name: str,
    model: Path,
    groups: list[dict[str, Any]] | None = None,
    models: dict[str, Any] | None = None,
    defaults: dict[str, Any] | None = None,
    zoo: dict[str, Any] | None = None,
) -> str:
    """`model` as both target t and draft d at γ 2, unless `groups` or `models` say otherwise;
    `defaults` add to (or replace) the [defaults] keys."""
    settings = {"repeats": 1, "warmup": 0, "max_new_tokens": 4, "dtype": "float32"}
    settings |= {"prompt_set": "factual", "prompts": 1} | (defaults or {})
    models = models or {"t": {"path": model}, "d": {"path": model}}
    return suite_toml(name, zoo=zoo, defaults=settings, models=models, groups=groups or [_group("d")])


def _group(draft: str, gamma: int = 2) -> dict[str, Any]:
    return {"name": "g", "target": ["t"], "draft": [draft], "gamma": [gamma]}


def _suites(folder: Path, model: Path) -> dict[str, Path]:
    texts = {
        "plain": suite_text("plain", model),
        "unicode-key": suite_text(
            "unicode-key", model, [{"name": "g", "target": ["módel"]}], {"módel": {"path": model}}
        ),
        # Literal text: a table declared twice is the TOML parser's refusal.
        "dup-table": suite_text("dup-table", model) + "[defaults]\nrepeats = 2\n",
        "path-is-file": suite_text(
            "path-is-file", model, models={"t": {"path": model / "config.json"}, "d": {"path": model}}
        ),
        "zoo-traversal": suite_text(
            "zoo-traversal", model, models={"t": {"zoo": "../../etc"}, "d": {"zoo": "draft-xs"}}, zoo=TINY_ZOO
        ),
        "empty-group": suite_text("empty-group", model, [{"name": "g"}]),
        "oracle": suite_text("oracle", model, [_group("oracle:1.5")]),
        "ngram": suite_text("ngram", model, [_group("ngram:5-2")]),
        "repeats": suite_text("repeats", model, defaults={"repeats": 1000000000}),
        "gamma": suite_text("gamma", model, [_group("d", gamma=10000)]),
        "empty": "",
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = folder / f"{name}.toml"
        paths[name].write_text(text, encoding="utf-8")
    (folder / "folder.toml").mkdir()
    paths["folder"] = folder / "folder.toml"
    return paths


def _stores(folder: Path, good_db: Path) -> dict[str, Path]:
    import sqlite3

    zero = folder / "zero.db"
    zero.write_bytes(b"")
    newer = folder / "newer.db"
    shutil.copy(good_db, newer)
    with sqlite3.connect(newer) as conn:
        conn.execute("UPDATE schema_version SET version = 3")
    conn.close()
    return {"zero": zero, "newer": newer, "good": good_db}


def _audit_files(folder: Path) -> dict[str, Path]:
    lines = STUDY.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], lines[1:20]
    files = {
        "empty": "",
        "header-only": header + "\n",
        "semicolon": "\n".join(line.replace(",", ";") for line in [header, *rows]) + "\n",
        "wide": ",".join(f"c{i}" for i in range(1_000_000)) + "\n" + ",".join("1" * 1_000_000) + "\n",
    }
    paths = {}
    for name, text in files.items():
        paths[name] = folder / f"{name}.csv"
        paths[name].write_text(text, encoding="utf-8")
    paths["garbage"] = folder / "bench.jsonl"
    good = '{"batch_size": 1, "steps": 0, "topk": 0, "num_draft_tokens": 0, "acc_length": 1.0, "speed": 98.8}'
    paths["garbage"].write_text(good + "\n" + good + " trailing}garbage\n", encoding="utf-8")
    return paths


def _perf_files(folder: Path) -> dict[str, Path]:
    fit, profile = json.loads(FIT.read_text()), json.loads(PROFILE.read_text())
    nan_fit = json.loads(json.dumps(fit))
    nan_fit["constants"]["dense_s"] = float("nan")  # json writes NaN, and Python's json reads it back
    negative_fit = json.loads(json.dumps(fit))
    negative_fit["constants"]["overhead_s"] = -1.0
    negative_times = json.loads(json.dumps(profile))
    for point in negative_times["points"]:
        point["median_s"] = -point["median_s"]
    zero_bandwidth = json.loads((EXAMPLES / "h100-sxm.json").read_text())
    zero_bandwidth["bandwidth_bytes_per_s"] = 0
    files = {
        "fit-nan": nan_fit,
        "fit-negative": negative_fit,
        "profile-empty": {**profile, "points": []},
        "profile-negative": negative_times,
        "hw-zero": zero_bandwidth,
    }
    paths = {"fit": FIT}
    for name, data in files.items():
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    return paths


def _advise(*args: str, hardware: Path = EXAMPLES / "h100-sxm.json", config: str = "mixtral-8x7b") -> tuple:
    return (
        "advise", "--config", str(EXAMPLES / f"{config}.json"), "--draft", "ngram",
        "--hardware", str(hardware), "--engine", "vllm", "--acceptance-kind", "alpha", *args,
    )  # fmt: skip


def cases(zoo: Path, folder: Path, good_db: Path) -> dict[str, Case]:
    model = zoo / "draft-xs"
    suites, stores = _suites(folder, model), _stores(folder, good_db)
    audit, perf = _audit_files(folder), _perf_files(folder)

    def run(suite: str, *extra: str) -> tuple[str, ...]:
        return ("bench", "run", str(suites[suite]), "--db", str(folder / f"{suite}.db"), "--quiet", *extra)

    def generate(*extra: str) -> tuple[str, ...]:
        return ("generate", "--target", str(model), "--max-new-tokens", "4", "--prompt", "hi", *extra)

    def refused(argv: tuple[str, ...], expect: str, suite: str | None = None) -> Case:
        return Case(argv, expect, folder / f"{suite}.db" if suite else None)

    export = ("bench", "export", "--db", str(stores["good"]), "--out")
    return {
        # suite files
        "suite-unicode-model-key": refused(run("unicode-key"), "bad model name 'módel'", "unicode-key"),
        "suite-duplicate-table": refused(run("dup-table"), "Cannot declare ('defaults',) twice", "dup-table"),
        "suite-set-gamma-negative": refused(
            run("plain", "--set", "gamma=-2"), "defaults.gamma: gamma must be >= 1, got -2", "plain"
        ),
        "suite-model-path-is-a-file": refused(
            run("path-is-file"), "config.json' is a file, not a model directory", "path-is-file"
        ),
        "suite-zoo-name-traversal": refused(
            run("zoo-traversal"), "preset 'tiny' has no model '../../etc'", "zoo-traversal"
        ),
        "suite-empty-group": refused(run("empty-group"), "groups[0].target: no target", "empty-group"),
        "suite-oracle-1.5": refused(run("oracle"), "bad oracle draft 'oracle:1.5'", "oracle"),
        "suite-ngram-5-2": refused(run("ngram"), "bad n-gram draft 'ngram:5-2'", "ngram"),
        "suite-repeats-1e9": refused(
            run("repeats"), "the suite would measure 2000000000 runs, above the limit of 100000", "repeats"
        ),
        "suite-gamma-10000": refused(run("gamma"), "gamma (10000) = 10020 exceeds the 4096-token", "gamma"),
        "suite-empty-file": refused(run("empty"), "schema: missing; put `schema = 1`", "empty"),
        "suite-is-a-directory": refused(run("folder"), "folder.toml is a directory; pass", "folder"),
        # stores and exports
        "store-zero-bytes": refused(("bench", "summary", "--db", str(stores["zero"])), "holds no runs"),
        "store-newer-schema": refused(
            ("bench", "summary", "--db", str(stores["newer"])), "schema version [3], this specmoe reads 2"
        ),
        "export-out-with-newline": refused((*export, str(folder / "a\nb.csv")), "holds a control character"),
        "export-out-is-a-directory": refused(
            (*export, str(folder)), "is a directory; pass a file name inside it"
        ),
        "report-out-is-a-file": refused(
            ("bench", "report", "--db", str(stores["good"]), "--out", str(suites["plain"])),
            "is a file; pass a folder for the report",
        ),
        # audit inputs
        "audit-csv-empty": refused(("audit", str(audit["empty"])), "the file is empty"),
        "audit-csv-header-only": refused(("audit", str(audit["header-only"])), "a header and no rows"),
        "audit-csv-semicolons": refused(
            ("audit", str(audit["semicolon"])), "separated by semicolons, not commas"
        ),
        "audit-csv-million-columns": refused(("audit", str(audit["wide"])), "missing column(s) job_id"),
        "audit-jsonl-trailing-garbage": refused(
            ("audit", str(audit["garbage"])), "bench.jsonl:2: invalid JSON (Extra data)"
        ),
        # performance-model files and options
        "fit-of-a-fit": refused(
            ("model", "fit", str(perf["fit"]), "--out", str(folder / "o.json")), "is a specmoe-fit, expected"
        ),
        "fit-empty-points": refused(
            ("model", "fit", str(perf["profile-empty"]), "--out", str(folder / "o.json")), "no timed points"
        ),
        "fit-negative-times": refused(
            ("model", "fit", str(perf["profile-negative"]), "--out", str(folder / "o.json")),
            "points[0]: median_s must be a finite time > 0 seconds",
        ),
        "predict-fit-nan-constant": refused(
            ("model", "predict", str(perf["fit-nan"])), "constant dense_s must be a finite number >= 0"
        ),
        "predict-fit-negative-constant": refused(
            ("model", "predict", str(perf["fit-negative"])), "constant overhead_s must be a finite number"
        ),
        "advise-hardware-zero-bandwidth": refused(
            _advise("--acceptance", "0.6", hardware=perf["hw-zero"]), "'bandwidth_bytes_per_s' must be"
        ),
        "advise-acceptance-1.5": refused(
            _advise("--acceptance", "1.5"), "an acceptance alpha is a fraction in [0, 1], got 1.5"
        ),
        "advise-gamma-max-10000": refused(
            _advise("--acceptance", "0.6", "--gamma-max", "10000"), "--gamma-max must be between 1 and 64"
        ),
        "advise-config-is-hardware": refused(
            _advise("--acceptance", "0.6", config="h100-sxm"), "'hidden_size' must be an integer >= 1"
        ),
        # generate
        "generate-empty-prompt": refused(generate("--prompt", ""), "empty prompt"),
        "generate-prompt-100k-tokens": refused(
            ("generate", "--target", str(model), "--prompt", "word " * 100_000),
            "prompt (100002 tokens) + max_new_tokens (64) + gamma (0) exceeds the model's context",
        ),
        "generate-gamma-0": refused(generate("--draft", str(model), "--gamma", "0"), "--gamma must be >= 1"),
        "generate-device-cuda-99": refused(generate("--device", "cuda:99"), "--device cuda:99"),
        # zoo and environment
        "zoo-build-seed-negative": refused(
            ("zoo", "build", "--out", str(folder / "z"), "--seed", "-1"), "--seed: must be >= 0, got -1"
        ),
        "xdg-cache-home-is-a-file": refused(
            ("bench", "run", "quick", "--db", str(folder / "xdg.db"), "--quiet"),
            "is a file, not a folder; set XDG_CACHE_HOME to a writable folder, or pass --zoo DIR",
            "xdg",
        ),
    }  # fmt: skip


def run_main(argv: tuple[str, ...]) -> int | None:
    """main's exit status (argparse's too), or None when it is still running after BOUND_S."""
    outcome: list[int] = []

    def call() -> None:
        try:
            outcome.append(main(list(argv)))
        except SystemExit as exit_:  # a usage error from argparse
            outcome.append(int(exit_.code or 0))

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(BOUND_S)
    return outcome[0] if outcome else None


@pytest.fixture(scope="module")
def setting(tiny_zoo, tmp_path_factory) -> tuple[Path, dict[str, Case]]:
    from tiny_suites import tiny_sd_suite

    from specmoe.bench.suite_run import run_suite
    from specmoe.suite.load import load_suite

    folder = tmp_path_factory.mktemp("more")
    good_db = folder / "good.db"
    suite = tiny_sd_suite(folder, "good", {"prompts": 1, "max_new_tokens": 2, "repeats": 1, "warmup": 0})
    run_suite(load_suite(suite), good_db, tiny_zoo, progress=False)
    (folder / "cache-file").write_text("not a folder")
    return folder, cases(tiny_zoo, folder, good_db)


CASE_IDS = [
    "suite-unicode-model-key", "suite-duplicate-table", "suite-set-gamma-negative",
    "suite-model-path-is-a-file", "suite-zoo-name-traversal", "suite-empty-group", "suite-oracle-1.5",
    "suite-ngram-5-2", "suite-repeats-1e9", "suite-gamma-10000", "suite-empty-file", "suite-is-a-directory",
    "store-zero-bytes", "store-newer-schema", "export-out-with-newline", "export-out-is-a-directory",
    "report-out-is-a-file",
    "audit-csv-empty", "audit-csv-header-only", "audit-csv-semicolons", "audit-csv-million-columns",
    "audit-jsonl-trailing-garbage",
    "fit-of-a-fit", "fit-empty-points", "fit-negative-times", "predict-fit-nan-constant",
    "predict-fit-negative-constant", "advise-hardware-zero-bandwidth", "advise-acceptance-1.5",
    "advise-gamma-max-10000", "advise-config-is-hardware",
    "generate-empty-prompt", "generate-prompt-100k-tokens", "generate-gamma-0", "generate-device-cuda-99",
    "zoo-build-seed-negative", "xdg-cache-home-is-a-file",
]  # fmt: skip


@pytest.mark.parametrize("name", CASE_IDS)
def test_hostile_input_is_refused_in_one_line(setting, name, capsys, monkeypatch):
    folder, all_cases = setting
    case = all_cases[name]
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    if name == "xdg-cache-home-is-a-file":
        monkeypatch.setenv("XDG_CACHE_HOME", str(folder / "cache-file"))
    status = run_main(case.argv)
    assert status is not None, f"still running after {BOUND_S} s: a hang"
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("specmoe") and ": error: " in lines[0], lines[0]
    assert "unexpected" not in lines[0] and "Traceback" not in lines[0], lines[0]
    assert case.expect in lines[0], lines[0]
    if case.db is not None:
        assert not case.db.exists()


def test_every_case_is_listed(setting):
    assert sorted(setting[1]) == sorted(CASE_IDS)


def test_nothing_is_written_for_a_refused_export(setting):
    folder, _ = setting
    assert not [p for p in folder.iterdir() if "\n" in p.name]
    assert not (folder / "z").exists()  # the refused zoo build made nothing
