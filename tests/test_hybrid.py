"""SD is lossless on hybrid models: gated-DeltaNet linear attention beside full attention (Qwen3.5,
Qwen3-Next), as target and as draft, eager and through the static cache; and a model whose cache
cannot drop a rejected suffix is refused before it runs.

The drafts are their targets with noise on every weight (`hybrid_models.save_hybrid`), so they
agree often but not always: rows reject at different positions and roll back by different counts.
"""

from __future__ import annotations

import pytest
import torch
from hybrid_models import VOCAB, hybrid_config, save_hybrid
from refusing_models import JAMBA_LAYOUT
from scipy.stats import chisquare

from specmoe.api import load_model
from specmoe.backends.hf_recurrent import LinearStates
from specmoe.backends.hf_static import StaticHFBackend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.decoding.ngram import NgramDrafter
from specmoe.decoding.oracle import OracleDrafter
from specmoe.decoding.sampling import SamplingParams
from specmoe.errors import SpecmoeError
from specmoe.metrics import acceptance_rate, invariant_violations, totals

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41], [90]]  # ragged, one a single token
FAMILIES = ["qwen3_5_moe", "qwen3_next", "qwen3_5"]
NOISE = 0.003  # draft weights = target weights + N(0, NOISE²): acceptance 0.4-0.7 on these models


@pytest.fixture(scope="module")
def hybrid_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrid")
    return {
        family: (
            save_hybrid(family, root / family),
            save_hybrid(family, root / f"{family}-draft", NOISE, seed=1),
        )
        for family in FAMILIES
    }


def _plain(target, prompts, **config):
    return [decode(target, [p], DecodeConfig(**config)).outputs[0].token_ids for p in prompts]


def _static(path, compiled: bool):
    eager = load_model(path, dtype="float64")
    return StaticHFBackend(eager.model, eager.name, eager.device, compile=compiled, compiler="eager")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_sd_is_exact_with_a_hybrid_target_and_draft(hybrid_dirs, family, batch):
    target_dir, draft_dir = hybrid_dirs[family]
    target, draft = load_model(target_dir, dtype="float64"), load_model(draft_dir, dtype="float64")
    prompts = PROMPTS[:batch] if batch > 1 else PROMPTS[2:]  # B = 1: a one-token prompt, nothing prefilled
    config = DecodeConfig(max_new_tokens=24, gamma=3, ignore_eos=True)
    expected = _plain(target, prompts, max_new_tokens=24, ignore_eos=True)
    result = decode(target, prompts, config, ModelDrafter(draft))
    assert [o.token_ids for o in result.outputs] == expected
    counts = totals(result)
    assert 0.2 <= acceptance_rate(counts.accepted, counts.drafted) <= 0.8  # drafts sometimes rejected
    assert invariant_violations(result) == []
    assert sum(r.state_s for r in result.rounds) > 0  # the rollback is timed as its own part


def test_without_the_state_rollback_sd_would_differ(hybrid_dirs, monkeypatch):
    """The negative control: masking KV slots alone leaves rejected tokens in the linear state."""
    target_dir, draft_dir = hybrid_dirs["qwen3_5_moe"]
    target, draft = load_model(target_dir, dtype="float64"), load_model(draft_dir, dtype="float64")
    expected = _plain(target, PROMPTS, max_new_tokens=24, ignore_eos=True)
    monkeypatch.setattr(LinearStates, "_readvance", lambda self, rows, k: None)
    result = decode(
        target, PROMPTS, DecodeConfig(max_new_tokens=24, gamma=3, ignore_eos=True), ModelDrafter(draft)
    )
    assert [o.token_ids for o in result.outputs] != expected


def test_rows_leave_a_hybrid_batch_independently(hybrid_dirs):
    target_dir, draft_dir = hybrid_dirs["qwen3_next"]
    target, draft = load_model(target_dir, dtype="float64"), load_model(draft_dir, dtype="float64")
    reference = _plain(target, PROMPTS, max_new_tokens=20, ignore_eos=True)
    target.eos_token_ids = frozenset({reference[1][5]})  # the second row ends early; the others go on
    expected = _plain(target, PROMPTS, max_new_tokens=20)
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=20, gamma=4), ModelDrafter(draft))
    assert [o.token_ids for o in result.outputs] == expected
    assert len({len(o.token_ids) for o in result.outputs}) > 1
    assert invariant_violations(result) == []


def test_static_cache_sd_is_exact_on_a_hybrid(hybrid_dirs):
    target_dir, draft_dir = hybrid_dirs["qwen3_5_moe"]
    expected = _plain(load_model(target_dir, dtype="float64"), PROMPTS, max_new_tokens=20, ignore_eos=True)
    target, draft = _static(target_dir, compiled=False), _static(draft_dir, compiled=False)
    config = DecodeConfig(max_new_tokens=20, gamma=3, ignore_eos=True)
    result = decode(target, PROMPTS, config, ModelDrafter(draft))
    assert [o.token_ids for o in result.outputs] == expected
    assert 0 < acceptance_rate(totals(result).accepted, totals(result).drafted) < 1
    again = decode(target, PROMPTS[:1], config, ModelDrafter(draft))  # the reused cache starts afresh
    assert again.outputs[0].token_ids == expected[0]


def test_compiled_graphs_roll_a_hybrid_back_exactly(small_pair):
    """Through torch.compile'd graphs (dynamo's eager compiler: the same graphs, no code generation),
    the linear layers' inputs are logged from inside the graph. A two-layer model keeps tracing short."""
    eager_target = small_pair[0]  # the compiled backends below share its model: only the running one logs
    prompts = [[1, 4, 2, 5], [3]]
    expected = _plain(eager_target, prompts, max_new_tokens=10, ignore_eos=True)
    target, draft = (
        StaticHFBackend(m.model, m.name, m.device, compile=True, compiler="eager") for m in small_pair
    )
    result = decode(
        target, prompts, DecodeConfig(max_new_tokens=10, gamma=3, ignore_eos=True), ModelDrafter(draft)
    )
    assert [o.token_ids for o in result.outputs] == expected
    assert 0 < acceptance_rate(totals(result).accepted, totals(result).drafted) < 1
    assert target.compile_s > 0


def test_an_oracle_draft_rolls_a_hybrid_target_back_by_any_count(hybrid_dirs):
    target_dir, draft_dir = hybrid_dirs["qwen3_5"]
    target = load_model(target_dir, dtype="float64")
    expected = _plain(target, PROMPTS, max_new_tokens=30, ignore_eos=True)
    # the oracle proposes the reference token with probability 0.5 and pays a hybrid draft's cost
    drafter = OracleDrafter(load_model(draft_dir, dtype="float64"), 0.5, expected, seed=3)
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=30, gamma=6, ignore_eos=True), drafter)
    assert [o.token_ids for o in result.outputs] == expected
    assert len({a for r in result.rounds for a in r.accepted}) >= 4  # many different rollback depths


def _small_hybrid(tmp_path, seed: int):
    """A two-layer Qwen3.5 hybrid (one linear-attention layer, one attention layer) over six tokens."""
    config = hybrid_config("qwen3_5")
    config.update(
        dict(
            vocab_size=6,
            num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"],
            hidden_size=16,
        )
    )
    return load_model(_random(config, tmp_path / f"small-{seed}", seed=seed, std=0.3), dtype="float64")


def _sampled_pairs(target, drafter, draws: int) -> torch.Tensor:
    params, counts = SamplingParams(temperature=1.0), torch.zeros(36, dtype=torch.float64)
    for seed in range(draws // 500):
        run = DecodeConfig(max_new_tokens=2, gamma=3, sampling=params, seed=seed, ignore_eos=True)
        for out in decode(target, [SMALL_PROMPT] * 500, run, drafter).outputs:
            counts[out.token_ids[0] * 6 + out.token_ids[1]] += 1
    return counts


SMALL_PROMPT = [1, 4, 2]


@pytest.fixture(scope="module")
def small_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("small-hybrid")
    return _small_hybrid(root, 0), _small_hybrid(root, 1)


def test_sampling_sd_keeps_a_hybrid_targets_distribution(small_pair):
    """The joint of the first two sampled tokens matches the target's exact joint; many proposals are
    rejected, and a wrong rollback would sample the second token after the rejected ones."""
    from small_vocab import exact_joint

    target, draft = small_pair
    draws = 3000
    expected = exact_joint(target, SMALL_PROMPT, SamplingParams(temperature=1.0)) * draws
    assert chisquare(*_pooled(_sampled_pairs(target, ModelDrafter(draft), draws), expected)).pvalue > 1e-3


def test_the_sampling_check_catches_a_missing_rollback(small_pair, monkeypatch):
    from small_vocab import exact_joint

    target, draft = small_pair
    draws = 1500
    expected = exact_joint(target, SMALL_PROMPT, SamplingParams(temperature=1.0)) * draws
    monkeypatch.setattr(LinearStates, "_readvance", lambda self, rows, k: None)
    assert chisquare(*_pooled(_sampled_pairs(target, ModelDrafter(draft), draws), expected)).pvalue < 1e-6


def _pooled(observed: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cells expecting fewer than 5 draws pooled into one, where the chi-square approximation holds."""
    rare = expected < 5
    if not rare.any():
        return observed, expected
    return (
        torch.cat([observed[~rare], observed[rare].sum()[None]]),
        torch.cat([expected[~rare], expected[rare].sum()[None]]),
    )


def _random(config, path, seed: int, std: float = 0.5):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(std=std)
    model.save_pretrained(path)
    return path


def _tiny(family: str, **fields):
    from transformers import AutoConfig

    base = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    return AutoConfig.for_model(family, **{**base, **fields})


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (
            lambda: _tiny("mamba2", num_heads=4, head_dim=16, state_size=8, n_groups=1, expand=2),
            "keeps its past outside transformers' Cache",
        ),
        (
            lambda: _tiny("jamba", **JAMBA_LAYOUT),
            "a recurrent or convolution state",
        ),
    ],
    ids=["mamba2", "jamba"],
)
def test_a_model_whose_cache_cannot_roll_back_decodes_plainly_and_refuses_sd_in_one_line(
    tmp_path, config, says
):
    target = load_model(_random(config(), tmp_path / "m", seed=0), dtype="float64")
    prompts = [[3, 14, 15, 9], [35, 8], [7]]
    plain = decode(target, prompts, DecodeConfig(max_new_tokens=5, ignore_eos=True))
    alone = [decode(target, [p], DecodeConfig(max_new_tokens=5, ignore_eos=True)) for p in prompts]
    assert [o.token_ids for o in plain.outputs] == [r.outputs[0].token_ids for r in alone]
    for drafter in (ModelDrafter(target), NgramDrafter(target)):
        with pytest.raises(SpecmoeError) as refused:
            decode(target, prompts, DecodeConfig(max_new_tokens=5, gamma=2), drafter)
        message = str(refused.value)
        assert says in message and "refused" in message and "'m'" in message and "\n" not in message
