"""The performance model's prediction of every cell of the study-hybrid-mtp pass, made before it runs.

Each SD configuration is priced as `specmoe advise` prices it from configs (`perf.setup.configured_setup`
and `perf.advise.advise_setup`): the hybrid-trained target's Hugging Face config, its own MTP module
(`--draft mtp`: one decoder layer of the target beside its embeddings and head) or a separate draft's
config (draft-xs, draft-s), the backend's CPU engine profile (`hf-eager-cpu`, `llamacpp-cpu`), and a
hardware file (the shipped
`hw.json` unless probed). Acceptance is the one input the configs do not give: each arm's greedy
acceptance rate at each γ as the zoo's build records it (`ZOO_ACCEPTANCE`, docs/zoo.md; never a run
of this pass), read as a per-position α at that γ.
"""

from __future__ import annotations

from specmoe.errors import SpecmoeError
from specmoe.findings.mtp import predicted_call

# Greedy acceptance rate (accepted / drafted) by γ of the hybrid-trained build, as zoo.json records it
# for the MTP module and draft-xs, and `zoo.agreement.acceptance_by_gamma` gives for draft-s
# (every built-in prompt, 64 new tokens, float32; docs/zoo.md's table).
ZOO_ACCEPTANCE: dict[str, dict[int, float]] = {
    "mtp": {1: 0.70, 2: 0.61, 3: 0.52, 4: 0.47},
    "draft-xs": {1: 0.77, 2: 0.67, 3: 0.59, 4: 0.53},
    "draft-s": {1: 0.79, 2: 0.71, 3: 0.63, 4: 0.58},
}
# Cached tokens before decoding, fixed with the predictions before the pass ran (`report.predicted`
# assumes 64 for a suite's built-in prompts).
PROMPT_TOKENS = 32


def price(spec, hardware) -> dict:
    """One SD configuration as `advise` prices it, at the zoo's recorded acceptance at its γ."""
    from specmoe.perf.drafts import DraftMethod, priced_as
    from specmoe.perf.engines import engine_profile
    from specmoe.perf.setup import configured_setup
    from specmoe.report.predicted import engine_for, zoo_architecture
    from specmoe.theory.speedup import per_token_alpha

    draft = str(spec.draft)
    arm = spec.draft_model.zoo if spec.draft_model is not None else draft
    name = engine_for(spec)
    if name is None:
        raise SpecmoeError(f"no shipped engine profile prices '{spec.target}' on {spec.device}")
    engine = engine_profile(name, hardware.device)
    target = zoo_architecture(spec.target_model, spec.dtype)
    method = priced_as(spec.draft)
    model = None if method is DraftMethod.MTP else zoo_architecture(spec.draft_model, spec.dtype)
    setup = configured_setup(
        target,
        hardware,
        engine,
        method,
        model,
        context=PROMPT_TOKENS + spec.max_new_tokens / 2,
        new_tokens=spec.max_new_tokens,
    )
    rate = ZOO_ACCEPTANCE[arm][spec.gamma]
    alpha = per_token_alpha(rate, spec.gamma)
    gamma, batch = spec.gamma, spec.batch_size
    speedup = setup.speedup(alpha, gamma, batch)
    at_full = setup.speedup(1.0, gamma, batch)
    from specmoe.perf.breakeven import breakeven_alpha, from_alpha

    found = breakeven_alpha(lambda a: setup.speedup(a, gamma, batch))
    return {
        "target": str(spec.target),
        "draft": draft,  # as the suite names it
        "arm": arm,  # the zoo model it runs ("mtp": the target's own module)
        "backend": spec.target_model.backend,
        "gamma": gamma,
        "batch": batch,
        "alpha": round(alpha, 4),
        "rate": rate,
        "speedup": round(float(speedup), 4),
        "at_full": round(float(at_full), 4),
        "breakeven_rate": None if found is None else round(from_alpha(found, gamma).rate, 4),
        "engine": name,
    }


def predict_mtp_step(suite, hardware: dict, where: str) -> list[dict]:
    """One record per SD configuration of `suite`, in suite order."""
    from specmoe.perf.hardware import parse_hardware
    from specmoe.suite.expand import expand

    parsed = parse_hardware(hardware, where)
    seen, cells = set(), []
    for spec in expand(suite):
        if spec.arm == "sd" and spec.cell_key not in seen:
            seen.add(spec.cell_key)
            cells.append(price(spec, parsed))
    return cells


def mtp_predicted_verdicts(cells: list[dict]) -> dict[str, str]:
    """The rules read on the point predictions, per batch size: what the model expects them to decide."""
    found: dict[str, str] = {}
    for backend in sorted({c["backend"] for c in cells}):
        for batch in sorted({c["batch"] for c in cells}):
            prices = {
                (c["arm"], c["gamma"]): c["speedup"]
                for c in cells
                if c["batch"] == batch and c["backend"] == backend
            }
            found[f"{backend} B{batch}"] = predicted_call(prices)
    return found
