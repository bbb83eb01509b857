"""Performance-model validation on the bench zoo, on this machine. Not a test: prints figures, writes JSON.

    python -m benchmarks.perf_model.perf_model --zoo /tmp/zoo-bench --out docs/results/cpu [--reuse]

In bfloat16 (the main validation) and float32 (to compare with harness.json, measured in float32):
1. `specmoe hw` numbers for this CPU.
2. Profiles T(B, t) of the MoE target and dense-s over B ∈ {1,2,4,8,16} × t ∈ {1,2,3,4,5,8} at a
   64-token context, and of the draft-xs draft at t ∈ {1, 2} (a draft round's first step
   carries two tokens). Each profile waits for a quiet machine
   (1-minute load average < 0.6) and is measured again when the load says another process ran.
3. A fit per model on at most 21 of its 30 points; the other 9 are held out. Median and worst
   |relative error| on each set, and a predicted-vs-measured plot (perf_model_fit.png).
4. The MoE profiled again with top-k 1 and 16 on a small grid, predicted from the top-4 fit with
   only K changed (the sparsity what-if, checked against measurements).
5. Predicted oracle speedups at B = 1, γ = 4, α ∈ {0, 1} next to the end-to-end ones in
   harness.json, and the predicted speedup against batch size for MoE, dense and several top-k
   (perf_model_speedup.png).
6. The first-principles (UNFITTED) prediction from the measured hardware and the zoo configs,
   against the measured times, to show what the fitted constants add.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from specmoe.perf.files import write_json
from specmoe.perf.firstprinciples import load_config, unfitted_model
from specmoe.perf.fit import fit_profile
from specmoe.perf.hardware import measure_hardware, parse_hardware
from specmoe.perf.model import forward_time
from specmoe.perf.predict import (
    ModelTimes,
    ProfileTimes,
    draft_step_s,
    fit_times,
    profile_times,
    with_top_k,
)
from specmoe.perf.profile import load_profile, profile_model
from specmoe.theory import sd_speedup

BATCHES = [1, 2, 4, 8, 16]
TOKENS = [1, 2, 3, 4, 5, 8]
SPARSITY_BATCHES = [1, 4, 16]
SPARSITY_TOKENS = [1, 2, 5]
TOP_KS = (1, 16)
CONTEXT = 64
WIDE_BATCHES = [32, 64]
WIDE_TOKENS = [1, 2, 3, 5]
CHECK_GAMMAS = (1, 2, 4)  # verify passes of 2, 3 and 5 tokens: measured at every batch size
HARNESS_DTYPE = "float32"  # harness.json's oracle runs
SPEEDUP_BATCHES = [1, 2, 4, 8, 16, 32, 64]


def log(line: str) -> None:
    print(line, flush=True)


def wait_for_quiet(threshold: float = 0.6, poll_s: float = 10.0, max_wait_s: float = 1800.0) -> float:
    """Wait until the 1-minute load average falls below `threshold` (nothing else running), or give
    up after max_wait_s. Returns the load average when the wait ended."""
    deadline = time.monotonic() + max_wait_s
    while os.getloadavg()[0] >= threshold and time.monotonic() < deadline:
        time.sleep(poll_s)
    return os.getloadavg()[0]


def profile(zoo: Path, label: str, name: str, batches, tokens, dtype: str, repeats: int, **options) -> dict:
    """Profile one model on a quiet machine: wait for quiet, and measure again (up to twice) when the
    load average says another process competed for the cores meanwhile."""
    for attempt in (1, 2, 3):
        load = wait_for_quiet()
        start = time.perf_counter()
        result = profile_model(zoo / name, batches, tokens, CONTEXT, dtype=dtype, repeats=repeats, **options)
        result["settings"]["attempts"] = attempt
        end_load = result["settings"]["load_average_end"]
        if end_load <= result["settings"]["threads"] + 0.6:
            break
        log(f"{label}: load average {load:.2f} -> {end_load:.2f} (another process ran); measuring again")
    seconds = time.perf_counter() - start
    log(f"profiled {label}: {len(result['points'])} points in {seconds:.0f} s")
    return result


def errors_against(target: ModelTimes, measured: dict) -> dict:
    """|relative error| of `target`'s predictions at every point of a measured profile."""
    rows = [
        {
            "batch": p["batch"],
            "tokens": p["tokens"],
            "measured_s": p["median_s"],
            "predicted_s": target.time(p["batch"], p["tokens"]),
        }
        for p in measured["points"]
    ]
    errors = [abs(r["predicted_s"] / r["measured_s"] - 1) for r in rows]
    return {"median_abs_rel": statistics.median(errors), "worst_abs_rel": max(errors), "points": rows}


def best_speedup(target, draft, batch: int, alpha: float, gammas=range(1, 8)) -> tuple[float, int]:
    """(speedup, γ) of the best γ among `gammas` at this batch size."""
    t1 = target.time(batch, 1)
    return max(
        (sd_speedup(alpha, g, t1, target.time(batch, g + 1), draft_step_s(draft, batch, g)), g)
        for g in gammas
    )


def plot_fit(fits: dict[str, dict], path: Path) -> None:
    """Predicted against measured T(B, t), one panel per fit; circles fitted, triangles held out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    columns = 2
    rows = (len(fits) + 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.6 * rows), squeeze=False)
    for ax, (name, fit) in zip(axes.flat, fits.items(), strict=False):
        for used, marker, label in ((True, "o", "fitted"), (False, "^", "held out")):
            points = [r for r in fit["points"] if r["used"] is used]
            ax.scatter(
                [r["measured_s"] * 1e3 for r in points],
                [r["predicted_s"] * 1e3 for r in points],
                c=[np.log2(r["batch"]) for r in points],
                cmap="viridis",
                marker=marker,
                label=label,
                vmin=0,
                vmax=4,
            )
        lo = min(r["measured_s"] for r in fit["points"]) * 1e3 * 0.8
        hi = max(r["measured_s"] for r in fit["points"]) * 1e3 * 1.2
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for factor in (1.05, 1 / 1.05):
            ax.plot([lo, hi], [lo * factor, hi * factor], "k:", lw=0.6)
        ax.set(xscale="log", yscale="log", xlabel="measured T(B,t) [ms]", ylabel="predicted [ms]")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            axis.set_minor_formatter(NullFormatter())
        q = fit["quality"]
        ax.set_title(
            f"{name}: held-out |err| median {q['heldout_median_abs_rel']:.1%}, "
            f"worst {q['heldout_worst_abs_rel']:.1%}",
            fontsize=9,
        )
        ax.legend(title="colour: log2 B; dotted ±5%", fontsize=8, title_fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_speedup(curves: dict[str, dict], path: Path, dtype: str) -> None:
    """Predicted best speedup against batch size: MoE against dense, and the top-k sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    panels = (
        ("MoE against dense", lambda label: "what-if" not in label),
        ("MoE top-k, 64 experts", lambda label: label.startswith("moe")),
    )
    for ax, (title, keep) in zip(axes, panels, strict=True):
        for label, curve in curves.items():
            if keep(label):
                ax.plot(curve["batch"], curve["speedup"], marker="o", label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axvspan(16, 64, color="0.92", label="extrapolated (B > 16)")
        ax.set(xscale="log", xlabel="batch size B", title=f"{title}, {dtype}")
        ax.set_xticks(SPEEDUP_BATCHES, labels=[str(b) for b in SPEEDUP_BATCHES])
        ax.legend(fontsize=8)
    axes[0].set_ylabel("predicted SD speedup, best γ ≤ 7 (α = 0.8, draft-xs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def measure_all(args, dtypes: tuple[str, ...]) -> dict[str, dict]:
    """Every profile the report needs, named model-dtype; reused from --out with --reuse."""
    profiles = {}
    for dtype in dtypes:
        plan = {
            "moe": ("moe", BATCHES, TOKENS, {}),
            "dense-s": ("dense-s", BATCHES, TOKENS, {}),
            "draft-xs": ("draft-xs", BATCHES, [1, 2], {}),
            **{f"moe-top{k}": ("moe", SPARSITY_BATCHES, SPARSITY_TOKENS, {"moe_top_k": k}) for k in TOP_KS},
        }
        if dtype == args.dtype:  # beyond the grid, to check the extrapolated speedups
            plan |= {
                "moe-wide": ("moe", WIDE_BATCHES, WIDE_TOKENS, {}),
                "dense-s-wide": ("dense-s", WIDE_BATCHES, WIDE_TOKENS, {}),
                "draft-xs-wide": ("draft-xs", WIDE_BATCHES, [1, 2], {}),
            }
        for name, (model, batches, tokens, options) in plan.items():
            path = args.out / "perf_profiles" / f"{name}-{dtype}.json"
            if args.reuse and path.is_file():
                profiles[f"{name}-{dtype}"] = load_profile(path)
                continue
            result = profile(
                args.zoo, f"{name}-{dtype}", model, batches, tokens, dtype, args.repeats, **options
            )
            profiles[f"{name}-{dtype}"] = result
            write_json(path, result)
    return profiles


def sparsity_check(moe: ModelTimes, profiles: dict, dtype: str) -> dict:
    """The top-4 fit with K changed, against profiles measured at that K."""
    checks = {}
    for k in TOP_KS:
        what_if = ModelTimes(f"moe top-{k}", moe.constants, with_top_k(moe.shape, k, "moe"), CONTEXT, True)
        checks[f"top{k}"] = check = errors_against(what_if, profiles[f"moe-top{k}-{dtype}"])
        log(
            f"{dtype} top-{k} from the top-4 fit: median {check['median_abs_rel']:.1%}, "
            f"worst {check['worst_abs_rel']:.1%}"
        )
    return checks


def harness_comparison(harness: dict, moe: ModelTimes, draft: ProfileTimes) -> dict:
    """Predicted oracle speedups at B = 1, γ = 4 against the end-to-end ones harness.json measured."""
    comparison = {}
    t1, t5, td = moe.time(1, 1), moe.time(1, 5), draft_step_s(draft, 1, 4)
    for key, alpha in (("oracle:0.0", 0.0), ("oracle:1.0", 1.0)):
        measured = harness[key]
        predicted = sd_speedup(alpha, 4, t1, t5, td)
        comparison[key] = {
            "predicted_speedup": predicted,
            "measured_speedup": measured["measured_speedup"],
            "predicted_over_measured": predicted / measured["measured_speedup"],
            "predicted_T11_ms": t1 * 1e3,
            "harness_T11_ms": measured["T11_ms"],
            "predicted_T15_ms": t5 * 1e3,
            "harness_T15_ms": measured["T15_ms"],
            "profiled_T_draft_ms": td * 1e3,
            "harness_T_draft_ms": measured["T_draft_ms"],
        }
        log(f"{key}: predicted {predicted:.3f}x, harness measured {measured['measured_speedup']:.3f}x")
    return comparison


def speedup_curves(moe: ModelTimes, dense: ModelTimes, draft: ModelTimes) -> dict:
    """Best predicted speedup (γ ≤ 7, α = 0.8) against B for the MoE, dense-s and other top-k."""
    targets = {"moe K=4 (as built)": moe, "dense-s": dense}
    for k in (1, 2, 8, 16):
        shape = with_top_k(moe.shape, k, "moe")
        targets[f"moe K={k} (what-if)"] = ModelTimes(f"K={k}", moe.constants, shape, CONTEXT, True, moe.grid)
    curves = {}
    for label, target in targets.items():
        best = [best_speedup(target, draft, b, 0.8) for b in SPEEDUP_BATCHES]
        curves[label] = {
            "batch": SPEEDUP_BATCHES,
            "speedup": [s for s, _ in best],
            "gamma": [g for _, g in best],
        }
        pairs = ", ".join(f"B={b}: {s:.2f}x (γ={g})" for b, (s, g) in zip(SPEEDUP_BATCHES, best, strict=True))
        log(f"{label}: {pairs}")
    return curves


def extrapolation_check(times: dict, profiles: dict, dtype: str) -> dict:
    """Forward times predicted beyond the profiled grid (B = 32, 64) against measurements there."""
    out = {}
    for name in ("moe", "dense-s"):
        out[name] = check = errors_against(times[f"{name}-{dtype}"], profiles[f"{name}-wide-{dtype}"])
        log(
            f"{name} beyond the grid: |err| median {check['median_abs_rel']:.1%}, "
            f"worst {check['worst_abs_rel']:.1%}"
        )
    return out


def speedup_check(times: dict, profiles: dict, dtype: str, alpha: float = 0.8) -> dict:
    """Best speedup over γ ∈ {1, 2, 4} per B, predicted by the fits against the one computed from the
    measured times (target and draft profiles, B = 1..64), both with `sd_speedup` at the same α."""
    out = {}
    for name in ("moe", "dense-s"):
        rows = []
        for batch in SPEEDUP_BATCHES:
            wide = "-wide" if batch > max(BATCHES) else ""
            target = profile_times(profiles[f"{name}{wide}-{dtype}"], name)
            draft = profile_times(profiles[f"draft-xs{wide}-{dtype}"], "draft-xs")

            measured = best_speedup(target, draft, batch, alpha, CHECK_GAMMAS)
            fits = times[f"{name}-{dtype}"], times[f"draft-xs-{dtype}"]
            predicted = best_speedup(*fits, batch, alpha, CHECK_GAMMAS)
            rows.append(
                {
                    "batch": batch,
                    "from_measured": measured[0],
                    "gamma_measured": measured[1],
                    "predicted": predicted[0],
                    "gamma_predicted": predicted[1],
                }
            )
        out[name] = rows
        pairs = ", ".join(f"B={r['batch']}: {r['predicted']:.2f}x vs {r['from_measured']:.2f}x" for r in rows)
        log(f"{name} speedup at α = {alpha}, predicted vs from measured times: {pairs}")
    return out


def first_principles(zoo: Path, hardware: dict, profiles: dict, dtype: str) -> dict:
    """The UNFITTED prediction from measured hardware and the zoo configs, against measurements."""
    out = {}
    measured_hw = parse_hardware(hardware, "measured hardware")
    for name in ("moe", "dense-s"):
        arch = load_config(zoo / name / "config.json", dtype)
        constants, shape = unfitted_model(arch, measured_hw, "measured hardware")
        check = errors_against(
            ModelTimes(name, constants, shape, CONTEXT, False), profiles[f"{name}-{dtype}"]
        )
        ratios = [r["measured_s"] / r["predicted_s"] for r in check["points"]]
        out[name] = {
            "median_measured_over_predicted": statistics.median(ratios),
            "range_measured_over_predicted": [min(ratios), max(ratios)],
            "T11_predicted_ms": forward_time(constants, shape, 1, 1, CONTEXT) * 1e3,
        }
        log(f"{name} unfitted ({dtype}): measured / predicted median {statistics.median(ratios):.2f}x")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("docs/results/cpu"))
    parser.add_argument("--dtype", default="bfloat16", help="dtype of the main validation")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--reuse", action="store_true", help="load profiles already in --out; measure the rest"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    out, main_dtype = args.out, args.dtype
    dtypes = tuple(dict.fromkeys((main_dtype, HARNESS_DTYPE)))
    report: dict = {"main_dtype": main_dtype, "dtypes": dtypes, "context": CONTEXT}

    hw_path = out / "perf_hw.json"
    hardware = json.loads(hw_path.read_text()) if args.reuse and hw_path.is_file() else None
    if hardware is None:
        wait_for_quiet()
        hardware = measure_hardware("cpu", read_mib=512)
        write_json(hw_path, hardware)
    report["hardware"] = {k: hardware[k] for k in ("bandwidth_bytes_per_s", "flops_per_s")}
    log(f"hw: {hardware['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, {hardware['flops_per_s']}")

    profiles = measure_all(args, dtypes)
    report["profile_seconds"] = {
        name: sum(sum(p["times_s"]) + sum(p["discarded_times_s"]) for p in data["points"])
        for name, data in profiles.items()
    }
    fits = {}
    for dtype in dtypes:
        for name in ("moe", "dense-s", "draft-xs"):
            key = f"{name}-{dtype}"
            fits[key] = fit = fit_profile(profiles[key], where=key)
            write_json(out / "perf_fits" / f"{key}.json", fit)
            report[f"fit_{key}"] = {"quality": fit["quality"], "parameters": fit["parameters"]}
            q = fit["quality"]
            held = (
                f"held-out median {q['heldout_median_abs_rel']:.1%} worst {q['heldout_worst_abs_rel']:.1%}"
                if q["heldout_points"]
                else "no held-out points"
            )
            fitted = f"fitted median {q['fit_median_abs_rel']:.1%} worst {q['fit_worst_abs_rel']:.1%}"
            log(f"{key}: {fitted}; {held}")
    plot_fit({k: v for k, v in fits.items() if not k.startswith("draft")}, out / "perf_model_fit.png")

    times = {key: fit_times(fit, key) for key, fit in fits.items()}
    report["experts_measured_vs_expected"] = [
        {k: row[k] for k in ("batch", "tokens", "n_tokens", "distinct_mean", "expected")}
        for row in profiles[f"moe-{main_dtype}"]["experts"]
    ]
    report["sparsity_check"] = {d: sparsity_check(times[f"moe-{d}"], profiles, d) for d in dtypes}

    harness_path = out / "harness.json"
    if harness_path.is_file():
        report["harness_comparison"] = harness_comparison(
            json.loads(harness_path.read_text())["oracle"],
            times[f"moe-{HARNESS_DTYPE}"],
            profile_times(profiles[f"draft-xs-{HARNESS_DTYPE}"], "draft-xs"),
        )

    curves = speedup_curves(
        times[f"moe-{main_dtype}"], times[f"dense-s-{main_dtype}"], times[f"draft-xs-{main_dtype}"]
    )
    report["speedup_vs_batch_alpha0.8"] = curves
    report["extrapolation_check"] = extrapolation_check(times, profiles, main_dtype)
    report["speedup_check_alpha0.8"] = speedup_check(times, profiles, main_dtype)
    plot_speedup(curves, out / "perf_model_speedup.png", main_dtype)
    report["first_principles"] = first_principles(args.zoo, hardware, profiles, main_dtype)

    report["wall_s"] = time.perf_counter() - started
    write_json(out / "perf_model.json", report)
    log(f"done in {report['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
