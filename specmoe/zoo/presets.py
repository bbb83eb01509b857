"""Named model-family presets: the shapes of every model the zoo builds.

Each preset is a scaled-down analog of one real family: Qwen3.5-35B-A3B (35B total, 3B active) as the
MoE target, 4B and 9B dense targets, 0.8B and 2B drafts, plus a small MoE draft with draft-s's
active size (2B active), which the family itself lacks. What is kept is the *ratios* in
`RATIO_TARGETS`, measured in parameters (see `specmoe.zoo.params` for the counting convention);
absolute sizes are chosen so `tiny` builds in seconds for tests and the `bench` MoE is over 1 GB in
bf16, big enough for its expert weights to dominate memory traffic on real hardware.

`trained` has tiny's shapes, trained on text instead of left random (`TrainingPlan`, and
`specmoe.zoo.train`): its drafts agree with its targets the way a real family's do. It also
distils an EAGLE-3 head for its MoE (zoo model `eagle3`), and `hybrid-trained` an MTP module that
its MoE's checkpoint carries as Qwen3.5's do (`specmoe.zoo.train_heads`).

`hybrid` (random) and `hybrid-trained` are the study's own architecture at tiny scale: Qwen3.5's
hybrid layers (three gated-DeltaNet linear-attention layers to one gated full-attention layer), a
Qwen3.5-MoE target with a shared expert and many small routed experts, and dense Qwen3.5 drafts
with the 2B's and the 0.8B's share of the target's active size.
"""

from dataclasses import dataclass, replace

from specmoe.errors import SpecmoeError

MOE = "moe"
MTP, EAGLE3 = "mtp", "eagle3"  # head drafters a trained preset may distil (`TrainingPlan.heads`)

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
class LinearAttention:
    """The gated-DeltaNet layers of a hybrid (Qwen3.5) model: key and value heads of one head size,
    and the short causal convolution in front of them."""

    key_heads: int
    value_heads: int
    head_dim: int
    conv_kernel: int = 4
    full_attention_interval: int = 4  # every n-th layer is full attention, the others linear


@dataclass(frozen=True)
class ModelShape:
    """One decoder-only model: Qwen3 (dense) when num_experts == 0, else Qwen3-MoE; with
    `linear` set, the hybrid Qwen3.5 (dense) or Qwen3.5-MoE.

    Every MoE layer is sparse (no dense layers); a Qwen3.5-MoE layer adds one shared expert of
    width `shared_expert_size` that every token uses. `intermediate_size` is the dense MLP width
    and is unused by MoE models.
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
    shared_expert_size: int = 0
    linear: LinearAttention | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_hybrid(self) -> bool:
        return self.linear is not None

    @property
    def model_type(self) -> str:
        """The transformers `model_type` this shape is built as."""
        if self.is_hybrid:
            return "qwen3_5_moe_text" if self.is_moe else "qwen3_5_text"
        return "qwen3_moe" if self.is_moe else "qwen3"

    @property
    def layer_types(self) -> tuple[str, ...]:
        """Each layer's token mixer: "linear_attention" or "full_attention"."""
        every = self.linear.full_attention_interval if self.linear else 1
        return tuple(
            "full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(self.num_layers)
        )


@dataclass(frozen=True)
class TrainingPlan:
    """How a trained preset's weights are made from its routing-aware init (`specmoe.zoo.train`).

    Every model sees the same `steps` batches of `batch_size` windows of `seq_len` tokens, in one
    fixed order. Targets (and the teacher) learn the text; drafts learn from the teacher: their loss
    is `distill_weight` x KL(teacher || draft) + (1 - distill_weight) x cross-entropy on the
    window, and `teacher_windows` of their windows are text the teacher wrote.
    The learning rate warms up linearly for `warmup_steps`, then follows a cosine down to
    `final_lr_fraction` of its peak.
    """

    steps: int
    batch_size: int = 6
    seq_len: int = 160  # tokens per window: the longest built-in prompt (97) plus 64 new tokens
    lr: float = 1e-2
    warmup_steps: int = 20
    final_lr_fraction: float = 0.1
    weight_decay: float = 0.1  # on matrices only, not on norms
    grad_clip: float = 1.0
    router_aux_weight: float = 0.01  # MoE load-balancing loss, keeps routing spread over experts
    teacher: str = "moe"
    drafts: tuple[str, ...] = ("draft-s", "draft-xs", "draft-moe")
    distill_weight: float = 0.8
    # Of each draft batch, this many windows are the teacher's own greedy continuation (after
    # `teacher_prefix` tokens of the text window they replace): drafts learn how the target goes on
    # when it writes, which is what speculative decoding asks them to guess.
    teacher_windows: int = 2
    teacher_prefix: int = 32
    init_logit_std: float = 0.3  # a near-uniform start: the zoo's random-model std of 3 costs steps
    package_repeats: int = 4  # epochs of the package's own corpus in the mixture
    generated_tokens: int = 25_000  # per prompt kind, of text the package generates (`zoo.synthetic`)
    stdlib_docs_tokens: int = 20_000  # tokens of the standard library's reference text
    stdlib_code_tokens: int = 30_000  # tokens of standard-library Python sources
    held_out_every: int = 10  # every n-th window of each source is held out, never trained on
    # Head drafters distilled from the teacher after it trains (`specmoe.zoo.train_heads`): "mtp",
    # saved inside the teacher's checkpoint (mtp.*), and "eagle3", saved as zoo model `eagle3`.
    heads: tuple[str, ...] = ()
    # Peak learning rates of the heads, on the family's schedule: an MTP module starts as a copy of
    # the target's last attention layer, an EAGLE-3 head's layer at random as the family's models do.
    mtp_lr: float = 3e-3
    eagle3_lr: float = 1e-2
    head_unroll: int = 3  # drafting steps every training position is unrolled through
    eagle3_draft_vocab: int = 1024  # the EAGLE-3 head's draft vocabulary: the most frequent tokens


@dataclass(frozen=True)
class ZooPreset:
    """A family of models sharing one tokenizer (vocab_size), context length and RoPE base.

    `training` is None for random-weight presets; a trained preset says how its weights are made.
    """

    name: str
    models: tuple[ModelShape, ...]
    vocab_size: int = 2048
    max_position_embeddings: int = 4096
    rope_theta: float = 1_000_000.0  # Qwen3's base; far beyond what a 4096 context needs to stay unique
    training: TrainingPlan | None = None

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

    @property
    def head_models(self) -> tuple[str, ...]:
        """Zoo names of the head drafters saved as models of their own (an EAGLE-3 head; an MTP
        module lives inside its target's checkpoint and is drafted with as `mtp`)."""
        heads = self.training.heads if self.training is not None else ()
        return tuple(head for head in heads if head == EAGLE3)

    @property
    def zoo_names(self) -> tuple[str, ...]:
        """Every name a suite may give as `zoo = ...`: the models and the heads saved apart."""
        return self.model_names + self.head_models


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

# tiny's shapes, so every ratio tiny keeps holds here too; the budget (steps x batch x seq_len
# tokens per model) is set so the whole family trains in under five minutes on one CPU core.
TRAINED = ZooPreset(name="trained", models=TINY.models, training=TrainingPlan(steps=300, heads=(EAGLE3,)))


def _hybrid_dense(name: str, hidden: int, layers: int, linear: LinearAttention) -> ModelShape:
    # Qwen3.5's attention layers: 4 query heads, 1 KV head of 16 here; MLP width 3x hidden.
    return ModelShape(name, hidden, layers, 4, 1, 16, intermediate_size=3 * hidden, linear=linear)


# Qwen3.5-35B-A3B at tiny scale. The study describes 2 routed experts of 128 (K/E = 1/64) beside a
# shared expert three times an expert's width; at 64 experts that ratio would be top-1 routing, a
# different router, so the target keeps top-2 of 64 (1/32) and the 3:1 shared/routed width.
# Total/active ~10 and the drafts' active shares (0.67, 0.27) are the other presets' RATIO_TARGETS.
_LINEAR = LinearAttention(key_heads=2, value_heads=4, head_dim=16)
HYBRID = ZooPreset(
    name="hybrid",
    models=(
        ModelShape(
            MOE,
            64,
            4,
            4,
            1,
            16,
            num_experts=64,
            top_k=2,
            moe_intermediate_size=256,
            shared_expert_size=768,
            linear=_LINEAR,
        ),
        _hybrid_dense("draft-s", 104, 4, _LINEAR),
        _hybrid_dense("draft-xs", 56, 4, LinearAttention(key_heads=1, value_heads=2, head_dim=16)),
    ),
)
HYBRID_TRAINED = ZooPreset(
    name="hybrid-trained",
    models=HYBRID.models,
    training=TrainingPlan(steps=300, drafts=("draft-s", "draft-xs"), heads=(MTP,)),
)

# The demo's two families (`specmoe demo`), each built in well under two minutes on two cores:
# `wide` has bench's layer widths with two layers per target and one for the draft, random weights:
# the smallest models whose decode step is bound by reading weights on a CPU (tiny's steps are bound
# by per-layer overhead, bench's take minutes to build and measure). `trained-demo` is the trained
# family's MoE and draft-xs alone, on half the training budget (the teacher's forwards, which
# distillation needs whatever the number of drafts, are a third of the trained family's time).
WIDE = ZooPreset(
    name="wide",
    models=(
        replace(BENCH.model(MOE), num_layers=2),
        replace(BENCH.model("dense-s"), name="dense", num_layers=2),
        _dense("draft", 384, 1, 6, 2, 64),
    ),
)
TRAINED_DEMO = ZooPreset(
    name="trained-demo",
    models=tuple(s for s in TINY.models if s.name in (MOE, "draft-xs")),
    training=TrainingPlan(steps=150, drafts=("draft-xs",)),
)


def _wide_sparsity() -> ZooPreset:
    """MoESD's sparsity question at one active size (`specmoe/suites/moesd-wide.toml`): wide's MoE (top-4 of
    64 experts, K/E = 1/16) beside the same experts, top-4 of 16 (K/E = 1/4), so the active
    parameters are equal and sparsity moves only the total (about 60 M against 210 M parameters);
    beside them the dense models of their active size (MLP width K x I) and of the 64-expert MoE's
    total size (E x I), and wide's one-layer draft."""
    wide = WIDE.model(MOE)
    dense = replace(WIDE.model("dense"), intermediate_size=wide.top_k * wide.moe_intermediate_size)
    total = wide.num_experts * wide.moe_intermediate_size
    return ZooPreset(
        name="wide-sparsity",
        models=(
            replace(wide, name="moe-e16", num_experts=16),
            wide,
            dense,
            replace(dense, name="dense-total", intermediate_size=total),
            WIDE.model("draft"),
        ),
    )


WIDE_SPARSITY = _wide_sparsity()

PRESETS: dict[str, ZooPreset] = {
    preset.name: preset
    for preset in (TINY, BENCH, TRAINED, HYBRID, HYBRID_TRAINED, WIDE, TRAINED_DEMO, WIDE_SPARSITY)
}


def get_preset(
    name: str, num_experts: int | None = None, top_k: int | None = None, train_steps: int | None = None
) -> ZooPreset:
    """The named preset, with the MoE model's expert count and/or top-k replaced, and for a trained
    preset its number of training steps.

    Overrides keep each expert's shape, so total parameters scale with num_experts and active
    parameters with top_k; the preset's ratios no longer hold after an override, by design (this
    is how sparsity is swept). `train_steps` shortens a trained preset's training: the same code
    and batch order, a schedule compressed to fewer steps, a weaker family built in seconds (tests).
    """
    if name not in PRESETS:
        raise SpecmoeError(f"unknown zoo preset '{name}'; available: {', '.join(PRESETS)}")
    preset = _with_train_steps(PRESETS[name], train_steps)
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


def _with_train_steps(preset: ZooPreset, train_steps: int | None) -> ZooPreset:
    if train_steps is None:
        return preset
    if preset.training is None:
        trained = ", ".join(name for name, p in PRESETS.items() if p.training is not None)
        raise SpecmoeError(
            f"--train-steps applies to trained presets ({trained}); preset '{preset.name}' has random weights"
        )
    if train_steps < 1:
        raise SpecmoeError(f"--train-steps must be >= 1, got {train_steps}")
    return replace(preset, training=replace(preset.training, steps=train_steps))
