"""`advise --emit`: the best draft length per batch size in an engine's own configuration syntax.

The advice (`specmoe.perf.advise.advise_setup`, at a stated acceptance) gives per batch size the
γ with the highest predicted speedup and its band; here it becomes what a user pastes:

    vllm      one `--speculative-config` JSON for every batch size: `num_speculative_tokens` and
              the batch-size table `num_speculative_tokens_per_batch_size`, entries
              [first batch, last batch, K] with K = 0 turning speculation off in that range
              (vllm/config/speculative.py; vllm/v1/spec_decode/dynamic/utils.py validates the
              table: ranges sorted, the first starting at 1, batch sizes past the last range
              keep its K)
    sglang    one launch line per batch size: SGLang's `--speculative-*` flags hold for a
              server's lifetime (`--speculative-adaptive` follows acceptance, not batch size),
              so each expected batch size gets its own server flags (python/sglang/srt/
              server_args.py; docs/advanced_features/speculative_decoding.md)
    llamacpp  one llama-server line per batch size (`--parallel B` slots): `--spec-type`,
              `--spec-draft-model`, `--spec-draft-n-max`/`--spec-draft-n-min` (common/arg.cpp;
              the type names are common/speculative.cpp's; the older `--draft-max` and
              `--draft-min` are removed there)

A batch size where even the best γ is predicted below 1× gets "disable SD". Every line carries
the predicted speedup and its band (the engine profile's, `EngineProfile.band_text`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

from specmoe.errors import SpecmoeError
from specmoe.perf.drafts import DraftMethod


class EngineSyntax(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMACPP = "llamacpp"

    @property
    def profiles(self) -> tuple[str, ...]:
        """The engine profiles whose prices this syntax can carry."""
        if self is EngineSyntax.LLAMACPP:
            return ("llamacpp-cuda", "llamacpp-rocm", "llamacpp-vulkan", "llamacpp-metal", "llamacpp-cpu")
        return (self.value,)


_VLLM_METHOD = {
    DraftMethod.MODEL: "draft_model",
    DraftMethod.NGRAM: "ngram",
    DraftMethod.EAGLE: "eagle",
    DraftMethod.EAGLE3: "eagle3",
    DraftMethod.MTP: "mtp",
    DraftMethod.MEDUSA: "medusa",
    DraftMethod.DFLASH: "dflash",
}
# SGLang runs a model's own MTP heads in its EAGLE worker (its DeepSeek docs: --speculative-algorithm EAGLE)
_SGLANG_ALGORITHM = {
    DraftMethod.MODEL: "STANDALONE",
    DraftMethod.NGRAM: "NGRAM",
    DraftMethod.EAGLE: "EAGLE",
    DraftMethod.EAGLE3: "EAGLE3",
    DraftMethod.MTP: "EAGLE",
    DraftMethod.DFLASH: "DFLASH",
}
_LLAMACPP_TYPE = {
    DraftMethod.MODEL: "draft-simple",
    DraftMethod.NGRAM: "ngram-simple",
    DraftMethod.EAGLE3: "draft-eagle3",
    DraftMethod.MTP: "draft-mtp",
    DraftMethod.DFLASH: "draft-dflash",
}
_TABLES = {
    EngineSyntax.VLLM: _VLLM_METHOD,
    EngineSyntax.SGLANG: _SGLANG_ALGORITHM,
    EngineSyntax.LLAMACPP: _LLAMACPP_TYPE,
}


@dataclass(frozen=True)
class Setting:
    """One batch size's answer: the γ to use (None: decode without a draft) and its price."""

    batch: int
    gamma: int | None
    best_gamma: int
    speedup: float  # predicted at best_gamma [×]
    band: tuple[float, float]
    verdict: str

    def comment(self) -> str:
        low, high = self.band
        price = f"{self.speedup:.2f}x [{low:.2f}, {high:.2f}]"
        if self.gamma is None:
            return f"B={self.batch}: disable SD (the best, γ={self.best_gamma}, at {price}; {self.verdict})"
        return f"B={self.batch}: γ={self.gamma}, predicted {price}; {self.verdict}"


def settings(advice: dict) -> list[Setting]:
    """Per batch size the best γ, or None where even it is predicted below 1×."""
    if advice.get("stated_alpha") is None:
        raise SpecmoeError(
            "--emit needs the acceptance you expect: add --acceptance A (--acceptance-kind, "
            "--acceptance-gamma) so each batch size's best γ has a predicted speedup"
        )
    out = []
    for row in advice["rows"]:
        best = row["best"]
        pays = best["speedup"] >= 1.0
        out.append(
            Setting(
                batch=row["batch"],
                gamma=best["gamma"] if pays else None,
                best_gamma=best["gamma"],
                speedup=best["speedup"],
                band=tuple(best["band"]),
                verdict=row["verdict"],
            )
        )
    return sorted(out, key=lambda s: s.batch)


def check_engine(syntax: EngineSyntax, engine: str, method: DraftMethod) -> None:
    if engine not in syntax.profiles:
        raise SpecmoeError(
            f"--emit {syntax.value} writes {syntax.value}'s settings, but the prices came from the "
            f"'{engine}' profile; pass --engine {' or '.join(syntax.profiles)}"
        )
    if method not in _TABLES[syntax]:
        raise SpecmoeError(
            f"{syntax.value} has no '{method.value}' drafter; --emit {syntax.value} takes --draft "
            + " | ".join(m.value for m in _TABLES[syntax])
        )


def vllm_schedule(rows: list[Setting]) -> list[list[int]]:
    """[first batch, last batch, K] ranges: each asked batch size covers up to the next one, the
    first from 1 as vLLM requires, neighbours with the same K merged; K = 0 where SD does not pay."""
    table: list[list[int]] = []
    for i, s in enumerate(rows):
        first = 1 if i == 0 else s.batch
        last = rows[i + 1].batch - 1 if i + 1 < len(rows) else s.batch
        k = s.gamma or 0
        if table and table[-1][2] == k:  # one range per K: the neighbour with the same K grows
            table[-1][1] = last
        else:
            table.append([first, last, k])
    return table


_NAMES = {EngineSyntax.VLLM: "vLLM", EngineSyntax.SGLANG: "SGLang", EngineSyntax.LLAMACPP: "llama.cpp"}


def _header(advice: dict, syntax: EngineSyntax) -> list[str]:
    name = {EngineSyntax.VLLM: "vLLM", EngineSyntax.SGLANG: "SGLang", EngineSyntax.LLAMACPP: "llama.cpp"}[
        syntax
    ]
    return [
        f"# {advice['target']}, drafter {advice['drafter']}",
        f"# {name} settings per batch size at the stated acceptance; band {advice['band']}",
    ]


def emit_vllm(advice: dict, rows: list[Setting], target: str, draft: str) -> str:
    lines = _header(advice, EngineSyntax.VLLM) + [f"# {s.comment()}" for s in rows]
    table = vllm_schedule(rows)
    k_max = max(k for _, _, k in table)
    if k_max == 0:
        return "\n".join([*lines, f"vllm serve {target}    # SD does not pay at any batch size asked"])
    method = DraftMethod(advice["method"])
    config: dict = {"method": _VLLM_METHOD[method]}
    if method in (
        DraftMethod.MODEL,
        DraftMethod.EAGLE,
        DraftMethod.EAGLE3,
        DraftMethod.MEDUSA,
        DraftMethod.DFLASH,
    ):
        config["model"] = draft
    if method is DraftMethod.NGRAM:  # the lookup window is not priced: vLLM requires a maximum
        config |= {"prompt_lookup_max": 4, "prompt_lookup_min": 2}
    config |= {"num_speculative_tokens": k_max, "num_speculative_tokens_per_batch_size": table}
    lines.append("# batch sizes past the last range keep its K; K = 0 decodes without a draft")
    lines.append(f"vllm serve {target} --speculative-config '{json.dumps(config)}'")
    return "\n".join(lines)


def emit_sglang(advice: dict, rows: list[Setting], target: str, draft: str) -> str:
    method = DraftMethod(advice["method"])
    lines = _header(advice, EngineSyntax.SGLANG)
    lines.append("# SGLang fixes these flags per server: launch the line for the batch size you serve")
    for s in rows:
        lines.append(f"# {s.comment()}")
        base = f"python -m sglang.launch_server --model-path {target}"
        if s.gamma is None:
            lines.append(base)
            continue
        flags = [f"--speculative-algorithm {_SGLANG_ALGORITHM[method]}"]
        if method in (DraftMethod.MODEL, DraftMethod.EAGLE, DraftMethod.EAGLE3, DraftMethod.DFLASH):
            flags.append(f"--speculative-draft-model-path {draft}")
        if method in (DraftMethod.NGRAM, DraftMethod.DFLASH):  # DFlash: the block, which must match
            flags.append(f"--speculative-num-draft-tokens {s.gamma + 1}")
        else:
            topk = advice.get("tree_width") or 1
            tokens = advice.get("verify_tokens") or s.gamma + 1
            flags += [
                f"--speculative-num-steps {s.gamma}",
                f"--speculative-eagle-topk {topk}",
                f"--speculative-num-draft-tokens {tokens}",
            ]
        lines.append(f"{base} {' '.join(flags)}")
    return "\n".join(lines)


def emit_llamacpp(advice: dict, rows: list[Setting], target: str, draft: str) -> str:
    method = DraftMethod(advice["method"])
    lines = _header(advice, EngineSyntax.LLAMACPP)
    lines.append("# --spec-draft-p-min 0 drafts the full γ every round, as priced (a higher one stops early)")
    for s in rows:
        lines.append(f"# {s.comment()}")
        base = f"llama-server -m {target} --parallel {s.batch}"
        if s.gamma is None:
            lines.append(f"{base} --spec-type none")
            continue
        flags = [f"--spec-type {_LLAMACPP_TYPE[method]}"]
        if method in (DraftMethod.MODEL, DraftMethod.EAGLE3, DraftMethod.DFLASH):
            flags.append(f"--spec-draft-model {draft}")
        if method is DraftMethod.NGRAM:
            flags.append(f"--spec-ngram-simple-size-m {s.gamma}")
        else:
            flags += [f"--spec-draft-n-max {s.gamma}", "--spec-draft-n-min 0", "--spec-draft-p-min 0"]
        lines.append(f"{base} {' '.join(flags)}")
    return "\n".join(lines)


_EMITTERS = {
    EngineSyntax.VLLM: emit_vllm,
    EngineSyntax.SGLANG: emit_sglang,
    EngineSyntax.LLAMACPP: emit_llamacpp,
}


def emit(advice: dict, syntax: EngineSyntax, target: str, draft: str) -> str:
    """The advice as `syntax`'s configuration; `target` and `draft` are the names written for the
    target and the draft weights (paths, Hugging Face ids or GGUF files)."""
    check_engine(syntax, advice["engine"], DraftMethod(advice["method"]))
    return _EMITTERS[syntax](advice, settings(advice), target, draft)
