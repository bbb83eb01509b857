"""An SD setup priced without any timing: target and drafter from configs, on a hardware file, under
an engine profile. What `specmoe advise --config` and the calibration against published
measurements score.

    target   first-principles forward times of the target config in its weight format, with the
             engine's fixed costs, bandwidth and compute shares and re-read rows
    drafter  a draft model's config priced the same way (its own format), or a head built from the
             target's shape (`specmoe.perf.drafts`), or nothing (n-gram)
    host     the engine's seconds per SD round and per plain step, and its n-gram search
    state    a hybrid target's (and hybrid draft's) linear-attention rollback per round, by the
             method the engine runs with this drafter (`EngineProfile.rollback_for`,
             `specmoe.perf.rollback`)
    shape    specmoe's chain round, a tree's width and verified size, or a block drafter's block
    offload  routed experts of some layers in host memory (`--n-cpu-moe`, `specmoe.perf.offload`)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from specmoe.errors import SpecmoeError
from specmoe.perf.compose import CHAIN, RoundShape, expected_speedup
from specmoe.perf.drafts import BlockPerRound, DraftMethod, OncePerRound, head_architecture, with_fc
from specmoe.perf.engines import EngineProfile
from specmoe.perf.firstprinciples import first_principles_constants, rates
from specmoe.perf.hardware import Hardware
from specmoe.perf.model import MoEShape
from specmoe.perf.offload import check_offload, host_experts, offloaded_layers
from specmoe.perf.predict import ModelTimes
from specmoe.perf.rollback import HybridRollback, rollback_s
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
    # (batch, seconds measured, seconds added to each target pass, factor on every forward, form)
    # of a plain step the user measured (`with_measured_step`); None: none given
    measured_step: tuple[int, float, float, float, str] | None = None
    block: int | None = None  # a block drafter's positions per round
    offloaded: int = 0  # MoE layers of the target whose experts sit in host memory

    @property
    def rollback(self) -> HybridRollback:
        """How the engine rolls a hybrid model back with this drafter."""
        return self.engine.rollback_for(self.method)

    def draft(self, gamma: int):
        """The drafter's forward times for rounds of γ proposals (a Medusa round runs its heads
        once; a block drafter one forward over its block)."""
        if self.method is DraftMethod.MEDUSA and self.draft_times is not None:
            return OncePerRound(self.draft_times, gamma)
        if self.method is DraftMethod.DFLASH and self.draft_times is not None:
            return BlockPerRound(self.draft_times, gamma, self.block)
        return self.draft_times

    def host_s(self, batch: float) -> float:
        """Host seconds of one SD round at `batch` live sequences."""
        return self.engine.round_s + self.engine.round_seq_s * batch

    def state_s(self, alpha: float, gamma: int, batch: float) -> float:
        """Expected seconds per round rolling back linear-attention state: the target's, and a hybrid
        draft model's, by the engine's method; 0 for models without such state."""
        method = self.rollback
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
    label: str,
    arch: Architecture,
    hardware: Hardware,
    engine: EngineProfile,
    context: float,
    offloaded: int = 0,
) -> ModelTimes:
    """First-principles forward times; `offloaded` MoE layers' experts priced on the host."""
    constants = first_principles_constants(arch, hardware, "hardware file", engine)
    host = None
    if offloaded:
        achieved = rates(arch, hardware, engine)
        constants, host = host_experts(
            offloaded, arch, constants, hardware, achieved.bandwidth, achieved.weight_flops
        )
    return ModelTimes(label, constants, MoEShape(arch.num_experts, arch.top_k), context, False, host=host)


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
    block: int | None = None,
    cpu_moe: int | None = None,
) -> SDSetup:
    """The setup for one target, drafter and engine. `draft` is the draft model's Architecture
    (method MODEL; for DFLASH, the block draft's own config, else z-lab's layout at the target's
    width); heads are built from the target (Medusa's from γ = `gamma_for_heads`). `block` is a
    block drafter's positions per round; `cpu_moe` llama.cpp's `--n-cpu-moe` blocks (`ALL_LAYERS`
    for `--cpu-moe`)."""
    if method is DraftMethod.MODEL and draft is None:
        raise SpecmoeError("a draft model needs its config: pass --draft-config draft.json")
    if method not in (DraftMethod.MODEL, DraftMethod.DFLASH) and draft is not None:
        raise SpecmoeError(f"--draft {method.value} builds its own drafter; drop --draft-config")
    if (method is DraftMethod.DFLASH) != (block is not None):
        raise SpecmoeError("a block size goes with a block drafter only: --draft dflash:BLOCK")
    check_offload(cpu_moe, hardware, target.is_moe, engine.name, engine.expert_offload)
    if new_tokens is not None and new_tokens < 1:
        raise SpecmoeError(f"--output-tokens must be at least 1, got {new_tokens}")
    if tree_width < 1 or (tree_tokens is not None and tree_tokens < 2):
        raise SpecmoeError("--tree-width must be >= 1 and --tree-tokens >= 2 (tokens verified per sequence)")
    if method.is_head or (method is DraftMethod.DFLASH and draft is None):
        draft = head_architecture(target, method, gamma_for_heads, draft_vocab)
    elif method is DraftMethod.DFLASH:
        draft = with_fc(draft)
    if method is DraftMethod.DFLASH:
        if tree_tokens is not None or tree_width != 1:
            raise SpecmoeError(
                "a block drafter verifies its block as a chain: drop --tree-tokens and --tree-width"
            )
        shape = RoundShape(verify_tokens=block, draft_width=1, wide_after_full=False)
    else:
        shape = RoundShape(
            verify_tokens=tree_tokens, draft_width=tree_width, wide_after_full=not method.is_head
        )
    offloaded = 0 if cpu_moe is None else offloaded_layers(cpu_moe, target.layers, target.moe_layers)
    times = _times(target.name, target, hardware, engine, context, offloaded)
    # llama.cpp numbers a model's MTP block after its main ones: N past them moves its experts too
    head_off = method is DraftMethod.MTP and cpu_moe is not None and cpu_moe > target.layers
    draft_times = None
    if draft is not None:
        draft_times = _times(
            draft.name, draft, hardware, engine, context, draft.moe_layers if head_off else 0
        )
    name = label or f"{target.name} ({target.dtype}) on {hardware.name} under {engine.name}"
    if engine.rollback_for(method) is HybridRollback.NONE and (
        target.state_bytes or (draft and method is DraftMethod.MODEL and draft.state_bytes)
    ):
        raise SpecmoeError(
            f"engine '{engine.name}' cannot roll back a hybrid model's linear-attention state with "
            f"--draft {method.value}, so it runs no SD on one; {_other_drafters(engine)}"
        )
    return SDSetup(
        name,
        times,
        method,
        draft,
        draft_times,
        hardware,
        engine,
        context,
        shape,
        new_tokens,
        target,
        block=block,
        offloaded=offloaded,
    )


def _other_drafters(engine: EngineProfile) -> str:
    can = [m.value for m in DraftMethod if engine.rollback_for(m) is not HybridRollback.NONE]
    if can:
        return f"under '{engine.name}' draft with {', '.join(can)}, or pick another engine"
    return "pick another engine (vllm, sglang, llamacpp-*, hf-*)"


class StepForm(StrEnum):
    """How a measured plain step longer than the model's enters every pass
    (docs/results/calibration/anchor-verdict-rules.md, change A)."""

    FIXED = "fixed"  # the difference, a fixed cost added to every target pass
    SCALED = "scaled"  # a factor on every forward of the target and the drafter


def with_measured_step(setup: SDSetup, batch: int, step_s: float, form: StepForm = StepForm.FIXED) -> SDSetup:
    """The setup with a measured plain decode step at `batch` (seconds). Where it is longer than the
    model's plain step (forward and host step), FIXED charges the difference to every target pass,
    verification included; SCALED multiplies every forward of the target and the drafter by
    (step − host step) ÷ forward, so the unexplained time grows with the pass as the model's own
    does. Where it is shorter, the setup is unchanged, a published step being only an upper bound
    (docs/results/calibration/measured-step-rules.md)."""
    if not step_s > 0 or step_s == float("inf"):
        raise SpecmoeError(
            f"a measured plain step must be a positive, finite number of seconds, got {step_s}"
        )
    gap = step_s - setup.plain_step_s(batch)
    if gap <= 0:
        return replace(setup, measured_step=(batch, step_s, 0.0, 1.0, form.value))
    if form is StepForm.SCALED:
        factor = (step_s - setup.plain_host_s) / setup.target.time(batch, 1)
        draft = None if setup.draft_times is None else replace(setup.draft_times, scale=factor)
        target = replace(setup.target, scale=factor)
        return replace(
            setup, target=target, draft_times=draft, measured_step=(batch, step_s, 0.0, factor, form.value)
        )
    constants = replace(setup.target.constants, overhead_s=setup.target.constants.overhead_s + gap)
    target = replace(setup.target, constants=constants)
    return replace(setup, target=target, measured_step=(batch, step_s, gap, 1.0, form.value))


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
        "hybrid_rollback": setup.rollback.value if setup.is_hybrid else None,
        "block": setup.block,
        "offloaded_moe_layers": setup.offloaded or None,
        "link_kind": setup.hardware.link_kind,
        "measured_step": None
        if setup.measured_step is None
        else dict(
            zip(("batch", "seconds", "added_per_pass_s", "scale", "form"), setup.measured_step, strict=True)
        ),
    }
