"""One default dtype for every command, and a `--fit` that matches no run is said, not silent."""

from __future__ import annotations

import logging
from pathlib import Path

from test_report import build_store, spec

from specmoe.cli import _parser
from specmoe.dtypes import DEFAULT_DTYPE
from specmoe.report import write_report
from specmoe.report.modelled import unmatched_fit
from specmoe.results.run_config import RunConfig
from specmoe.suite.quick import QuickArgs
from specmoe.suite.schema import GridAxes

FITS = Path(__file__).parents[1] / "docs" / "results" / "cpu" / "perf_fits"


def test_generate_profile_bench_quick_and_suites_share_one_default_dtype():
    parser = _parser()
    generate = parser.parse_args(["generate", "--target", "moe"])
    profile = parser.parse_args(["profile", "--model", "moe", "--out", "p.json"])
    quick = parser.parse_args(["bench", "quick", "--model", "m", "--draft", "ngram"])
    assert generate.dtype == profile.dtype == quick.dtype == DEFAULT_DTYPE == "float32"
    assert QuickArgs.__dataclass_fields__["dtype"].default == DEFAULT_DTYPE
    assert GridAxes.model_fields["dtype"].default == DEFAULT_DTYPE


def test_a_fit_matches_its_model_in_its_dtype_only():
    configs = [RunConfig.from_dict({"target": "moe", "draft": "draft-xs", "dtype": "float32"})]
    assert unmatched_fit("moe", "float32", configs) == ""
    assert unmatched_fit("draft-xs", "float32", configs) == ""
    assert "fitted in bfloat16 but the runs used it in float32" in unmatched_fit("moe", "bfloat16", configs)
    assert "--dtype float32" in unmatched_fit("moe", "bfloat16", configs)
    assert "no run uses its model dense-l" in unmatched_fit("dense-l", "float32", configs)


def test_a_fit_that_matches_no_run_is_a_warning(tmp_path, caplog):
    specs = [s for b in (1, 2) for s in (spec("moe", batch=b), spec("moe", "draft-xs", batch=b))]
    build_store(tmp_path / "r.db", specs)
    assert spec("moe").dtype == "float32"
    with caplog.at_level(logging.WARNING):
        write_report(tmp_path / "r.db", tmp_path / "out", fits=[FITS / "moe-bfloat16.json"])
    assert "moe-bfloat16.json draws no model curve" in caplog.text
    assert "used it in float32" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        write_report(tmp_path / "r.db", tmp_path / "out", fits=[FITS / "moe-float32.json"])
    assert "draws no model curve" not in caplog.text


def test_a_fit_that_misses_its_own_held_out_points_is_a_warning(tmp_path, caplog):
    import json

    build_store(tmp_path / "r.db", [spec("moe"), spec("moe", "draft-xs")])
    poor = json.loads((FITS / "moe-float32.json").read_text(encoding="utf-8"))
    poor["quality"]["heldout_median_abs_rel"] = 0.41
    (tmp_path / "poor.json").write_text(json.dumps(poor), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        write_report(tmp_path / "r.db", tmp_path / "out", fits=[tmp_path / "poor.json"])
    assert "poor.json misses its own held-out points by a median 41%" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        write_report(tmp_path / "r.db", tmp_path / "out", fits=[FITS / "moe-float32.json"])
    assert "misses its own held-out points" not in caplog.text
