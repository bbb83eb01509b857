"""What each serving engine exposes about speculative decoding: one table, read by the client.

Counter names are Prometheus *sample* names as they appear in `/metrics` text (counters carry the
`_total` suffix); every sample with the name is summed over its label sets (engines, data-parallel
ranks). Gauges are engine-computed averages over the server's recent window, not over a run: they
are recorded beside a run, never turned into counts. Response fields are dotted paths into the last
streamed chunk of each response.

Sources:
- vLLM (v1 engine): `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`
  and `..._num_accepted_tokens_per_pos` (label `position`, 0-based), all counters.
- SGLang: per response, when the request sets `return_spec_tokens_details` (SGLang PR #33518),
  `sglext.spec_tokens_details` with `spec_verify_ct` (verify steps), `spec_num_proposed_drafts` and
  `spec_num_correct_drafts` (draft tokens proposed and accepted), in a chunk of its own with empty
  `choices` before the usage chunk. As a fallback, and recorded beside every run,
  `sglang:spec_accept_length` (mean tokens per verify pass, bonus token included) and
  `sglang:spec_accept_rate` (accepted ÷ drafted), both gauges; SGLang exports no spec-decode
  counters. Metrics need `--enable-metrics`; an SGLang from before the per-request details ignores
  the request field, and its counts stay unknown.
- llama-server (llama.cpp): per response `timings.draft_n` and `timings.draft_n_accepted`.
- generic: any other OpenAI-compatible server (llama-cpp-python's `llama_cpp.server`, hosted
  APIs): timings only.
"""

from __future__ import annotations

from dataclasses import dataclass

from specmoe.errors import SpecmoeError


@dataclass(frozen=True)
class EngineMetrics:
    name: str
    drafts: str | None = None  # counter: sequence-rounds that verified a draft
    draft_tokens: str | None = None  # counter: draft tokens proposed for verification
    accepted_tokens: str | None = None  # counter: draft tokens the verifier accepted
    accepted_per_position: str | None = None  # counter with a `position` label (0-based)
    gauges: tuple[tuple[str, str], ...] = ()  # (recorded name, sample name)
    response_drafted: str | None = None  # dotted path in a response's top-level fields
    response_accepted: str | None = None
    response_rounds: str | None = None  # verify steps of the response
    request_fields: tuple[tuple[str, object], ...] = ()  # added to every request body
    ignore_eos: bool = False  # accepts the non-standard `ignore_eos` request field

    @property
    def counters(self) -> tuple[str, ...]:
        names = (self.drafts, self.draft_tokens, self.accepted_tokens)
        return tuple(n for n in names if n is not None)

    @property
    def reads_metrics(self) -> bool:
        return bool(self.counters or self.gauges or self.accepted_per_position)


ENGINES: dict[str, EngineMetrics] = {
    "vllm": EngineMetrics(
        name="vllm",
        drafts="vllm:spec_decode_num_drafts_total",
        draft_tokens="vllm:spec_decode_num_draft_tokens_total",
        accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
        accepted_per_position="vllm:spec_decode_num_accepted_tokens_per_pos_total",
        ignore_eos=True,
    ),
    "sglang": EngineMetrics(
        name="sglang",
        gauges=(("accept_length", "sglang:spec_accept_length"), ("accept_rate", "sglang:spec_accept_rate")),
        response_drafted="sglext.spec_tokens_details.spec_num_proposed_drafts",
        response_accepted="sglext.spec_tokens_details.spec_num_correct_drafts",
        response_rounds="sglext.spec_tokens_details.spec_verify_ct",
        request_fields=(("return_spec_tokens_details", True),),
        ignore_eos=True,
    ),
    "llamacpp-server": EngineMetrics(
        name="llamacpp-server",
        response_drafted="timings.draft_n",
        response_accepted="timings.draft_n_accepted",
        ignore_eos=True,
    ),
    "generic": EngineMetrics(name="generic"),
}


def engine_metrics(name: str) -> EngineMetrics:
    if name not in ENGINES:
        raise SpecmoeError(f"unknown engine '{name}'; available: {', '.join(ENGINES)}")
    return ENGINES[name]
