"""A suite on a model that refuses a batch of prompts (B > 1): the runs it refuses are skipped,
logged and never stored; the rest of the suite is measured and stored, and a resumed suite neither
loses nor duplicates rows."""

from __future__ import annotations

import pytest
from refusing_models import tiny_bloom
from suite_files import TINY_ZOO, write_suite, zoo_models

from specmoe.bench.suite_run import run_suite
from specmoe.results.store import Store
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite

DEFAULTS = {"prompts": 1, "warmup": 0, "max_new_tokens": 8, "dtype": "float32", "prompt_set": "factual"}
REFUSED = "so a batch of left-padded prompts would decode silently wrong and is refused"


@pytest.fixture(scope="module")
def bloom(tiny_zoo, tmp_path_factory):
    return tiny_bloom(tiny_zoo, tmp_path_factory.mktemp("bloom") / "bloom")


def _suite(tmp_path, bloom, group: dict, repeats: int):
    models = {"bloom": {"path": bloom}} | zoo_models("moe", "draft-xs")
    defaults = DEFAULTS | {"repeats": repeats}
    return load_suite(write_suite(tmp_path, zoo=TINY_ZOO, defaults=defaults, models=models, groups=[group]))


def _skips(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "skipped, not stored" in r.getMessage()]


def _summaries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "runs were not measured" in r.getMessage()]


def test_a_target_that_refuses_a_batch_is_measured_at_b1_only_and_resumes(bloom, tiny_zoo, tmp_path, caplog):
    group = {"name": "alibi", "target": ["bloom"], "draft": ["ngram"], "gamma": [2], "batch_size": [1, 2]}
    db = tmp_path / "r.db"
    # A suite cut short after its first repeat, then resumed with both.
    with caplog.at_level("WARNING"):
        first = run_suite(_suite(tmp_path, bloom, group, repeats=1), db, tiny_zoo, progress=False)
    assert sorted((r.arm, r.config["batch_size"]) for r in first) == [("baseline", 1), ("sd", 1)]
    skips = _skips(caplog)
    assert len(skips) == 2 and all(REFUSED in message and "'bloom'" in message for message in skips)
    (summary,) = _summaries(caplog)
    assert summary.startswith("2 of 4 runs were not measured")
    assert "drop batch sizes above 1 for 'bloom' in group(s) alibi" in summary
    caplog.clear()

    suite = _suite(tmp_path, bloom, group, repeats=2)
    with caplog.at_level("WARNING"):
        resumed = run_suite(suite, db, tiny_zoo, progress=False)
    b1 = sorted(s.run_id for s in expand(suite) if s.batch_size == 1)
    assert sorted(r.run_id for r in resumed) == b1
    kept = {r.run_id: r.created_at for r in first}
    assert all(r.created_at == kept[r.run_id] for r in resumed if r.run_id in kept)
    assert len(_skips(caplog)) == 4  # both repeats of B = 2: never stored, so skipped again
    assert _summaries(caplog)[0].startswith("4 of 6 runs were not measured")
    with Store(db) as store:
        assert sorted(r.run_id for r in store.rows()) == b1  # each once
        assert store.failures() == []  # a refusal is no failed attempt


def test_a_draft_that_refuses_a_batch_skips_only_its_arm(bloom, tiny_zoo, tmp_path, caplog):
    group = {
        "name": "drafts",
        "target": ["moe"],
        "draft": ["bloom", "draft-xs"],
        "gamma": [2],
        "batch_size": [1, 2],
    }
    with caplog.at_level("WARNING"):
        rows = run_suite(
            _suite(tmp_path, bloom, group, repeats=1), tmp_path / "r.db", tiny_zoo, progress=False
        )
    measured = sorted((r.config["batch_size"], r.arm, r.config.get("draft") or "") for r in rows)
    assert measured == [
        (1, "baseline", ""),
        (1, "sd", "bloom"),
        (1, "sd", "draft-xs"),
        (2, "baseline", ""),
        (2, "sd", "draft-xs"),
    ]
    (skip,) = _skips(caplog)
    assert REFUSED in skip
    assert "1 of 6 runs were not measured" in _summaries(caplog)[0]
