"""The result table as rich tables on a terminal: the same cells and notes as the plain text
(`specmoe.report.summary_table`), coloured by what a row's marks say."""

from __future__ import annotations

from specmoe.report.summary_table import (
    SummaryTable,
    context_lines,
    header_cells,
    is_number_column,
    latency_cells,
    latency_headers,
    note_lines,
    row_cells,
)


def print_rich(table: SummaryTable, console) -> None:
    """The summary as rich tables on a terminal (`console`: a rich Console on stdout). Cells are
    Text, never markup: "[1.05, 1.19]" is an interval, not a style."""
    from rich.table import Table
    from rich.text import Text

    for line in context_lines(table):
        console.print(Text(line, style="dim"))
    body = [row_cells(table, c) for c in table.comparisons]
    results = Table(show_edge=False, pad_edge=False)
    for index, header in enumerate(header_cells(table)):
        results.add_column(Text(header), justify="right" if is_number_column(index, body) else "left")
    for c, cells in zip(table.comparisons, body, strict=True):
        style = "red" if c.impossible else "yellow" if c.unstable or c.audit_failures or c.no_number else None
        results.add_row(*(Text(cell) for cell in cells), style=style)
    console.print(results)
    if table.latency:
        served = Table(title="server latency per request (ms)", show_edge=False, pad_edge=False)
        cells = [latency_cells(table, lat) for lat in table.latency]
        for index, header in enumerate(latency_headers(table)):
            served.add_column(Text(header), justify="right" if is_number_column(index, cells) else "left")
        for row in cells:
            served.add_row(*(Text(cell) for cell in row))
        console.print(served)
    for line in note_lines(table):
        console.print(Text(line))
