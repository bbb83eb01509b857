"""Hostile numbers and files given to the performance model and the newer commands: zero, negative,
1e-300 and 1e30 rates and sizes, integers too large for a float (10**400 in JSON), NaN and
infinity, empty lists and paths, a list where an object belongs, an unknown draft, and a FIFO given
as a file (it must be refused, not read: nothing ever writes to it, so a read would wait forever).

Each probe runs `specmoe.cli.main` in this process, in a thread with a bound (a hang fails it), and
must end in a non-zero exit and one line naming the problem, without "unexpected" or a traceback,
and without a store or suite file when the command would write one. The table of probes with what
each did before these checks: docs/results/cpu/probes-numbers.md.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from test_bad_input_files import run_main

from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError
from specmoe.user_files import read_user_text

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "perf-examples"
HARDWARE = EXAMPLES / "h100-sxm.json"
CONFIG = EXAMPLES / "qwen3-30b-a3b.json"
FIT = REPO / "docs" / "results" / "cpu" / "perf_fits" / "moe-float32.json"
HUGE = "1" + "0" * 400  # 10**400: an integer no float holds

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


def _json(path: Path, changes: dict, replace: tuple[str, str] | None = None) -> str:
    """`path`'s JSON with `changes` merged in (dotted keys reach one level down), written beside the
    test; `replace` swaps text in the written JSON (for numbers json.dumps cannot write)."""
    data = copy.deepcopy(json.loads(path.read_text(encoding="utf-8")))
    for key, value in changes.items():
        head, _, tail = key.partition(".")
        if tail:
            data[head][tail] = value
        else:
            data[key] = value
    text = json.dumps(data)
    if replace:
        assert replace[0] in text
        text = text.replace(*replace, 1)
    return text


def _advise(hardware: str, *more: str) -> tuple[str, ...]:
    return (
        "advise",
        "--config",
        str(CONFIG),
        "--hardware",
        hardware,
        "--engine",
        "vllm",
        "--draft",
        "ngram",
        *more,
    )


def _predict_fit(fit: str, *more: str) -> tuple[str, ...]:
    return ("model", "predict", fit, *more)


# probe -> (the file it writes, as text, or None; argv given that file's path; a part of the line)
Probe = tuple[Callable[[], str] | None, Callable[[str], tuple[str, ...]], str]
RATE = "'bandwidth_bytes_per_s' must be a finite number > 0 per second (per device), between 1 and 1e+18"
FIT_SHAPE = "'model' and 'shape' must be JSON objects"
TOO_LARGE = "an integer of 401 digits, too large for any quantity"
FIFO = "is not a regular file (a FIFO), so nothing to read"

PROBES: dict[str, Probe] = {
    # hardware files: rates out of any device's range, numbers no float holds, wrong types
    "hw-bandwidth-zero": (lambda: _json(HARDWARE, {"bandwidth_bytes_per_s": 0}), _advise, RATE),
    "hw-bandwidth-negative": (lambda: _json(HARDWARE, {"bandwidth_bytes_per_s": -1e12}), _advise, RATE),
    "hw-bandwidth-1e-300": (lambda: _json(HARDWARE, {"bandwidth_bytes_per_s": 1e-300}), _advise, RATE),
    "hw-bandwidth-1e30": (lambda: _json(HARDWARE, {"bandwidth_bytes_per_s": 1e30}), _advise, RATE),
    "hw-bandwidth-nan": (lambda: _json(HARDWARE, {"bandwidth_bytes_per_s": float("nan")}), _advise, RATE),
    "hw-bandwidth-inf": (lambda: _json(HARDWARE, {"bandwidth_bytes_per_s": float("inf")}), _advise, RATE),
    "hw-bandwidth-10e400": (
        lambda: _json(HARDWARE, {"bandwidth_bytes_per_s": 7}, (": 7,", f": {HUGE},")),
        _advise,
        TOO_LARGE,
    ),
    "hw-device-count-10e400": (
        lambda: _json(HARDWARE, {"device_count": 7}, (": 7,", f": {HUGE},")),
        _advise,
        TOO_LARGE,
    ),
    "hw-flops-zero": (
        lambda: _json(HARDWARE, {"flops_per_s": {"bfloat16": 0}}),
        _advise,
        "'bfloat16' must be a finite number > 0 per second",
    ),
    "hw-link-negative": (
        lambda: _json(HARDWARE, {"link_bandwidth_bytes_per_s": -1}),
        _advise,
        "'link_bandwidth_bytes_per_s' must be a finite number > 0 per second",
    ),
    "hw-list-not-object": (lambda: json.dumps([1, 2]), _advise, "must hold a JSON object"),
    "hw-empty-path": (None, lambda _: _advise(""), "argument --hardware: an empty path"),
    # model predict: a fit's shape and numbers
    "predict-fit-0-experts": (
        lambda: _json(FIT, {"shape.num_experts": 0}),
        _predict_fit,
        "shape has 0 experts and top_k 4",
    ),
    "predict-fit-moe-priced-dense": (
        lambda: _json(FIT, {"shape": {"num_experts": 0, "top_k": 0}}),
        _predict_fit,
        "the fit's model is an MoE model (64 experts) but its shape has 0 experts",
    ),
    "predict-fit-experts-text": (
        lambda: _json(FIT, {"shape.num_experts": "64"}),
        _predict_fit,
        "shape.num_experts must be a whole number >= 0, got '64'",
    ),
    "predict-fit-constant-1e30": (
        lambda: _json(FIT, {"constants.dense_s": 1e30}),
        _predict_fit,
        "constant dense_s must be a finite number >= 0 seconds, at most 1e+06, got 1e+30",
    ),
    "predict-fit-constant-negative": (
        lambda: _json(FIT, {"constants.expert_s": -1.0}),
        _predict_fit,
        "constant expert_s must be a finite number >= 0 seconds",
    ),
    "predict-fit-constant-10e400": (
        lambda: _json(FIT, {"constants.dense_s": 7}, ('"dense_s": 7', f'"dense_s": {HUGE}')),
        _predict_fit,
        TOO_LARGE,
    ),
    "predict-fit-shape-list": (lambda: _json(FIT, {"shape": [64, 4]}), _predict_fit, FIT_SHAPE),
    "predict-fit-model-list": (lambda: _json(FIT, {"model": []}), _predict_fit, FIT_SHAPE),
    "predict-fit-bytes-negative": (
        lambda: _json(FIT, {"model.bytes_experts": -5}),
        _predict_fit,
        "model.bytes_experts must be a whole number of bytes >= 0, got -5",
    ),
    "predict-fit-empty-path": (None, lambda _: _predict_fit(""), "argument fit: an empty path"),
    "predict-config-hidden-10e400": (
        lambda: _json(CONFIG, {"hidden_size": 7}, ('"hidden_size": 7', f'"hidden_size": {HUGE}')),
        lambda path: ("model", "predict", "--config", path, "--hardware", str(HARDWARE), "--engine", "vllm"),
        TOO_LARGE,
    ),
    "predict-batch-empty": (None, lambda _: _predict_fit(str(FIT), "--batch", ""), "argument --batch: empty"),
    "predict-gamma-empty": (
        None,
        lambda _: _predict_fit(str(FIT), "--gamma", ""),
        "--gamma: '' is not an integer",
    ),
    "predict-alpha-nan": (
        None,
        lambda _: _predict_fit(str(FIT), "--alpha", "nan"),
        "--alpha: nan is outside [0, 1]",
    ),
    "predict-top-k-0": (None, lambda _: _predict_fit(str(FIT), "--top-k", "0"), "--top-k must be in 1..64"),
    # advise: sizes and times past any machine, empty grids
    "advise-context-1e30": (
        None,
        lambda _: _advise(str(HARDWARE), "--context", "1" + "0" * 30),
        "--context must be between 0 and 100,000,000 tokens",
    ),
    "advise-plain-step-1e30": (
        None,
        lambda _: _advise(str(HARDWARE), "--batch", "1", "--plain-step-ms", "1e30"),
        "--plain-step-ms must be a positive number of ms up to 1e+09",
    ),
    "advise-plain-step-nan": (
        None,
        lambda _: _advise(str(HARDWARE), "--batch", "1", "--plain-step-ms", "nan"),
        "--plain-step-ms must be a positive number of ms",
    ),
    "advise-acceptance-1e30": (
        None,
        lambda _: _advise(str(HARDWARE), "--acceptance", "1e30", "--acceptance-kind", "alpha"),
        "an acceptance alpha is a fraction in [0, 1], got 1e+30",
    ),
    "advise-gamma-empty": (None, lambda _: _advise(str(HARDWARE), "--gamma", ""), "argument --gamma: empty"),
    "advise-batch-empty": (None, lambda _: _advise(str(HARDWARE), "--batch", ""), "argument --batch: empty"),
    "advise-config-empty-path": (
        None,
        lambda _: (
            "advise",
            "--config",
            "",
            "--hardware",
            str(HARDWARE),
            "--engine",
            "vllm",
            "--draft",
            "ngram",
        ),
        "argument --config: an empty path",
    ),
    # calibrate
    "calibrate-data-empty-path": (
        None,
        lambda _: ("calibrate", "fit", "--data", ""),
        "argument --data: an empty path",
    ),
    "calibrate-specbundle-list": (
        lambda: json.dumps([1, 2]),
        lambda path: ("calibrate", "specbundle", path),
        "holds no JSON object",
    ),
    # audit
    "audit-empty-path": (None, lambda _: ("audit", ""), "argument path: an empty path"),
    "audit-max-mb-nan": (None, lambda _: ("audit", str(HARDWARE), "--max-mb", "nan"), "--max-mb must be > 0"),
}

# probe -> argv given a FIFO's path; each line says the FIFO is no file to read
FIFOS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "fifo-as-hardware": lambda fifo: _advise(fifo),
    "fifo-as-config": lambda fifo: (
        "advise",
        "--config",
        fifo,
        "--hardware",
        str(HARDWARE),
        "--engine",
        "vllm",
        "--draft",
        "ngram",
    ),
    "fifo-as-engines": lambda fifo: _advise(str(HARDWARE), "--engines", fifo),
    "fifo-as-fit": lambda fifo: _predict_fit(fifo),
    "fifo-as-draft-fit": lambda fifo: _predict_fit(str(FIT), "--draft", fifo),
    "fifo-as-calibration-rows": lambda fifo: ("calibrate", "fit", "--data", fifo),
    "fifo-as-specbundle": lambda fifo: ("calibrate", "specbundle", fifo),
    "fifo-as-model-check-fit": lambda fifo: ("model", "check", fifo, "--model", "moe"),
}


def _refused(argv: tuple[str, ...], expect: str, capsys) -> str:
    status = run_main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status not in (0, None), f"exit {status}: {err}"  # None: still running at the bound
    assert len(lines) == 1, err
    assert "unexpected" not in err and "Traceback" not in err, err
    assert expect in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("name", list(PROBES))
def test_a_hostile_number_or_path_is_refused_in_one_line(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    write, argv, expect = PROBES[name]
    path = tmp_path / f"{name}.json"
    if write is not None:
        path.write_text(write(), encoding="utf-8")
    _refused(argv(str(path)), expect, capsys)


@needs_fifo
@pytest.mark.parametrize("name", list(FIFOS))
def test_a_fifo_given_as_a_file_is_refused_not_read(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    fifo = tmp_path / "input.json"
    os.mkfifo(fifo)
    _refused(FIFOS[name](str(fifo)), FIFO, capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input.json"]


@pytest.mark.parametrize(
    ("flags", "expect"),
    [
        (("--draft", "no-such-draft"), "--draft no-such-draft: no such model directory or .gguf file"),
        (("--draft", "ngram", "--gamma", ""), "--gamma '': give whole numbers >= 1"),
        (("--draft", "ngram", "--batch", ""), "--batch '': give whole numbers >= 1"),
        (("--draft", "ngram", "--temperature", "nan"), "argument --temperature: must be a finite number"),
        (("--draft", "ngram", "--db", ""), "argument --db: an empty path"),
    ],
    ids=["unknown-draft", "gamma-empty", "batch-empty", "temperature-nan", "db-empty-path"],
)
def test_bench_quick_refuses_in_one_line_and_writes_nothing(flags, expect, tiny_zoo, tmp_path, capsys):
    db = tmp_path / "quick.db"
    argv = ("bench", "quick", "--model", str(tiny_zoo / "moe"), "--db", str(db), *flags)
    _refused(argv, expect, capsys)
    assert list(tmp_path.iterdir()) == []  # no store, no suite file


@needs_fifo
def test_bench_quick_refuses_a_fifo_as_its_dataset(tiny_zoo, tmp_path, capsys):
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    argv = ("bench", "quick", "--model", str(tiny_zoo / "moe"), "--draft", "ngram", "--dataset", str(fifo))
    _refused((*argv, "--db", str(tmp_path / "quick.db")), FIFO, capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["prompts.jsonl"]


def test_bench_quick_refuses_an_empty_model_path(capsys):
    _refused(("bench", "quick", "--model", "", "--draft", "ngram"), "argument --model: an empty path", capsys)


def test_an_integer_past_any_float_is_a_parse_error():
    with pytest.raises(json.JSONDecodeError, match="401 digits"):
        json_value('{"a": ' + HUGE + "}")
    assert json_value('{"a": 12345678901234567890}') == {"a": 12345678901234567890}


@needs_fifo
def test_only_regular_files_are_read(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SpecmoeError, match="not a regular file"):
        read_user_text(fifo)
    with pytest.raises(SpecmoeError, match="an empty path"):
        read_user_text("")
    (tmp_path / "ok.json").write_text("{}", encoding="utf-8")
    assert read_user_text(tmp_path / "ok.json") == "{}"
