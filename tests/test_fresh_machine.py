"""What a new user runs is what CI runs: the README's two commands are `.ci/run`'s and `.ci/demo`'s
lines, verbatim, and nothing in those scripts changes their meaning (no variable set beside them).
Every instruction that builds llama-cpp-python builds it portable and past pip's wheel cache."""

from __future__ import annotations

import re
from pathlib import Path

from specmoe.extras import LLAMACPP_BUILD, install_hint

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
LLAMACPP_DOC = (REPO / "docs" / "llamacpp.md").read_text(encoding="utf-8")
PORTABLE = 'CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"'


def _command_after(text: str, lead: str) -> str:
    """The first fenced bash block after the paragraph that starts with `lead`: one line."""
    rest = text[text.index(lead) :]
    block = re.search(r"```bash\n(.*?)```", rest, re.S)
    assert block is not None, f"no command after {lead!r}"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 1, f"the command after {lead!r} is not one line: {lines}"
    return lines[0]


def _script_lines(name: str) -> list[str]:
    text = (REPO / ".ci" / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _sets_a_variable(line: str) -> bool:
    return bool(re.match(r"\s*(export\s+|declare\s+(-\w+\s+)*)?[A-Za-z_][A-Za-z0-9_]*=", line))


def test_the_readme_test_command_is_ci_verbatim():
    command = _command_after(README, "Set up and run the tests")
    lines = _script_lines("run")
    assert lines[-1] == command  # CI's last step is the README's line, character for character
    assert not [line for line in lines if _sets_a_variable(line)]  # and nothing beside it sets a variable
    assert PORTABLE in command and "SPECMOE_REAL_WEIGHTS=1 pytest -q" in command


def test_the_readme_main_command_is_ci_verbatim():
    command = _command_after(README, "Set up and run the main job")
    lines = _script_lines("demo")
    assert lines[-1] == command
    assert not [line for line in lines if _sets_a_variable(line)]


def test_every_llamacpp_build_is_portable_and_past_the_wheel_cache():
    command = _command_after(README, "Set up and run the tests")
    build = command.split(" && ")[2]  # venv, activate, then the build
    assert build.startswith(PORTABLE) and "--no-cache-dir" in build and "llama-cpp-python" in build
    assert LLAMACPP_BUILD.startswith(PORTABLE) and "--no-cache-dir" in LLAMACPP_BUILD
    assert LLAMACPP_BUILD in README and LLAMACPP_BUILD in LLAMACPP_DOC
    assert install_hint("llamacpp").startswith(LLAMACPP_BUILD)  # what a missing extra's error says
    for text in (README, LLAMACPP_DOC):
        lines = [line.split(" # ")[0] for line in text.splitlines()]  # commands without their comments
        for i, line in enumerate(lines):
            if re.search(r"pip install .*llama-cpp-python", line):  # a build: portable, uncached
                assert PORTABLE in line and "--no-cache-dir" in line, line
            elif re.search(r"pip install .*llamacpp[,\]]", line):  # the extra: after such a build
                assert "llama-cpp-python" in line or "llama-cpp-python" in lines[i - 1], line
