"""`specmoe bench quick`: a sweep from arguments, written as a suite file that reruns the same runs."""

from __future__ import annotations

import pytest

from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.results.store import Store
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite
from specmoe.suite.quick import QuickArgs, build_quick_suite, model_name, parse_int_list, suite_path_for


def _args(tiny_zoo, tmp_path, **changes) -> QuickArgs:
    fields = {
        "model": str(tiny_zoo / "moe"),
        "drafts": (str(tiny_zoo / "draft-xs"), "ngram"),
        "gammas": (2, 4),
        "batches": (1, 2),
        "db": tmp_path / "out" / "r.db",
        "num_prompts": 2,
        "max_new_tokens": 4,
    }
    return QuickArgs(**{**fields, **changes})


def test_written_suite_reloads_to_the_same_runs(tiny_zoo, tmp_path):
    args = _args(tiny_zoo, tmp_path)
    suite, path = build_quick_suite(args)
    assert path == suite_path_for(args.db) == tmp_path / "out" / "r.suite.toml"
    reloaded = load_suite(path)
    assert [s.run_id for s in expand(reloaded)] == [s.run_id for s in expand(suite)]
    sd = [s for s in expand(suite) if s.arm == "sd"]
    assert {(s.draft, s.gamma, s.batch_size) for s in sd} == {
        (d, g, b) for d in ("draft-xs", "ngram:1-3") for g in (2, 4) for b in (1, 2)
    }
    assert {s.max_new_tokens for s in sd} == {4} and {s.prompts for s in sd} == {2}


def test_model_names_come_from_paths_and_hub_ids():
    assert model_name("/x/zoo/draft-xs/") == "draft-xs"
    assert model_name("Qwen/Qwen3-0.6B") == "Qwen3-0.6B"
    assert model_name("/m/model q4.gguf") == "model-q4"
    assert model_name("/m/oracle") == "m-oracle"


def test_same_directory_as_target_and_draft_is_one_model(tiny_zoo, tmp_path):
    args = _args(tiny_zoo, tmp_path, drafts=(str(tiny_zoo / "moe"),))
    suite, _ = build_quick_suite(args)
    assert list(suite.models) == ["moe"]


def test_dataset_reads_prompt_and_text_lines(tiny_zoo, tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text('{"text": "alpha beta"}\n{"prompt": "gamma"}\n', encoding="utf-8")
    suite, _ = build_quick_suite(_args(tiny_zoo, tmp_path, dataset=str(data), num_prompts=None))
    assert {s.prompt_set for s in expand(suite)} == {str(data.resolve())}


@pytest.mark.parametrize(
    ("text", "what"),
    [("2,x", "--gamma"), ("0", "--batch"), ("", "--gamma")],
)
def test_bad_int_lists_are_one_line(text, what):
    with pytest.raises(SpecmoeError, match=f"{what} .*whole numbers >= 1"):
        parse_int_list(text, what)


def test_bad_dataset_and_oracle_are_one_line_and_write_nothing(tiny_zoo, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"question": "no"}\n', encoding="utf-8")
    with pytest.raises(SpecmoeError, match=r"bad\.jsonl:2: no prompt string"):
        build_quick_suite(_args(tiny_zoo, tmp_path, dataset=str(bad)))
    with pytest.raises(SpecmoeError, match=r"--dataset nope\.jsonl: no such file"):
        build_quick_suite(_args(tiny_zoo, tmp_path, dataset="nope.jsonl"))
    with pytest.raises(SpecmoeError, match="oracle drafts need a cost model"):
        build_quick_suite(_args(tiny_zoo, tmp_path, drafts=("oracle:0.5",)))
    assert not (tmp_path / "out").exists()


def test_cli_runs_stores_and_prints_the_summary(tiny_zoo, tmp_path, capsys):
    db = tmp_path / "q.db"
    argv = [
        "bench", "quick", "--model", str(tiny_zoo / "moe"), "--draft", "ngram", "--gamma", "2",
        "--num-prompts", "1", "--max-new-tokens", "4", "--warmup", "0", "--db", str(db), "--quiet",
        "--threads", "1",
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"suite written to {tmp_path / 'q.suite.toml'}" in out
    assert "moe" in out and "ngram:1-3" in out and "speedup" in out
    with Store(db) as store:
        rows = store.rows()
    assert {(r.arm, r.suite) for r in rows} == {("baseline", "bench-quick"), ("sd", "bench-quick")}
    # The written file reruns as a suite: every run is already stored, nothing is measured again.
    assert main(["bench", "run", str(tmp_path / "q.suite.toml"), "--db", str(db), "--quiet"]) == 0
    with Store(db) as store:
        assert len(store.rows()) == len(rows)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gamma", "2,-1"], "--gamma '2,-1': give whole numbers"),
        (["--dataset", "missing.jsonl"], "--dataset missing.jsonl: no such file"),
        (["--model", "specmoe-test/absent"], "not in the local Hugging Face cache"),
        (["--num-prompts", "0"], "argument --num-prompts: must be >= 1, got 0"),
    ],
)
def test_cli_bad_input_is_one_line(tiny_zoo, tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    model = str(tiny_zoo / "moe")
    argv = ["bench", "quick", "--model", model, "--draft", "ngram", "--db", str(tmp_path / "x.db")]
    try:
        code = main(argv + extra)
    except SystemExit as stop:  # argparse's own usage errors
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
