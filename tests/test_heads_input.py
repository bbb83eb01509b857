"""Head drafters under sampling and hostile input: sampling SD with an MTP or EAGLE-3 head keeps the
target's distribution (chi-square, with the head's own distribution as the negative control), and
every head that does not fit its target, or a checkpoint without one, is refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from head_models import WEIGHTS, eagle3_config, eagle3_dir, small_hybrid_moe, with_mtp
from safetensors.torch import load_file, save_file
from scipy.stats import chisquare
from small_vocab import VOCAB, exact_joint, small_vocab_model

from specmoe.api import generate_text, load_model
from specmoe.cli import main
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.make_drafter import make_drafter
from specmoe.decoding.sampling import SamplingParams
from specmoe.drafts import ModelDraft, MtpDraft
from specmoe.errors import SpecmoeError

PROMPT = [1, 4, 2]
PARAMS = SamplingParams(temperature=1.0)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A two-layer target over six tokens with a random MTP module and a random EAGLE-3 head."""
    root = tmp_path_factory.mktemp("heads-small")
    target = small_vocab_model(root / "target", 0, 2)
    with_mtp(
        target.model, root / "target", root / "target-mtp", seed=3, config_key="num_nextn_predict_layers"
    )
    eagle3_dir(target.model, root / "eagle3", seed=4, layers=[0, 1, 2])
    return root


def _drafter(root, kind, target):
    if kind == "mtp":
        return make_drafter(MtpDraft(), target)
    return make_drafter(ModelDraft("eagle3"), target, load_model(root / "eagle3", dtype="float64"))


def _joint(target, drafter, draws: int, batch: int = 500) -> torch.Tensor:
    counts = torch.zeros(VOCAB * VOCAB, dtype=torch.float64)
    for seed in range(draws // batch):
        config = DecodeConfig(max_new_tokens=2, gamma=3, sampling=PARAMS, seed=seed, ignore_eos=True)
        for out in decode(target, [PROMPT] * batch, config, drafter).outputs:
            counts[out.token_ids[0] * VOCAB + out.token_ids[1]] += 1
    return counts


@pytest.mark.parametrize("kind", ["mtp", "eagle3"])
def test_sampling_sd_with_a_head_keeps_the_target_distribution(small, kind):
    target = load_model(small / ("target-mtp" if kind == "mtp" else "target"), dtype="float64")
    draws = 4000
    expected = exact_joint(target, PROMPT, PARAMS) * draws
    # Goodness of fit over the 36 (x1, x2) cells, as tests/test_sampling_sd.py; the control below
    # shows the check rejects a distribution leaking the head's.
    assert chisquare(_joint(target, _drafter(small, kind, target), draws), expected).pvalue > 1e-3


def test_the_joint_check_rejects_the_heads_own_distribution(small):
    target = load_model(small / "target-mtp", dtype="float64")
    drafter = _drafter(small, "mtp", target)
    draws, counts = 4000, torch.zeros(VOCAB * VOCAB, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    for _ in range(draws // 500):
        target.capture_hidden(drafter.hidden_layers)
        target.prefill([PROMPT[:-1]] * 500)
        drafter.begin([PROMPT] * 500, target.hidden())
        for first, second in drafter.propose([PROMPT] * 500, 2, PARAMS, generator).tokens.tolist():
            counts[first * VOCAB + second] += 1
    target.capture_hidden(())
    assert chisquare(counts, exact_joint(target, PROMPT, PARAMS) * draws).pvalue < 1e-6


# --- hostile input: one line each --------------------------------------------------------------


def _one_line(err: SpecmoeError, *words: str) -> None:
    text = str(err)
    assert "\n" not in text and all(w in text for w in words), text


def test_a_checkpoint_without_mtp_weights_is_refused(small):
    target = load_model(small / "target", dtype="float64")
    with pytest.raises(SpecmoeError) as err:
        make_drafter(MtpDraft(), target)
    _one_line(err.value, "no MTP weights", "mtp.*")


def _edited_mtp(small, tmp_path, edit) -> object:
    """The target, loaded from a copy of the MTP checkpoint that `edit` then changes on disk (its
    tensors, a dict, in place): --draft mtp reads the module from the files when it drafts."""
    out = shutil.copytree(small / "target-mtp", tmp_path / "edited")
    target = load_model(out, dtype="float64")
    tensors = load_file(out / WEIGHTS)
    edit(tensors)
    save_file(tensors, out / WEIGHTS, metadata={"format": "pt"})
    return target


def test_a_truncated_mtp_tensor_is_refused(small, tmp_path):
    def cut(tensors):
        tensors["mtp.fc.weight"] = tensors["mtp.fc.weight"][:, :-3].contiguous()

    with pytest.raises(SpecmoeError) as err:
        make_drafter(MtpDraft(), _edited_mtp(small, tmp_path, cut))
    _one_line(err.value, "mtp.fc.weight", "shape")


def test_a_missing_mtp_tensor_is_refused(small, tmp_path):
    target = _edited_mtp(small, tmp_path, lambda tensors: tensors.pop("mtp.norm.weight"))
    with pytest.raises(SpecmoeError) as err:
        make_drafter(MtpDraft(), target)
    _one_line(err.value, "mtp.norm.weight", "missing")


def test_an_mtp_module_made_for_another_hidden_size_is_refused(small, tmp_path):
    def wider(tensors):
        for key in [k for k in tensors if k.startswith("mtp.")]:
            tensors[key] = torch.zeros([2 * d if d in (16, 32) else d for d in tensors[key].shape])

    with pytest.raises(SpecmoeError) as err:
        make_drafter(MtpDraft(), _edited_mtp(small, tmp_path, wider))
    _one_line(err.value, "has shape", "16 hidden")


def test_the_deepseek_nextn_layout_is_refused_by_name(small, tmp_path):
    def nextn(tensors):
        for key in [k for k in tensors if k.startswith("mtp.")]:
            tensors["model.layers.2." + key.removeprefix("mtp.").replace("fc.", "eh_proj.")] = tensors.pop(
                key
            )

    with pytest.raises(SpecmoeError) as err:
        make_drafter(MtpDraft(), _edited_mtp(small, tmp_path, nextn))
    _one_line(err.value, "DeepSeek-V3 / GLM nextn layout", "eh_proj")


def _eagle3(small, tmp_path, **config) -> object:
    target = load_model(small / "target", dtype="float64")
    head = shutil.copytree(small / "eagle3", tmp_path / "head")
    (head / "config.json").write_text(
        json.dumps({**json.loads((head / "config.json").read_text()), **config})
    )
    return target, load_model(head, dtype="float64")


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"eagle_aux_hidden_state_layer_ids": [0, 1, 5]}, ("target layers [0, 1, 5]", "2 decoder layers")),
        ({"eagle_aux_hidden_state_layer_ids": None}, ("vLLM's default", "2 decoder layers")),
        ({"vocab_size": 7, "draft_vocab_size": 7}, ("vocabulary of 7 tokens", "target has 6")),
        ({"hidden_size": 32, "head_dim": 16}, ("has shape",)),
    ],
)
def test_an_eagle3_head_that_does_not_fit_its_target_is_refused(small, tmp_path, config, words):
    target, head = _eagle3(small, tmp_path, **config)
    with pytest.raises(SpecmoeError) as err:
        make_drafter(ModelDraft("eagle3"), target, head)
    _one_line(err.value, *words)


def test_an_eagle3_head_for_another_hidden_size_is_refused(small, tmp_path):
    """A head for a target whose hidden states are wider: its fc reads 3 x 32 features, not 3 x 16."""
    target = load_model(small / "target", dtype="float64")
    other = small_hybrid_moe(tmp_path / "wide", vocab=VOCAB)  # hidden size 32
    eagle3_dir(load_model(other, dtype="float64").model, tmp_path / "head", layers=[0, 1, 2])
    with pytest.raises(SpecmoeError) as err:
        make_drafter(ModelDraft("eagle3"), target, load_model(tmp_path / "head", dtype="float64"))
    _one_line(err.value, "fuses target hidden states of size 32", "16")


def test_a_head_is_found_by_its_config(small):
    head = load_model(small / "eagle3", dtype="float64")
    assert type(head).__name__ == "Eagle3Checkpoint"
    assert eagle3_config(load_model(small / "target", dtype="float64").model, None)["architectures"] == [
        "LlamaForCausalLMEagle3"
    ]


def test_generate_drafts_with_the_targets_mtp_module(tiny_zoo, tmp_path):
    target = load_model(tiny_zoo / "moe", dtype="float64")
    with_mtp(target.model, tiny_zoo / "moe", tmp_path / "moe-mtp")
    report = generate_text(
        str(tmp_path / "moe-mtp"), ["def add(a, b):"], MtpDraft(), gamma=3, max_new_tokens=12, check=True,
        dtype="float64",
    )  # fmt: skip
    assert report["divergences"] == [] and report["stats"]["drafted"] > 0


def test_generate_refuses_mtp_without_weights_in_one_line(capsys, tiny_zoo):
    code = main(
        ["generate", "--zoo", str(tiny_zoo), "--target", "moe", "--draft", "mtp", "--dtype", "float64"]
    )
    err = capsys.readouterr().err
    assert code != 0 and "no MTP weights" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_benchmark_runs_and_stores_head_drafters(tiny_zoo, tmp_path, capsys):
    """`bench quick` with --draft mtp and an EAGLE-3 head's directory: the suite runner measures
    them as any draft, each round's draft time included."""
    from specmoe.results.store import Store

    model = load_model(tiny_zoo / "moe", dtype="float64").model
    target = with_mtp(model, tiny_zoo / "moe", tmp_path / "moe-mtp")
    head = eagle3_dir(model, tmp_path / "head", layers=[0, 1, 2], draft_vocab=1024)
    db = tmp_path / "q.db"
    argv = [
        "bench", "quick", "--model", str(target), "--draft", "mtp", "--draft", str(head), "--gamma", "2",
        "--num-prompts", "1", "--max-new-tokens", "6", "--warmup", "0", "--db", str(db), "--quiet",
        "--threads", "1",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    with Store(db) as store:
        rows = [r for r in store.rows() if r.arm == "sd"]
    assert sorted(r.config["draft"] for r in rows) == sorted(["mtp", "head"])
    assert all(r.audit_verdict == "pass" and r.times.draft_s > 0 for r in rows)
    assert all("identical to plain greedy decoding" in r.audit_reason for r in rows)


def test_a_suite_names_the_zoo_heads(tmp_path):
    """`draft = "mtp"` needs no model of its own; an EAGLE-3 head is a zoo model of the presets that
    train one, and of no other."""
    from suite_files import write_suite, zoo_models

    from specmoe.suite.expand import expand
    from specmoe.suite.load import load_suite

    group = {"name": "g", "target": ["moe"], "draft": ["mtp", "eagle3"], "gamma": [3]}
    path = write_suite(
        tmp_path, "heads", zoo={"preset": "trained"}, models=zoo_models("moe", "eagle3"), groups=[group]
    )
    specs = [s for s in expand(load_suite(path)) if s.arm == "sd"]
    assert {str(s.draft): (s.draft_model.zoo if s.draft_model else None) for s in specs} == {
        "mtp": None,
        "eagle3": "eagle3",
    }
    assert len({s.cell_key for s in specs}) == 2  # the two drafts are two measured cells
    tiny = write_suite(
        tmp_path, "tiny", zoo={"preset": "tiny"}, models=zoo_models("moe", "eagle3"), groups=[group]
    )
    with pytest.raises(SpecmoeError, match="preset 'tiny' has no model 'eagle3'"):
        load_suite(tiny)
