"""Where the findings document lives: in a checkout of the repository (docs/findings.md, its results
under docs/results/cpu/findings), never inside an installed package. The checkout is found from a
folder upwards, so `specmoe findings` works from any folder of a clone and refuses outside one."""

from __future__ import annotations

from pathlib import Path

from specmoe.errors import SpecmoeError

FINDINGS_OUT = Path("docs/results/cpu/findings")
FINDINGS_DOC = Path("docs/findings.md")


def find_checkout(start: Path) -> Path | None:
    """The nearest folder at or above `start` holding pyproject.toml and docs/findings.md, if any."""
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / FINDINGS_DOC).is_file():
            return folder
    return None


def checkout_root(start: Path | None = None) -> Path:
    """The checkout around `start` (the current folder by default); one line when there is none."""
    here = Path.cwd() if start is None else start
    root = find_checkout(here)
    if root is None:
        raise SpecmoeError(
            f"no specmoe checkout at or above {here} (a folder with pyproject.toml and {FINDINGS_DOC}): "
            "the findings document lives in a clone of the repository; run there or pass --out and --doc"
        )
    return root


def _from_here(path: Path) -> Path:
    # Shown as the user would type it: relative to the current folder where it lies below it.
    try:
        return path.relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def findings_paths(out: Path | None, doc: Path | None) -> tuple[Path, Path]:
    """--out and --doc, each defaulting to the checkout's shipped findings (refused outside one)."""
    if out is not None and doc is not None:
        return out, doc
    root = checkout_root()
    return (
        out if out is not None else _from_here(root / FINDINGS_OUT),
        doc if doc is not None else _from_here(root / FINDINGS_DOC),
    )


def is_shipped_findings(out: Path) -> bool:
    """Whether `out` is the results folder of the checkout it lies in (the published findings)."""
    root = find_checkout(out)
    return root is not None and Path(out).resolve() == root / FINDINGS_OUT
