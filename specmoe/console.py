"""Where specmoe's words go: a command's output on stdout, everything else as log records on stderr.

A command's output (tables, JSON, the paths it wrote) is printed to stdout, so it can be piped and
saved. What happens along the way (progress, a model being built, a warning) is a log record of
the module that knows it (`logging.getLogger(__name__)`), shown on stderr at the level the command
line asks for: `-q` warnings only, by default info, `-v` debug. On a terminal the records go through
rich's handler and live progress bars share its console; in a file or a pipe they are plain lines
with a time stamp, one record per line, so a log file reads top to bottom.

Only the `specmoe` logger's level follows `-v/-q`: other libraries keep to warnings, so a `-v` run
shows specmoe's debug lines rather than every HTTP request of a client library.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from rich.console import Console
from rich.logging import RichHandler

LOGGER = "specmoe"
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PLAIN_DATE = "%H:%M:%S"
LEVELS = {-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}  # -q, default, -v

_console: Console | None = None


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is an interactive terminal (False for files, pipes and captured streams)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def stderr_console() -> Console:
    """The one rich console on stderr: the log handler and progress bars draw through it, so a log
    line printed while a bar is live lands above the bar instead of through it. It looks up
    sys.stderr when it writes (a redirected or captured stderr is followed)."""
    global _console
    if _console is None:
        _console = Console(stderr=True)
    return _console


def level_for(verbosity: int) -> int:
    """The `specmoe` logger's level for -q (-1), nothing (0) or -v (1 and more)."""
    return LEVELS[max(-1, min(1, verbosity))]


class _StderrHandler(logging.StreamHandler):
    """A plain handler writing to whatever sys.stderr is when a record arrives (as logging's own
    last-resort handler does), so a handler installed once keeps working when stderr is swapped."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def make_handler(terminal: bool) -> logging.Handler:
    """rich's handler on a terminal; one plain, time-stamped line per record otherwise."""
    if terminal:
        handler: logging.Handler = RichHandler(
            console=stderr_console(), show_path=False, rich_tracebacks=False, markup=False
        )
        handler.setFormatter(logging.Formatter("%(message)s", datefmt="[%X]"))
    else:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT, datefmt=PLAIN_DATE))
    handler._specmoe = True  # type: ignore[attr-defined]  # ours: replaced, not stacked, on reconfigure
    return handler


def configure_logging(verbosity: int = 0, terminal: bool | None = None) -> None:
    """Send log records to stderr: the `specmoe` logger at the level of `verbosity` (see level_for),
    other libraries' at warning and above. Calling it again replaces the handler it installed."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_specmoe", False)]:
        root.removeHandler(handler)
    root.addHandler(make_handler(is_terminal(sys.stderr) if terminal is None else terminal))
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    logging.getLogger(LOGGER).setLevel(level_for(verbosity))


def info_enabled() -> bool:
    """Whether info records of specmoe are shown (not under -q): progress is info."""
    return logging.getLogger(LOGGER).isEnabledFor(logging.INFO)
