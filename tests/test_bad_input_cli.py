"""Bad input and faults through the command line, as a user meets them.

Every case runs `specmoe` as a subprocess and must end in exactly one line on stderr that names the
problem, a non-zero exit, no traceback, and nothing stored: a store it was pointed at holds no run
afterwards (or, when it is not a specmoe store, is byte for byte what it was). The cases run in
parallel, once per session (`outcomes`), since each pays for a Python start and a torch import.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from broken_models import broken_models
from fake_servers import free_port
from suite_files import write_suite

from specmoe.cli import main

PASSWORD = "s3cret-pw"


@dataclass(frozen=True)
class Case:
    argv: tuple[str | bytes, ...]  # after `specmoe`; bytes for text that is not UTF-8
    expect: str  # a part of the one stderr line
    db: str | None = None  # a store the case must leave without runs


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    db_before: bytes | None  # the store's bytes before the run, when it existed


def _suite(
    folder: Path,
    name: str,
    target: Path,
    draft: Path,
    max_new_tokens: int = 4,
    prompts: str = "factual",
    defaults: dict[str, Any] | None = None,
    first: dict[str, Any] | None = None,
):
    """Two groups: a baseline of a good target, then an SD group whose draft may be broken, so a
    fault found only when the second group starts would have stored the first group's run.
    `defaults` and `first` add to (or replace) keys of [defaults] and of the first group."""
    settings = {"repeats": 1, "warmup": 0, "max_new_tokens": max_new_tokens, "dtype": "float32"}
    groups = [
        {"name": "first", "target": ["t"], "batch_size": [1]} | (first or {}),
        {"name": "second", "target": ["t"], "draft": ["d"], "gamma": [2], "batch_size": [1]},
    ]
    path = write_suite(
        folder,
        name,
        defaults=settings | {"prompt_set": prompts} | (defaults or {}),
        models={"t": {"path": target}, "d": {"path": draft}},
        groups=groups,
    )
    return str(path)


def _served_suite(folder: Path, url: str, load: dict[str, Any] | None = None) -> str:
    """One served target at `url`; `load` replaces the group's closed-loop `concurrency = [1]`."""
    group = {"name": "g", "target": ["t"]} | (load or {"concurrency": [1]})
    path = write_suite(
        folder,
        "served",
        defaults={"repeats": 1, "warmup": 0, "max_new_tokens": 4, "prompt_set": "factual"},
        models={"t": {"url": url, "model": "m"}},
        groups=[group],
    )
    return str(path)


def _stores(folder: Path) -> dict[str, Path]:
    """Files that are not a usable store: someone else's SQLite database, text, a folder, and a
    specmoe store whose pages after the first are overwritten."""
    foreign = folder / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
    conn.close()
    text = folder / "notes.db"
    text.write_text("not a database\n" * 100)
    directory = folder / "folder.db"
    directory.mkdir()
    corrupt = folder / "corrupt.db"
    from specmoe.results.store import FailedAttempt, Store

    with Store(corrupt) as store:
        for i in range(50):
            store.add_failure(FailedAttempt(f"run-{i}", 1, "x" * 200, True), "t")
    data = bytearray(corrupt.read_bytes())
    data[4096:] = b"\xab" * (len(data) - 4096)
    corrupt.write_bytes(bytes(data))
    return {"foreign": foreign, "text": text, "folder": directory, "corrupt": corrupt}


def other_tokenizer(model: Path, folder: Path) -> Path:
    """A copy of `model` whose tokenizer.json swaps two tokens: the same vocabulary size, and the
    same weights, but ids that mean other tokens."""
    other = folder / f"{model.name}-other-tokenizer"
    shutil.copytree(model, other)
    tokenizer = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    first, second = (t for t, i in vocab.items() if i in (300, 301))
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    return other


def _cases(zoo: Path, folder: Path) -> dict[str, Case]:
    good = zoo / "draft-xs"
    broken = broken_models(zoo / "draft-xs", folder)  # the other faults: tests/test_backend_hf.py, in process
    stores = _stores(folder)
    retokenized = other_tokenizer(good, folder)
    bad_jsonl = folder / "prompts.jsonl"
    bad_jsonl.write_bytes(b'{"prompt": "fine"}\n{"prompt": "caf\xe9"}\n')
    wrong_columns = folder / "columns.csv"
    wrong_columns.write_text("a,b\n1,2\n")
    binary = folder / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01job_id")
    db = str(folder / "results.db")
    missing_folder = str(folder / "no-such-folder" / "results.db")
    url = f"http://alice:{PASSWORD}@127.0.0.1:{free_port()}/v1"

    def generate(*args: str | bytes) -> tuple[str | bytes, ...]:
        return ("generate", "--target", str(good), "--max-new-tokens", "4", "--prompt", "hi", *args)

    def export(store: Path) -> tuple[str, ...]:  # store faults without importing torch: fast
        return ("bench", "export", "--db", str(store), "--out", str(folder / "runs.csv"))

    def run(suite: str, store: str = db) -> tuple[str, ...]:
        return ("bench", "run", suite, "--db", store, "--quiet")

    def suite(name: str, draft: Path = good, **kw) -> str:
        return _suite(folder, name, good, draft, **kw)

    return {
        # sampling parameters
        "temperature-nan": Case(generate("--temperature", "nan"), "must be a finite number, got 'nan'"),
        "temperature-inf": Case(generate("--temperature", "inf"), "must be a finite number, got 'inf'"),
        "temperature-negative": Case(
            generate("--temperature", "-1"), "temperature must be a finite number >= 0"
        ),
        "temperature-tiny": Case(generate("--temperature", "1e-30"), "too small to sample with"),
        "top-p-nan": Case(generate("--top-p", "nan"), "must be a finite number, got 'nan'"),
        "top-p-zero": Case(generate("--top-p", "0"), "top-p must be in (0, 1]"),
        "temperature-not-a-number": Case(generate("--temperature", "warm"), "not a number: 'warm'"),
        "max-new-tokens-negative": Case(generate("--max-new-tokens", "-3"), "max_new_tokens must be >= 1"),
        "prompt-not-utf8": Case(generate("--prompt", b"\xff\xfe"), "not valid UTF-8 text"),
        # models
        "model-missing-tensor": Case(
            ("generate", "--target", str(broken["missing"]), "--prompt", "hi"),
            "1 weight tensor(s) missing from the checkpoint (model.norm.weight)",
        ),
        "model-not-found": Case(
            ("generate", "--target", str(folder / "nope"), "--prompt", "hi"), "not found"
        ),
        # a suite fails before its first run
        "suite-draft-missing-tensor": Case(
            run(suite("missing", broken["missing"])), "missing from the checkpoint", db
        ),
        "suite-draft-truncated": Case(run(suite("truncated", broken["truncated"])), "truncated", db),
        "suite-draft-other-tokenizer": Case(
            run(suite("tokenizer", retokenized)), "draft and target tokenizers differ", db
        ),
        "suite-prompts-not-utf8": Case(
            run(suite("prompts", prompts=str(bad_jsonl))), "prompts.jsonl:2: not valid UTF-8", db
        ),
        "suite-context-too-long": Case(
            run(suite("context", max_new_tokens=5000)), "exceeds the 4096-token context", db
        ),
        # stores
        "store-foreign-sqlite": Case(run(suite("ok"), str(stores["foreign"])), "not a specmoe results store"),
        "store-text-file": Case(export(stores["text"]), "file is not a database"),
        "store-is-a-folder": Case(run(suite("ok"), str(stores["folder"])), "is not a file"),
        "store-corrupted": Case(export(stores["corrupt"]), "database disk image is malformed"),
        "store-missing-folder": Case(run(suite("ok"), missing_folder), "does not exist; create it"),
        "export-out-missing-folder": Case(
            ("bench", "export", "--db", str(stores["foreign"]), "--out", str(folder / "no" / "x.csv")),
            "does not exist; create it or pass another --out",
        ),
        "export-foreign-store": Case(
            ("bench", "export", "--db", str(stores["foreign"]), "--out", str(folder / "x.csv")),
            "not a specmoe results store",
        ),
        "export-missing-store": Case(
            ("bench", "export", "--db", str(folder / "none.db")), "results store not found"
        ),
        "report-corrupted-store": Case(
            ("bench", "report", "--db", str(stores["corrupt"]), "--out", str(folder / "report")), "malformed"
        ),
        # servers: the password is never shown (nor stored: the case's store must hold no run)
        "server-url-password-unreachable": Case(
            run(_served_suite(folder, url), str(folder / "served.db")),
            "cannot reach http://127.0.0.1:",
            str(folder / "served.db"),
        ),
        # audit
        "audit-missing-path": Case(("audit", str(folder / "nope.csv")), "does not exist"),
        "audit-not-utf8": Case(("audit", str(binary)), "pass a readable UTF-8 CSV file"),
        "audit-wrong-columns": Case(("audit", str(wrong_columns)), "missing column(s)"),
        # usage
        "unknown-command": Case(("benchmark",), "invalid choice: 'benchmark'"),
        "missing-required-option": Case(("generate",), "the following arguments are required: --target"),
        "bad-executor": Case(("bench", "run", "quick", "--executor", "mpi"), "invalid choice: 'mpi'"),
    }


def _run_case(case: Case) -> Outcome:
    before = None
    if case.db is not None and Path(case.db).is_file():
        before = Path(case.db).read_bytes()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("SPECMOE_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "specmoe.cli", *case.argv], capture_output=True, env=env, timeout=300
    )
    return Outcome(
        proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"), before
    )


@pytest.fixture(scope="module")
def outcomes(tiny_zoo, tmp_path_factory) -> tuple[dict[str, Case], dict[str, Outcome], dict[str, bytes]]:
    folder = tmp_path_factory.mktemp("bad-input")
    cases = _cases(tiny_zoo, folder)
    files = {str(p): p.read_bytes() for p in folder.glob("*.db") if p.is_file()}
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        results = dict(zip(cases, pool.map(_run_case, cases.values()), strict=True))
    return cases, results, files


CASE_IDS = [
    "temperature-nan", "temperature-inf", "temperature-negative", "temperature-tiny", "top-p-nan",
    "top-p-zero", "temperature-not-a-number", "max-new-tokens-negative", "prompt-not-utf8",
    "model-missing-tensor", "model-not-found",
    "suite-draft-missing-tensor", "suite-draft-truncated", "suite-draft-other-tokenizer",
    "suite-prompts-not-utf8", "suite-context-too-long",
    "store-foreign-sqlite", "store-text-file", "store-is-a-folder", "store-corrupted",
    "store-missing-folder", "export-out-missing-folder", "export-foreign-store", "export-missing-store",
    "report-corrupted-store", "server-url-password-unreachable",
    "audit-missing-path", "audit-not-utf8", "audit-wrong-columns",
    "unknown-command", "missing-required-option", "bad-executor",
]  # fmt: skip


@pytest.mark.parametrize("name", CASE_IDS)
def test_bad_input_is_one_line_nonzero_and_stores_nothing(outcomes, name):
    cases, results, files = outcomes
    case, result = cases[name], results[name]
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0, result
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert case.expect in lines[0], lines[0]
    assert PASSWORD not in result.stderr + result.stdout
    if case.db is not None:
        assert _stored_runs(Path(case.db)) == 0
        if Path(case.db).is_file():
            assert PASSWORD.encode() not in Path(case.db).read_bytes()
    for path, before in files.items():  # the stores that are not specmoe's stay untouched
        assert Path(path).read_bytes() == before, path


def test_every_case_is_listed(outcomes):
    assert sorted(outcomes[0]) == sorted(CASE_IDS)


def _stored_runs(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        count = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] if "runs" in tables else 0
    conn.close()
    return count


# --- an unexpected error (a bug) -------------------------------------------------------------------


def _boom(args):
    raise ZeroDivisionError("division by zero")


def test_an_unexpected_error_is_one_line_pointing_to_the_traceback(monkeypatch, capsys):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    monkeypatch.setattr("specmoe.cli.zoo.run_zoo_list", _boom)
    assert main(["zoo", "list"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "specmoe: error: unexpected ZeroDivisionError: division by zero; run again with `specmoe -v ...` "
        "or SPECMOE_DEBUG=1 for the traceback, and report it"
    ]


@pytest.mark.parametrize("debug", ["-v", "SPECMOE_DEBUG"])
def test_the_traceback_is_one_switch_away(monkeypatch, debug):
    monkeypatch.setattr("specmoe.cli.zoo.run_zoo_list", _boom)
    argv = ["zoo", "list"]
    if debug == "-v":
        argv.insert(0, "-v")
    else:
        monkeypatch.setenv("SPECMOE_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(argv)
