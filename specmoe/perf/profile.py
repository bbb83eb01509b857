"""Time single forward passes T(B, t) through the backend protocol, and count the experts they touch.

Shape legend: B sequences in the batch, t new tokens per sequence, C cached tokens per sequence,
n = B·t tokens in one pass, E routed experts per MoE layer, K experts per token, L MoE layers.

For each batch size B the backend is prefilled once with B rows of C random token ids. Then, for
each t, a random [B, t] block is forwarded and rolled back: `warmup` untimed passes first, then
`repeats` timed passes. The timed passes go round-robin over t (t₁, t₂, …, t₁, t₂, …) so that slow
drift in the machine (another process, clock changes) hits every t alike instead of biasing one.
Each pass is bracketed by `Backend.synchronize()` and read with `time.perf_counter`. A point whose
timings scatter (interquartile range above 10% of the median: another process took a core) is
measured again, up to 3 more times, keeping the attempt with the lowest median. A disturbance can
also last a whole point without widening its spread (measured: a llama.cpp draft step read 1.60 ms
in one quiet pass and 0.97 ms in the next); `passes` > 1 measures the whole grid that many times and
keeps, per point, the pass with the lower median, by the same rule: interference only slows.

For MoE models a separate, untimed pass per (B, t) runs under the router trace (hooks cost time)
and records how many distinct experts each layer selected, beside the balanced-routing expectation
N(n) = E·(1 − (1 − K/E)^n). Raw times are kept in the JSON; medians and spreads are derived here
once, for convenience, and can be recomputed from the raw lists.

Both backends are profiled alike: a directory through transformers, a .gguf file through llama.cpp
(its KV cache sized to the profile's context, `threads` for its decode threads as for torch's).
llama.cpp has no hook on its expert selection, so its MoE profiles carry no expert counts
(`experts_note` says so). Given a `specmoe hw` result, each point also records its bandwidth floor
and the fraction of it the step reaches (`specmoe.perf.floor`).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

from specmoe.backends import backend_for
from specmoe.errors import SpecmoeError
from specmoe.perf.files import MAX_BATCH, SCHEMA, parse_counts, read_json
from specmoe.perf.floor import add_floors
from specmoe.perf.structure import moe_shape
from specmoe.theory import expected_active_experts

KIND = "specmoe-profile"
MAX_SPREAD = 0.10  # interquartile range / median above which a point is measured again
RETRIES = 3
PROFILE_HINT = "make one with `specmoe profile --model DIR --batch 1,2,4 --tokens 1,2,4 --out FILE`"


def profile_model(
    model_dir: str | Path,
    batch_sizes: str | list[int],
    tokens: str | list[int],
    context: int = 64,
    dtype: str | None = None,
    device: str = "cpu",
    repeats: int = 5,
    warmup: int = 2,
    trace_samples: int = 3,
    moe_top_k: int | None = None,
    seed: int = 0,
    passes: int = 1,
    progress=None,
    threads: int | None = None,
    hardware: dict | None = None,
    **load_options,
) -> dict:
    """Load the model at `model_dir` and profile it; returns the profile JSON (a dict).

    `load_options` go to the backend loader (experts_implementation, allow_pickle, ...);
    `progress`, when given, is called with one line of text per batch size; `threads` sets torch's
    and llama.cpp's thread count (default: torch's); `hardware`, a `specmoe hw` result, adds each
    point's bandwidth floor.
    """
    from specmoe.api import load_model

    batch_sizes = parse_counts(batch_sizes, "--batch", maximum=MAX_BATCH)
    tokens = parse_counts(tokens, "--tokens")
    for name, value, least in (
        ("--context", context, 0),
        ("--repeats", repeats, 1),
        ("--warmup", warmup, 0),
        ("trace_samples", trace_samples, 1),
        ("--passes", passes, 1),
    ):
        if value < least:
            raise SpecmoeError(f"{name} must be >= {least}, got {value}")
    if threads is not None:
        if threads < 1:
            raise SpecmoeError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    info = backend_for(model_dir)
    engine = info.name
    if info.sized_at_load:
        # llama.cpp allocates its KV cache up front: size it to the profile, not to 4096 positions
        # per sequence, so that batch 64 fits in memory.
        load_options = _llamacpp_options(load_options) | {
            "n_threads": torch.get_num_threads(),
            "n_ctx": context + max(tokens),
        }
    backend = load_model(model_dir, dtype=dtype, device=device, moe_top_k=moe_top_k, **load_options)
    if context + max(tokens) > backend.max_context:
        raise SpecmoeError(
            f"--context {context} + {max(tokens)} tokens exceeds the model's {backend.max_context} "
            "positions; use a shorter context"
        )
    profile = {
        "schema": SCHEMA,
        "kind": KIND,
        "model": describe_backend(backend, Path(model_dir), moe_top_k),
        "engine": engine,
        "context": context,
        "repeats": repeats,
        "warmup": warmup,
        "passes": passes,
        "settings": {
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            **info.library_versions(),
            "seed": seed,
            "load_average_start": _load_average(),
        },
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "points": [],
    }
    generator = torch.Generator().manual_seed(seed)
    kept: dict[tuple[int, int], dict] = {}
    for _ in range(passes):
        for batch in batch_sizes:
            points = time_batch(backend, batch, tokens, context, repeats, warmup, generator)
            for point in points:
                key = (point["batch"], point["tokens"])
                kept[key] = faster(kept[key], point) if key in kept else point
            if progress:
                progress(
                    f"B={batch}: "
                    + ", ".join(f"t={p['tokens']} {p['median_s'] * 1e3:.2f} ms" for p in points)
                )
    profile["points"] = list(kept.values())
    profile["settings"]["load_average_end"] = _load_average()
    if profile["model"]["is_moe"] and backend.router_trace() is None:
        profile["experts_note"] = f"the {engine} backend exposes no hook on expert selection"
    elif profile["model"]["is_moe"]:
        profile["experts"] = [
            row
            for batch in batch_sizes
            for row in count_experts(
                backend, batch, tokens, context, trace_samples, generator, profile["model"]
            )
        ]
    return profile if hardware is None else add_floors(profile, hardware)


def _llamacpp_options(options: dict) -> dict:
    """The shared loader options minus those only transformers has (off by default)."""
    dropped = ("experts_implementation", "allow_pickle", "trust_remote_code")
    return {k: v for k, v in options.items() if k not in dropped}


def _load_average() -> float | None:
    """The 1-minute load average: above the thread count, other processes competed for the cores."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def describe_backend(backend, path: Path, moe_top_k: int | None = None) -> dict:
    """Name, dtype, MoE shape and weight bytes of a loaded model (transformers or a GGUF file)."""
    model = getattr(backend, "model", None)
    if model is None and backend_for(path).reads_file:
        from specmoe.perf.gguf_bytes import describe_gguf

        return {"name": backend.name, "path": str(path), "device": str(backend.device)} | describe_gguf(
            path, moe_top_k
        )
    config = model.config.to_dict() if model is not None else {}
    experts, top_k = moe_shape(config, where=str(path / "config.json"))
    info = {
        "name": backend.name,
        "path": str(path),
        "dtype": str(getattr(backend, "dtype", "")).removeprefix("torch."),
        "device": str(backend.device),
        "is_moe": experts > 0,
        "num_experts": experts,
        "top_k": top_k,
    }
    if model is not None:
        info.update(weight_bytes(model))
    return info


def weight_bytes(model) -> dict:
    """Bytes of routed-expert weights, of the input embedding table, and of everything else.

    Routed experts are the parameters under an `.experts.` module (transformers' MoE blocks; shared
    experts are named `shared_expert(s)` and count as dense). A token reads one embedding row, so
    the table is reported apart from the dense weights every pass streams in full.
    """
    dense = experts = embedding = 0
    for name, param in model.named_parameters():
        size = param.numel() * param.element_size()
        if ".experts." in name:
            experts += size
        elif "embed_tokens" in name:
            embedding += size
        else:
            dense += size
    return {"bytes_dense": dense, "bytes_experts": experts, "bytes_embedding": embedding}


def _random_ids(generator: torch.Generator, vocab: int, shape: tuple[int, ...]) -> torch.Tensor:
    # id 0 is EOS in the zoo; avoiding it keeps the inputs ordinary text-like ids for any tokenizer.
    return torch.randint(1, vocab, shape, generator=generator)


def time_batch(
    backend,
    batch: int,
    tokens: list[int],
    context: int,
    repeats: int,
    warmup: int,
    generator,
    max_spread: float = MAX_SPREAD,
    retries: int = RETRIES,
) -> list[dict]:
    """Timed forwards [B, t] over a cache of `context` tokens per row, one point per t.

    A point whose spread (interquartile range / median) exceeds `max_spread` is measured again,
    up to `retries` more times, and the attempt with the lowest median is kept: interference from
    other processes only ever slows a pass down. Every attempt's raw times stay in the point.
    """
    prompts = _random_ids(generator, backend.vocab_size, (batch, context)).tolist()
    backend.prefill(prompts)
    blocks = {t: _random_ids(generator, backend.vocab_size, (batch, t)).to(backend.device) for t in tokens}
    for t in tokens:
        for _ in range(warmup):
            _timed_forward(backend, blocks[t], context)
    first: dict[int, list[float]] = {t: [] for t in tokens}
    for _ in range(repeats):
        for t in tokens:
            first[t].append(_timed_forward(backend, blocks[t], context))
    points = []
    for t in tokens:
        attempts = [first[t]]
        while _spread(attempts[-1]) > max_spread and len(attempts) <= retries:
            attempts.append([_timed_forward(backend, blocks[t], context) for _ in range(repeats)])
        points.append(_point(batch, t, attempts))
    return points


def faster(a: dict, b: dict) -> dict:
    """Two measurements of one point: the one with the lower median; the other's times are kept
    among the discarded ones."""
    best, other = (a, b) if a["median_s"] <= b["median_s"] else (b, a)
    discarded = best["discarded_times_s"] + other["times_s"] + other["discarded_times_s"]
    return best | {"attempts": a["attempts"] + b["attempts"], "discarded_times_s": discarded}


def _spread(times: list[float]) -> float:
    """Interquartile range over median: 0 for steady timings, large when some passes were slowed."""
    if len(times) < 2:
        return 0.0
    quartiles = statistics.quantiles(times, n=4)
    return (quartiles[2] - quartiles[0]) / statistics.median(times)


def _timed_forward(backend, block: torch.Tensor, context: int) -> float:
    """Seconds of one forward over block [B, t]; the cache is rolled back to `context` afterwards."""
    backend.synchronize()
    start = time.perf_counter()
    backend.forward(block)
    backend.synchronize()
    elapsed = time.perf_counter() - start
    backend.rollback([context] * block.shape[0])
    return elapsed


def _point(batch: int, tokens: int, attempts: list[list[float]]) -> dict:
    times = min(attempts, key=statistics.median)
    return {
        "batch": batch,
        "tokens": tokens,
        "times_s": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "iqr_rel": _spread(times),
        "attempts": len(attempts),
        "discarded_times_s": [x for attempt in attempts if attempt is not times for x in attempt],
    }


def count_experts(
    backend, batch: int, tokens: list[int], context: int, samples: int, generator, info: dict
) -> list[dict]:
    """Distinct experts per layer for [B, t] passes, mean over `samples` random blocks (untimed)."""
    from specmoe.backends.router_trace import distinct_experts_per_layer

    trace = backend.router_trace()
    if trace is None or not trace.is_moe:
        raise SpecmoeError(
            f"model '{info['name']}' has MoE settings but no router class the trace knows; "
            "add its router class to ROUTER_CLASSES in specmoe/backends/router_trace.py"
        )
    backend.prefill(_random_ids(generator, backend.vocab_size, (batch, context)).tolist())
    rows = []
    for t in tokens:
        per_layer = []
        for _ in range(samples):
            trace.clear()
            with trace:
                backend.forward(_random_ids(generator, backend.vocab_size, (batch, t)).to(backend.device))
            per_layer.append(distinct_experts_per_layer(trace.records[-1:]))
            backend.rollback([context] * batch)
        trace.clear()
        mean_per_layer = [statistics.fmean(layer) for layer in zip(*per_layer, strict=True)]
        rows.append(
            {
                "batch": batch,
                "tokens": t,
                "n_tokens": batch * t,
                "distinct_per_layer": mean_per_layer,
                "distinct_mean": statistics.fmean(mean_per_layer),
                "expected": expected_active_experts(batch * t, info["num_experts"], info["top_k"]),
            }
        )
    return rows


def load_profile(path: Path) -> dict:
    """A profile written by `profile_model`, checked enough for the fit to trust it."""
    profile = read_json(Path(path), (KIND,), PROFILE_HINT)
    points = profile.get("points")
    if not isinstance(points, list) or not points:
        raise SpecmoeError(f"profile '{path}' has no timed points; {PROFILE_HINT}")
    for index, point in enumerate(points):
        problem = _point_problem(point)
        if problem:
            raise SpecmoeError(f"profile '{path}' points[{index}]: {problem}; {PROFILE_HINT}")
    return profile


def _point_problem(point) -> str | None:
    """What makes one profile point unusable by a fit (a time no clock can measure), or None."""
    if not isinstance(point, dict):
        return f"not an object but {type(point).__name__}"
    missing = [k for k in ("batch", "tokens", "median_s") if k not in point]
    if missing:
        return f"no {', '.join(missing)}"
    for key in ("batch", "tokens"):
        if type(point[key]) is not int or point[key] < 1:
            return f"{key} must be a whole number >= 1, got {point[key]!r}"
    seconds = point["median_s"]
    if type(seconds) not in (int, float) or not math.isfinite(seconds) or seconds <= 0:
        return f"median_s must be a finite time > 0 seconds, got {seconds!r}"
    return None
