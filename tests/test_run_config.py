"""A stored run's config read as one typed value: keys as stored, drafts parsed, gaps as before."""

from __future__ import annotations

import sqlite3

import pytest
from test_store import make_row

from specmoe.drafts import ModelDraft, NgramDraft, OracleDraft
from specmoe.errors import SpecmoeError
from specmoe.results.run_config import RunConfig
from specmoe.results.store import Store


def test_a_stored_row_reads_its_settings_typed_and_keeps_its_dict(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        store.add(make_row(1))
        [row] = store.rows()
    assert row.config["draft"] == "draft-xs"  # the dict is what was stored, for export
    assert row.settings.draft == ModelDraft("draft-xs") and row.settings.draft_name == "draft-xs"
    assert (row.settings.target, row.settings.gamma) == ("moe", 4)


def test_missing_keys_read_as_a_dict_get_did_and_unknown_keys_stay_in_the_dict():
    settings = RunConfig.from_dict({"i": 1, "config_key": "k"})
    assert settings.draft is None and settings.gamma is None and settings.target_field("gguf") is None
    assert (settings.compile, settings.chat, settings.prompt_batch) == (False, False, 0)
    assert settings.cell == "k"  # rows stored before prompt batches: the config key is the cell
    assert RunConfig.from_dict({"draft": "oracle:0.6"}).oracle_p == 0.6
    assert RunConfig.from_dict({"draft": "ngram:1-3"}).draft == NgramDraft(1, 3)
    assert not isinstance(RunConfig.from_dict({"draft": "draft-xs"}).draft, OracleDraft)


def test_a_run_without_a_draft_has_no_gamma_though_stored_as_0():
    baseline = RunConfig.from_dict({"arm": "baseline", "draft": None, "gamma": 0})
    assert baseline.draft is None and baseline.gamma is None
    assert RunConfig.from_dict({"arm": "sd", "draft": "draft-xs", "gamma": 2}).gamma == 2


def test_a_stored_draft_that_does_not_parse_is_a_malformed_row(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as store:
        store.add(make_row(1))
    with sqlite3.connect(path) as conn:
        conn.execute("""UPDATE runs SET config = '{"draft": "oracle:2"}'""")
    with (
        pytest.raises(SpecmoeError, match=r"run 'run-00001' has a malformed row .*oracle:2"),
        Store(path) as store,
    ):
        store.rows()
