"""A suite's [[groups]] (with [defaults] merged in) checked into `Group`s: their axes, settings,
model and draft references, and the rules that tie them (served targets, prompt lengths, top-k)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specmoe.bench.suite import Group, ModelSpec, zoo_shape
from specmoe.bench.suite_checks import SuiteContext, leaf, suggest
from specmoe.bench.suite_schema import GROUP_KEYS, builtin_defaults
from specmoe.dtypes import DTYPE_NAMES
from specmoe.engine.draft_spec import ModelDraft, OracleDraft, draft_of, parse_draft
from specmoe.errors import SpecmoeError
from specmoe.prompts import BUILTIN_PROMPT_SETS, is_builtin

BUILTIN_DEFAULTS = builtin_defaults()  # what a key is when neither [defaults] nor the group sets it


def parse_group(
    ctx: SuiteContext, where: str, raw: dict[str, Any], defaults: dict[str, Any], models: dict[str, ModelSpec]
) -> Group:
    ctx.check_keys(where, raw, GROUP_KEYS)
    if "name" not in raw:
        ctx.fail(f"{where}.name", 'every group needs a name, e.g. name = "B"')
    name = ctx.string(f"{where}.name", raw["name"])
    merged = {**BUILTIN_DEFAULTS, **defaults, **raw}

    def key(k: str) -> str:
        # Errors point at the table the value came from.
        return f"{where}.{k}" if k in raw else f"defaults.{k}" if k in defaults else f"{where}.{k}"

    if "target" not in merged:
        ctx.fail(f"{where}.target", 'no target; set target = ["<model>", ...] in the group or [defaults]')
    target = ctx.axis(key("target"), merged["target"], lambda k, v: _model_ref(ctx, k, v, models))
    draft = ctx.axis(
        key("draft"), merged["draft"], lambda k, v: _draft_ref(ctx, k, v, models), allow_empty=True
    )
    gamma: tuple[int, ...] = (0,)
    if draft:
        if "gamma" not in merged:
            ctx.fail(f"{where}.gamma", "a group with drafts needs gamma = [<draft length>, ...]")
        gamma = ctx.axis(key("gamma"), merged["gamma"], lambda k, v: ctx.integer(k, v, minimum=1))
    elif "gamma" in raw:
        ctx.fail(f"{where}.gamma", "gamma is set but the group has no draft; add a draft or remove gamma")
    prompt_set, prompt_length = _prompts(ctx, where, raw, defaults, merged)
    oracle_cost = ctx.string(key("oracle_cost"), merged["oracle_cost"])
    if any(isinstance(draft_of(d), OracleDraft) for d in draft) and oracle_cost not in models:
        ctx.fail(
            key("oracle_cost"),
            f"oracle drafts run model '{oracle_cost}' for their cost, but it is not in [models]; "
            f"add [models.{oracle_cost}] or set oracle_cost",
        )
    moe_top_k = ctx.axis(key("moe_top_k"), merged["moe_top_k"], lambda k, v: ctx.integer(k, v, minimum=1))
    _check_top_k(ctx, key("moe_top_k"), moe_top_k, target, models)
    served = _check_serving(ctx, key, raw, target, draft, prompt_length, moe_top_k, models)

    def positive(k: str, v: Any) -> int:
        return ctx.integer(k, v, minimum=1)

    requests = merged["requests"]
    request_rate = _request_rates(ctx, key, merged, served)
    return Group(
        name=name,
        description=ctx.string(f"{where}.description", raw.get("description", "")),
        target=target,
        draft=draft,
        gamma=gamma,
        prompt_set=prompt_set,
        prompt_length=prompt_length,
        batch_size=(1,) if served else ctx.axis(key("batch_size"), merged["batch_size"], positive),
        moe_top_k=moe_top_k,
        temperature=ctx.axis(key("temperature"), merged["temperature"], lambda k, v: ctx.number(k, v)),
        max_new_tokens=ctx.axis(
            key("max_new_tokens"), merged["max_new_tokens"], lambda k, v: ctx.integer(k, v, minimum=1)
        ),
        dtype=ctx.axis(key("dtype"), merged["dtype"], lambda k, v: ctx.choice(k, v, DTYPE_NAMES)),
        device=ctx.axis(key("device"), merged["device"], lambda k, v: ctx.device(k, v)),
        repeats=ctx.integer(key("repeats"), merged["repeats"], minimum=1),
        warmup=ctx.integer(key("warmup"), merged["warmup"], minimum=0),
        oracle_cost=oracle_cost,
        concurrency=_concurrency(ctx, key, merged, served, request_rate),
        request_rate=request_rate,
        requests=positive(key("requests"), requests) if served and requests is not None else None,
        cpus=_resource(ctx, key("cpus"), merged["cpus"], minimum=0.001),
        prompts=_prompt_count(ctx, key("prompts"), merged["prompts"]),
        compile=_flag(ctx, key("compile"), merged["compile"]),
        chat=_chat(ctx, key, merged, prompt_length),
        gpus=None if merged["gpus"] is None else _resource(ctx, key("gpus"), merged["gpus"], minimum=0.0),
    )


def _request_rates(ctx: SuiteContext, key, merged: dict[str, Any], served: bool) -> tuple[float | None, ...]:
    """Open-loop arrival rates (requests/s, "inf" for all at once); (None,) for a closed loop."""
    if merged["request_rate"] is None or not served:
        return (None,)  # a local group was refused by _check_serving when it set one itself
    if merged["requests"] is None:
        ctx.fail(
            key("request_rate"),
            "an open-loop run (request_rate) needs requests = N, the requests sent per run; add it",
        )

    def rate(k: str, v: Any) -> float:
        if v == "inf" or (isinstance(v, float) and v == math.inf):  # TOML's bare inf too
            return math.inf
        if isinstance(v, str) or ctx.number(k, v) <= 0:
            ctx.fail(k, f'request_rate must be a number of requests/s > 0 or "inf", got {v!r}')
        return float(v)

    return ctx.axis(key("request_rate"), merged["request_rate"], rate)


def _concurrency(
    ctx: SuiteContext, key, merged: dict[str, Any], served: bool, rates: tuple[float | None, ...]
) -> tuple[int | None, ...]:
    """Requests in flight: 1 by default in a closed loop; in an open loop a cap, by default none (as
    many as the run sends)."""
    if not served:
        return (None,)
    default = merged["requests"] if rates != (None,) else 1
    return ctx.axis(
        key("concurrency"), _or(merged["concurrency"], default), lambda k, v: ctx.integer(k, v, 1)
    )


def _chat(ctx: SuiteContext, key, merged: dict[str, Any], prompt_length: tuple[int | None, ...]) -> bool:
    chat = _flag(ctx, key("chat"), merged["chat"])
    if chat and prompt_length != (None,):
        ctx.fail(key("chat"), "synthetic prompts (prompt_length) are token ids with no text to template")
    return chat


def _flag(ctx: SuiteContext, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        ctx.fail(key, f"{leaf(key)} must be true or false, got {value!r}")
    return value


def _prompt_count(ctx: SuiteContext, key: str, value: Any) -> int | None:
    """`prompts = N` (N >= 1) or `prompts = "all"` (None)."""
    if value == "all":
        return None
    if isinstance(value, str):
        ctx.fail(key, f'prompts must be a count >= 1 or "all", got {value!r}')
    return ctx.integer(key, value, minimum=1)


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _resource(ctx: SuiteContext, key: str, value: Any, minimum: float) -> float:
    amount = ctx.number(key, value)
    if amount < minimum:
        ctx.fail(key, f"{leaf(key)} must be > 0, got {value}")
    return amount


def _check_serving(
    ctx: SuiteContext,
    key,
    raw: dict[str, Any],
    target: tuple[str, ...],
    draft: tuple[str, ...],
    prompt_length: tuple[int | None, ...],
    moe_top_k: tuple[int | None, ...],
    models: dict[str, ModelSpec],
) -> bool:
    """Whether a group measures servers. Its targets are all servers or all local models; a served
    target's drafts are its SD arms: other servers of the same model, with speculative decoding on."""
    served = [models[t].server is not None for t in target]
    if any(served) and not all(served):
        ctx.fail(key("target"), "a group's targets must be all servers (url =) or all local; split the group")
    if not served[0]:
        for name in draft:
            if name in models and models[name].server is not None:
                ctx.fail(key("draft"), f"'{name}' is a server: only a served target's SD arm can be")
        for k in ("concurrency", "requests", "request_rate"):
            if k in raw:
                ctx.fail(key(k), f"{k} applies to served targets (url =) only; local targets use batch_size")
        return False
    for name in draft:
        server = models[name].server if name in models else None
        if server is None:
            ctx.fail(
                key("draft"),
                f"'{name}' is not a server; the SD arm of a served target is a second server of the same "
                "model with speculative decoding on (url =)",
            )
        for t in target:
            served_model = models[t].server.model  # type: ignore[union-attr]
            if server.model != served_model:
                ctx.fail(
                    key("draft"),
                    f"server '{name}' serves '{server.model}' but target '{t}' serves '{served_model}'; "
                    "both arms must serve the same model",
                )
    if prompt_length != (None,):
        _check_served_lengths(ctx, key("prompt_length"), (*target, *draft), models)
    if raw.get("batch_size", 1) not in (1, [1]):
        ctx.fail(key("batch_size"), "servers batch requests themselves: set concurrency = [...] instead")
    if moe_top_k != (None,):
        ctx.fail(key("moe_top_k"), "moe_top_k cannot change a served model; remove it from this group")
    return True


def _check_served_lengths(
    ctx: SuiteContext, key: str, names: tuple[str, ...], models: dict[str, ModelSpec]
) -> None:
    """Synthetic prompts for servers are token ids made with the served model's tokenizer and sent as
    a completions prompt, so every server of the group needs `tokenizer =` and the completions
    endpoint (a chat message is text, whose token count the server's template would change)."""
    for name in names:
        server = models[name].server
        assert server is not None
        if server.tokenizer is None:
            ctx.fail(
                key,
                f"synthetic prompts for server '{name}' need its tokenizer: add tokenizer = \"<HF dir or "
                f'hub ID>" to [models.{name}], or use prompt_set',
            )
        if server.endpoint != "completions":
            ctx.fail(
                key,
                f"synthetic prompts are token ids, sent to /v1/completions; server '{name}' uses "
                f'endpoint = "{server.endpoint}": set endpoint = "completions" or use prompt_set',
            )


def _prompts(
    ctx: SuiteContext, where: str, raw: dict[str, Any], defaults: dict[str, Any], merged: dict[str, Any]
) -> tuple[tuple[str | None, ...], tuple[int | None, ...]]:
    """A group uses prompt sets or synthetic prompt lengths, never both: the innermost table that
    sets either one decides, so a group's prompt_length overrides a default prompt_set."""
    for table, prefix in ((raw, where), (defaults, "defaults")):
        has_set, has_length = "prompt_set" in table, "prompt_length" in table
        if has_set and has_length:
            ctx.fail(f"{prefix}.prompt_length", "set prompt_set or prompt_length, not both")
        if has_length:
            lengths = ctx.axis(
                f"{prefix}.prompt_length", table["prompt_length"], lambda k, v: ctx.integer(k, v, 1)
            )
            return (None,), lengths
        if has_set:
            return ctx.axis(f"{prefix}.prompt_set", table["prompt_set"], _prompt_set_checker(ctx)), (None,)
    return ctx.axis(f"{where}.prompt_set", merged["prompt_set"], _prompt_set_checker(ctx)), (None,)


def _prompt_set_checker(ctx: SuiteContext):
    def check(key: str, value: Any) -> str:
        name = ctx.string(key, value)
        if is_builtin(name):
            return name
        if name.endswith(".jsonl") or "/" in name:
            path = (ctx.path.parent / Path(name).expanduser()).resolve()
            if not path.is_file():
                ctx.fail(key, f"prompt set file not found: {path}")
            return str(path)
        hint = f"{suggest(name, BUILTIN_PROMPT_SETS)}; built-ins: {', '.join(BUILTIN_PROMPT_SETS)}"
        ctx.fail(key, f"unknown prompt set '{name}'{hint} (or give the path of a .jsonl file)")

    return check


def _check_top_k(
    ctx: SuiteContext,
    key: str,
    top_ks: tuple[int | None, ...],
    targets: tuple[str, ...],
    models: dict[str, ModelSpec],
) -> None:
    if top_ks == (None,):
        return
    for name in targets:
        spec = models[name]
        if spec.zoo is None:
            continue  # a path model's shape is only known once it is loaded
        shape = zoo_shape(spec)
        if not shape.is_moe:
            ctx.fail(
                key, f"moe_top_k applies to MoE targets only, but '{name}' is dense; move it to its own group"
            )
        for k in top_ks:
            if k is not None and k > shape.num_experts:
                ctx.fail(key, f"moe_top_k must be <= {shape.num_experts} (the experts of '{name}'), got {k}")


def _model_ref(ctx: SuiteContext, key: str, value: Any, models: dict[str, ModelSpec]) -> str:
    name = ctx.string(key, value)
    if name not in models:
        ctx.fail(
            key, f"unknown model '{name}'{suggest(name, tuple(models))}; define it under [models.{name}]"
        )
    return name


def _draft_ref(ctx: SuiteContext, key: str, value: Any, models: dict[str, ModelSpec]) -> str:
    """The canonical spelling of a draft (`specmoe.engine.draft_spec`), so "ngram" and "ngram:1-3",
    or "oracle:0.60" and "oracle:0.6", are one run."""
    text = ctx.string(key, value)
    try:
        draft = parse_draft(text)
    except SpecmoeError as err:
        ctx.fail(key, str(err))
    if isinstance(draft, ModelDraft):
        return _model_ref(ctx, key, text, models)
    return str(draft)
