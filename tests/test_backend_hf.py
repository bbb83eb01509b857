"""The HF backend: bad input, ragged cache bookkeeping, router trace through the backend."""

from __future__ import annotations

import json

import pytest
import torch
from broken_models import broken_models

from specmoe.api import load_model
from specmoe.backends import load_backend
from specmoe.backends.router_trace import distinct_experts_per_layer
from specmoe.errors import SpecmoeError


def test_missing_directory_is_one_clear_error(tmp_path):
    with pytest.raises(SpecmoeError, match="not found"):
        load_model(tmp_path / "nope")


def test_pickle_weights_need_opt_in(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not really")
    with pytest.raises(SpecmoeError, match="allow-pickle"):
        load_model(tmp_path)


def test_remote_code_needs_opt_in(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "x", "auto_map": {"AutoModel": "m.M"}}))
    (tmp_path / "model.safetensors").write_bytes(b"\x02" + b"\x00" * 7 + b"{}")  # no tensors
    with pytest.raises(SpecmoeError, match="trust-remote-code"):
        load_model(tmp_path)


@pytest.fixture(scope="module")
def broken(tiny_zoo, tmp_path_factory):
    return broken_models(tiny_zoo / "draft-xs", tmp_path_factory.mktemp("broken"))


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("missing", "1 weight tensor(s) missing from the checkpoint (model.norm.weight); the model would run "
         "with random weights there"),
        ("extra", "1 weight tensor(s) in the checkpoint that the model has no place for "
         "(model.unused.weight)"),
        ("truncated", "model.safetensors: truncated ("),
        ("shapes", "config.json does not match the weights (12 tensor(s) differ in shape, first "
         "model.layers.0.mlp.down_proj.weight: (32, 96) in the weights, (32, 192) from config.json)"),
    ],
)  # fmt: skip
def test_weights_that_do_not_match_are_refused_never_randomly_filled(broken, fault, message):
    with pytest.raises(SpecmoeError) as err:
        load_model(broken[fault], dtype="float32")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_safetensors_header_is_checked_against_the_file_size(tmp_path):
    from specmoe.backends.weights import safetensors_header

    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    assert safetensors_header(path)["w"]["shape"] == [2]
    for cut, state in ((4, "truncated"), (-4, "longer than its header says")):
        path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8 - cut))
        with pytest.raises(SpecmoeError, match=state):
            safetensors_header(path)
    path.write_bytes(b"\xff" * 64)
    with pytest.raises(SpecmoeError, match="truncated or not a safetensors file"):
        safetensors_header(path)


def test_unknown_backend_names_the_available_ones():
    with pytest.raises(SpecmoeError, match="available: hf"):
        load_backend("nope", "x")


def test_rollback_masks_rejected_slots_per_row(exact_models):
    model = exact_models["dense-s"]
    model.prefill([[5, 6, 7], [8]])
    assert model.cached_lengths() == [3, 1]
    model.forward(torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]]))
    model.rollback([5, 4])
    assert model.cached_lengths() == [5, 4]
    # the next token sees exactly the kept context: compare with a fresh prefill of it
    ragged = model.forward(torch.tensor([[9], [9]]))[:, -1]
    model.prefill([[5, 6, 7, 1, 2], [8, 1, 2, 3]])
    fresh = model.forward(torch.tensor([[9], [9]]))[:, -1]
    assert torch.allclose(ragged, fresh, rtol=0, atol=1e-10)


def test_router_trace_counts_distinct_experts(exact_models):
    model = exact_models["moe"]
    assert exact_models["dense-s"].router_trace() is None
    trace = model.router_trace()
    model.prefill([[]])
    with trace:
        trace.clear()
        model.forward(torch.arange(1, 33)[None])
    distinct = distinct_experts_per_layer(trace.records)
    assert len(distinct) == 2 and all(20 <= d <= 32 for d in distinct)  # N(32) = 27.9 of 32 experts
    model.rollback([0])


def test_moe_top_k_override(tiny_zoo):
    model = load_model(tiny_zoo / "moe", dtype="float32", moe_top_k=1)
    assert model.model.config.num_experts_per_tok == 1
    with pytest.raises(SpecmoeError, match="moe_top_k"):
        load_model(tiny_zoo / "dense-s", dtype="float32", moe_top_k=1)
