"""`specmoe bench report`: a static HTML report of a results store (docs/report.md)."""

from specmoe.report.write import write_report

__all__ = ["write_report"]
