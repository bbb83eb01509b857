"""A suite's [[groups]] (with [defaults] merged in) checked into `Group`s: their model and draft
references and the rules that tie keys and tables together (served targets, prompt lengths,
top-k). Each value's type and range is the schema's (`schema`), checked before."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specmoe.drafts import DraftSpec
from specmoe.prompts import BUILTIN_PROMPT_SETS, is_builtin
from specmoe.suite.errors import SuiteContext, suggest
from specmoe.suite.schema import GroupSettings, GroupTable
from specmoe.suite.types import PLAIN_SETTINGS, Group, ModelSpec, zoo_shape


class _Merged:
    """A group's values with [defaults] under them, and for each key the table it came from (an
    error points at the table the value was written in)."""

    def __init__(self, where: str, group: GroupTable, defaults: GroupSettings) -> None:
        self.where, self.group, self.defaults = where, group, defaults

    def __getitem__(self, k: str) -> Any:
        return getattr(self.group if self.own(k) else self.defaults, k)

    def own(self, k: str) -> bool:
        return k in self.group.model_fields_set

    def key(self, k: str) -> str:
        if not self.own(k) and k in self.defaults.model_fields_set:
            return f"defaults.{k}"
        return f"{self.where}.{k}"


def parse_group(
    ctx: SuiteContext,
    where: str,
    group: GroupTable,
    defaults: GroupSettings,
    models: dict[str, ModelSpec],
) -> Group:
    """A [[groups]] table the schema accepted, merged over [defaults] and checked against the
    models and the rules that tie its keys together."""
    merged = _Merged(where, group, defaults)
    key = merged.key
    if merged["target"] is None:
        ctx.fail(f"{where}.target", 'no target; set target = ["<model>", ...] in the group or [defaults]')
    target = _axis(merged["target"])
    for name in target:
        _model_ref(ctx, key("target"), name, models)
    draft: tuple[DraftSpec, ...] = _axis(merged["draft"])  # typed by the schema
    for spec in draft:
        if spec.model_name is not None:
            _model_ref(ctx, key("draft"), spec.model_name, models)
    gamma: tuple[int | None, ...] = (None,)  # no draft, no gamma
    if draft:
        if merged["gamma"] is None:
            ctx.fail(f"{where}.gamma", "a group with drafts needs gamma = [<draft length>, ...]")
        gamma = _axis(merged["gamma"])
    elif merged.own("gamma"):
        ctx.fail(f"{where}.gamma", "gamma is set but the group has no draft; add a draft or remove gamma")
    prompt_set, prompt_length = _prompts(ctx, merged)
    oracle_cost = merged["oracle_cost"]
    if any(d.needs_cost_model for d in draft) and oracle_cost not in models:
        ctx.fail(
            key("oracle_cost"),
            f"oracle drafts run model '{oracle_cost}' for their cost, but it is not in [models]; "
            f"add [models.{oracle_cost}] or set oracle_cost",
        )
    moe_top_k = _axis(merged["moe_top_k"])
    _check_top_k(ctx, key("moe_top_k"), moe_top_k, target, models)
    served = _check_serving(ctx, merged, target, draft, prompt_length, moe_top_k, models)
    request_rate = _request_rates(ctx, merged, served)
    if merged["chat"] and prompt_length != (None,):
        ctx.fail(key("chat"), "synthetic prompts (prompt_length) are token ids with no text to template")
    return Group(
        name=group.name,
        description=group.description,
        target=target,
        draft=draft,
        gamma=gamma,
        prompt_set=prompt_set,
        prompt_length=prompt_length,
        batch_size=(1,) if served else _axis(merged["batch_size"]),
        moe_top_k=moe_top_k,
        temperature=_axis(merged["temperature"]),
        max_new_tokens=_axis(merged["max_new_tokens"]),
        dtype=_axis(merged["dtype"]),
        device=_axis(merged["device"]),
        repeats=merged["repeats"],
        warmup=merged["warmup"],
        oracle_cost=oracle_cost,
        concurrency=_concurrency(merged, served, request_rate),
        request_rate=request_rate,
        requests=merged["requests"] if served else None,
        cpus=merged["cpus"],
        prompts=None if merged["prompts"] == "all" else merged["prompts"],
        compile=merged["compile"],
        chat=merged["chat"],
        gpus=merged["gpus"],
        plain=tuple((s.name, merged[s.name]) for s in PLAIN_SETTINGS if merged[s.name] is not None),
    )


def _axis(values: list[Any] | None) -> tuple[Any, ...]:
    """A grid axis as the group holds it: duplicates dropped, order kept; (None,) when unset."""
    return (None,) if values is None else tuple(dict.fromkeys(values))


def _request_rates(ctx: SuiteContext, merged: _Merged, served: bool) -> tuple[float | None, ...]:
    """Open-loop arrival rates (requests/s, math.inf for all at once); (None,) for a closed loop."""
    if merged["request_rate"] is None or not served:
        return (None,)  # a local group was refused by _check_serving when it set one itself
    if merged["requests"] is None:
        ctx.fail(
            merged.key("request_rate"),
            "an open-loop run (request_rate) needs requests = N, the requests sent per run; add it",
        )
    rates = _axis(merged["request_rate"])
    for rate in rates:
        problem = schedule_problem(rate, merged["requests"])
        if problem:
            ctx.fail(merged.key("request_rate"), problem)
    return rates


# An open-loop run sends requests at Poisson arrival times fixed in advance; a rate typed with the
# wrong exponent (1e-7 for 1e7) would have the run wait months for its arrivals. A day bounds any
# benchmark run meant here, and is far beyond one: 1000 requests at 0.1/s take under 3 hours.
MAX_SCHEDULE_S = 24 * 3600


def schedule_problem(rate: float, requests: int) -> str:
    """Why an open-loop run would wait too long for its own arrivals, or "": the expected time of
    its last arrival, (requests - 1) gaps of 1 / rate seconds (at least one gap, so a rate that low
    is refused however few requests it sends), beyond MAX_SCHEDULE_S."""
    if math.isinf(rate):
        return ""
    expected_s = max(requests - 1, 1) / rate
    if expected_s <= MAX_SCHEDULE_S:
        return ""
    return (
        f"request_rate {rate:g} requests/s spaces {requests} request(s) {1 / rate:.3g} s apart on average, "
        f"{expected_s / 3600:.3g} hours of arrivals for one run, beyond the limit of "
        f"{MAX_SCHEDULE_S // 3600} hours; raise request_rate (requests/s), or lower requests"
    )


def _concurrency(merged: _Merged, served: bool, rates: tuple[float | None, ...]) -> tuple[int | None, ...]:
    """Requests in flight: 1 by default in a closed loop; in an open loop a cap, by default none (as
    many as the run sends)."""
    if not served:
        return (None,)
    default = merged["requests"] if rates != (None,) else 1
    concurrency = merged["concurrency"]
    return _axis([default] if concurrency is None else concurrency)


def _check_serving(
    ctx: SuiteContext,
    merged: _Merged,
    target: tuple[str, ...],
    draft: tuple[DraftSpec, ...],
    prompt_length: tuple[int | None, ...],
    moe_top_k: tuple[int | None, ...],
    models: dict[str, ModelSpec],
) -> bool:
    """Whether a group measures servers. Its targets are all servers or all local models; a served
    target's drafts are its SD arms: other servers of the same model, with speculative decoding on."""
    key = merged.key
    served = [models[t].server is not None for t in target]
    if any(served) and not all(served):
        ctx.fail(key("target"), "a group's targets must be all servers (url =) or all local; split the group")
    drafted = {str(d): _model_of(d, models) for d in draft}  # by spelling: None where not a model
    if not served[0]:
        for name, model in drafted.items():
            if model is not None and model.server is not None:
                ctx.fail(key("draft"), f"'{name}' is a server: only a served target's SD arm can be")
        for k in ("concurrency", "requests", "request_rate"):
            if merged.own(k):
                ctx.fail(key(k), f"{k} applies to served targets (url =) only; local targets use batch_size")
        return False
    for name, model in drafted.items():
        server = None if model is None else model.server
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
        _check_served_lengths(ctx, key("prompt_length"), (*target, *drafted), models)
    if merged.own("batch_size") and merged["batch_size"] != [1]:
        ctx.fail(key("batch_size"), "servers batch requests themselves: set concurrency = [...] instead")
    if moe_top_k != (None,):
        ctx.fail(key("moe_top_k"), "moe_top_k cannot change a served model; remove it from this group")
    return True


def _model_of(draft: DraftSpec, models: dict[str, ModelSpec]) -> ModelSpec | None:
    """The [models] entry a draft names; None for n-gram and oracle drafts, which name none."""
    return None if draft.model_name is None else models.get(draft.model_name)


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


def _prompts(ctx: SuiteContext, merged: _Merged) -> tuple[tuple[str | None, ...], tuple[int | None, ...]]:
    """A group uses prompt sets or synthetic prompt lengths, never both: the innermost table that
    sets either one decides, so a group's prompt_length overrides a default prompt_set."""
    where = merged.where
    for table, prefix in ((merged.group, where), (merged.defaults, "defaults")):
        if "prompt_length" in table.model_fields_set:
            return (None,), _axis(table.prompt_length)
        if "prompt_set" in table.model_fields_set:
            return _prompt_sets(ctx, f"{prefix}.prompt_set", table.prompt_set), (None,)
    return _prompt_sets(ctx, f"{where}.prompt_set", merged["prompt_set"]), (None,)


def _prompt_sets(ctx: SuiteContext, key: str, names: list[str]) -> tuple[str, ...]:
    """Built-in set names as they are, files as absolute paths (taken from the suite's folder)."""
    return _axis([_prompt_set(ctx, key, name) for name in names])


def _prompt_set(ctx: SuiteContext, key: str, name: str) -> str:
    if is_builtin(name):
        return name
    if name.endswith(".jsonl") or "/" in name:
        try:
            path = (ctx.path.parent / Path(name).expanduser()).resolve()
        except (RuntimeError, OSError):  # Python < 3.13 raises RuntimeError on a symlink loop
            ctx.fail(
                key, f"prompt set file {name} is a symlink loop or unreadable; point it at a .jsonl file"
            )
        if not path.is_file():
            ctx.fail(key, f"prompt set file not found: {path}")
        return str(path)
    hint = f"{suggest(name, BUILTIN_PROMPT_SETS)}; built-ins: {', '.join(BUILTIN_PROMPT_SETS)}"
    ctx.fail(key, f"unknown prompt set '{name}'{hint} (or give the path of a .jsonl file)")


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


def _model_ref(ctx: SuiteContext, key: str, name: str, models: dict[str, ModelSpec]) -> None:
    if name not in models:
        ctx.fail(
            key, f"unknown model '{name}'{suggest(name, tuple(models))}; define it under [models.{name}]"
        )
