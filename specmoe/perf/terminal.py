"""Plain-text renderings of fits, predictions and advice for the terminal."""

from __future__ import annotations

_UNITS = {"knee_tokens": "tokens", "sharpness": "", "kv_knee_tokens": "tokens"}


def _constant(name: str, entry: dict) -> str:
    value, std = entry["value"], entry["std"]
    unit = _UNITS.get(name, "ms")
    scale = 1e3 if unit == "ms" else 1.0
    if entry["at_bound"]:  # the Jacobian's spread means nothing at a bound
        return f"  {name:<12} {value * scale:10.4g} {unit} (at its bound)"
    spread = f" ± {std * scale:.3g}" if std is not None else " ± n/a"
    return f"  {name:<12} {value * scale:10.4g}{spread} {unit}"


def format_fit(fit: dict) -> str:
    q = fit["quality"]
    lines = [
        f"fit of {fit['model'].get('name', '?')} ({fit['model'].get('dtype', '?')}, "
        f"context {fit['context']}): {q['fit_points']} points fitted, {q['heldout_points']} held out",
        *(_constant(name, entry) for name, entry in fit["parameters"].items()),
        f"  fitted points   median |err| {q['fit_median_abs_rel']:.1%}, worst {q['fit_worst_abs_rel']:.1%}",
    ]
    if q["heldout_points"]:
        lines.append(
            f"  held-out points median |err| {q['heldout_median_abs_rel']:.1%}, "
            f"worst {q['heldout_worst_abs_rel']:.1%}"
        )
    return "\n".join(lines)


def format_prediction(prediction: dict) -> str:
    alphas = list(prediction["rows"][0]["speedup"]) if prediction["rows"] else []
    title = f"target {prediction['target']}"
    if not prediction["fitted"]:
        title = f"UNFITTED first-principles estimate (no timing), context {prediction['context']}: {title}"
    draft = prediction["draft"] or "none (draft cost 0: an upper bound)"
    header = f"{'B':>5} {'γ':>3} {'T(B,1) ms':>10} {'T(B,γ+1) ms':>12} {'T_D ms':>8} {'η':>6} " + " ".join(
        f"{'S@α=' + a:>9}" for a in alphas
    )
    lines = [title, f"draft {draft}", header]
    for row in prediction["rows"]:
        speedups = " ".join(f"{row['speedup'][a]:9.2f}" for a in alphas)
        mark = "  *" if row["extrapolated"] else ""
        lines.append(
            f"{row['batch']:>5} {row['gamma']:>3} {row['target_1_s'] * 1e3:10.3f} "
            f"{row['target_verify_s'] * 1e3:12.3f} {row['draft_s'] * 1e3:8.3f} {row['efficiency']:6.2f} "
            f"{speedups}{mark}"
        )
    if any(row["extrapolated"] for row in prediction["rows"]):
        lines.append("* outside the profiled (B, t) grid: extrapolated")
    return "\n".join(lines)


def format_advice(advice: dict) -> str:
    lines = [f"target {advice['target']}" + ("" if advice["fitted"] else " (UNFITTED)")]
    error = advice.get("fit_error")
    if error is not None:
        lines.append(
            f"the fit misses its held-out points by a median {error:.1%}: each speedup carries a band "
            f"of ×/÷ {1 + 2 * error:.2f}"
            + (" (a poor fit: profile more points, or a quieter machine)" if error > 0.10 else "")
        )
    for row in advice["rows"]:
        best = row["best"]
        choice = f"{best['draft']} (α={best['alpha']:g}), γ={best['gamma']}"
        note = " [extrapolated]" if best["extrapolated"] else ""
        if "band" in row:
            low, high = row["band"]
            note += f" [{low:.3g}–{high:.3g}x within the fit's error]"
        if row.get("within_error"):
            lines.append(
                f"B={row['batch']:<4} too close to call: {choice} is predicted at {best['speedup']:.3g}x, "
                f"and the fit's error reaches both sides of 1x; measure it{note}"
            )
        elif row["pays"]:
            lines.append(
                f"B={row['batch']:<4} use {choice}: predicted speedup {best['speedup']:.3g}x, "
                f"target efficiency {best['efficiency']:.2f}{note}"
            )
        else:
            lines.append(
                f"B={row['batch']:<4} SD will not pay: the best choice, {choice}, is predicted at "
                f"{best['speedup']:.3g}x (< 1); decode without a draft{note}"
            )
    return "\n".join(lines)


def _acceptance_text(acc: dict | None) -> str:
    if acc is None:
        return "no acceptance (even full acceptance stays below 1× by the point estimate)"
    return f"α {acc['alpha']:.2f} = rate {acc['rate']:.0%} = τ {acc['tau']:.2f}"


def format_setup_advice(advice: dict) -> str:
    """The answer from configs: per batch size a verdict, the best γ, its break-even acceptance in
    the three definitions and, with a stated acceptance, the predicted speedup and its band."""
    stated = advice["stated_alpha"]
    shape = ""
    if advice.get("block"):
        shape = f", one forward per block of {advice['block']} positions ({advice['block'] - 1} proposals)"
    elif advice["verify_tokens"]:
        shape = f", tree of {advice['verify_tokens']} tokens, width {advice['tree_width']}"
    lines = [
        f"target   {advice['target']}",
        f"drafter  {advice['drafter']}{shape}",
        f"UNFITTED: first principles + the '{advice['engine']}' engine profile "
        f"(band {advice['band']}); context {advice['context']:g} tokens"
        + (
            f"; {advice['output_tokens']} output tokens per sequence"
            if advice.get("output_tokens")
            else "; a long decode (steady state)"
        ),
        "break-even: the acceptance at which SD matches plain decoding (α per position; "
        "rate = accepted/drafted; τ = mean accepted length incl. the bonus token)",
    ]
    if advice.get("measured_step"):
        step = advice["measured_step"]
        if step.get("scale", 1.0) != 1.0:
            charged = (
                f"every forward of the target and the drafter is multiplied by {step['scale']:.2f}, so "
                "the time the model does not explain grows with the pass"
            )
        elif step["added_per_pass_s"] > 0:
            charged = (
                f"the {step['added_per_pass_s'] * 1e3:.2f} ms the model does not explain is charged to every "
                "target pass"
            )
        else:
            charged = "no longer than the model's own step, which is kept"
        lines.insert(
            3,
            f"measured: a plain step of {step['seconds'] * 1e3:.2f} ms at B={step['batch']}; {charged} "
            "(docs/results/calibration/measured-step-check.md)",
        )
    if advice.get("offloaded_moe_layers"):
        lines.insert(
            3,
            f"offload: the routed experts of {advice['offloaded_moe_layers']} MoE layers sit in host "
            "memory; a pass of fewer than 32 tokens runs the N(t) experts it wakes on the CPU, a larger "
            "one copies them to the device (specmoe/perf/offload.py)",
        )
    if advice.get("link_kind") == "network" and advice.get("devices", 1) > 1:
        lines.insert(
            3,
            f"network: {advice['devices']} devices over a network link; its all-reduces are priced from the "
            "hardware file's link bandwidth and latency, first principles no published row has checked",
        )
    if advice.get("hybrid_rollback"):
        lines.insert(
            3,
            f"hybrid: every round rolls the linear-attention state back by the engine's method, "
            f"'{advice['hybrid_rollback']}' (priced per round: specmoe/perf/rollback.py)",
        )
    for row in advice["rows"]:
        best = row["best"]
        head = (
            f"B={row['batch']:<4} {row['verdict']:<22} γ={best['gamma']:<2} "
            f"pays above {_acceptance_text(best['breakeven'])}"
        )
        if stated is not None:
            low, high = best["band"]
            acc = best["acceptance"]
            head += (
                f"; at τ {acc['tau']:.2f} (rate {acc['rate']:.0%}): {best['speedup']:.2f}x "
                f"[{low:.2f}, {high:.2f}]"
            )
        lines.append(head)
        lines.append(
            f"       plain step {row['target_1_s'] * 1e3:.2f} ms; target efficiency at γ={best['gamma']}: "
            f"{best['efficiency']:.2f}; at full acceptance {best['speedup_at_full_acceptance']:.2f}x"
        )
    return "\n".join(lines)
