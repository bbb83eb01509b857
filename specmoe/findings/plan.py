"""What `specmoe findings` measures: which shipped suites, at which scale.

`full` runs the shipped suites as written (hours on a CPU). `cpu` is a shorter pass of the same
designs that fits about an hour and a half on one CPU core: the groups the claims rest on, fewer
tokens, drafts, γ values and batch sizes, and never fewer than five paired units per cell (the least
that gives a confidence interval; ten at batch size 1). Every setting a pass
changes is stored in each run's config, so the exported rows say what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specmoe.backends.registry import HF, LLAMACPP, BackendInfo, backend_info
from specmoe.errors import SpecmoeError
from specmoe.suite.overrides import SuiteOverrides


@dataclass(frozen=True)
class EngineSetup:
    """An engine and weight type the study's claims are measured through ("llama.cpp Q8_0").

    `backend` is "hf" (PyTorch + transformers, `weights` its compute dtype) or "llamacpp" (the
    zoo's GGUF export, `weights` its type). Its study step stores `<study>.db/.csv`; its profiles
    live in `profiles-<engine>/` and their fits in `fits-<engine>/`, one file per model and weight
    type, where the cost ratios beside its verdicts come from.
    """

    name: str
    label: str  # as the findings document names it
    backend: str
    weights: str
    study: str  # the name of its study step
    moesd: str | None = None  # the name of its moesd step, where the plan has one

    @property
    def backend_info(self) -> BackendInfo:
        return backend_info(self.backend)

    @property
    def engine(self) -> str:
        return self.backend_info.engine

    @property
    def runs_family(self) -> bool:
        """Whether the trained family, the moesd sweep and its fits ran through this engine: they are
        model directories, never exported to one weights file (GGUF)."""
        return not self.backend_info.reads_file


ENGINE_SETUPS = (
    EngineSetup("transformers-bf16", "transformers bf16", HF.name, "bfloat16", "study", "moesd"),
    EngineSetup(
        "llamacpp-q8_0", "llama.cpp Q8_0", LLAMACPP.name, "q8_0", "study-llamacpp-q8_0", "moesd-llamacpp-q8_0"
    ),
    EngineSetup("llamacpp-q4_k_m", "llama.cpp Q4_K_M", LLAMACPP.name, "q4_k_m", "study-llamacpp-q4_k_m"),
)


# The study's own architecture: the hybrid zoo (docs/zoo.md) through transformers, float32. Not among
# ENGINE_SETUPS: its family has no dense target and no profiles, so it gets a findings section of its
# own (`specmoe.findings.hybrid`) rather than a column of the per-engine table.
HYBRID = EngineSetup(
    "transformers-hybrid", "transformers float32, hybrid zoo", HF.name, "float32", "study-hybrid"
)
# MoESD's claims (e) and (f) where a step is bound by reading weights: the wide-sparsity zoo through
# transformers, float32 (`specmoe.findings.wide`); a findings section of its own, like the hybrid zoo's.
WIDE = EngineSetup(
    "transformers-wide", "transformers float32, wide-sparsity zoo", HF.name, "float32", "moesd-wide"
)


def engine_setup(name: str) -> EngineSetup:
    found = {e.name: e for e in (*ENGINE_SETUPS, HYBRID, WIDE)}
    if name not in found:
        raise SpecmoeError(f"unknown findings engine '{name}'; available: {', '.join(found)}")
    return found[name]


@dataclass(frozen=True)
class Step:
    name: str  # also the name of the step's store and export files
    suite: str  # a shipped suite's name
    overrides: SuiteOverrides = field(default_factory=SuiteOverrides)
    engine: str = "transformers-bf16"
    threads: int | None = None  # forward threads; None lets the noise guard choose


@dataclass(frozen=True)
class Profile:
    """A `specmoe profile` of one bench-zoo model, fitted after for the predictions."""

    model: str
    batches: tuple[int, ...]
    tokens: tuple[int, ...]
    dtype: str = "float32"  # compute dtype (transformers) or GGUF type (llama.cpp)
    context: int = 64
    repeats: int = 3
    folder: str = "profiles"  # under the results folder; fits go to the matching fits folder
    engine: str = "transformers-bf16"
    passes: int = 1  # grid passes; each point keeps the faster (`specmoe.perf.profile`)

    @property
    def name(self) -> str:
        return f"{self.model}-{self.dtype}"

    @property
    def fits_folder(self) -> str:
        return self.folder.replace("profiles", "fits", 1)


# The moesd suite's batch range, so its speedups are predicted inside the profiled grid. Targets
# get verify widths up to γ + 1 = 5; the draft needs 1 and 2 tokens (a round's first draft step
# carries two).
_PROFILE_BATCHES = (1, 2, 4, 8, 16, 32, 64)
PROFILES = (
    Profile("moe", _PROFILE_BATCHES, (1, 2, 3, 5)),
    Profile("dense-s", _PROFILE_BATCHES, (1, 2, 3, 5)),
    Profile("draft-xs", _PROFILE_BATCHES, (1, 2)),
)
# Per engine, the study's cost ratios: a draft step over a target step, and a verify of γ + 1 = 5
# and 9 tokens (the study pass's γ 4 and 8) over a step. llama.cpp profiles cover the moesd batch
# range too, so that its fits predict the same grid; the transformers bf16 ones (the study pass's
# dtype; the float32 ones above serve moesd) stay at small batches, enough to fit.
_STUDY_TOKENS = (1, 2, 3, 5, 9)
_DRAFT_TOKENS = (1, 2, 3)
ENGINE_PROFILES = (
    *(
        Profile(model, (1, 2, 4), tokens, "bfloat16", folder="profiles-transformers")
        for model, tokens in (("moe", _STUDY_TOKENS), ("dense-s", _STUDY_TOKENS), ("draft-xs", _DRAFT_TOKENS))
    ),
    *(
        # two passes: one quiet llama.cpp pass read a draft step 60% slow over a whole point
        Profile(
            model,
            _PROFILE_BATCHES,
            tokens,
            quant,
            folder="profiles-llamacpp",
            engine=f"llamacpp-{quant}",
            passes=2,
        )
        for quant in ("q8_0", "q4_k_m")
        for model, tokens in (("draft-xs", _DRAFT_TOKENS), ("dense-s", _STUDY_TOKENS), ("moe", _STUDY_TOKENS))
    ),
)
LLAMACPP_THREADS = 1  # see `study_on_llamacpp`; profiles run one thread on every engine

# The cpu pass measures every prompt of a set as a paired unit (`prompts = 10`: the sets' 9-10
# prompts, the 9-prompt reasoning set topped up with one numbered copy), and trims the grid instead:
# study groups B and D only, drafts draft-xs, draft-s and n-gram, dense-l as D's target (the one
# claim b compares), γ 4 and 8, 32 new tokens, one repeat; moesd's batch sweep at oracle 0.9, γ 2
# and 4, B 1-64 in four steps, five repeats so that every batch size has at least five units (B = 64
# decodes all ten prompts, with copies, per batch); the sparsity sweep at top-k 1, 4 and 8, B 1, 16
# and 64.
_CPU = (
    Step(
        "moesd",
        "moesd",
        SuiteOverrides(
            settings=(
                ("batch.draft", ["oracle:0.9"]),
                ("batch.gamma", [2, 4]),
                ("batch.batch_size", [1, 4, 16, 64]),
                ("sparsity.batch_size", [1, 16, 64]),
                ("sparsity.moe_top_k", [1, 4, 8]),
                ("repeats", 5),
            ),
        ),
    ),
    Step(
        "study",
        "study",
        SuiteOverrides(
            settings=(
                ("max_new_tokens", 32),
                ("repeats", 1),
                ("prompts", 10),
                ("B.draft", ["draft-xs", "draft-s", "ngram"]),
                ("D.target", ["dense-l"]),
                ("gamma", [4, 8]),
            ),
            groups=("B", "D"),
        ),
    ),
    Step("family", "family", SuiteOverrides(settings=(("repeats", 1), ("prompts", 10)))),
)


def study_on_llamacpp(cpu_study: Step, gguf_type: str) -> Step:
    """The cpu study step through llama.cpp at one GGUF type: the same groups, drafts, γ, prompts and
    token budget (`specmoe/suites/study-gguf.toml` is `study.toml` with GGUF models), so its cells pair
    with the transformers pass's cell for cell.

    Threads: the study's harness (llama.cpp's own tools) would use its default, one thread per
    physical core. One is used here because the measuring setup gives the measurement one core to
    itself; both passes run one thread, so the engines are compared on equal cores.
    """
    settings = (*cpu_study.overrides.settings, ("models.*.gguf", gguf_type))
    return Step(
        f"study-llamacpp-{gguf_type}",
        "study-gguf",
        SuiteOverrides(settings=settings, groups=cpu_study.overrides.groups),
        engine=f"llamacpp-{gguf_type}",
        threads=LLAMACPP_THREADS,
    )


# The moesd sweeps through llama.cpp at Q8_0 (the batch range costs about as much per pass in
# llama.cpp as in transformers at B = 64, so one quantisation and γ = 4 alone keep it to about
# twenty minutes): the cpu pass's batch sizes, top-k values and repeats otherwise. The moesd suite
# runs float32, which is also what llama.cpp computes activations in.
_MOESD_LLAMACPP = Step(
    "moesd-llamacpp-q8_0",
    "moesd",
    SuiteOverrides(
        settings=(
            *_CPU[0].overrides.settings,
            ("batch.gamma", [4]),
            ("models.*.backend", LLAMACPP.name),
            ("models.*.gguf", "q8_0"),
        )
    ),
    engine="llamacpp-q8_0",
    threads=LLAMACPP_THREADS,
)
# The study's suite B questions and the low-acceptance oracles on the hybrid zoo, at the study pass's
# scale: γ 4 and 8, 32 new tokens, one repeat of every prompt as a unit.
_STUDY_HYBRID = Step(
    "study-hybrid",
    "study-hybrid",
    SuiteOverrides(
        settings=(("max_new_tokens", 32), ("repeats", 1), ("prompts", 10), ("gamma", [4, 8])),
        groups=("B", "D"),
    ),
    engine=HYBRID.name,
)
# The moesd-wide pass as its suite is written (`specmoe/suites/moesd-wide.toml` says what it cuts to fit 30
# minutes on two cores, build included), at one thread: the noise guard would choose two on an idle
# two-core machine, and the regime the claims are about moves with the threads.
MOESD_WIDE = Step("moesd-wide", "moesd-wide", engine=WIDE.name, threads=1)
# Its code path end to end in a couple of minutes, never shipped: B 1-4 at 8 new tokens, every unit kept.
MOESD_WIDE_SMOKE = replace(
    MOESD_WIDE,
    overrides=SuiteOverrides(
        settings=(("max_new_tokens", 8),),
        groups=("sweep-B1", "sweep-B2", "sweep-B4", "acceptance-B1"),
    ),
)
# MTP against separate drafts on the hybrid zoo through transformers and llama.cpp
# (`specmoe/suites/study-hybrid-mtp.toml` says what it cuts to fit 20 minutes on two cores, zoo build
# included), at one thread as moesd-wide and the llama.cpp passes.
STUDY_HYBRID_MTP = Step("study-hybrid-mtp", "study-hybrid-mtp", engine=HYBRID.name, threads=1)
# Its code path end to end in a few minutes, never shipped: 8 new tokens, γ 1 and 4, five units at B 1.
STUDY_HYBRID_MTP_SMOKE = replace(
    STUDY_HYBRID_MTP,
    overrides=SuiteOverrides(
        settings=(
            ("max_new_tokens", 8),
            ("gamma", [1, 4]),
            ("mtp-B1.prompts", 5),
            ("llamacpp-B1.prompts", 5),
        ),
    ),
)
_CPU = (
    *_CPU,
    *(study_on_llamacpp(_CPU[1], quant) for quant in ("q8_0", "q4_k_m")),
    _MOESD_LLAMACPP,
    _STUDY_HYBRID,
    MOESD_WIDE,
    STUDY_HYBRID_MTP,
)

_FULL = (Step("moesd", "moesd"), Step("study", "study"), Step("family", "family"))
_FULL = (*_FULL, *(study_on_llamacpp(_FULL[1], quant) for quant in ("q8_0", "q4_k_m")))

SCALES: dict[str, tuple[Step, ...]] = {"cpu": _CPU, "full": _FULL}


# Passes `specmoe findings --pass NAME` measures alone: (the step, its smoke version).
PASSES: dict[str, tuple[Step, Step]] = {
    MOESD_WIDE.name: (MOESD_WIDE, MOESD_WIDE_SMOKE),
    STUDY_HYBRID_MTP.name: (STUDY_HYBRID_MTP, STUDY_HYBRID_MTP_SMOKE),
}


def pass_step(name: str, smoke: bool = False) -> Step:
    if name not in PASSES:
        raise SpecmoeError(f"unknown findings pass '{name}'; available: {', '.join(PASSES)}")
    return PASSES[name][1 if smoke else 0]


def plan(scale: str, engines: tuple[str, ...] = ()) -> tuple[Step, ...]:
    """The scale's steps, only those of `engines` when some are named."""
    if scale not in SCALES:
        raise SpecmoeError(f"unknown findings scale '{scale}'; available: {', '.join(SCALES)}")
    for name in engines:
        engine_setup(name)  # an unknown engine fails in one line
    return tuple(s for s in SCALES[scale] if not engines or s.engine in engines)
