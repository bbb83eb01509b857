"""The trained zoo: its data, its training code and its builds, on a shortened training run.

The full preset trains for about four minutes, too long for the test suite; every test here goes
through the same code with `train_steps` cut to a few steps. The full preset's acceptance numbers
(draft-xs between 0.3 and 0.8 against moe, draft-s above it) are checked by
benchmarks/zoo/trained_family.py, which writes docs/results/cpu/trained_family.json.
"""

import hashlib
import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specmoe.bench.suite_zoo import default_zoo_dir
from specmoe.errors import SpecmoeError
from specmoe.suite.load import builtin_suite_path, load_suite
from specmoe.zoo import build_zoo, load_manifest, resolve_model
from specmoe.zoo.agreement import greedy_acceptance
from specmoe.zoo.build import zoo_model
from specmoe.zoo.distill import greedy_continuations, train_drafts
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import MOE, PRESETS, RATIO_TARGETS, RATIO_TOLERANCE, get_preset
from specmoe.zoo.synthetic import GENERATORS, documents
from specmoe.zoo.tokenizer import corpus_files, train_tokenizer
from specmoe.zoo.train import reproducible
from specmoe.zoo.train_data import batch_order, held_out_prompts, training_data, without_prompts
from specmoe.zoo.train_loop import held_out_loss, initial_model, learning_rate, target_loss, train_target

TRAINED = PRESETS["trained"]
STEPS = 2  # enough to run every code path; the weights are barely trained


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(corpus_files())


@pytest.fixture(scope="module")
def data(tokenizer):
    return training_data(TRAINED.training, tokenizer)


@pytest.fixture(scope="module")
def short_zoo(tmp_path_factory) -> Path:
    return build_zoo("trained", tmp_path_factory.mktemp("trained") / "zoo", train_steps=STEPS)


# --- the preset -----------------------------------------------------------------------------------


def test_trained_preset_has_the_family_shapes_and_ratios():
    assert [s.name for s in TRAINED.models] == [
        "moe",
        "dense-l",
        "dense-s",
        "draft-s",
        "draft-xs",
        "draft-moe",
    ]
    moe = count_params(TRAINED.model(MOE), TRAINED.vocab_size)
    assert abs(moe.total / moe.active / RATIO_TARGETS[MOE] - 1) <= RATIO_TOLERANCE
    for shape in TRAINED.models:
        if shape.name != MOE:
            ratio = count_params(shape, TRAINED.vocab_size).active / moe.active
            assert abs(ratio / RATIO_TARGETS[shape.name] - 1) <= RATIO_TOLERANCE, shape.name
    plan = TRAINED.training
    assert plan.teacher == MOE and plan.teacher not in plan.drafts
    assert set(plan.drafts) <= set(TRAINED.model_names)


def test_train_steps_override_is_checked():
    assert get_preset("trained", train_steps=3).training.steps == 3
    assert get_preset("trained").training.steps == TRAINED.training.steps
    with pytest.raises(
        SpecmoeError, match=r"--train-steps applies to trained presets.*'tiny' has random weights"
    ):
        get_preset("tiny", train_steps=3)
    with pytest.raises(SpecmoeError, match="--train-steps must be >= 1, got 0"):
        get_preset("trained", train_steps=0)
    with pytest.raises(SpecmoeError, match="unknown zoo preset 'trainde'; available: tiny, bench, trained"):
        get_preset("trainde")
    with pytest.raises(SpecmoeError, match="is trained; build it"):
        zoo_model(TRAINED.model(MOE), TRAINED)


def test_demo_suite_runs_on_the_trained_demo_family_from_the_user_cache(tmp_path, monkeypatch):
    suite = load_suite(builtin_suite_path("quick"))
    assert (suite.zoo_preset, suite.zoo_seed) == ("trained-demo", 0)
    trained = get_preset("trained-demo")
    assert {m.zoo for m in suite.models.values()} == set(trained.model_names) == {"moe", "draft-xs"}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_zoo_dir("trained-demo", 0) == tmp_path / "specmoe" / "zoo" / "trained-demo-seed0"


# --- data -------------------------------------------------------------------------------------------


def test_benchmark_prompts_are_held_out_of_the_training_text(data, tokenizer):
    prompts = held_out_prompts()
    assert len(prompts) >= 39
    corpus = "".join(path.read_text(encoding="utf-8") for path in corpus_files())
    assert any(p in corpus for p in prompts)  # the shipped corpus does contain one; it must be dropped
    trained_text = tokenizer.decode(data.train.flatten().tolist())
    held_text = tokenizer.decode(data.held_out.flatten().tolist())
    for prompt in prompts:
        assert prompt not in trained_text and prompt not in held_text, prompt


def test_without_prompts_drops_whole_paragraphs():
    text = "Intro.\n\nQuestion: Who wrote it?\nAnswer: Someone.\n\nOutro."
    assert without_prompts(text, ("Who wrote it?",)) == "Intro.\n\nOutro."


def test_data_mixture_is_fixed_and_records_its_sources(data, tokenizer):
    again = training_data(TRAINED.training, tokenizer)
    assert torch.equal(data.train, again.train) and torch.equal(data.held_out, again.held_out)
    names = [s.name for s in data.sources]
    assert names[:4] == [f"package:{p.name}" for p in corpus_files()]
    assert {f"generated:{kind}" for kind in GENERATORS} <= set(names)
    assert "stdlib:pydoc_data/topics.py" in names and any(
        n.startswith("stdlib:") and n.endswith(".py") for n in names
    )
    assert all(len(s.sha256) == 64 and s.tokens > 0 for s in data.sources)
    plan = TRAINED.training
    assert data.train.shape[1] == data.held_out.shape[1] == plan.seq_len
    assert sum(s.held_out_windows for s in data.sources) == data.held_out.shape[0]
    package_windows = sum(s.train_windows for s in data.sources if s.name.startswith("package:"))
    others = sum(s.train_windows for s in data.sources if not s.name.startswith("package:"))
    # Package text is repeated, each pass cut at another offset (losing at most one window a pass).
    assert others + plan.package_repeats * (package_windows - 4) <= data.train.shape[0]
    assert data.train.shape[0] <= others + plan.package_repeats * package_windows
    assert (data.train != 0).all(), (
        "EOS (id 0) never appears in training text: the models never learn to stop"
    )


def test_generated_text_is_deterministic_and_its_arithmetic_is_right():
    for kind in GENERATORS:
        first, second = documents(kind), documents(kind)
        assert [next(first) for _ in range(50)] == [next(second) for _ in range(50)]
    stream = documents("reasoning")
    text = "\n".join(next(stream) for _ in range(300))
    equations = re.findall(r"(\d+) ([-+*]) (\d+) = (\d+)", text)
    assert len(equations) > 100
    for left, op, right, result in equations:
        assert eval(f"{left} {op} {right}") == int(result), (left, op, right, result)
    chinese = documents("chinese")
    sums = re.findall(r"(\d+)加(\d+)等于(\d+)", "".join(next(chinese) for _ in range(300)))
    assert sums and all(int(a) + int(b) == int(c) for a, b, c in sums)


def test_batch_order_is_seeded_and_covers_every_window_each_epoch():
    order = batch_order(50, steps=20, batch_size=5, seed=0)
    assert order.shape == (20, 5)
    assert torch.equal(order, batch_order(50, 20, 5, seed=0))
    assert not torch.equal(order, batch_order(50, 20, 5, seed=1))
    assert sorted(order.flatten()[:50].tolist()) == list(range(50))


def test_learning_rate_warms_up_then_decays_to_the_floor():
    plan = replace(TRAINED.training, steps=100, warmup_steps=10, lr=1e-2, final_lr_fraction=0.1)
    rates = [learning_rate(step, plan) for step in range(100)]
    assert rates[0] == pytest.approx(1e-3) and rates[9] == pytest.approx(1e-2)
    assert all(a >= b for a, b in itertools.pairwise(rates[9:]))
    assert rates[-1] == pytest.approx(1e-3, rel=0.01)


# --- training ---------------------------------------------------------------------------------------


def test_reproducible_restores_the_callers_settings():
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    with reproducible():
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (threads, deterministic)


def test_training_experts_forward_matches_transformers_eager():
    plan = TRAINED.training
    windows = torch.randint(1, TRAINED.vocab_size, (3, 40), generator=torch.Generator().manual_seed(0))
    with reproducible():
        model = initial_model(TRAINED.model(MOE), TRAINED, 0, plan)
        ours = target_loss(model, windows, plan)
        ours.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        model.zero_grad()
        model.set_experts_implementation("eager")
        eager = target_loss(model, windows, plan)
        eager.backward()
    assert ours.item() == pytest.approx(eager.item(), abs=1e-6)
    for name, param in model.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_teacher_continuations_are_greedy_and_never_end():
    with reproducible():
        model = initial_model(TRAINED.model("draft-xs"), TRAINED, 0, TRAINED.training).eval()
        prefixes = torch.randint(1, TRAINED.vocab_size, (3, 8), generator=torch.Generator().manual_seed(0))
        written = greedy_continuations(model, prefixes, 20)
        assert written.shape == (3, 20) and torch.equal(written[:, :8], prefixes)
        with torch.no_grad():  # the cached loop against recomputing the whole sequence each step
            for position in range(8, 20):
                logits = model(input_ids=written[:, :position]).logits[:, -1]
                assert torch.equal(logits.argmax(-1), written[:, position])
            model.lm_head.weight.zero_()  # every logit ties, and argmax picks the first: EOS (id 0)
        assert (greedy_continuations(model, prefixes, 12)[:, 8:] == 1).all()


def test_targets_learn_the_text_and_drafts_learn_the_teacher(data):
    """30 steps: a target's held-out loss falls well below its start, and a distilled draft picks
    the teacher's favourite next token far more often than the same draft untrained."""
    zoo = replace(
        TRAINED,
        training=replace(TRAINED.training, steps=30, teacher="draft-s", drafts=("draft-xs",), batch_size=4),
    )
    order = batch_order(data.train.shape[0], 30, 4, seed=0)
    held_out = data.held_out[:16]
    with reproducible():
        start = held_out_loss(initial_model(zoo.model("draft-s"), zoo, 0, zoo.training).eval(), held_out)
        teacher = train_target(zoo.model("draft-s"), zoo, 0, replace(data, held_out=held_out), order)
        assert teacher.held_out_loss < start - 1.0
        untrained = initial_model(zoo.model("draft-xs"), zoo, 0, zoo.training)
        drafts, _ = train_drafts(
            [zoo.model("draft-xs")], teacher, zoo, 0, replace(data, held_out=held_out), order
        )
        draft = initial_model(zoo.model("draft-xs"), zoo, 0, zoo.training)
        draft.load_state_dict({k: v.float() for k, v in drafts["draft-xs"].weights.items()})
        teacher_model = initial_model(zoo.model("draft-s"), zoo, 0, zoo.training)
        teacher_model.load_state_dict({k: v.float() for k, v in teacher.weights.items()})

        def agreement(model) -> float:
            with torch.no_grad():
                guess = model.eval()(input_ids=held_out).logits.argmax(-1)
                truth = teacher_model.eval()(input_ids=held_out).logits.argmax(-1)
            return (guess == truth).float().mean().item()

        assert agreement(draft) > agreement(untrained) + 0.2
    assert drafts["draft-xs"].teacher == "draft-s" and teacher.teacher is None


# --- builds -----------------------------------------------------------------------------------------


def test_short_build_writes_a_trained_manifest(short_zoo):
    manifest = load_manifest(short_zoo)
    assert (manifest["preset"], manifest["seed"]) == ("trained", 0)
    assert manifest["overrides"] == {"num_experts": None, "top_k": None, "train_steps": STEPS}
    training = manifest["training"]
    assert training["plan"]["steps"] == STEPS and training["threads"] == 1
    assert training["data"]["python"] and training["data"]["sources"]
    assert training["total_cpu_s"] > 0
    for name, entry in manifest["models"].items():
        assert entry["train_tokens"] == STEPS * training["plan"]["batch_size"] * training["plan"]["seq_len"]
        assert 0 < entry["held_out_loss"] < 12 and entry["train_s"] > 0
        assert entry["teacher"] == ("moe" if name in training["plan"]["drafts"] else None)
        config = json.loads((short_zoo / name / "config.json").read_text())
        assert config["dtype"] == "bfloat16" and config["eos_token_id"] == 0
    heads = manifest["heads"]  # the EAGLE-3 head, in a folder of its own; its acceptance beside draft-xs's
    assert list(heads) == ["eagle3"] and heads["eagle3"]["target"] == "moe"
    for entry in (heads["eagle3"], manifest["models"]["draft-xs"]):
        assert list(entry["acceptance"]) == ["1", "2", "3", "4"]
        assert all(0 <= rate <= 1 for rate in entry["acceptance"].values())
    head = json.loads((short_zoo / "eagle3" / "config.json").read_text())
    assert head["architectures"] == ["LlamaForCausalLMEagle3"] and head[
        "eagle_aux_hidden_state_layer_ids"
    ] == [0, 1, 2]
    assert resolve_model("eagle3", short_zoo) == short_zoo / "eagle3"
    assert build_zoo("trained", short_zoo, train_steps=STEPS) == short_zoo  # reused, not retrained
    with pytest.raises(SpecmoeError, match=r"train_steps=2.*pick another --out.*preset=trained, seed=0$"):
        build_zoo("trained", short_zoo)


def test_two_builds_with_the_same_seed_are_identical(short_zoo, tiny_zoo, tmp_path):
    again = build_zoo("trained", tmp_path / "again", train_steps=STEPS)
    first, second = load_manifest(short_zoo), load_manifest(again)
    for name in TRAINED.model_names:
        assert _sha256(again / name / "model.safetensors") == _sha256(short_zoo / name / "model.safetensors")
        assert first["models"][name]["safetensors_sha256"] == second["models"][name]["safetensors_sha256"]
        assert first["models"][name]["held_out_loss"] == second["models"][name]["held_out_loss"]
    assert first["training"]["data"] == second["training"]["data"]
    assert _sha256(again / "eagle3" / "model.safetensors") == _sha256(
        short_zoo / "eagle3" / "model.safetensors"
    )
    assert first["heads"] == {**second["heads"], "eagle3": {**second["heads"]["eagle3"], **_timings(first)}}
    # ...and training changed the weights: they are not the random zoo's of the same shapes.
    assert _sha256(tiny_zoo / MOE / "model.safetensors") != _sha256(short_zoo / MOE / "model.safetensors")


def _timings(manifest: dict) -> dict:
    """The EAGLE-3 head's entry's seconds, which two identical builds need not share."""
    entry = manifest["heads"]["eagle3"]
    return {key: entry[key] for key in ("train_s", "train_cpu_s", "teacher_written_s")}


def test_greedy_acceptance_is_reported_per_prompt_kind(short_zoo):
    rows = greedy_acceptance(
        short_zoo / MOE, short_zoo / "draft-xs", gamma=3, max_new_tokens=6, kinds=["code"]
    )
    (row,) = rows
    assert row.kind == "code" and row.prompts == 10
    assert row.drafted == 3 * row.rounds and 0 <= row.accepted <= row.drafted
    assert row.acceptance_rate == row.accepted / row.drafted
    assert len(row.by_position) == 3 and all(0 <= p <= 1 for p in row.by_position)
    assert list(row.by_position) == sorted(row.by_position, reverse=True)
