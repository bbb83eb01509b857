"""Named model-family presets: the shapes of every model the zoo builds.

Each preset is a scaled-down analog of one real family: Qwen3.5-35B-A3B (35B total, 3B active) as the
MoE target, 4B and 9B dense targets, 0.8B and 2B drafts, plus a small MoE draft with draft-s's
active size (2B active), which the family itself lacks. What is kept is the *ratios* in
`RATIO_TARGETS`, measured in parameters (see `specmoe.zoo.params` for the counting convention);
absolute sizes are chosen so `tiny` builds in seconds for tests and the `bench` MoE is over 1 GB in
bf16, big enough for its expert weights to dominate memory traffic on real hardware.
"""

from dataclasses import dataclass, replace

from specmoe.errors import SpecmoeError

MOE = "moe"

# The real family the presets imitate, as ratios:
#   moe      total / active                   (35B / 3B, ~10x; 8-12x accepted)
#   others   active / (moe active)            (9B, 4B, 2B, 0.8B over 3B; dense: active = total)
# draft-moe has draft-s's active size, so the two drafts cost about the same FLOPs per token and
# differ in sparsity alone: same attention, K/E = 2/16 experts whose active width K * I equals
# draft-s's dense MLP width (3 * hidden). Its total/active is not pinned (3.3 tiny, 6.1 bench:
# embeddings weigh more in tiny).
RATIO_TARGETS: dict[str, float] = {
    "moe": 10.0,
    "dense-l": 3.0,
    "dense-s": 1.3,
    "draft-s": 0.67,
    "draft-xs": 0.27,
    "draft-moe": 0.67,
}
RATIO_TOLERANCE = 0.15  # relative


@dataclass(frozen=True)
class ModelShape:
    """One decoder-only model: Qwen3 (dense) when num_experts == 0, else Qwen3-MoE.

    Every MoE layer is sparse (no dense or shared-expert layers); `intermediate_size` is the dense
    MLP width and is unused by MoE models.
    """

    name: str
    hidden_size: int
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int = 0
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def model_type(self) -> str:
        """The transformers `model_type` this shape is built as."""
        return "qwen3_moe" if self.is_moe else "qwen3"


@dataclass(frozen=True)
class ZooPreset:
    """A family of models sharing one tokenizer (vocab_size), context length and RoPE base."""

    name: str
    models: tuple[ModelShape, ...]
    vocab_size: int = 2048
    max_position_embeddings: int = 4096
    rope_theta: float = 1_000_000.0  # Qwen3's base; far beyond what a 4096 context needs to stay unique

    def model(self, name: str) -> ModelShape:
        for shape in self.models:
            if shape.name == name:
                return shape
        raise SpecmoeError(
            f"preset '{self.name}' has no model '{name}'; available: {', '.join(self.model_names)}"
        )

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(shape.name for shape in self.models)


def _dense(name: str, hidden: int, layers: int, q_heads: int, kv_heads: int, head_dim: int) -> ModelShape:
    # MLP width 3x hidden, as in the Qwen3 dense models.
    return ModelShape(name, hidden, layers, q_heads, kv_heads, head_dim, intermediate_size=3 * hidden)


def _moe_twin(name: str, dense: ModelShape, num_experts: int, top_k: int) -> ModelShape:
    """A Qwen3-MoE with the dense model's attention and active MLP width (top_k experts of width
    3H / top_k): the same active parameters, up to the router's E x H per layer."""
    return replace(
        dense,
        name=name,
        intermediate_size=0,
        num_experts=num_experts,
        top_k=top_k,
        moe_intermediate_size=dense.intermediate_size // top_k,
    )


_TINY_DRAFT_S = _dense("draft-s", 64, 4, 4, 1, 16)
_BENCH_DRAFT_S = _dense("draft-s", 768, 7, 12, 3, 64)


TINY = ZooPreset(
    name="tiny",
    models=(
        # K/E = 1/16 as in bench; wide experts so that, even at H=64 with a 2048-token vocabulary
        # counted twice, experts dominate the total and total/active lands near 10.
        ModelShape(MOE, 64, 2, 4, 2, 16, num_experts=32, top_k=2, moe_intermediate_size=512),
        _dense("dense-l", 128, 8, 8, 2, 16),
        _dense("dense-s", 128, 2, 8, 2, 16),
        _TINY_DRAFT_S,
        _dense("draft-xs", 32, 4, 2, 1, 16),
        _moe_twin("draft-moe", _TINY_DRAFT_S, num_experts=16, top_k=2),
    ),
)

BENCH = ZooPreset(
    name="bench",
    models=(
        ModelShape(MOE, 1024, 8, 16, 4, 64, num_experts=64, top_k=4, moe_intermediate_size=512),
        _dense("dense-l", 1280, 12, 20, 5, 64),
        _dense("dense-s", 1024, 8, 16, 4, 64),
        _BENCH_DRAFT_S,
        _dense("draft-xs", 512, 6, 8, 2, 64),
        _moe_twin("draft-moe", _BENCH_DRAFT_S, num_experts=16, top_k=2),
    ),
)

PRESETS: dict[str, ZooPreset] = {preset.name: preset for preset in (TINY, BENCH)}


def get_preset(name: str, num_experts: int | None = None, top_k: int | None = None) -> ZooPreset:
    """The named preset, with the MoE model's expert count and/or top-k replaced.

    Overrides keep each expert's shape, so total parameters scale with num_experts and active
    parameters with top_k; the preset's ratios no longer hold after an override, by design (this
    is how sparsity is swept).
    """
    if name not in PRESETS:
        raise SpecmoeError(f"unknown zoo preset '{name}'; available: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    if num_experts is None and top_k is None:
        return preset
    moe = preset.model(MOE)
    experts = moe.num_experts if num_experts is None else num_experts
    k = moe.top_k if top_k is None else top_k
    if experts < 1 or not 1 <= k <= experts:
        raise SpecmoeError(
            f"invalid MoE override num_experts={experts}, top_k={k}: need 1 <= top_k <= num_experts"
        )
    models = tuple(replace(m, num_experts=experts, top_k=k) if m.name == MOE else m for m in preset.models)
    return replace(preset, models=models)
