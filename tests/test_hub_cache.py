"""Hub IDs ("org/name") resolve from the local Hugging Face cache, never from the network."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from suite_files import write_suite

from specmoe.bench.preflight import preflight
from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.suite.load import load_suite
from specmoe.suite.overrides import SuiteOverrides
from specmoe.zoo import resolve_model
from specmoe.zoo.hub_cache import hub_cache_dir, looks_like_hub_id, resolve_hub_id

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def one_model_suite(tmp_path: Path, name: str, path: str) -> Path:
    """`s.toml`: one model given by `path` (a hub ID or a directory), measured alone."""
    return write_suite(
        tmp_path, None, file="s.toml", models={name: {"path": path}}, groups=[{"name": "g", "target": name}]
    )


@pytest.fixture
def hub_cache(tmp_path, tiny_zoo, monkeypatch) -> Path:
    """A hub cache in tmp_path holding the tiny zoo's moe as "specmoe-test/tiny-moe", laid out as
    huggingface_hub lays it out; every socket connection fails, so a look-up that went to the
    network would fail the test."""
    cache = tmp_path / "hub"
    repo = cache / "models--specmoe-test--tiny-moe"
    shutil.copytree(tiny_zoo / "moe", repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def no_network(*args, **kwargs):
        raise AssertionError("the hub cache look-up tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    return cache


def test_hub_id_shape():
    assert looks_like_hub_id("Qwen/Qwen3-0.6B")
    assert looks_like_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct")
    for text in ("moe", "./moe", "/abs/path", "a/b/c", "org/../x", "org/model.gguf", "~/x"):
        assert not looks_like_hub_id(text), text


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub_cache_dir() == tmp_path / "c"


def test_cached_model_resolves_to_its_snapshot(hub_cache):
    snapshot = hub_cache / "models--specmoe-test--tiny-moe" / "snapshots" / COMMIT
    assert resolve_hub_id("specmoe-test/tiny-moe") == snapshot
    assert resolve_model("specmoe-test/tiny-moe", None) == snapshot


def test_absent_model_is_one_line_with_the_fix(hub_cache):
    with pytest.raises(SpecmoeError) as info:
        resolve_model("specmoe-test/not-there", None)
    message = str(info.value)
    assert "not in the local Hugging Face cache" in message
    assert "hf download specmoe-test/not-there" in message
    assert "\n" not in message


def test_snapshot_without_config_is_refused(hub_cache):
    repo = hub_cache / "models--specmoe-test--empty"
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    with pytest.raises(SpecmoeError, match=r"has no config\.json"):
        resolve_hub_id("specmoe-test/empty")


def test_generate_takes_a_hub_id(hub_cache, capsys):
    argv = ["generate", "--target", "specmoe-test/tiny-moe", "--draft", "ngram", "--max-new-tokens", "4"]
    code = main(argv)
    assert code == 0
    assert "tokens in" in capsys.readouterr().out


def test_suite_path_and_set_take_a_hub_id(hub_cache, tmp_path):
    suite_file = one_model_suite(tmp_path, "moe", "specmoe-test/tiny-moe")
    snapshot = str(hub_cache / "models--specmoe-test--tiny-moe" / "snapshots" / COMMIT)
    assert load_suite(suite_file).models["moe"].path == snapshot
    missing = load_suite(suite_file, SuiteOverrides(settings=(("models.moe.path", "specmoe-test/missing"),)))
    assert missing.models["moe"].hub_id == "specmoe-test/missing"
    with pytest.raises(SpecmoeError, match=r"models\.moe\.path: model 'specmoe-test/missing' is not"):
        preflight(missing, tmp_path / "r.db", None)


def test_suite_with_absent_hub_id_fails_before_its_first_run(hub_cache, tmp_path, capsys):
    suite_file = one_model_suite(tmp_path, "moe", "specmoe-test/missing")
    assert main(["bench", "run", str(suite_file), "--db", str(tmp_path / "r.db"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "models.moe.path: model 'specmoe-test/missing' is not a local directory" in err
    assert err.count("\n") == 1 and not (tmp_path / "r.db").exists()


def test_a_relative_path_that_does_not_exist_yet_still_loads(hub_cache, tmp_path):
    # "models/mine" reads like a hub ID too; the suite loads, and preflight names the path later.
    suite_file = one_model_suite(tmp_path, "mine", "models/mine")
    assert load_suite(suite_file).models["mine"].path == str(tmp_path / "models" / "mine")
