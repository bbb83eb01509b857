"""Hostile input, round 4, where the right outcome is more than a refused command: a pickle checkpoint
under --allow-pickle loads, copies of prompts are said at the start and in the report, a prompt file
edited while its suite runs stops it, audits of impossible counts say "invalid", and a run whose
throughput is zero is no row. The one-line refusals: tests/test_bad_input_round4.py."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from test_bad_input_identity import _prompt_file
from tiny_suites import TINY_SD_GROUP, tiny_sd_suite

from specmoe.bench.suite_run import run_suite
from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.results.store import Store
from specmoe.suite.expand import expand
from specmoe.suite.legacy_keys import keep_stored_keys, path_keyed, warn_path_keys
from specmoe.suite.load import load_suite

VLLM = Path(__file__).parent / "data" / "serving-results" / "vllm"


# --- --allow-pickle loads what it promises --------------------------------------------------------


def _pickle_copy(model: Path, folder: Path, extra: dict) -> Path:
    """`model` with its safetensors weights saved as pytorch_model.bin, `extra` pickled beside them."""
    out = folder / f"{model.name}-pickle"
    shutil.copytree(model, out)
    tensors = {}
    for file in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(file))
        file.unlink()
    (out / "model.safetensors.index.json").unlink(missing_ok=True)
    torch.save({**tensors, **extra}, out / "pytorch_model.bin")
    return out


def test_allow_pickle_loads_a_checkpoint_the_weights_only_unpickler_refuses(tiny_zoo, tmp_path, capsys):
    # An older checkpoint: a numpy scalar pickled beside the tensors. torch's weights-only unpickler,
    # which transformers uses whatever it is told, refuses it: "unexpected UnpicklingError" before.
    model = _pickle_copy(tiny_zoo / "draft-xs", tmp_path, {"training_step": np.int64(5)})
    argv = ["generate", "--target", str(model), "--prompt", "Hello", "--max-new-tokens", "6", "--json"]
    assert main([*argv, "--allow-pickle"]) == 0
    pickled = json.loads(capsys.readouterr().out)["outputs"][0]["token_ids"]
    assert main([*argv[:2], str(tiny_zoo / "draft-xs"), *argv[3:]]) == 0
    assert pickled == json.loads(capsys.readouterr().out)["outputs"][0]["token_ids"]  # the same weights
    assert main(argv) == 2  # without the flag: still refused, in one line
    assert "holds only pickle weights" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["cut to a third", "not a pickle"])
def test_a_broken_pickle_checkpoint_is_one_line(tiny_zoo, tmp_path, capsys, damage):
    model = _pickle_copy(tiny_zoo / "draft-xs", tmp_path, {})
    data = (model / "pytorch_model.bin").read_bytes()
    broken = data[: len(data) // 3] if damage == "cut to a third" else b"not a pickle\n"
    (model / "pytorch_model.bin").write_bytes(broken)
    argv = ["generate", "--target", str(model), "--prompt", "hi", "--max-new-tokens", "2", "--allow-pickle"]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "pytorch_model.bin: not a readable pickle checkpoint" in lines[0], lines
    assert "unexpected" not in lines[0]


# --- copies of prompts are said before the run and in the report ------------------------------------


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


# --- a prompt file edited while its suite runs ---------------------------------------------------


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
