"""Reading a results CSV in the study's schema (`specmoe.audit.foreign.audit_csv`): its rows as
dicts, or one line that says why the file is not such a CSV.

Spreadsheet programs write what a user then passes here: a byte-order mark before the first column
(read as nothing), a semicolon or tab between fields where the locale's decimal mark is a comma
(refused with the separator named, not as missing columns), and an empty file or a header without
rows (refused: an audit of nothing would pass `--fail-on` as if every claim were checked).
"""

from __future__ import annotations

import csv
from pathlib import Path

from specmoe.errors import SpecmoeError

_OTHER_SEPARATORS = {";": "semicolons", "\t": "tabs", "|": "vertical bars"}


def read_rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """The CSV's rows, each with every one of `columns`; SpecmoeError in one line otherwise."""
    expected = f"expected a results CSV with {', '.join(columns)}"
    try:
        # utf-8-sig: a byte-order mark (as spreadsheet programs write) is not part of the first column.
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle, restval="")  # short rows: empty cells
            header = reader.fieldnames or []
            if not header:
                raise SpecmoeError(f"{path}: the file is empty; {expected}")
            missing = [c for c in columns if c not in header]
            if missing:
                separator = _separator(header, columns)
                if separator:
                    raise SpecmoeError(
                        f"{path}: the fields are separated by {separator}, not commas; save the file as "
                        "comma-separated CSV"
                    )
                raise SpecmoeError(f"{path}: missing column(s) {', '.join(missing)}; {expected}")
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:  # csv.Error: a cell past the field limit
        raise SpecmoeError(f"cannot read {path}: {err}; pass a readable UTF-8 CSV file") from err
    if not rows:
        raise SpecmoeError(f"{path}: a header and no rows, so nothing to audit; pass the CSV with its runs")
    return rows


def _separator(header: list[str], columns: tuple[str, ...]) -> str | None:
    """The name of the separator that splits the header into the expected columns, if one does."""
    line = ",".join(header)
    for mark, name in _OTHER_SEPARATORS.items():
        if all(c in line.split(mark) for c in columns):
            return name
    return None
