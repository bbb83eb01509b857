"""A suite flattened into `RunSpec`s: one per arm, grid point, prompt batch and repeat."""

from __future__ import annotations

import itertools
from dataclasses import replace

from specmoe.prompts import batch_count, load_prompts, prompt_set_digest, selection_size
from specmoe.suite.types import GRID_AXES, Group, ModelSpec, RunSpec, Suite, zoo_shape


def expand(suite: Suite) -> list[RunSpec]:
    """Every RunSpec of the suite, repeat outermost: all of repeat 0, then all of repeat 1, ...

    Within a repeat, specs follow the file: group order, then the grid (target outermost, so the
    runner switches models rarely), then the prompt batch; each SD spec follows its baseline. Each
    grid point measures ⌈N / B⌉ batches of its set's N selected prompts (`prompts`). Specs are
    deduplicated by run_id; a run shared by two groups keeps the first group's name. The order in
    which a runner measures them is `specmoe.bench.plan.plan`'s.
    """
    specs: dict[str, RunSpec] = {}
    points = [(group, point) for group in suite.groups for point in _grid(suite, group)]
    for repeat in range(max(group.repeats for group in suite.groups)):
        for group, point in points:
            if repeat >= group.repeats:
                continue
            for batch in range(_batches(point)):
                spec = replace(point, repeat=repeat, prompt_batch=batch)
                baseline = spec.baseline()
                specs.setdefault(baseline.run_id, baseline)
                specs.setdefault(spec.run_id, spec)
    return list(specs.values())


def _batches(spec: RunSpec) -> int:
    """Prompt batches a grid point measures: ⌈selected prompts / B⌉; one for servers and for
    synthetic prompts without an explicit count."""
    if spec.concurrency is not None:
        return 1
    if spec.prompt_length is not None:
        return batch_count(spec.prompts or spec.batch_size, spec.batch_size)
    return batch_count(selection_size(len(load_prompts(spec.prompt_set)), spec.prompts), spec.batch_size)


def _grid(suite: Suite, group: Group):
    digests = {name: prompt_set_digest(name) for name in group.prompt_set if name is not None}
    for values in itertools.product(*(group.axis(name) for name in GRID_AXES)):
        point = dict(zip(GRID_AXES, values, strict=True))  # each axis is the RunSpec field of its name
        draft, prompt_set, served = point["draft"], point["prompt_set"], point["concurrency"] is not None
        target_model = suite.model(point["target"])
        cost_model = None if draft is None else draft.cost_model(group.oracle_cost)
        draft_model = None if cost_model is None else suite.model(cost_model)
        point["moe_top_k"] = _effective_top_k(target_model, point["moe_top_k"])
        yield RunSpec(
            **point,
            suite=suite.name,
            group=group.name,
            arm="baseline" if draft is None else "sd",
            repeat=0,
            warmup=group.warmup,
            oracle_cost=group.oracle_cost if draft is not None and draft.needs_cost_model else None,
            target_model=target_model,
            draft_model=draft_model,
            requests=group.requests,
            prompts=None if served else group.prompts,
            compile=group.compile and not served,
            chat=group.chat and not served,
            prompt_digest=None if prompt_set is None else digests[prompt_set],
            plain=group.plain,
        )


def _effective_top_k(model: ModelSpec, top_k: int | None) -> int | None:
    # Zoo MoE targets always carry their real top-k, so an override equal to the preset's own value
    # is the same run as no override at all.
    if model.zoo is None:
        return top_k
    shape = zoo_shape(model)
    if not shape.is_moe:
        return None
    return shape.top_k if top_k is None else top_k
