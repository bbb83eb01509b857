"""The demo's closing paragraph: the two studies' claims answered in one run's numbers.

Built from the run's accounts (`specmoe.report.story`) and the performance model's calls made before
it ran (`specmoe.report.predicted`), nothing else: where SD paid and why (for an MoE target, what a
verify cost against the experts it wakes beyond a step's, MoESD's account of why batch helps),
where it lost and why, whether batch helped SD on the MoE more than on the dense target (MoESD's
claim), how the model's calls compared with the verdicts, and the audit of the study's rows.

The model's call and the verdict use one vocabulary: "expected to pay" (GO) matches SD paying,
"expected to lose" (NO-GO) SD losing, and "too close to call" (DEPENDS) SD breaking about even.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from specmoe.perf.breakeven import Verdict
from specmoe.report.predicted import CALLS, Prediction, acceptance_call
from specmoe.report.story import CellAccount, Outcome, label, outcome
from specmoe.report.summary_table import speedup_text
from specmoe.theory import expected_active_experts

MATCHES = {Verdict.GO: Outcome.PAYS, Verdict.NO_GO: Outcome.LOSES, Verdict.DEPENDS: Outcome.EVEN}
HEADINGS = {
    Outcome.PAYS: "Where SD paid here, and why:",
    Outcome.LOSES: "Where it lost, and why:",
    Outcome.EVEN: "Where it broke about even:",
}
INTRO = (
    "What this run says about the two studies, in its own numbers, each beside the performance "
    "model's call made before measuring:"
)


def prediction_of(account: CellAccount, predictions: Mapping[str, Prediction]) -> Prediction | None:
    return predictions.get(str(account.config.get("cell_key")))


def called(p: Prediction | None) -> str:
    """ "predicted 1.79×, expected to pay", or for a draft of unknown acceptance its call alone."""
    if p is None:
        return "no prediction"
    if p.speedup is not None:
        return f"predicted {p.speedup:.2f}×, {CALLS[p.verdict]}"
    return f"predicted: {acceptance_call(p)}"


def experts_woken(shape: tuple[int, int], top_k: int | None, gamma: int, batch: int) -> str:
    """What a verify wakes beyond a step's, under MoESD's uniform-routing account."""
    num_experts, k = shape[0], top_k or shape[1]
    step = float(expected_active_experts(batch, num_experts, k))
    verify = float(expected_active_experts(batch * (gamma + 1), num_experts, k))
    return (
        f"where a step of B={batch} wakes {step:.1f} of {num_experts} experts a layer and the verify "
        f"{verify:.1f}, {verify / step:.1f}× as many (uniform routing)"
    )


def reason(account: CellAccount, experts: Mapping[str, tuple[int, int]]) -> str:
    """Why, from the round's measured costs: what the verify cost against what it reads beyond a
    step (for an MoE target, the experts it wakes), the drafts' cost, what the round emitted."""
    cost, config = account.cost, account.config
    if cost is None or account.emitted_per_round is None:
        return "its runs time no rounds"
    gamma, batch = cost.gamma, int(config.get("batch_size") or 1)
    verify = f"a verify of {gamma + 1} tokens a sequence cost {cost.verify:.2f} plain steps"
    shape = experts.get(str(config.get("target")))
    if shape is not None:
        verify += " " + experts_woken(shape, config.get("moe_top_k"), gamma, batch)
    else:
        verify += " (a dense step already reads every weight, so the extra tokens add compute alone)"
    rounds = (
        f"{verify}; the {gamma} draft steps cost {cost.draft:.2f} more, so a round cost {cost.total:.2f} "
        f"steps for {account.emitted_per_round:.2f} tokens"
    )
    return f"{lead(account)}{rounds}"


def lead(account: CellAccount) -> str:
    """What weighed most in a round that did not pay: too little accepted, or drafts dearer than
    the verify; "" for a round that paid or where neither stands out."""
    cost, rate = account.cost, account.comparison.acceptance_rate
    if cost is None or outcome(account.comparison.speedup) is Outcome.PAYS:
        return ""
    if rate == rate and rate < LOW_ACCEPTANCE:
        return f"only {rate:.0%} of proposals were accepted: "
    if cost.draft > cost.verify:
        return "the drafts cost more than the verify: "
    return ""


LOW_ACCEPTANCE = 0.2  # below this share of proposals accepted, too little is accepted to say more


def item(account: CellAccount, predictions: Mapping[str, Prediction], experts: Mapping) -> str:
    c = account.comparison
    busy = " (BUSY: measured while other processes used the CPU)" if c.busy else ""
    speed = speedup_text(c.speedup, c.prompts, c.copies)
    return (
        f"  - {label(c.config)}: {speed}{busy} ({called(prediction_of(account, predictions))}): "
        f"{reason(account, experts)}."
    )


def measured(found: Sequence[CellAccount]) -> list[CellAccount]:
    return [a for a in found if not a.comparison.no_number and not a.comparison.impossible]


def batch_claim(found: Sequence[CellAccount], experts: Mapping[str, tuple[int, int]]) -> list[str]:
    """MoESD's claim in this run: SD's speedup gains more from batch on the MoE than on a dense
    target. Each target's change from its smallest batch to its largest, same draft and γ."""
    series: dict[tuple, list[CellAccount]] = {}
    for account in measured(found):
        config = account.config
        key = (str(config.get("target")), str(config.get("draft")), config.get("gamma"))
        series.setdefault(key, []).append(account)
    trends = {}
    for key, accounts in series.items():
        ordered = sorted(accounts, key=lambda a: a.config.get("batch_size") or 0)
        if len({a.config.get("batch_size") for a in ordered}) > 1:
            trends[key] = (ordered[0], ordered[-1])
    moe = [k for k in trends if k[0] in experts]
    dense = [k for k in trends if k[0] not in experts]
    if not moe or not dense:
        return []
    parts = []
    for key in (*moe, *dense):
        first, last = trends[key]
        parts.append(
            f"{key[0]} + {key[1]}, γ={key[2]}, from {first.comparison.speedup.value:.2f}× at "
            f"B={first.config['batch_size']} to {last.comparison.speedup.value:.2f}× at "
            f"B={last.config['batch_size']}"
        )

    def gain(key: tuple) -> float:
        first, last = trends[key]
        return last.comparison.speedup.value / first.comparison.speedup.value

    least_moe, most_dense = min(gain(k) for k in moe), max(gain(k) for k in dense)
    if least_moe > 1.0 and least_moe > most_dense:
        verdict = "holds here"
    elif least_moe > most_dense:
        verdict = "holds only in part here (batch cost the MoE's SD less than the dense model's, " + (
            "but did not raise it)"
        )
    else:
        verdict = "does not hold here"
    return [
        "",
        "MoESD's claim, that batch helps SD on a sparse MoE more than on a dense model, "
        f"{verdict}: the speedup moved {'; '.join(parts)} (each a point estimate; the intervals are above).",
    ]


def model_record(found: Sequence[CellAccount], predictions: Mapping[str, Prediction]) -> list[str]:
    """How the calls made before measuring compared with the verdicts, and the predicted speedups
    with the measured ones (the model's relative error, where it priced a speedup)."""
    pairs = [(a, p) for a in measured(found) if (p := prediction_of(a, predictions)) is not None]
    if not pairs:
        return []
    right = sum(1 for a, p in pairs if MATCHES[p.verdict] is outcome(a.comparison.speedup))
    errors = [
        p.speedup / a.comparison.speedup.value - 1
        for a, p in pairs
        if p.speedup is not None and a.comparison.speedup.value > 0
    ]
    line = f"The model's calls before measuring matched {right} of {len(pairs)} verdicts"
    if errors:
        above = sum(1 for e in errors if e > 0)
        line += (
            f"; a predicted speedup was a median {abs(statistics.median(errors)):.0%} "
            f"{'above' if statistics.median(errors) > 0 else 'below'} the measured one (above it in "
            f"{above} of {len(errors)}): first principles from configs, a bandwidth probe and an engine "
            "profile, nothing fitted to this run"
        )
    return ["", line + "."]


def closing_lines(
    found: Sequence[CellAccount],
    predictions: Mapping[str, Prediction],
    experts: Mapping[str, tuple[int, int]],
    audit: str | None = None,
) -> list[str]:
    """The closing paragraph (see the module docstring); `audit` is the study audit's line."""
    lines = ["", INTRO]
    by_outcome = {o: [a for a in measured(found) if outcome(a.comparison.speedup) is o] for o in Outcome}
    for verdict in (Outcome.PAYS, Outcome.LOSES, Outcome.EVEN):
        if by_outcome[verdict]:
            lines += ["", HEADINGS[verdict], *(item(a, predictions, experts) for a in by_outcome[verdict])]
    if not by_outcome[Outcome.PAYS]:
        lines += ["", "SD paid in none of this run's configurations."]
    lines += batch_claim(found, experts)
    lines += model_record(found, predictions)
    if audit:
        lines += ["", audit]
    return lines
