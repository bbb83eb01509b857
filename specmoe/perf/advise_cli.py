"""`specmoe advise --config ...`: the command-line arguments turned into an `SDSetup` and its advice."""

from __future__ import annotations

from dataclasses import replace

from specmoe.errors import SpecmoeError
from specmoe.perf.advise import advise_setup, check_gamma_max, stated_alpha
from specmoe.perf.breakeven import AcceptanceKind
from specmoe.perf.drafts import Drafter, DraftMethod
from specmoe.perf.engines import engine_profile
from specmoe.perf.files import MAX_BATCH, MAX_GAMMA, check_context, parse_counts
from specmoe.perf.firstprinciples import load_config
from specmoe.perf.hardware import load_hardware
from specmoe.perf.model import MAX_CONSTANT_S
from specmoe.perf.offload import ALL_LAYERS
from specmoe.perf.predict import config_name
from specmoe.perf.setup import StepForm, configured_setup, with_measured_step

DEFAULT_BATCHES = (1, 4, 16, 64)


def _drafter(args) -> Drafter:
    drafts = args.draft or []
    if len(drafts) > 1:
        raise SpecmoeError(
            "with --config pass one --draft METHOD (or --draft-config); compare drafts in two calls"
        )
    if drafts:
        return Drafter.parse(drafts[0])
    if args.draft_config is None:
        raise SpecmoeError(
            "say what drafts: --draft-config draft.json, or --draft ngram | eagle | eagle3 | mtp | medusa | "
            "dflash[:BLOCK]"
        )
    return Drafter(DraftMethod.MODEL)


def refuse_pipeline(stages: int | None) -> None:
    """Pipeline parallelism is refused, not guessed: its bubbles depend on micro-batching the model
    does not see."""
    if stages is None or stages == 1:
        return
    if not isinstance(stages, int) or stages < 1:
        raise SpecmoeError(f"--pp takes a number of pipeline stages >= 1, got {stages!r}")
    raise SpecmoeError(
        f"pipeline parallelism (--pp {stages}) is not modelled: a stage's idle time depends on the "
        "engine's micro-batching, which no config states; price one stage's devices with a hardware "
        "file of device_count = the tensor-parallel size, or measure and use a fit"
    )


def _cpu_moe(args) -> int | None:
    if getattr(args, "cpu_moe", False):
        if getattr(args, "n_cpu_moe", None) is not None:
            raise SpecmoeError("pass --cpu-moe (every layer) or --n-cpu-moe N, not both")
        return ALL_LAYERS
    return getattr(args, "n_cpu_moe", None)


def advise_from_configs(args) -> dict:
    if args.fit is not None:
        raise SpecmoeError("pass either a FIT or --config, not both: a fit already knows the machine")
    if args.hardware is None or args.engine is None:
        raise SpecmoeError(
            "--config needs --hardware FILE and --engine NAME (e.g. docs/perf-examples/h100-sxm.json, sglang)"
        )
    check_context(args.context)
    refuse_pipeline(getattr(args, "pp", None))
    hardware = load_hardware(args.hardware)
    engine = engine_profile(args.engine, hardware.device, args.engines)
    drafter = _drafter(args)
    method = drafter.method
    target = replace(load_config(args.config, args.dtype, args.kv_dtype), name=config_name(args.config))
    draft = None
    if method in (DraftMethod.MODEL, DraftMethod.DFLASH) and args.draft_config is not None:
        draft = load_config(args.draft_config, args.draft_dtype, args.kv_dtype)
        draft = replace(draft, name=config_name(args.draft_config))
    elif args.draft_config is not None:
        raise SpecmoeError(f"--draft {method.value} builds its own drafter; drop --draft-config")
    if args.gamma is None:
        check_gamma_max(args.gamma_max)
    gammas = parse_counts(args.gamma or list(range(1, args.gamma_max + 1)), "--gamma", maximum=MAX_GAMMA)
    if drafter.block is not None:
        if args.gamma is not None and gammas != [drafter.proposals]:
            raise SpecmoeError(
                f"a block of {drafter.block} proposes {drafter.proposals} tokens a round; drop --gamma "
                f"or pass --draft dflash:{gammas[0] + 1}"
            )
        gammas = [drafter.proposals]
    heads = max(gammas) if method is DraftMethod.MEDUSA else 4
    setup = configured_setup(
        target,
        hardware,
        engine,
        method,
        draft,
        context=args.context,
        gamma_for_heads=heads,
        tree_tokens=args.tree_tokens,
        tree_width=args.tree_width,
        draft_vocab=args.draft_vocab,
        new_tokens=args.output_tokens,
        block=drafter.block,
        cpu_moe=_cpu_moe(args),
    )
    batches = parse_counts(args.batch or list(DEFAULT_BATCHES), "--batch", maximum=MAX_BATCH)
    if args.plain_step_ms is not None:
        if not 0 < args.plain_step_ms <= MAX_CONSTANT_S * 1e3:
            raise SpecmoeError(
                f"--plain-step-ms must be a positive number of ms up to {MAX_CONSTANT_S * 1e3:g} "
                f"(no decode step takes longer), got {args.plain_step_ms}"
            )
        if len(batches) != 1:
            raise SpecmoeError(
                "--plain-step-ms is the step measured at one batch size: pass exactly one --batch"
            )
        setup = with_measured_step(setup, batches[0], args.plain_step_ms / 1e3, StepForm(args.step_form))
    alpha = stated_alpha(args.acceptance, AcceptanceKind(args.acceptance_kind), args.acceptance_gamma, gammas)
    return advise_setup(setup, batches, gammas, alpha)
