"""Hostile input to the performance model's commands (`model predict`, `advise`, `calibrate`,
`findings`): zero, negative, 1e-300 and 1e30 rates and sizes, integers too large for a float
(10**400 in JSON), NaN and infinity, empty lists and paths, a list where an object belongs, an
unknown draft, a FIFO given as a file (it must be refused, not read: nothing ever writes to it, so a
read would wait forever), calibration rows that cannot be rows, the newer `advise` flags, and
`findings`' refusals before it writes.

Each probe runs `specmoe.cli.main` in this process, in a thread with a bound (a hang fails it), and
must end in a non-zero exit and one line naming the problem, without "unexpected" or a traceback,
and without a store or suite file when the command would write one. The table of probes with what
each did before these checks: docs/results/cpu/probes-numbers.md and probes-surfaces.md.
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
HOST_HARDWARE = EXAMPLES / "rtx4090.json"  # has a 'host' object, for --n-cpu-moe
MOE = EXAMPLES / "qwen3-30b-a3b.json"
DENSE = EXAMPLES / "qwen3-8b.json"
HYBRID = EXAMPLES / "qwen3.5-35b-a3b.json"
PUBLISHED = REPO / "specmoe" / "calibration" / "data" / "published.csv"
HEADER = PUBLISHED.read_text(encoding="utf-8").splitlines()[0]
ROW = "r1,src,w,h100-sxm,1,sglang,llama-3.1-8b,bfloat16,eagle3,,,2,3,,1,tau,3.0,,512,1.81,reported,n"
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


CALIBRATE_PROBES: dict[str, tuple[bytes, tuple[str, ...], str]] = {
    "rows-empty": (b"", ("fit",), "holds no rows"),
    "rows-header-only": (HEADER.encode() + b"\n", ("fit",), "holds no rows"),
    "rows-garbled": (b"garbage\x00\xff,,,\n", ("fit",), "is not UTF-8 text"),
    "rows-speedup-nan": (f"{HEADER}\n{ROW.replace(',1.81,', ',nan,')}\n".encode(), ("fit",), "got nan"),
    "rows-speedup-negative": (
        f"{HEADER}\n{ROW.replace(',1.81,', ',-2,')}\n".encode(),
        ("heldout",),
        "speedup must be a finite number > 0",
    ),
    "rows-batch-0": (
        f"{HEADER}\n{ROW.replace(',2,3,', ',0,3,')}\n".encode(),
        ("check",),
        "batch and tree_width must be whole numbers >= 1, got 0",
    ),
    "rows-unknown-engine": (
        f"{HEADER}\n{ROW.replace('sglang', 'warpdrive')}\n".encode(),
        ("frozen", "--source", "src"),
        "unknown engine 'warpdrive'",
    ),
    "rows-a-json-file": (HARDWARE.read_bytes(), ("fit",), "no column id, source, where"),
}


@pytest.mark.parametrize("name", list(CALIBRATE_PROBES))
def test_hostile_calibration_rows_are_refused_in_one_line(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    data, command, expect = CALIBRATE_PROBES[name]
    rows = tmp_path / "rows.csv"
    rows.write_bytes(data)
    _refused(("calibrate", command[0], "--data", str(rows), *command[1:]), expect, capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["rows.csv"]


def test_a_calibration_json_of_the_wrong_type_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    wrong = tmp_path / "calibration.json"
    wrong.write_text("[1, 2]", encoding="utf-8")
    _refused(("calibrate", "heldout", "--intervals", str(wrong)), "holds no JSON object", capsys)


def _advise_on(config: Path, hardware: Path, engine: str, draft: str, *more: str) -> tuple[str, ...]:
    flags = ("--config", str(config), "--hardware", str(hardware), "--engine", engine, "--draft", draft)
    return ("advise", *flags, *more)


LLAMA = (MOE, HOST_HARDWARE, "llamacpp-cuda", "ngram")


ADVISE_PROBES: dict[str, tuple[tuple[str, ...], str]] = {
    "dflash-0": (_advise_on(MOE, HARDWARE, "vllm", "dflash:0"), "a DFlash block is 2..64 positions"),
    "dflash-negative": (_advise_on(MOE, HARDWARE, "vllm", "dflash:-3"), "got '-3'"),
    "dflash-text": (_advise_on(MOE, HARDWARE, "vllm", "dflash:abc"), "got 'abc'"),
    "n-cpu-moe-negative": (_advise_on(*LLAMA, "--n-cpu-moe", "-1"), "argument --n-cpu-moe: must be >= 0"),
    "n-cpu-moe-dense": (
        _advise_on(DENSE, HOST_HARDWARE, "llamacpp-cuda", "ngram", "--n-cpu-moe", "2"),
        "this target has none",
    ),
    "n-cpu-moe-no-host": (
        _advise_on(MOE, HARDWARE, "llamacpp-cuda", "ngram", "--n-cpu-moe", "8"),
        "'host' object",
    ),
    "pp-0": (_advise_on(*LLAMA, "--pp", "0"), "argument --pp: must be >= 1"),
    "tree-tokens-0": (_advise_on(*LLAMA, "--tree-tokens", "0"), "--tree-tokens >= 2"),
    "draft-vocab-0": (_advise_on(*LLAMA, "--draft-vocab", "0"), "argument --draft-vocab: must be >= 1"),
    "acceptance-rate-1.5": (
        _advise_on(*LLAMA, "--acceptance", "1.5", "--acceptance-kind", "rate", "--acceptance-gamma", "4"),
        "an acceptance rate is a fraction in [0, 1], got 1.5",
    ),
    "acceptance-tau-0.5": (
        _advise_on(*LLAMA, "--acceptance", "0.5", "--acceptance-kind", "tau", "--acceptance-gamma", "4"),
        "lies in [1, 5], got 0.5",
    ),
    "acceptance-rate-without-gamma": (
        _advise_on(*LLAMA, "--acceptance", "0.5", "--acceptance-kind", "rate"),
        "add --acceptance-gamma G",
    ),
    "mlx-hybrid-on-cuda": (_advise_on(HYBRID, HARDWARE, "mlx", "ngram"), "engine 'mlx' runs on mps"),
}


@pytest.mark.parametrize("name", list(ADVISE_PROBES))
def test_a_hostile_advise_flag_is_refused_in_one_line(name, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    argv, expect = ADVISE_PROBES[name]
    _refused(argv, expect, capsys)


def test_n_cpu_moe_past_the_layers_is_every_layer_as_in_llama_cpp(capsys):
    """llama.cpp's `--n-cpu-moe 99` is the idiom for "every block" (as `-ngl 99`): priced, and the
    answer says how many layers moved."""
    from test_bad_input_files import run_main

    assert run_main(_advise_on(*LLAMA, "--n-cpu-moe", "100000")) == 0
    assert "the routed experts of 48 MoE layers sit in host memory" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["no-such-pass", "hw-missing", "hw-fifo", "hw-not-json", "out-empty"])
def test_findings_refuses_before_writing(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    out = tmp_path / "out"
    hw = tmp_path / "hw.json"
    if name == "hw-fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs on this system")
        os.mkfifo(hw)
    elif name == "hw-not-json":
        hw.write_text("{", encoding="utf-8")
    predict = ("findings", "--pass", "study-hybrid-mtp", "--predict", "--hw", str(hw), "--out", str(out))
    argv, expect = {
        "no-such-pass": (("findings", "--pass", "no-such-pass", "--out", str(out)), "unknown findings pass"),
        "hw-missing": (predict, "not found"),
        "hw-fifo": (predict, "is not a regular file (a FIFO)"),
        "hw-not-json": (predict, "is not valid JSON"),
        "out-empty": (("findings", "--pass", "study-hybrid-mtp", "--predict", "--out", ""), "an empty path"),
    }[name]
    _refused(argv, expect, capsys)
    assert not out.exists()
