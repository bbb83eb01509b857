"""An SD setup priced without any timing: target and drafter from configs, on a hardware file, under
an engine profile. What `specmoe advise --config` and the calibration against published
measurements score.

    target   first-principles forward times of the target config in its weight format, with the
             engine's fixed costs, bandwidth and compute shares and re-read rows
    drafter  a draft model's config priced the same way (its own format), or a head built from the
             target's shape (`specmoe.perf.drafts`), or nothing (n-gram)
    host     the engine's seconds per SD round and per plain step, and its n-gram search
    state    a hybrid target's (and hybrid draft's) linear-attention rollback per round, by the
             engine's method (`specmoe.perf.rollback`)
    shape    specmoe's chain round, or a tree's width and verified size
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specmoe.errors import SpecmoeError
from specmoe.perf.compose import CHAIN, RoundShape, expected_speedup
from specmoe.perf.drafts import DraftMethod, OncePerRound, head_architecture
from specmoe.perf.firstprinciples import first_principles_constants
from specmoe.perf.hardware import Hardware
from specmoe.perf.model import MoEShape
from specmoe.perf.predict import ModelTimes
from specmoe.perf.rollback import HybridRollback, rollback_s
from specmoe.perf.runtimes import EngineProfile
from specmoe.perf.structure import Architecture


@dataclass(frozen=True)
class SDSetup:
    """Everything a composed speedup needs besides the acceptance and γ."""

    label: str
    target: ModelTimes
    method: DraftMethod
    draft_arch: Architecture | None  # the draft model's or head's weights; None for n-gram
    draft_times: ModelTimes | None
    hardware: Hardware
    engine: EngineProfile
    context: float
    shape: RoundShape = CHAIN
    new_tokens: int | None = None  # tokens each sequence decodes; None: a long decode's steady state
    target_arch: Architecture | None = None  # for a hybrid's state rollback; None: not priced
    # (batch, seconds measured, seconds added to each target pass) of a plain step the user
    # measured (`with_measured_step`); None: none given
    measured_step: tuple[int, float, float] | None = None

    def draft(self, gamma: int):
        """The drafter's forward times for rounds of γ proposals (a Medusa round runs its heads once)."""
        if self.method is DraftMethod.MEDUSA and self.draft_times is not None:
            return OncePerRound(self.draft_times, gamma)
        return self.draft_times

    def host_s(self, batch: float) -> float:
        """Host seconds of one SD round at `batch` live sequences."""
        return self.engine.round_s + self.engine.round_seq_s * batch

    def state_s(self, alpha: float, gamma: int, batch: float) -> float:
        """Expected seconds per round rolling back linear-attention state: the target's, and a hybrid
        draft model's, by the engine's method; 0 for models without such state."""
        method = self.engine.hybrid_rollback
        bandwidth = (
            self.hardware.bandwidth_bytes_per_s
            * self.hardware.device_count
            * self.engine.bandwidth_efficiency
        )
        draft = self.draft_arch if self.method is DraftMethod.MODEL else None
        return rollback_s(self.target_arch, method, bandwidth, alpha, gamma, batch, self.target) + rollback_s(
            draft, method, bandwidth, alpha, gamma, batch, self.draft_times
        )

    @property
    def is_hybrid(self) -> bool:
        """Whether the target or a draft model keeps linear-attention state."""
        draft = self.draft_arch if self.method is DraftMethod.MODEL else None
        return any(arch is not None and arch.state_bytes > 0 for arch in (self.target_arch, draft))

    def speedup(self, alpha: float, gamma: int, batch: int) -> float:
        """The composed speedup (`compose.expected_speedup`) at per-position acceptance α."""
        return expected_speedup(
            self.target,
            self.draft(gamma),
            alpha,
            gamma,
            batch,
            self.host_s(batch) + self.state_s(alpha, gamma, batch),
            self.plain_host_s,
            self.draft_host_s,
            self.shape,
            self.new_tokens,
        )

    @property
    def plain_host_s(self) -> float:
        return self.engine.step_s

    def plain_step_s(self, batch: int) -> float:
        """Seconds of one plain decode step at `batch`: the target's forward and the host step."""
        return self.target.time(batch, 1) + self.plain_host_s

    @property
    def draft_host_s(self) -> float:
        return self.engine.ngram_s if self.method is DraftMethod.NGRAM else 0.0


def _times(
    label: str, arch: Architecture, hardware: Hardware, engine: EngineProfile, context: float
) -> ModelTimes:
    constants = first_principles_constants(arch, hardware, "hardware file", engine)
    return ModelTimes(label, constants, MoEShape(arch.num_experts, arch.top_k), context, False)


def configured_setup(
    target: Architecture,
    hardware: Hardware,
    engine: EngineProfile,
    method: DraftMethod,
    draft: Architecture | None = None,
    context: float = 512,
    gamma_for_heads: int = 4,
    tree_tokens: int | None = None,
    tree_width: int = 1,
    draft_vocab: int | None = None,
    label: str | None = None,
    new_tokens: int | None = None,
) -> SDSetup:
    """The setup for one target, drafter and engine. `draft` is the draft model's Architecture
    (method MODEL only); heads are built from the target (Medusa's from γ = `gamma_for_heads`)."""
    if method is DraftMethod.MODEL and draft is None:
        raise SpecmoeError("a draft model needs its config: pass --draft-config draft.json")
    if method is not DraftMethod.MODEL and draft is not None:
        raise SpecmoeError(f"--draft {method.value} builds its own drafter; drop --draft-config")
    if new_tokens is not None and new_tokens < 1:
        raise SpecmoeError(f"--output-tokens must be at least 1, got {new_tokens}")
    if tree_width < 1 or (tree_tokens is not None and tree_tokens < 2):
        raise SpecmoeError("--tree-width must be >= 1 and --tree-tokens >= 2 (tokens verified per sequence)")
    if method.is_head:
        draft = head_architecture(target, method, gamma_for_heads, draft_vocab)
    shape = RoundShape(verify_tokens=tree_tokens, draft_width=tree_width, wide_after_full=not method.is_head)
    times = _times(target.name, target, hardware, engine, context)
    draft_times = None if draft is None else _times(draft.name, draft, hardware, engine, context)
    name = label or f"{target.name} ({target.dtype}) on {hardware.name} under {engine.name}"
    if engine.hybrid_rollback is HybridRollback.NONE and (
        target.state_bytes or (draft and draft.state_bytes)
    ):
        raise SpecmoeError(
            f"engine '{engine.name}' cannot roll back a hybrid model's linear-attention state, so it runs "
            "no SD on one; pick another engine (vllm, sglang, llamacpp-*, hf-*)"
        )
    return SDSetup(
        name, times, method, draft, draft_times, hardware, engine, context, shape, new_tokens, target
    )


def with_measured_step(setup: SDSetup, batch: int, step_s: float) -> SDSetup:
    """The setup with a measured plain decode step at `batch` (seconds): where it is longer than the
    model's plain step (forward and host step), the difference becomes a fixed cost of every target
    pass, so verification pays it too; where it is shorter, the setup is unchanged, a published step
    being only an upper bound (docs/results/calibration/measured-step-rules.md)."""
    if not step_s > 0:
        raise SpecmoeError(f"a measured plain step must be positive seconds, got {step_s}")
    gap = step_s - setup.plain_step_s(batch)
    setup = replace(setup, measured_step=(batch, step_s, max(gap, 0.0)))
    if gap <= 0:
        return setup
    constants = replace(setup.target.constants, overhead_s=setup.target.constants.overhead_s + gap)
    return replace(setup, target=replace(setup.target, constants=constants))


def describe(setup: SDSetup) -> dict:
    """What the setup priced, for the output's header and --json."""
    drafter = setup.method.value
    if setup.draft_arch is not None and setup.method is DraftMethod.MODEL:
        drafter = f"{setup.draft_arch.name} ({setup.draft_arch.dtype})"
    elif setup.draft_arch is not None:
        drafter = f"{setup.method.value} head ({setup.draft_arch.params_dense / 1e6:.0f}M weights)"
    return {
        "target": setup.label,
        "drafter": drafter,
        "method": setup.method.value,
        "engine": setup.engine.name,
        "hardware": setup.hardware.name,
        "devices": setup.hardware.device_count,
        "context": setup.context,
        "output_tokens": setup.new_tokens,
        "verify_tokens": setup.shape.verify_tokens,
        "tree_width": setup.shape.draft_width,
        "host_round_s": setup.engine.round_s,
        "host_round_per_sequence_s": setup.engine.round_seq_s,
        "host_step_s": setup.plain_host_s,
        "uncertainty": setup.engine.uncertainty,
        "band_basis": setup.engine.band_basis.value,
        "shortfall": setup.engine.shortfall,
        "band": setup.engine.band_text,
        "hybrid_rollback": setup.engine.hybrid_rollback.value if setup.is_hybrid else None,
        "measured_step": None
        if setup.measured_step is None
        else dict(zip(("batch", "seconds", "added_per_pass_s"), setup.measured_step, strict=True)),
    }
