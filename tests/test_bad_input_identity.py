"""What a run is, by content: a prompt file edited in place (before a suite or while it runs), a
draft whose tokenizer is not the target's, copies of prompts counted as units and said before the
run, and the weights behind a stored key.

Beside tests/test_bad_input_cli.py (faults through the command line) these run in process, against the
tiny zoo, since each needs a store made first and then something changed under it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from test_bad_input_cli import other_tokenizer
from tiny_suites import TINY_SD_GROUP, tiny_sd_suite

from specmoe.backends.tokenizer_digest import tokenizer_digest
from specmoe.bench.suite_run import run_suite
from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.prompts import original_id
from specmoe.report.summary_json import to_json
from specmoe.report.summary_table import build, format_text
from specmoe.results.store import Store
from specmoe.suite.expand import expand
from specmoe.suite.legacy_keys import keep_stored_keys, path_keyed, warn_path_keys
from specmoe.suite.load import load_suite


def _prompt_file(path: Path, *texts: str) -> Path:
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def _file_suite(folder: Path, prompts: Path) -> Path:
    defaults = {"prompt_set": prompts, "prompts": 1, "max_new_tokens": 2, "repeats": 1, "warmup": 0}
    return tiny_sd_suite(folder, "edited", defaults)


def _stored_ids(db: Path) -> set[str]:
    with Store(db) as store:
        return store.finished_ids()


# --- 1. a prompt file is part of a run's key by what it holds ------------------------------------


def test_a_prompt_file_edited_in_place_is_measured_again(tiny_zoo, tmp_path):
    prompts = _prompt_file(tmp_path / "mine.jsonl", "The capital of France is", "Water boils at")
    path, db = _file_suite(tmp_path, prompts), tmp_path / "r.db"
    first = {r.run_id for r in run_suite(load_suite(path), db, tiny_zoo, progress=False)}
    assert len(first) == 2  # a baseline and an SD run
    again = {r.run_id for r in run_suite(load_suite(path), db, tiny_zoo, progress=False)}
    assert again == first and _stored_ids(db) == first  # unchanged content: resumed, nothing new

    _prompt_file(prompts, "The capital of Italy is", "Water boils at")  # the same path, edited
    edited = {r.run_id for r in run_suite(load_suite(path), db, tiny_zoo, progress=False)}
    assert len(edited) == 2 and edited.isdisjoint(first)
    assert _stored_ids(db) == first | edited


def test_the_same_prompts_saved_differently_are_the_same_work(tmp_path):
    prompts = _prompt_file(tmp_path / "mine.jsonl", "one", "two")
    before = {s.run_id for s in expand(load_suite(_file_suite(tmp_path, prompts)))}
    prompts.write_text('{"prompt":"one"}\r\n\r\n{"prompt": "two"}\r\n', encoding="utf-8")
    assert {s.run_id for s in expand(load_suite(_file_suite(tmp_path, prompts)))} == before


def test_built_in_sets_are_keyed_as_before(tmp_path):
    suite = load_suite(tiny_sd_suite(tmp_path, "builtin", {"prompt_set": "factual", "prompts": 1}))
    for spec in expand(suite):
        assert spec.prompt_digest is None and "prompt_digest" not in spec.key_fields


def test_a_store_with_path_keyed_runs_of_a_file_resumes_them(tmp_path):
    prompts = _prompt_file(tmp_path / "mine.jsonl", "one", "two")
    specs = expand(load_suite(_file_suite(tmp_path, prompts)))
    assert all(s.prompt_digest is not None for s in specs)
    assert keep_stored_keys(specs, set()) == specs  # a new store: keys by content
    # A store written before content keys holds one of the file's runs under its path key: every
    # run of that file keeps its path key, so the stored one resumes and its partner pairs with it.
    old = {path_keyed(next(s for s in specs if s.arm == "baseline")).run_id}
    kept = keep_stored_keys(specs, old)
    assert [s.run_id for s in kept] == [path_keyed(s).run_id for s in specs]
    assert {s.baseline_key for s in kept} == {path_keyed(s).baseline_key for s in specs}


# --- 2. copies of prompts are not more prompts ---------------------------------------------------


def _copies_suite(folder: Path, count: int) -> Path:
    prompts = _prompt_file(folder / "three.jsonl", "The capital of France is", "Water boils at", "One two")
    defaults = {"prompt_set": prompts, "prompts": count, "max_new_tokens": 2, "repeats": 1, "warmup": 0}
    # An oracle accepting every proposal: its bound, 1 + γ, leaves room for a 2-token run's timing
    # jitter, which the random draft's bound of 1x did not (a busy machine made it "impossible").
    oracle = {**TINY_SD_GROUP, "draft": ["oracle:1.0"], "oracle_cost": "draft-xs"}
    return tiny_sd_suite(folder, f"selection{count}", defaults, groups=[oracle])


def test_units_beyond_the_set_are_labelled_as_copies(tiny_zoo, tmp_path):
    rows = run_suite(load_suite(_copies_suite(tmp_path, 5)), tmp_path / "r.db", tiny_zoo, progress=False)
    table = build(rows)
    (only,) = table.comparisons
    assert (only.units, only.prompts, only.copies) == (5, 3, 2)  # 5 units from 3 distinct prompts
    assert " n=5 (3 prompts + 2 copies)" in format_text(table)
    (record,) = to_json(table)["rows"]
    assert (record["prompts"], record["copies"]) == (3, 2)
    assert record["speedup"]["text"].endswith("n=5 (3 prompts + 2 copies)")


def test_a_selection_within_the_set_has_no_copies(tiny_zoo, tmp_path):
    rows = run_suite(load_suite(_copies_suite(tmp_path, 3)), tmp_path / "r.db", tiny_zoo, progress=False)
    (only,) = build(rows).comparisons
    assert (only.units, only.prompts, only.copies) == (3, 3, 0)
    assert " copies)" not in format_text(build(rows))


def test_a_copy_id_names_its_original():
    assert original_id("factual:3/2") == "factual:3" and original_id("factual:3") == "factual:3"
    assert original_id("81/12") == "81" and original_id("a/1") == "a/1" and original_id("/2") == "/2"


# --- 3. a draft's tokenizer is its target's by content, not by size ------------------------------


def test_a_draft_with_another_tokenizer_of_the_same_size_is_refused(tiny_zoo, tmp_path, capsys):
    other = other_tokenizer(tiny_zoo / "draft-xs", tmp_path)
    argv = ["generate", "--target", str(tiny_zoo / "moe"), "--prompt", "Hi", "--max-new-tokens", "2"]
    assert main([*argv, "--draft", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "draft and target tokenizers differ" in err and "pick a draft that shares" in err
    assert main([*argv, "--draft", str(tiny_zoo / "draft-xs")]) == 0  # its own family's draft runs
    assert (
        tokenizer_digest(other)
        != tokenizer_digest(tiny_zoo / "moe")
        == tokenizer_digest(tiny_zoo / "draft-xs")
    )
    assert tokenizer_digest(tmp_path) is None  # no tokenizer.json: compared by size alone


# --- 5. the weights behind a stored key ------------------------------------------------------------


def _path_suite(folder: Path, zoo: Path) -> Path:
    """The tiny MoE and draft-xs named by path (not by zoo name), from a copy the test may change."""
    import shutil

    for name in ("moe", "draft-xs"):
        shutil.copytree(zoo / name, folder / name)
    defaults = {"prompt_set": "factual", "prompts": 1, "max_new_tokens": 2, "repeats": 1, "warmup": 0}
    models = {name: {"path": folder / name} for name in ("moe", "draft-xs")}
    return tiny_sd_suite(folder, "bypath", defaults, zoo=None, models=models)


def _retrain_in_place(model_dir: Path) -> None:
    """New weights at the same path, same shapes: every tensor nudged."""
    from safetensors.torch import load_file, save_file

    file = model_dir / "model.safetensors"
    save_file({k: v * 1.01 for k, v in load_file(file).items()}, file, metadata={"format": "pt"})


def test_every_row_records_the_weights_it_measured(tiny_zoo, tmp_path):
    rows = run_suite(load_suite(_path_suite(tmp_path, tiny_zoo)), tmp_path / "r.db", None, progress=False)
    sd = next(r for r in rows if r.arm == "sd")
    assert set(sd.env["weights"]) == {"moe", "draft-xs"}
    assert all(len(v) == 12 for v in sd.env["weights"].values())
    baseline = next(r for r in rows if r.arm == "baseline")
    assert baseline.env["weights"] == {"moe": sd.env["weights"]["moe"]}


def test_weights_changed_under_a_stored_run_are_said_once_per_model(tiny_zoo, tmp_path, caplog):
    suite, db = _path_suite(tmp_path, tiny_zoo), tmp_path / "r.db"
    run_suite(load_suite(suite), db, None, progress=False)
    caplog.clear()
    run_suite(load_suite(suite), db, None, progress=False)  # unchanged: nothing said
    assert not [r for r in caplog.records if "weights are not those" in r.getMessage()]
    _retrain_in_place(tmp_path / "draft-xs")
    run_suite(load_suite(suite), db, None, progress=False)
    said = [r.getMessage() for r in caplog.records if "weights are not those" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "model 'draft-xs': its weights are not those 1 stored run(s)"
    )
    assert "measure into a new --db" in said[0]


def test_a_fingerprint_follows_the_weights_not_the_place(tiny_zoo, tmp_path):
    import shutil

    from specmoe.backends.weights import weights_fingerprint

    shutil.copytree(tiny_zoo / "draft-xs", tmp_path / "copy")
    assert weights_fingerprint(tmp_path / "copy") == weights_fingerprint(tiny_zoo / "draft-xs")
    _retrain_in_place(tmp_path / "copy")
    assert weights_fingerprint(tmp_path / "copy") != weights_fingerprint(tiny_zoo / "draft-xs")


# --- 6. copies said before the run, a prompt file edited while its suite runs ----------------------


def test_more_prompts_than_the_set_holds_is_said_before_the_run_and_in_the_report(tiny_zoo, tmp_path, caplog):
    from specmoe.report.results import collect
    from specmoe.report.tables import sd_table

    prompts = _prompt_file(tmp_path / "one.jsonl", "The capital of France is")
    defaults = {"prompt_set": prompts, "prompts": 2, "max_new_tokens": 2, "repeats": 1, "warmup": 0}
    oracle = {**TINY_SD_GROUP, "draft": ["oracle:1.0"], "oracle_cost": "draft-xs"}
    suite = tiny_sd_suite(tmp_path, "copies", defaults, groups=[oracle])
    with caplog.at_level(logging.WARNING, logger="specmoe.suite.size"):
        rows = run_suite(load_suite(suite), tmp_path / "r.db", tiny_zoo, progress=False)
    said = [r.getMessage() for r in caplog.records if "numbered copies" in r.getMessage()]
    assert len(said) == 1 and "prompts = 2 but prompt set" in said[0] and "holds 1, so 1 of the 2" in said[0]
    table = sd_table(collect(rows))
    assert any("(1 prompts + 1 copies)" in cell for row in table.cells for cell in row)
    assert all(record["copies"] == 1 for record in table.records)


def test_a_selection_within_the_set_says_nothing(tiny_zoo, tmp_path, caplog):
    from specmoe.suite.size import warn_copies

    prompts = _prompt_file(tmp_path / "two.jsonl", "one", "two")
    suite = tiny_sd_suite(tmp_path, "fits", {"prompt_set": prompts, "prompts": 2})
    assert warn_copies(load_suite(suite)) == []


def test_a_prompt_file_edited_mid_suite_stops_it_and_the_rerun_measures_the_edit(
    tiny_zoo, tmp_path, monkeypatch
):
    from specmoe.bench import runner

    prompts = _prompt_file(tmp_path / "mine.jsonl", "The capital of France is", "Water boils at")
    defaults = {"prompt_set": prompts, "max_new_tokens": 2, "repeats": 1, "warmup": 0}
    path, db = tiny_sd_suite(tmp_path, "edited", defaults), tmp_path / "r.db"
    block = runner.Runner.block

    def block_then_edit(self, *args, **kwargs):
        rows = block(self, *args, **kwargs)
        _prompt_file(prompts, "The capital of Italy is", "Water boils at")  # after the first block
        return rows

    monkeypatch.setattr(runner.Runner, "block", block_then_edit)
    with pytest.raises(SpecmoeError, match=r"prompt file .*mine\.jsonl changed while suite edited ran"):
        run_suite(load_suite(path), db, tiny_zoo, progress=False)
    with Store(db) as store:
        first = store.rows()
    assert len(first) == 2  # the first block (one prompt batch, both arms), measured before the edit
    assert {p["prompt_id"] for r in first for p in r.prompts} == {"mine:0"}
    monkeypatch.setattr(runner.Runner, "block", block)
    again = run_suite(load_suite(path), db, tiny_zoo, progress=False)
    assert len(again) == 4 and not {r.run_id for r in again} & {r.run_id for r in first}


def test_a_store_keyed_by_path_says_an_edit_cannot_be_told(tmp_path, caplog):
    prompts = _prompt_file(tmp_path / "mine.jsonl", "one", "two")
    specs = expand(load_suite(tiny_sd_suite(tmp_path, "old", {"prompt_set": prompts, "prompts": 1})))
    old = {path_keyed(specs[0]).run_id}  # a store from before prompt files were keyed by content
    with caplog.at_level(logging.WARNING, logger="specmoe.suite.legacy_keys"):
        lines = warn_path_keys(specs, keep_stored_keys(specs, old))
    assert (
        len(lines) == 1
        and "keyed by its path" in lines[0]
        and "an edit to it since cannot be told" in lines[0]
    )
    assert warn_path_keys(specs, keep_stored_keys(specs, set())) == []  # a new store: nothing to say
