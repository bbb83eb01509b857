"""The report page: one static HTML file, no scripts, no resources outside its own folder.

Every string that comes from the results store or the command line (model names, prompt sets,
paths, suite and group names, audit reasons, environment values) passes through `html.escape`
before it reaches the page; figures and CSV files are linked by relative path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from specmoe.report.figures import Omitted
from specmoe.report.runinfo import Environment, FailedRun, NoiseState
from specmoe.report.tables import Table


@dataclass(frozen=True)
class FigureEntry:
    title: str
    caption: str
    png: str  # path relative to report.html
    svg: str


@dataclass(frozen=True)
class TableEntry:
    table: Table
    csv: str  # path relative to report.html


@dataclass(frozen=True)
class Page:
    source: str  # the results store as the user named it
    runs: int
    suites: tuple[str, ...]
    shared_settings: str
    study: tuple[FigureEntry, ...]
    explain: tuple[FigureEntry, ...]  # time split, acceptance by position, γ × B grid
    tables: tuple[TableEntry, ...]
    moesd: tuple[FigureEntry, ...]
    serving: tuple[FigureEntry, ...]
    failed: tuple[FailedRun, ...]
    environments: tuple[Environment, ...]
    omitted: tuple[Omitted, ...]
    noise: NoiseState
    unstable: int = 0  # SD configurations whose repeats disagree (UNSTABLE in `bench summary`)


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.92em; color: #444; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
.fail { color: #a00; }
.pass { color: #070; }
.meta { color: #555; }
nav a { margin-right: 1em; }
.scroll { overflow-x: auto; }
"""


def render(page: Page) -> str:
    sections = [
        _header(page),
        _figures_section("study", "Views of the empirical study", page.study),
        _figures_section("explain", "Why the speedup is what it is", page.explain),
        _tables_section(page.tables),
        _figures_section("moesd", "MoESD views", page.moesd),
        _figures_section("serving", "Serving views", page.serving),
        _audit_section(page.failed, page.runs),
        _environment_section(page.environments, page.noise),
        _omitted_section(page.omitted, page.noise),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>specmoe report: {escape(page.source)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(sections)
        + "\n</body>\n</html>\n"
    )


def _header(page: Page) -> str:
    failed, flagged = len(page.failed), page.noise.flagged
    audit = (
        f'<span class="pass">all {page.runs} runs pass their audit</span>'
        if not failed
        else f'<a class="fail" href="#audit">{failed} of {page.runs} runs failed their audit</a>'
    )
    if flagged:  # a green "all pass" would read as all is well while the guard hid the runs
        audit = (
            f'<a class="fail" href="#noise">{flagged} of {page.runs} runs flagged noisy</a>'
            + (
                ", so no table or figure has a number"
                if flagged == page.runs
                else ", left out of every number"
            )
            + f"; {failed or 'none'} failed {'its' if failed == 1 else 'their'} audit"
        )
    if page.unstable:  # a green "all pass" beside rows marked UNSTABLE would read as all is well
        audit = audit.replace('<span class="pass">', "<span>") + (
            f'; <a class="fail" href="#tables">{page.unstable} SD configuration'
            f"{'s' if page.unstable != 1 else ''} UNSTABLE</a> (repeats disagree)"
        )
    shared = f"<p>Every run: {escape(page.shared_settings)}.</p>" if page.shared_settings else ""
    return (
        "<h1>Speculative decoding benchmark report</h1>\n"
        f'<p class="meta">Results store <code>{escape(page.source)}</code>: {page.runs} runs from '
        f"suite{'s' if len(page.suites) != 1 else ''} {escape(', '.join(page.suites))}; {audit}.</p>\n"
        f"{shared}\n"
        '<nav><a href="#study">Study views</a><a href="#explain">Why this speedup</a>'
        '<a href="#tables">Tables</a>'
        '<a href="#moesd">MoESD views</a><a href="#serving">Serving views</a>'
        '<a href="#audit">Audit</a><a href="#environment">Environment</a>'
        '<a href="#not-available">Not available</a></nav>'
    )


def _figures_section(anchor: str, heading: str, figures: Sequence[FigureEntry]) -> str:
    body = (
        "\n".join(_figure(f) for f in figures) or "<p>No figure of this kind has data in this result set.</p>"
    )
    return f'<section id="{anchor}">\n<h2>{escape(heading)}</h2>\n{body}\n</section>'


def _figure(entry: FigureEntry) -> str:
    return (
        f"<figure>\n<h3>{escape(entry.title)}</h3>\n"
        f'<img src="{escape(entry.png)}" alt="{escape(entry.title)}">\n'
        f"<figcaption>{escape(entry.caption)} "
        f'<a href="{escape(entry.png)}">PNG</a> · <a href="{escape(entry.svg)}">SVG</a></figcaption>\n'
        "</figure>"
    )


def _tables_section(tables: Sequence[TableEntry]) -> str:
    body = "\n".join(_table(t) for t in tables) or "<p>No table has data in this result set.</p>"
    return f'<section id="tables">\n<h2>Tables</h2>\n{body}\n</section>'


def _table(entry: TableEntry) -> str:
    table = entry.table
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    rows = "\n".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in table.cells)
    return (
        f"<h3>{escape(table.title)}</h3>\n<p>{escape(table.caption)} "
        f'<a href="{escape(entry.csv)}">CSV</a></p>\n'
        f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{rows}\n</tbody>\n</table></div>"
    )


def _audit_section(failed: Sequence[FailedRun], runs: int) -> str:
    if not failed:
        body = f'<p class="pass">All {runs} runs pass every audit check.</p>'
    else:
        items = "\n".join(f'<li class="fail">{escape(f.sentence)}</li>' for f in failed)
        body = f"<p>{len(failed)} of {runs} runs failed their audit:</p>\n<ul>\n{items}\n</ul>"
    return f'<section id="audit">\n<h2>Audit</h2>\n{body}\n</section>'


def _environment_section(envs: Sequence[Environment], noise: NoiseState) -> str:
    rows = "\n".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in noise.items())
    fix = f'<p class="fail">Runs flagged noisy: {escape(noise.fix)}.</p>' if noise.fix else ""
    blocks = [
        f'<div id="noise"><p>Machine load and the noise guard:</p>\n<table>\n{rows}\n</table>{fix}</div>'
    ]
    for index, env in enumerate(envs, start=1):
        rows = "\n".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in env.values)
        heading = f"Environment {index}: " if len(envs) > 1 else ""
        runs = f"{env.runs} run{'s' if env.runs != 1 else ''} measured here"
        blocks.append(f"<p>{heading}{runs}:</p>\n<table>\n{rows}\n</table>")
    body = "\n".join(blocks) if envs else blocks[0] + "\n<p>The runs record no environment.</p>"
    return f'<section id="environment">\n<h2>Environment</h2>\n{body}\n</section>'


def _omitted_section(omitted: Sequence[Omitted], noise: NoiseState) -> str:
    if not omitted:
        body = "<p>Every view has data in this result set.</p>"
    else:
        items = "\n".join(f"<li><b>{escape(o.title)}</b>: {escape(o.reason)}.</li>" for o in omitted)
        lead = "<p>These views are left out because this result set has no data for them"
        if noise.flagged:
            lead += (
                f' once the <a href="#noise">{noise.flagged} of {noise.runs} runs the noise guard '
                "flagged</a> are set aside"
            )
        body = f"{lead}:</p>\n<ul>\n{items}\n</ul>"
    return f'<section id="not-available">\n<h2>Not available in this result set</h2>\n{body}\n</section>'
