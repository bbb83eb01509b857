"""Logging levels from the command line (-q, default, -v) and where log records go."""

from __future__ import annotations

import logging
import re

import pytest
from rich.logging import RichHandler

from specmoe.cli import main
from specmoe.console import configure_logging, level_for
from specmoe.errors import SpecmoeError

log = logging.getLogger("specmoe.test")


@pytest.fixture(autouse=True)
def restore_logging():
    root, ours = logging.getLogger(), logging.getLogger("specmoe")
    handlers, levels = list(root.handlers), (root.level, ours.level)
    yield
    root.handlers[:] = handlers
    root.setLevel(levels[0])
    ours.setLevel(levels[1])


@pytest.mark.parametrize(("flags", "level"), [(["-q"], logging.WARNING), ([], logging.INFO)])
def test_quiet_and_default_set_specmoes_level(flags, level, tmp_path, capsys):
    assert main([*flags, "bench", "summary", "--db", str(tmp_path / "none.db")]) == 2
    assert logging.getLogger("specmoe").level == level
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "results store not found" in err  # still one line on error


def test_verbose_is_debug_and_keeps_the_traceback(tmp_path):
    with pytest.raises(SpecmoeError, match="results store not found"):
        main(["-v", "bench", "summary", "--db", str(tmp_path / "none.db")])
    assert logging.getLogger("specmoe").level == logging.DEBUG


def test_quiet_and_verbose_together_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["-q", "-v", "bench", "summary", "--db", "x.db"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_levels_follow_the_flags(capsys):
    for verbosity, shown in ((-1, ["warning"]), (0, ["info", "warning"]), (1, ["debug", "info", "warning"])):
        configure_logging(verbosity, terminal=False)
        log.debug("debug")
        log.info("info")
        log.warning("warning")
        assert [line.rsplit(" ", 1)[-1] for line in capsys.readouterr().err.splitlines()] == shown
    assert level_for(3) == logging.DEBUG and level_for(-2) == logging.WARNING


def test_other_libraries_stay_at_warnings_under_verbose(capsys):
    configure_logging(1, terminal=False)
    logging.getLogger("urllib3.connectionpool").info("a request")
    logging.getLogger("urllib3.connectionpool").warning("a retry")
    assert capsys.readouterr().err.splitlines()[-1].endswith("urllib3.connectionpool: a retry")


def test_without_a_terminal_a_record_is_one_plain_time_stamped_line(capsys):
    configure_logging(0, terminal=False)
    configure_logging(0, terminal=False)  # configuring again replaces the handler, never stacks it
    log.info("one")
    (line,) = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d INFO specmoe\.test: one", line)


def test_on_a_terminal_rich_handles_the_records():
    configure_logging(0, terminal=True)
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_specmoe", False)]
    assert len(ours) == 1 and isinstance(ours[0], RichHandler)


def test_global_quiet_is_not_overridden_by_a_commands_own_quiet(tmp_path, capsys):
    # `bench run` and `profile` have a --quiet of their own; the global -q must survive their default
    assert main(["-q", "bench", "run", "no-such-suite", "--db", str(tmp_path / "r.db")]) == 2
    assert logging.getLogger("specmoe").level == logging.WARNING
    assert capsys.readouterr().err.count("\n") == 1
