"""The llama.cpp backend on the GGUF export of the tiny zoo: same tokens as transformers, lossless
greedy SD through the same backend, the harness's invariants and audit, one-line errors.

Needs the `llamacpp` extra. Without it these tests skip, unless the environment variable CI is set:
there a missing extra is a failure, not a skip (CI installs it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from audited import counts_pass
from suite_files import TINY_ZOO, write_suite
from test_gguf import require  # tests/ is on sys.path under pytest's default import mode

from specmoe.api import load_model, load_tokenizer
from specmoe.bench.suite_run import run_suite
from specmoe.cli import main
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.errors import SpecmoeError
from specmoe.metrics import invariant_violations, totals
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite
from specmoe.zoo.gguf import export_gguf, zoo_gguf

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41], [99]]  # different lengths, one a single token
TEXT = "The history of the printing press"


@pytest.fixture(scope="module")
def gguf_files(tiny_zoo) -> dict[tuple[str, str], Path]:
    require("llama_cpp")
    return {(m, t): zoo_gguf(tiny_zoo, m, t) for m in ("moe", "dense-s", "draft-xs") for t in ("f32", "f16")}


def llama(path: Path, **options):
    return load_model(path, n_threads=1, **options)  # tiny models: threads only add spin-waiting


@pytest.fixture(scope="module")
def models(gguf_files) -> dict[str, object]:
    return {m: llama(gguf_files[(m, "f16")]) for m in ("moe", "dense-s", "draft-xs")}


def greedy(target, prompts, drafter=None, gamma=4, tokens=24) -> list[tuple[int, ...]]:
    config = DecodeConfig(max_new_tokens=tokens, gamma=gamma, ignore_eos=True)
    result = decode(target, prompts, config, drafter)
    assert invariant_violations(result) == []
    return [o.token_ids for o in result.outputs]


# --- the same model as transformers ---------------------------------------------------------------


def test_gguf_tokenizer_tokenizes_like_the_zoo_tokenizer(tiny_zoo, gguf_files):
    ours, reference = load_tokenizer(gguf_files[("moe", "f16")]), load_tokenizer(tiny_zoo / "moe")
    for text in [TEXT, "def f(x):\n    return x**2  # 12345", "中文测试，你好！", "  spaced\tout\n\n words "]:
        ids = ours.encode(text, add_special_tokens=False)
        assert ids == reference.encode(text, add_special_tokens=False)
        assert ours.decode(ids) == text


@pytest.mark.parametrize("name", ["moe", "dense-s"])
def test_f32_gguf_reproduces_transformers_float32_logits(tiny_zoo, gguf_files, name):
    ours = llama(gguf_files[(name, "f32")], cache_type="f32", flash_attn=False)
    reference = load_model(tiny_zoo / name, dtype="float32")
    block = torch.tensor([[7, 8, 9, 10]])  # [1, 4]
    for backend in (ours, reference):
        backend.prefill([PROMPTS[0]])
    got, want = ours.forward(block), reference.forward(block)  # [1, 4, V]
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert (got - want).abs().max().item() < 1e-4


@pytest.mark.parametrize("gguf_type", ["f32", "f16"])
@pytest.mark.parametrize("name", ["moe", "dense-s"])
def test_greedy_tokens_equal_transformers(tiny_zoo, gguf_files, name, gguf_type):
    prompt = load_tokenizer(tiny_zoo / name).encode(TEXT, add_special_tokens=False)
    reference = greedy(load_model(tiny_zoo / name, dtype="float32"), [prompt], tokens=32)
    assert greedy(llama(gguf_files[(name, gguf_type)]), [prompt], tokens=32) == reference


# --- the backend protocol -------------------------------------------------------------------------


def test_rollback_then_refeed_gives_the_same_logits(models):
    model = models["moe"]
    model.prefill(PROMPTS[:2])
    block = torch.tensor([[1, 2, 3], [4, 5, 6]])  # [2, 3]
    first = model.forward(block)
    assert model.cached_lengths() == [10, 5]
    model.rollback([8, 5])  # row 0 drops two of its three new tokens, row 1 keeps all
    assert model.cached_lengths() == [8, 5]
    again = model.forward(torch.tensor([[2, 3], [7, 8]]))
    assert torch.allclose(again[0], first[0, 1:], atol=1e-4)


def test_retain_keeps_each_rows_own_cache(models):
    model = models["dense-s"]
    model.prefill([PROMPTS[1]])
    alone = model.forward(torch.tensor([[5, 6]]))
    model.prefill(PROMPTS)
    model.forward(torch.tensor([[1, 2], [5, 6], [3, 4]]))
    model.retain([1])
    assert model.cached_lengths() == [4]
    model.rollback([2])
    assert torch.allclose(model.forward(torch.tensor([[5, 6]])), alone, atol=1e-4)
    assert model.router_trace() is None


# --- lossless speculative decoding ----------------------------------------------------------------


@pytest.mark.parametrize("target_name", ["moe", "dense-s"])
@pytest.mark.parametrize("gamma", [1, 4, 16])
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_sd_matches_greedy_decoding(models, target_name, gamma, batch):
    target, prompts = models[target_name], PROMPTS[:batch]
    expected = [greedy(target, [p])[0] for p in prompts]
    assert greedy(target, prompts, ModelDrafter(models["draft-xs"]), gamma) == expected


def test_self_draft_accepts_everything(models, gguf_files):
    target = models["moe"]
    drafter = ModelDrafter(llama(gguf_files[("moe", "f16")]))
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=30, gamma=4, ignore_eos=True), drafter)
    t = totals(result)
    assert [o.token_ids for o in result.outputs] == [greedy(target, [p], tokens=30)[0] for p in PROMPTS]
    assert t.accepted == t.drafted and t.target_forwards == 6


def test_moe_top_k_override_changes_the_model(gguf_files, models):
    path = gguf_files[("moe", "f16")]
    top1 = llama(path, moe_top_k=1)
    assert greedy(top1, [PROMPTS[0]]) != greedy(models["moe"], [PROMPTS[0]])
    assert greedy(llama(path, moe_top_k=2), [PROMPTS[0]]) == greedy(models["moe"], [PROMPTS[0]])
    with pytest.raises(SpecmoeError, match="between 1 and the model's 32 experts, got 33"):
        llama(path, moe_top_k=33)
    with pytest.raises(SpecmoeError, match="without MoE routers"):
        llama(gguf_files[("dense-s", "f16")], moe_top_k=1)


# --- the harness ----------------------------------------------------------------------------------

DRAFT_XS = {"zoo": "draft-xs", "backend": "llamacpp", "gguf": "q8_0"}


def gguf_suite(folder: Path, file: str, dense: Path | str, draft_xs: dict[str, str] = DRAFT_XS) -> Path:
    """The tiny zoo's MoE and draft-xs run by llama.cpp, and a dense model given as a GGUF file."""
    models = {
        "moe": {"zoo": "moe", "backend": "llamacpp"},
        "draft-xs": draft_xs,
        "dense-file": {"path": dense},
    }
    group = {"name": "sd", "target": ["moe", "dense-file"], "draft": ["draft-xs", "oracle:1.0", "ngram"]}
    return write_suite(
        folder,
        "gguf-mini",
        file=file,
        zoo=TINY_ZOO | {"seed": 0},
        defaults={"prompts": 1, "max_new_tokens": 12, "dtype": "float32", "prompt_set": "code"},
        models=models,
        groups=[group | {"oracle_cost": "draft-xs", "gamma": [3], "batch_size": [1, 2]}],
    )


def test_suite_on_the_gguf_zoo_passes_the_audit(tiny_zoo, gguf_files, tmp_path):
    path = gguf_suite(tmp_path, "gguf.toml", gguf_files[("dense-s", "f16")])
    suite = load_suite(path)
    assert suite.models["dense-file"].backend == "llamacpp"  # implied by the .gguf path
    assert suite.models["draft-xs"].identity["gguf"] == "q8_0"
    rows = run_suite(suite, tmp_path / "r.db", tiny_zoo, progress=False)
    assert sorted(r.run_id for r in rows) == sorted(s.run_id for s in expand(suite))
    for row in rows:
        c = row.counts
        assert c.emitted + c.truncated == c.accepted + c.rounds
        assert c.emitted == 12 * row.config["batch_size"]
        assert counts_pass(row), row.audit_reason
        if row.arm == "sd" and row.config["temperature"] == 0.0:
            assert "output identical to plain greedy decoding" in row.audit_reason
    assert all(r.acceptance_rate == 1.0 for r in rows if r.config["draft"] == "oracle:1.0")
    assert (tiny_zoo / "gguf" / "draft-xs-q8_0.gguf").is_file()


def test_suite_rejects_gguf_settings_that_cannot_apply(tmp_path):
    bad = gguf_suite(tmp_path, "a.toml", "x.gguf", DRAFT_XS | {"gguf": "q4_k"})
    with pytest.raises(SpecmoeError, match=r"models.draft-xs.gguf: unknown gguf 'q4_k'"):
        load_suite(bad)
    hf = gguf_suite(tmp_path, "b.toml", "x.gguf", {"zoo": "draft-xs", "gguf": "q8_0"})
    with pytest.raises(SpecmoeError, match='gguf = needs backend = "llamacpp"'):
        load_suite(hf)


# --- bad input: one line each ---------------------------------------------------------------------


def one_line_error(capsys, *args: str) -> str:
    assert main(["generate", *args, "--prompt", "Hello", "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specmoe: error: ")
    return err


def test_a_file_that_is_not_gguf(tmp_path, capsys):
    require("llama_cpp")
    fake = tmp_path / "model.gguf"
    fake.write_text('{"not": "gguf"}')
    err = one_line_error(capsys, "--target", str(fake))
    assert "is not a GGUF file (it starts with b'{\"no'" in err
    with pytest.raises(SpecmoeError, match="not found"):
        load_model(tmp_path / "missing.gguf")


def test_a_gguf_of_an_unsupported_architecture(tmp_path, capsys):
    gguf = require("gguf")
    require("llama_cpp")
    path = tmp_path / "foo.gguf"
    writer = gguf.GGUFWriter(path, "foo")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 8).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    err = one_line_error(capsys, "--target", str(path))
    assert "architecture 'foo' is not supported by this llama.cpp" in err


def test_mismatched_vocabularies(tiny_zoo, gguf_files, tmp_path, capsys):
    other = tmp_path / "draft-other"
    shutil.copytree(tiny_zoo / "draft-xs", other)
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = (t for t, i in vocab.items() if i in (300, 301))
    vocab[first], vocab[second] = vocab[second], vocab[first]  # same size, two tokens swapped
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    draft = export_gguf(other, tmp_path / "draft-other.gguf")
    target = str(gguf_files[("moe", "f16")])
    err = one_line_error(capsys, "--target", target, "--draft", str(draft))
    assert "draft and target vocabularies differ: both have 2048 tokens but not the same ones" in err


def test_options_llamacpp_cannot_honour(gguf_files):
    path = gguf_files[("draft-xs", "f16")]
    with pytest.raises(SpecmoeError, match="dtype 'bfloat16' cannot be honoured"):
        llama(path, dtype="bfloat16")
    with pytest.raises(SpecmoeError, match="unknown cache_type 'q4'"):
        llama(path, cache_type="q4")
