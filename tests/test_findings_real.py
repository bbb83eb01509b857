"""Claims (c) and (d) on real weights: the `real.*` values of the findings template."""

from pathlib import Path

from specmoe.findings.claims import PROMPTS
from specmoe.findings.real import REAL_EXPORT, real_values

REAL = Path(__file__).resolve().parents[1] / "docs" / "results" / "cpu" / "real"


def test_without_the_export_every_value_is_still_given():
    found = real_values(Path("/nonexistent"))
    assert found["real.cells"] == "0"
    assert found["real.c_table"] == found["real.d_table"] == "(not measured)"


def test_the_shipped_export_gives_a_row_per_backend_and_draft_and_a_column_per_kind():
    assert (REAL / REAL_EXPORT).is_file(), "export the real-cpu suite (docs/results/cpu/real/README.md)"
    found = real_values(REAL)
    header, _, *rows = found["real.c_table"].splitlines()
    assert all(kind in header for kind in PROMPTS)
    assert any("transformers" in row and "distilled draft" in row for row in rows)
    assert any("llama.cpp" in row and "distilled draft" in row for row in rows)
    assert int(found["real.d_series"]) >= int(found["real.d_helps"])
