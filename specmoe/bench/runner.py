"""Runs a suite's arms through one decoding code path and one clock, and stores each finished run.

Baseline and SD arms share `specmoe.decoding.decode.decode`: the same prefill, commit and token
counting, the same `time.perf_counter` clock, the same process. Both decode exactly
max_new_tokens tokens (EOS ignored, as llama-bench does), so tokens/s compare like with like.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import torch

from specmoe.backends import load_backend
from specmoe.backends.base import Backend
from specmoe.backends.eagle3_head import Eagle3Checkpoint
from specmoe.backends.weights import weights_fingerprint
from specmoe.bench.batches import batch_prompts_of, prompt_ids
from specmoe.bench.env import environment
from specmoe.bench.noise import (
    RETRIES,
    LoadMeter,
    beyond_bound,
    disturbance,
    flagged_beyond_bound,
    guard_on,
    own_cores,
    step_spread,
)
from specmoe.bench.plan import Block
from specmoe.bench.refusals import BlockRows, Runnable, SkippedRun, skip
from specmoe.bench.served import ServedRunner
from specmoe.bench.spec_row import run_row
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.divergence import find_divergences
from specmoe.decoding.make_drafter import make_drafter
from specmoe.decoding.records import DecodeResult
from specmoe.decoding.sampling import SamplingParams
from specmoe.metrics import decode_tokens_per_s, invariant_violations, per_sequence, run_times, totals
from specmoe.results.run_audit import audit_run
from specmoe.results.store import RunRow
from specmoe.suite.model_paths import model_path
from specmoe.suite.types import RunSpec, Suite

log = logging.getLogger(__name__)


class ModelPool:
    """Loads each (model, dtype, device, top-k) once per suite run and hands out the same backend."""

    def __init__(self, suite: Suite, zoo_dir: Path | None) -> None:
        self.suite = suite
        self.zoo_dir = zoo_dir
        self._models: dict[tuple, Backend] = {}
        self._tokenizers: dict[str, object] = {}
        self._weights: dict[str, str] = {}

    def path(self, name: str) -> Path:
        """Where the model loads from (`model_paths.model_path`, as preflight checked it)."""
        return model_path(self.suite.models[name], self.zoo_dir)

    def weights(self, names: list[str]) -> dict[str, str]:
        """Each named model's weights fingerprint (`backends.weights.weights_fingerprint`), taken
        once per suite run: stored with every row, so a store can tell when a path's files changed."""
        for name in names:
            if name not in self._weights:
                self._weights[name] = weights_fingerprint(self.path(name))
        return {name: self._weights[name] for name in names}

    def model(
        self, name: str, dtype: str, device: str, moe_top_k: int | None = None, compile: bool = False
    ) -> Backend:
        key = (name, dtype, device, moe_top_k, compile)
        if key not in self._models:
            options = {"dtype": dtype, "device": device}
            if moe_top_k is not None:
                options["moe_top_k"] = moe_top_k
            if compile:
                options["compile"] = True
            log.debug("loading %s from %s (%s)", name, self.path(name), options)
            self._models[key] = load_backend(self.suite.models[name].backend, str(self.path(name)), **options)
        return self._models[key]

    def tokenizer(self, name: str):
        if name not in self._tokenizers:
            from specmoe.api import load_tokenizer

            self._tokenizers[name] = load_tokenizer(self.path(name))
        return self._tokenizers[name]


SETTLE_TOLERANCE = 0.03  # relative difference of the last two warm-up decode times
SETTLE_MAX_RUNS = 8


def settled(times: list[float], tolerance: float = SETTLE_TOLERANCE, cap: int = SETTLE_MAX_RUNS) -> bool:
    """Warm-up may stop: the last two decode times agree within `tolerance`, or `cap` runs are done."""
    if len(times) >= cap:
        return True
    return len(times) >= 2 and abs(times[-1] - times[-2]) <= tolerance * min(times[-2:])


@dataclass(frozen=True)
class Measured:
    """One timed decode with how it was measured (the row's `measure`) and whether it is noisy."""

    result: DecodeResult
    measure: dict
    noisy: bool


class Runner:
    """Measures blocks of RunSpecs. Each configuration warms up before its first timed run."""

    def __init__(self, pool: ModelPool) -> None:
        self.pool = pool
        self._warm: set[str] = set()
        self._warmup_compile_s: dict[str, float] = {}  # by run_id: seconds its warm-up compiled
        self._settled: set[tuple] = set()
        self._continuations: dict[tuple, list[list[int]]] = {}
        self._prompt_ids: dict[str, list[list[int]]] = {}  # by config_key
        self._served: ServedRunner | None = None  # made on the first run against a server
        self._machine_busy = False  # the last timed run stayed disturbed after its retries

    def block(self, block: Block, stored_baseline: RunRow | None = None) -> BlockRows:
        """Measure a block's arms back to back, in its order, and make their rows (baseline first).

        `stored_baseline` is the block's baseline row when it was stored by an earlier run of the
        suite (and so is not among the block's specs). Every arm warms up before the first timed
        run, so no warm-up falls between two timed arms of the pair. Runs a model refuses are left
        out (`_runnable`), so a block may have no rows.
        """
        if block.specs[0].concurrency is not None:
            return BlockRows(self._served_block(block, stored_baseline))
        runnable = self._runnable(block.specs)
        specs = runnable.specs
        for spec in specs:
            self.warm_up(spec)
        measured = {
            spec.run_id: self.timed(spec, block.baseline_id, position) for position, spec in enumerate(specs)
        }
        measured = self._recheck_speedups(specs, block.baseline_id, measured, stored_baseline)
        created_at = datetime.now(UTC).isoformat(timespec="seconds")
        baseline = stored_baseline
        rows = []
        for spec in sorted(specs, key=lambda s: s.arm != "baseline"):
            m = measured[spec.run_id]
            if spec.arm == "baseline" and spec.temperature == 0.0:
                self._remember_plain(spec, m.result)
            row = make_row(spec, m, baseline, created_at, self.lossless_note(spec, m.result))
            env = {**row.env, "weights": self.pool.weights(spec.model_names)}
            if spec.arm == "baseline" and runnable.sd_refused:  # its SD arms never ran
                env["sd_refused"] = runnable.sd_refused
            row = replace(row, env=env)
            baseline = row if spec.arm == "baseline" else baseline
            rows.append(row)
        return BlockRows(rows, runnable.skipped)

    def _recheck_speedups(
        self,
        specs: Sequence[RunSpec],
        baseline_id: str,
        measured: dict[str, Measured],
        stored_baseline: RunRow | None,
    ) -> dict[str, Measured]:
        """SD runs whose speedup breaks their own acceptance's bound (`noise.beyond_bound`) are
        measured once more with the whole block, its baseline first among them (the likelier
        disturbed arm: nothing makes a decode faster), so every pair stays measured back to back;
        with a baseline stored by an earlier run, only those runs. Still beyond, they are flagged
        noisy with the reason, and kept."""
        beyond = self._beyond_bound(specs, measured, stored_baseline)
        if not beyond:
            return measured
        measured = dict(measured)
        whole_block = any(spec.arm == "baseline" for spec in specs)
        for position, spec in enumerate(specs):
            if whole_block or spec.run_id in beyond:
                log.debug("%s: %s; measuring again", spec.run_id, beyond.get(spec.run_id, "its SD arm"))
                again = self.timed(spec, baseline_id, position)
                first = measured[spec.run_id].measure
                # The warm-up compiled once, before the first measurement: its seconds stay with the run.
                kept = {"attempts": first["attempts"] + again.measure["attempts"]}
                kept["warmup_compile_s"] = first["warmup_compile_s"]
                measured[spec.run_id] = replace(again, measure={**again.measure, **kept})
        for run_id, why in self._beyond_bound(specs, measured, stored_baseline).items():
            m = measured[run_id]
            measured[run_id] = replace(m, measure=flagged_beyond_bound(m.measure, why), noisy=True)
        return measured

    @staticmethod
    def _beyond_bound(
        specs: Sequence[RunSpec], measured: dict[str, Measured], stored_baseline: RunRow | None
    ) -> dict[str, str]:
        """Why each SD run of the block is beyond its bound, by run id; only such runs."""
        baseline = next((measured[s.run_id].result for s in specs if s.arm == "baseline"), None)
        if baseline is not None:
            rate = decode_tokens_per_s(totals(baseline).emitted, baseline.decode_s)
        elif stored_baseline is not None:
            rate = stored_baseline.tokens_per_s
        else:
            return {}
        found = {}
        for spec in specs:
            why = (
                ""
                if spec.arm != "sd" or not spec.gamma
                else beyond_bound(measured[spec.run_id].result, spec.gamma, rate)
            )
            if why:
                found[spec.run_id] = why
        return found

    def _runnable(self, specs: tuple[RunSpec, ...]) -> Runnable:
        """The block's runs less those a model refuses (`specmoe.bench.refusals`): at B > 1 on a
        target that refuses a batch, every run; on a target that cannot drop rejected draft tokens
        (`Backend.rollback_refused`), each SD arm, logged here with the reason, which is returned for
        the baseline's row; at B > 1, each SD arm whose draft model refuses a batch."""
        first = specs[0]
        target = self.pool.model(first.target, first.dtype, first.device, first.moe_top_k, first.compile)
        batched = first.batch_size > 1  # one batch size per block: the baseline's
        if batched and target.batch_refused is not None:
            return Runnable((), skipped=tuple(skip(s, s.target, target.batch_refused) for s in specs))
        rollback = target.rollback_refused
        kept, skipped = [], []
        for spec in specs:
            if spec.draft is not None and rollback is not None:
                log.warning("run %s (%s, draft %s) skipped: %s", spec.run_id, spec.arm, spec.draft, rollback)
                continue
            refused = self._draft_refusal(spec) if batched else None
            if refused is None:
                kept.append(spec)
            else:
                skipped.append(refused)
        drafted = any(spec.draft is not None for spec in specs)
        return Runnable(tuple(kept), (rollback or "") if drafted else "", tuple(skipped))

    def _draft_refusal(self, spec: RunSpec) -> SkippedRun | None:
        """The run, skipped, when its draft model refuses a batch: a draft model drafts through its
        own backend, whose refusal `decode` reads (`ModelDrafter`); other drafts run no model of
        their own, and an EAGLE-3 head runs beside the target's backend."""
        name = None if spec.draft is None else spec.draft.model_name
        if name is None:
            return None
        model = self.pool.model(name, spec.dtype, spec.device, compile=spec.compile)
        if isinstance(model, Eagle3Checkpoint) or model.batch_refused is None:
            return None
        return skip(spec, name, model.batch_refused)

    def _served_block(self, block: Block, stored_baseline: RunRow | None) -> list[RunRow]:
        if self._served is None:
            self._served = ServedRunner()
        return self._served.block(block.specs, stored_baseline)

    def _target_and_prompts(self, spec: RunSpec) -> tuple[Backend, list[list[int]]]:
        target = self.pool.model(spec.target, spec.dtype, spec.device, spec.moe_top_k, spec.compile)
        # Warm-up, the timed run and its lossless check all decode the same prompts: read the set
        # and tokenize once per run key (which fixes the prompts, the batch and the template).
        if spec.config_key not in self._prompt_ids:
            self._prompt_ids[spec.config_key] = prompt_ids(spec, self.pool.tokenizer(spec.target))
        return target, self._prompt_ids[spec.config_key]

    def _inputs(self, spec: RunSpec):
        target, prompts = self._target_and_prompts(spec)
        config = DecodeConfig(
            max_new_tokens=spec.max_new_tokens,
            sampling=SamplingParams(temperature=spec.temperature),
            seed=spec.repeat,
            ignore_eos=True,
            **drafting(spec),
        )
        return target, prompts, config, self._drafter_factory(spec, target, prompts, config)

    def warm_up(self, spec: RunSpec) -> None:
        """Untimed runs before a configuration's first timed run: the suite's `warmup` count, and for a
        model's first configuration until two runs agree (measured: the first timed bfloat16 MoE
        baseline after one warm-up ran up to 30% slower than the next)."""
        if spec.cell_key in self._warm:
            return
        target, prompts, config, make_drafter = self._inputs(spec)
        results = [decode(target, prompts, config, make_drafter()) for _ in range(spec.warmup)]
        times = [r.decode_s for r in results]
        model_key = (spec.target, spec.dtype, spec.device, spec.moe_top_k)
        if spec.warmup and model_key not in self._settled:
            while not settled(times):
                results.append(decode(target, prompts, config, make_drafter()))
                times.append(results[-1].decode_s)
            self._settled.add(model_key)
        # The compiled path compiles its shapes here: their seconds go with the run's row, apart.
        self._warmup_compile_s[spec.run_id] = sum(r.compile_s for r in results)
        self._warm.add(spec.cell_key)

    def measure(self, spec: RunSpec) -> DecodeResult:
        """One timed decode of the run, after its warm-up (no noise guard)."""
        self.warm_up(spec)
        target, prompts, config, make_drafter = self._inputs(spec)
        return decode(target, prompts, config, make_drafter())

    def timed(self, spec: RunSpec, block_id: str, position: int) -> Measured:
        """The run's timed decode under the noise guard: measured again while the machine disturbs it
        (at most noise.RETRIES times, none once the machine has stayed busy), then flagged."""
        target, prompts, config, make_drafter = self._inputs(spec)
        meter = LoadMeter()
        attempts = 0
        while True:
            attempts += 1
            drafter = make_drafter()
            started = _now_ms()
            meter.start()
            result = decode(target, prompts, config, drafter)
            load = meter.stop()
            spread = step_spread([r.verify_s for r in result.rounds], [len(r.rows) for r in result.rounds])
            reason = disturbance(load, spread, spare_cores=max(0, len(own_cores()) - torch.get_num_threads()))
            if not reason or attempts > RETRIES or self._machine_busy:
                break
            log.debug("%s: disturbed (%s); measuring again", spec.run_id, reason)
        self._machine_busy = bool(reason)
        measure = {
            "started_at": started,
            "finished_at": _now_ms(),
            "block": block_id,
            "position": position,
            "threads": torch.get_num_threads(),
            "other_cpu": round(load.other_cpu, 3),
            "steal": round(load.steal, 4),
            "load_avg": round(load.load_avg, 2),
            "step_spread": None if spread is None else round(spread, 4),
            "attempts": attempts,
            "compile_s": round(result.compile_s, 3),  # compiling new shapes, kept out of decode_s
            "warmup_compile_s": round(self._warmup_compile_s.pop(spec.run_id, 0.0), 3),  # likewise
            "noise": reason or None,  # None, not "": exports read back the same
            "noise_guard": guard_on(),  # off: the loads above were recorded and never judged
            "recurrent_rollback": target.recurrent_rollback,  # llama.cpp hybrids: snapshots | checkpoints
        }
        return Measured(result, measure, bool(reason))

    def _remember_plain(self, spec: RunSpec, result: DecodeResult) -> None:
        """A greedy baseline's output is plain greedy decoding of its prompts: the SD arms' reference."""
        _, prompts = self._target_and_prompts(spec)
        key = self._plain_key(spec, prompts, spec.max_new_tokens)
        self._continuations.setdefault(key, [list(o.token_ids) for o in result.outputs])

    def lossless_note(self, spec: RunSpec, result: DecodeResult) -> tuple[bool, str]:
        """For a greedy SD arm: does its output equal plain greedy decoding of the same prompts?

        Returns (ok, note). In float64 any difference is a bug. In lower precision a (G+1)-token
        verify pass can split a near-tie differently from a 1-token step; the note then gives the
        first differing position and the target's top-2 logit margin there, for the reader to judge.
        """
        if spec.arm != "sd" or spec.temperature != 0.0:
            return True, ""
        target, prompts = self._target_and_prompts(spec)
        key = self._plain_key(spec, prompts, spec.max_new_tokens)
        if key in self._continuations:
            plain = self._continuations[key]
        else:
            config = DecodeConfig(max_new_tokens=spec.max_new_tokens, ignore_eos=True, **drafting(spec))
            plain = [c[: spec.max_new_tokens] for c in self._continuation(spec, target, prompts, config)]
        found = find_divergences(target, prompts, [o.token_ids for o in result.outputs], plain)
        if not found:
            return True, "output identical to plain greedy decoding"
        first = found[0]
        note = (
            f"output differs from plain greedy decoding in {len(found)} of {len(prompts)} sequences, "
            f"first at token {first.position} of sequence {first.sequence}, "
            f"target top-2 logit margin {first.margin:.3g}"
        )
        return spec.dtype != "float64", note

    def _drafter_factory(self, spec, target, prompts, config) -> Callable[[], object | None]:
        """A fresh drafter per decode; the models and the oracle's continuations are loaded once."""
        draft = spec.draft
        if draft is None:
            return lambda: None
        name = draft.cost_model(spec.oracle_cost)
        model = None if name is None else self.pool.model(name, spec.dtype, spec.device, compile=spec.compile)
        continuations = None
        if draft.dialed_acceptance is not None:  # an oracle replays the target's own continuation
            continuations = self._continuation(spec, target, prompts, config)
        return lambda: make_drafter(draft, target, model, continuations, seed=spec.oracle_seed)

    @staticmethod
    def _plain_key(spec: RunSpec, prompts: list[list[int]], max_new_tokens: int | str) -> tuple:
        return (
            spec.target,
            spec.dtype,
            spec.device,
            spec.moe_top_k,
            tuple(map(tuple, prompts)),
            max_new_tokens,
        )

    def _continuation(self, spec, target, prompts, config) -> list[list[int]]:
        """The target's own greedy continuation of the prompts, at least γ tokens past the run
        (untimed). Computed once per prompt batch with room for γ up to CONTINUATION_PAD, so the
        oracle arms of one batch at different γ share it."""
        needed = config.max_new_tokens + config.gamma
        key = self._plain_key(spec, prompts, "continuation")
        if key not in self._continuations or len(self._continuations[key][0]) < needed:
            length = config.max_new_tokens + max(config.gamma, CONTINUATION_PAD)
            plain = DecodeConfig(max_new_tokens=length, ignore_eos=True)
            self._continuations[key] = [list(o.token_ids) for o in decode(target, prompts, plain).outputs]
        return self._continuations[key]


CONTINUATION_PAD = 16  # tokens past max_new_tokens an oracle continuation carries


def drafting(spec: RunSpec) -> dict[str, int]:
    """The `DecodeConfig` settings a run's draft adds: its gamma. A run without a draft has none to
    give, and `decode` reads none without a drafter."""
    return {} if spec.draft is None else {"gamma": spec.gamma}


def _now_ms() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def make_row(
    spec: RunSpec,
    measured: Measured | DecodeResult,
    baseline: RunRow | None,
    created_at: str,
    lossless: tuple[bool, str] = (True, ""),
) -> RunRow:
    """The stored row of a measured run; `baseline` is its baseline's row (SD arms), for the audit."""
    if isinstance(measured, DecodeResult):
        measured = Measured(measured, {}, False)
    result = measured.result
    counts, times = totals(result), run_times(result)
    tokens_per_s = decode_tokens_per_s(counts.emitted, result.decode_s)
    problems = invariant_violations(result)
    audit = audit_run(counts, times, spec.gamma, tokens_per_s, baseline)
    verdict, reason = audit.verdict, audit.reason
    if problems:
        verdict, reason = "fail", "; ".join(problems[:3])
    exact, note = lossless
    if not exact:
        verdict = "fail"
    if note:
        reason = f"{reason}; {note}"
    prompts = [
        {"prompt_id": p.id, "category": p.category, **asdict(c)}
        for p, c in zip(batch_prompts_of(spec), per_sequence(result), strict=True)
    ]
    return run_row(
        spec,
        env=environment(spec.device),
        counts=counts,
        times=times,
        tokens_per_s=tokens_per_s,
        rounds_trace=[asdict(r) for r in result.rounds],
        audit_verdict=verdict,
        audit_reason=reason,
        created_at=created_at,
        prompts=prompts,
        measure=measured.measure,
        noisy=measured.noisy,
    )
