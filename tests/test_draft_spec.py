"""A draft's spelling parsed once into a typed value, and its canonical string (part of run keys)."""

import pytest
import torch

from specmoe.backends.base import BackendBase
from specmoe.decoding.drafters import ModelDrafter
from specmoe.decoding.make_drafter import make_drafter
from specmoe.decoding.ngram import DEFAULT_MAX_N, DEFAULT_MIN_N, NgramDrafter
from specmoe.decoding.oracle import OracleDrafter
from specmoe.drafts import (
    ModelDraft,
    MtpDraft,
    NgramDraft,
    OracleDraft,
    draft_of,
    is_reserved_name,
    parse_draft,
)
from specmoe.errors import SpecmoeError
from specmoe.perf.drafts import PRICED_ONLY, DraftMethod, priced_as


@pytest.mark.parametrize(
    ("text", "draft", "canonical"),
    [
        ("draft-xs", ModelDraft("draft-xs"), "draft-xs"),
        ("/models/draft", ModelDraft("/models/draft"), "/models/draft"),
        ("ngram", NgramDraft(DEFAULT_MIN_N, DEFAULT_MAX_N), "ngram:1-3"),
        ("ngram:1-3", NgramDraft(1, 3), "ngram:1-3"),
        ("ngram:02-4", NgramDraft(2, 4), "ngram:2-4"),
        ("oracle:0.9", OracleDraft(0.9), "oracle:0.9"),
        ("oracle:0.60", OracleDraft(0.6), "oracle:0.6"),
        ("oracle:1", OracleDraft(1.0), "oracle:1.0"),
        ("mtp", MtpDraft(), "mtp"),
    ],
)
def test_spellings_parse_to_one_value_with_a_stable_canonical_string(text, draft, canonical):
    assert parse_draft(text) == draft
    assert str(draft) == canonical
    assert parse_draft(canonical) == draft  # stored strings read back to the same value


@pytest.mark.parametrize(
    "text", ["ngram:3-1", "ngram:0-2", "ngram:x", "ngram:", "oracle:1.5", "oracle:nan", "oracle:"]
)
def test_bad_spellings_are_one_line_errors(text):
    with pytest.raises(SpecmoeError, match=rf"^bad (n-gram|oracle) draft '{text}'; write "):
        parse_draft(text)


def test_no_draft_and_reserved_names():
    assert draft_of(None) is None
    assert is_reserved_name("ngram") and is_reserved_name("oracle-x") and is_reserved_name("mtp")
    assert not is_reserved_name("ngram2") and not is_reserved_name("draft-xs")


ORACLE_KEY = {"oracle": 0.6, "cost": "ID", "draws": "per-unit"}


@pytest.mark.parametrize(
    ("draft", "answers", "key"),
    [
        (ModelDraft("d"), ("d", True, False, None, "d"), "ID"),
        (NgramDraft(1, 3), (None, False, False, None, None), {"ngram": [1, 3]}),
        (OracleDraft(0.6), (None, True, True, 0.6, "cost"), ORACLE_KEY),
        (MtpDraft(), (None, True, False, None, None), {"head": "mtp"}),
    ],
)
def test_each_kind_answers_what_callers_ask(draft, answers, key):
    asked = (draft.model_name, draft.runs_model, draft.needs_cost_model, draft.dialed_acceptance)
    assert (*asked, draft.cost_model("cost")) == answers
    assert draft.key("ID") == key  # a run key's draft part, as stored: never change it


class _Model(BackendBase):
    name, vocab_size, max_context, device = "m", 8, 64, torch.device("cpu")


def test_make_drafter_builds_each_kind():
    target = _Model()
    assert isinstance(make_drafter(NgramDraft(2, 4), target), NgramDrafter)
    assert isinstance(make_drafter(ModelDraft("d"), target, _Model()), ModelDrafter)
    assert isinstance(make_drafter(OracleDraft(0.5), target, _Model(), [[1, 2]]), OracleDrafter)
    with pytest.raises(ValueError, match="needs a loaded model"):
        make_drafter(ModelDraft("d"), target)
    with pytest.raises(SpecmoeError, match=r"^this MTP drafter runs llama\.cpp's MTP context and needs a"):
        make_drafter(MtpDraft(), target)  # neither a transformers nor a llama.cpp target


@pytest.mark.parametrize(
    ("spelling", "eagle3_head", "method"),
    [
        ("draft-xs", False, DraftMethod.MODEL),
        ("path/to/head", True, DraftMethod.EAGLE3),
        ("ngram:2-4", False, DraftMethod.NGRAM),
        ("oracle:0.6", False, DraftMethod.MODEL),  # it pays for its cost model's forwards
        ("mtp", False, DraftMethod.MTP),
    ],
)
def test_each_run_draft_is_priced_as_one_advise_kind(spelling, eagle3_head, method):
    assert priced_as(parse_draft(spelling), eagle3_head) is method


def test_the_two_draft_taxonomies_cover_each_other():
    """Every kind `advise` prices is either what some run's draft is priced as, or priced only."""
    run = {
        priced_as(parse_draft(s), head) for s in ("d", "ngram", "oracle:0.5", "mtp") for head in (False, True)
    }
    assert run.isdisjoint(PRICED_ONLY)
    assert run | PRICED_ONLY == set(DraftMethod)
