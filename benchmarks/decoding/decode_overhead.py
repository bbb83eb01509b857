"""Host overhead of an eager decode step and an SD round: specmoe against transformers' `generate()`.

Not a test: prints a table and writes JSON.

    OMP_NUM_THREADS=1 python -m benchmarks.decoding.decode_overhead \
        --out docs/results/cpu/decode_overhead.json

For each pair (the trained zoo's `moe` + `draft-xs` in float32; an OLMoE-1B-7B-shaped random MoE,
64 experts top-8, with a Qwen3-0.6B-shaped random draft, both bf16 and cut to `--layers` layers so
they fit beside other work) and batch size:

1. *counts* per plain step and per SD round (`host_syncs.py`): host reads and uploads (the points
   that drain a GPU's queue), compute ops (about one kernel launch each), allocations, split into
   the models' forwards and the loop around them. A count per step is the difference between a
   long and a short run over the steps between them, so prefill and setup cancel; counts do not
   depend on the machine's load;
2. *times* per step and per round, measured the same way for both arms: the interval between two
   successive forwards of the target (one per plain step, one verify per SD round, in both engines),
   pooled over the long runs of `--repeats` alternated repeats (rotating order); medians with the
   quartiles beside them; and the share of a run's wall outside the models' forwards (forward
   hooks' clocks; on a CPU every op is done when its call returns).

Arms: specmoe's plain decode, transformers' greedy `generate()`; specmoe SD at γ = 4 and (B = 1)
transformers' assisted generation with the same pair and a constant γ = 4.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from benchmarks.decoding.host_syncs import counting, python_calls
from specmoe.backends.hf import HFBackend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter

GAMMA = 4
PROMPT_LEN = 24


class ForwardClock:
    """Seconds spent inside the given models' forwards (outermost calls only)."""

    def __init__(self, *models) -> None:
        self.seconds = 0.0
        self._depth = 0
        self._start = 0.0
        self._hooks = []
        for model in models:
            self._hooks.append(model.register_forward_pre_hook(self._enter))
            self._hooks.append(model.register_forward_hook(self._leave))

    def _enter(self, *_):
        self._depth += 1
        if self._depth == 1:
            self._start = time.perf_counter()

    def _leave(self, *_):
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._start

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()


def olmoe_pair(layers: int, dtype_name: str, device: str = "cpu", compile: bool = False) -> tuple:
    """An OLMoE-1B-7B-shaped MoE and a Qwen3-0.6B-shaped draft (same vocabulary), random weights,
    the MoE's experts kernel chosen as the loader would for this device and path (`hf.load_hf`)."""
    from transformers import AutoModelForCausalLM, OlmoeConfig, Qwen3Config

    target = OlmoeConfig(
        vocab_size=50304,
        hidden_size=2048,
        intermediate_size=1024,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=16,
        num_experts=64,
        num_experts_per_tok=8,
        max_position_embeddings=4096,
        eos_token_id=None,
        pad_token_id=1,
    )
    draft = Qwen3Config(
        vocab_size=50304,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        eos_token_id=None,
        pad_token_id=1,
    )
    from specmoe.backends import hf_experts
    from specmoe.backends.hf import default_experts_implementation
    from specmoe.dtypes import torch_dtype

    hf_experts.register()

    dtype = torch_dtype(dtype_name)
    torch.manual_seed(0)
    models = []
    for config in (target, draft):
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
        if getattr(config, "num_experts", None):
            model.set_experts_implementation(default_experts_implementation(dtype_name, compile, device))
        models.append(model)
    return models


def zoo_pair(zoo: Path, dtype: str) -> tuple:
    from specmoe.api import load_model

    return load_model(zoo / "moe", dtype=dtype).model, load_model(zoo / "draft-xs", dtype=dtype).model


def prompts_for(batch: int, vocab: int) -> list[list[int]]:
    """Ragged prompts of plain token ids (random models: any ids do)."""
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(3, vocab, (PROMPT_LEN - 3 * row,), generator=gen).tolist() for row in range(batch)]


# -- the arms: each returns (wall seconds, units) for a run of n new tokens -------------------------
def specmoe_arm(target, drafter_backend):
    def run(prompts, n):
        drafter = ModelDrafter(drafter_backend) if drafter_backend is not None else None
        start = time.perf_counter()
        result = decode(
            target, prompts, DecodeConfig(max_new_tokens=n, gamma=GAMMA, ignore_eos=True), drafter
        )
        return time.perf_counter() - start, len(result.rounds)

    return run


def transformers_arm(target_model, draft_model):
    if draft_model is not None:
        config = draft_model.generation_config
        config.num_assistant_tokens = GAMMA
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0

    device = target_model.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def run(prompts, n):
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[1] * (width - len(p)) + p for p in prompts], device=device)  # left-padded
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        kwargs = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=1)
        if draft_model is not None:
            kwargs["assistant_model"] = draft_model
        forwards = [0]
        hook = target_model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
        try:
            with torch.inference_mode():
                sync()
                start = time.perf_counter()
                target_model.generate(ids, attention_mask=mask, **kwargs)
                sync()
                wall = time.perf_counter() - start
        finally:
            hook.remove()
        return wall, forwards[0]  # target forwards: one per step, one per assisted round (+ prefill)

    return run


def per_unit(run, prompts, models, long: int) -> tuple[list[float], float]:
    """(seconds of every step or round of a long run, share of its wall outside the models'
    forwards). A step or round is the interval between two successive forwards of the target
    (`models[0]`): one per plain step, one verify per SD round, in both engines; the interval
    after prefill and the last two are dropped. Medians of these are robust to a busy machine's
    spikes."""
    clock = ForwardClock(*models)
    starts: list[float] = []
    hook = models[0].register_forward_pre_hook(lambda *_: starts.append(time.perf_counter()))
    try:
        wall, _ = run(prompts, long)
    finally:
        clock.close()
        hook.remove()
    # The last rounds of an assisted run draft fewer tokens (the length limit): both arms drop them.
    intervals = [b - a for a, b in itertools.pairwise(starts[1:])][:-2]
    return intervals, (wall - clock.seconds) / wall


def counts(run, prompts, models, short: int, long: int) -> dict:
    """Counts per unit (step or round): a counted long run minus a counted short run."""
    results = []
    for n in (long, short):
        with counting(*models) as counter:
            _, units = run(prompts, n)
        results.append((counter, units))
    (long_c, long_u), (short_c, short_u) = results
    units = long_u - short_u
    out = {"units": units}
    for region in ("model", "host loop"):
        a, b = long_c.regions[region], short_c.regions[region]
        reads = {k: (a.reads[k] - b.reads[k]) / units for k in set(a.reads) | set(b.reads)}
        out[region] = {
            "syncs": (a.syncs - b.syncs) / units,
            "reads": dict(sorted(reads.items())),
            "uploads": (a.uploads - b.uploads) / units,
            "async_uploads": (a.async_uploads - b.async_uploads) / units,
            "ops": (a.ops - b.ops) / units,
            "allocations": (a.allocations - b.allocations) / units,
            "allocated_mb": (a.allocated_bytes - b.allocated_bytes) / units / 1e6,
            "top_ops": {k: (a.op_names[k] - b.op_names[k]) / units for k, _ in a.op_names.most_common(12)},
        }
    out["forwards_per_unit"] = (long_c.forwards - short_c.forwards) / units
    calls = []
    for n in (long, short):
        with python_calls(*models) as counted:
            run(prompts, n)
        calls.append(counted)
    for region in ("model", "host loop"):
        out[region]["python_calls"] = (calls[0][region] - calls[1][region]) / units
    return out


def measure_pair(name: str, target_model, draft_model, batches, args) -> dict:
    device = torch.device(args.device)
    target = HFBackend(target_model, name, device)
    draft = HFBackend(draft_model, name + "-draft", device)
    report: dict = {}
    for batch in batches:
        prompts = prompts_for(batch, target.vocab_size)
        arms = {
            "specmoe plain": (specmoe_arm(target, None), (target_model,)),
            "transformers generate": (transformers_arm(target_model, None), (target_model,)),
            "specmoe SD": (specmoe_arm(target, draft), (target_model, draft_model)),
        }
        if batch == 1:
            arms["transformers assisted"] = (
                transformers_arm(target_model, draft_model),
                (target_model, draft_model),
            )
        entry: dict = {"counts": {}, "seconds_per_unit": {}, "host_share": {}}
        for arm, (run, models) in arms.items():
            run(prompts, args.short)  # warm-up
            entry["counts"][arm] = counts(run, prompts, models, args.short, args.long)
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        shares: dict[str, list[float]] = {arm: [] for arm in arms}
        order = list(arms)
        for repeat in range(args.repeats):
            for arm in order[repeat % len(order) :] + order[: repeat % len(order)]:
                run, models = arms[arm]
                intervals, share = per_unit(run, prompts, models, args.long)
                times[arm].extend(intervals)
                shares[arm].append(share)
        for arm in arms:
            quartiles = statistics.quantiles(times[arm], n=4)
            entry["seconds_per_unit"][arm] = {
                "median": statistics.median(times[arm]),
                "q1": quartiles[0],
                "q3": quartiles[2],
                "n": len(times[arm]),
            }
            entry["host_share"][arm] = statistics.median(shares[arm])
        report[f"B{batch}"] = entry
        print(table({name: {f"B{batch}": entry}}), flush=True)
    return report


HEADER = (
    "| pair | B | arm | syncs (model / loop) | ops (model / loop) | allocations (model / loop) "
    "| Python calls (model / loop) | ms per unit (quartiles) | outside forwards |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def table(report: dict) -> str:
    lines = [HEADER]
    for pair, batches in report.items():
        for batch, entry in batches.items():
            for arm, c in entry["counts"].items():
                t = entry["seconds_per_unit"].get(arm)
                ms = f"{t['median'] * 1e3:.2f} ({t['q1'] * 1e3:.2f}–{t['q3'] * 1e3:.2f})" if t else "—"
                share = entry["host_share"].get(arm)
                cells = [
                    pair,
                    batch[1:],
                    arm,
                    f"{c['model']['syncs']:.1f} / {c['host loop']['syncs']:.1f}",
                    f"{c['model']['ops']:.0f} / {c['host loop']['ops']:.0f}",
                    f"{c['model']['allocations']:.0f} / {c['host loop']['allocations']:.0f}",
                    f"{c['model']['python_calls']:.0f} / {c['host loop']['python_calls']:.0f}",
                    ms,
                    f"{share:.1%}" if share is not None else "—",
                ]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", type=Path, default=Path.home() / ".cache/specmoe/zoo/trained-seed0")
    parser.add_argument("--pairs", default="trained,olmoe")
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--layers", type=int, default=2, help="layers of the OLMoE- and Qwen3-shaped models")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (counts are the same; times are not)")
    parser.add_argument("--short", type=int, default=4, help="new tokens of the short run")
    parser.add_argument("--long", type=int, default=20, help="new tokens of the long run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import transformers

    report: dict = {
        "machine": {
            "cpu": platform.processor() or "cpu",
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "load_average_at_start": os.getloadavg(),
        },
        "setup": vars(args) | {"zoo": args.zoo.name, "out": None, "gamma": GAMMA, "prompt_len": PROMPT_LEN},
        "pairs": {},
    }
    batches = [int(b) for b in args.batches.split(",")]
    for pair in args.pairs.split(","):
        if pair == "trained":
            target_model, draft_model = zoo_pair(args.zoo, "float32")
        else:
            target_model, draft_model = olmoe_pair(args.layers, "bfloat16", args.device)
        target_model, draft_model = target_model.to(args.device), draft_model.to(args.device)
        report["pairs"][pair] = measure_pair(pair, target_model, draft_model, batches, args)
        del target_model, draft_model
    report["machine"]["load_average_at_end"] = os.getloadavg()
    print(table(report["pairs"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
