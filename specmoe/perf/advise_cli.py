"""`specmoe advise --config ...`: the command-line arguments turned into an `SDSetup` and its advice."""

from __future__ import annotations

from dataclasses import replace

from specmoe.errors import SpecmoeError
from specmoe.perf.advise import advise_setup, check_gamma_max, stated_alpha
from specmoe.perf.breakeven import AcceptanceKind
from specmoe.perf.drafts import DraftMethod
from specmoe.perf.files import MAX_BATCH, MAX_GAMMA, parse_counts
from specmoe.perf.firstprinciples import load_config
from specmoe.perf.hardware import load_hardware
from specmoe.perf.predict import config_name
from specmoe.perf.runtimes import engine_profile
from specmoe.perf.setup import configured_setup, with_measured_step

DEFAULT_BATCHES = (1, 4, 16, 64)


def _method(args) -> DraftMethod:
    drafts = args.draft or []
    if len(drafts) > 1:
        raise SpecmoeError(
            "with --config pass one --draft METHOD (or --draft-config); compare drafts in two calls"
        )
    if drafts:
        return DraftMethod.parse(drafts[0])
    if args.draft_config is None:
        raise SpecmoeError(
            "say what drafts: --draft-config draft.json, or --draft ngram | eagle | eagle3 | mtp | medusa"
        )
    return DraftMethod.MODEL


def advise_from_configs(args) -> dict:
    if args.fit is not None:
        raise SpecmoeError("pass either a FIT or --config, not both: a fit already knows the machine")
    if args.hardware is None or args.engine is None:
        raise SpecmoeError(
            "--config needs --hardware FILE and --engine NAME (e.g. docs/perf-examples/h100-sxm.json, sglang)"
        )
    if args.context < 0:
        raise SpecmoeError(f"--context must be >= 0 tokens, got {args.context}")
    hardware = load_hardware(args.hardware)
    engine = engine_profile(args.engine, hardware.device, args.engines)
    method = _method(args)
    target = replace(load_config(args.config, args.dtype, args.kv_dtype), name=config_name(args.config))
    draft = None
    if method is DraftMethod.MODEL:
        draft = load_config(args.draft_config, args.draft_dtype, args.kv_dtype)
        draft = replace(draft, name=config_name(args.draft_config))
    elif args.draft_config is not None:
        raise SpecmoeError(f"--draft {method.value} builds its own drafter; drop --draft-config")
    if args.gamma is None:
        check_gamma_max(args.gamma_max)
    gammas = parse_counts(args.gamma or list(range(1, args.gamma_max + 1)), "--gamma", maximum=MAX_GAMMA)
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
    )
    batches = parse_counts(args.batch or list(DEFAULT_BATCHES), "--batch", maximum=MAX_BATCH)
    if args.plain_step_ms is not None:
        if not args.plain_step_ms > 0:
            raise SpecmoeError(f"--plain-step-ms must be a positive number of ms, got {args.plain_step_ms}")
        if len(batches) != 1:
            raise SpecmoeError(
                "--plain-step-ms is the step measured at one batch size: pass exactly one --batch"
            )
        setup = with_measured_step(setup, batches[0], args.plain_step_ms / 1e3)
    alpha = stated_alpha(args.acceptance, AcceptanceKind(args.acceptance_kind), args.acceptance_gamma, gammas)
    return advise_setup(setup, batches, gammas, alpha)
