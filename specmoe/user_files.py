"""Reading a file a user names: only a regular file is opened.

A FIFO given as a hardware or config file would block the read forever (nothing ever writes to it),
a character device such as /dev/zero never ends, and an empty path reads as the current folder
(Path("") is "."). Each is refused here in one line naming the path; a missing file, a folder and
text that is not UTF-8 raise as `Path.read_text` does, for the caller to explain in its own words.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from specmoe.errors import SpecmoeError


def check_regular(path: Path | str) -> None:
    """A one-line SpecmoeError when `path` is empty or names something that exists but is neither
    a regular file nor a folder (a FIFO, a device, a socket); nothing otherwise."""
    if not str(path).strip():
        raise SpecmoeError("an empty path where a file belongs; pass the file's path")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: the read that follows says so
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise SpecmoeError(f"'{path}' is not a regular file ({kind}), so nothing to read; pass a file")


def read_user_text(path: Path | str) -> str:
    """The UTF-8 text of a file a user names, after `check_regular`."""
    check_regular(path)
    return Path(path).read_text(encoding="utf-8")
