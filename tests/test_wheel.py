"""The package as a wheel installs it: built with `pip wheel`, unpacked away from the checkout and run
from another folder, it lists and loads the shipped suites, finds the study's rows, answers `advise`
with its shipped example configs, and refuses `findings` (a checkout's document) in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _build_wheel(tmp_path: Path) -> Path:
    pytest.importorskip("setuptools", reason="building a wheel offline needs setuptools installed")
    source = tmp_path / "source"  # a copy, so no build/ folder of the checkout leaks stale files in
    shutil.copytree(REPO / "specmoe", source / "specmoe", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    dist = tmp_path / "dist"
    offline = ("--no-deps", "--no-build-isolation", "--no-index", "-q")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), *offline, "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if built.returncode != 0:
        pytest.skip(f"pip cannot build a wheel offline here: {built.stderr.strip()[-300:]}")
    (wheel,) = dist.glob("specmoe-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(site, folder): the wheel unpacked into `site`, and an empty folder outside any checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    site = tmp / "site"
    with zipfile.ZipFile(_build_wheel(tmp)) as archive:
        archive.extractall(site)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return site, elsewhere


def _run(installed: tuple[Path, Path], *args: str) -> subprocess.CompletedProcess:
    site, elsewhere = installed
    # The unpacked wheel first on the path: the dependencies come from this interpreter's site-packages
    # (as a venv made with --system-site-packages), specmoe from the wheel alone.
    env = {**os.environ, "PYTHONPATH": str(site), "XDG_CACHE_HOME": str(elsewhere / "cache")}
    return subprocess.run(
        [sys.executable, *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_wheel_lists_and_loads_every_shipped_suite(installed):
    site, _ = installed
    shipped = sorted(p.stem for p in (REPO / "specmoe" / "suites").glob("*.toml"))
    listed = _run(installed, "-m", "specmoe.cli", "bench", "run", "--help")
    assert listed.returncode == 0, listed.stderr
    assert all(name in listed.stdout for name in shipped) and "quick" in shipped
    code = (
        "import specmoe\n"
        "from specmoe.suite.load import load_suite, resolve_suite_path\n"
        "from specmoe.suite.shipped import STUDY_ROWS, shipped_suites\n"
        "print(specmoe.__file__)\n"
        "print(STUDY_ROWS.is_file())\n"
        "for name in shipped_suites():\n"
        "    print(name, len(load_suite(resolve_suite_path(name)).models))\n"
    )
    loaded = _run(installed, "-c", code)
    assert loaded.returncode == 0, loaded.stderr
    where, study_rows, *suites = loaded.stdout.splitlines()
    assert Path(where).is_relative_to(site) and study_rows == "True"
    assert [line.split()[0] for line in suites] == shipped


def test_the_wheel_answers_advise_with_its_shipped_examples(installed):
    examples = installed[0] / "specmoe" / "perf" / "examples"
    answer = _run(
        installed,
        *("-m", "specmoe.cli", "advise", "--config", str(examples / "qwen3.5-35b-a3b.json")),
        *("--hardware", str(examples / "h100-sxm.json"), "--engine", "vllm", "--draft", "mtp"),
    )
    assert answer.returncode == 0, answer.stderr
    assert "qwen3.5-35b-a3b" in answer.stdout and "B=1" in answer.stdout


def test_the_wheel_refuses_findings_outside_a_checkout_in_one_line(installed):
    refused = _run(installed, "-m", "specmoe.cli", "findings", "--render-only")
    assert refused.returncode != 0
    assert "no specmoe checkout" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
