"""Everything a suite needs, checked before its first run, so a suite fails at once or runs to the end.

A suite runs for minutes to hours; a broken model, prompt set or store found at run 40 wastes the 39
runs before it and leaves a half-measured grid. In order, cheapest first:

1. every prompt set: the file exists, is UTF-8 and parses (`load_prompt_set`);
2. the store: an existing specmoe store, or a new path in an existing folder; writable
   (`check_store_path`; nothing is created here, the run creates a new store);
3. every local model's files: its directory, config.json and weight files (safetensors headers
   against file sizes, `specmoe.backends.weights`) or its GGUF file (magic, header, and every
   tensor's bytes within the file, `specmoe.backends.gguf_layout`); the devices, for the backend
   that runs each model (torch's, or llama.cpp's GPU offload), and for llama.cpp models its self-test
   (`specmoe.backends.llamacpp_check`: a build that cannot run on this machine);
4. every run's context: prompt tokens + max_new_tokens + gamma fit the target's (and the draft's)
   max_position_embeddings, with prompts tokenized by the target's tokenizer as the run will; and
   every HF draft's tokenizer maps ids to the same tokens as its target's (`tokenizer_digest`);
5. every HF model loads, once, on the CPU in the dtype of its first run, and is freed. A tensor
   missing from the checkpoint, one it does not expect, or a config.json whose shapes disagree with
   the weights is found only by loading (`load_hf` refuses all three); so is an HF model's top-k
   beyond its experts (`set_moe_top_k`; a GGUF model's is read from its header). The cost is one
   extra load per distinct model, seconds next to a suite's minutes, and no more peak memory than the run's
   own load, which also reads the weights on the CPU first. Config models (`config =`) are not
   loaded here: the zoo wrote them from the very model their config makes.

Servers are not contacted here: a served run checks its server before its first request.

Before all of these, and before the zoo is built or a GGUF exported, `check_extras`: every optional
extra (pyproject.toml) the suite's backends and executor import is installed (`specmoe.extras`).
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

from specmoe.backends import BackendInfo, backend_for
from specmoe.bench.batches import prompt_ids
from specmoe.errors import SpecmoeError
from specmoe.extras import require
from specmoe.prompts import load_prompt_set
from specmoe.results.store import check_store_path
from specmoe.suite.expand import expand
from specmoe.suite.model_paths import local_files
from specmoe.suite.types import SERVING_BACKEND, ModelSpec, RunSpec, Suite


def preflight(suite: Suite, db: Path, zoo_dir: Path | None, local: bool = True) -> None:
    """Raise SpecmoeError (one line: what, where, the fix) on the first fault any run would meet.

    Cheap checks come first; nothing is created or written (a new store is made by the run).
    `local` False: the runs execute on other machines (a Ray cluster), whose model paths and
    devices this one may not have, so only the prompt sets and the store are checked here; each
    worker refuses a broken model in one line when it loads it.
    """
    every = expand(suite)
    for prompt_set in sorted({s.prompt_set for s in every if s.prompt_set is not None}):
        load_prompt_set(prompt_set)
    check_store_path(db)
    if not local:
        return
    specs = [s for s in every if s.concurrency is None]  # served runs load no model here
    dtypes = _local_models(specs)
    paths = {name: local_files(suite.models[name], zoo_dir) for name in dtypes}
    backends = {name: _backend_of(suite.models[name], path) for name, path in paths.items()}
    contexts = {name: None if b is None else b.check_files(paths[name]) for name, b in backends.items()}
    _check_devices(suite, specs, backends)
    _check_context(specs, paths, contexts)
    _check_tokenizers(specs, paths, contexts)
    for name, path in paths.items():
        # A config model was written by `save_pretrained` of the model its config makes, moments ago
        # or in an earlier suite: loading it on the CPU proves nothing new and, at real shapes, costs
        # tens of seconds and as much host memory as the model.
        if contexts[name] is not None and suite.models[name].config is None:  # an HF model
            _check_loads(path, dtypes[name], _top_ks(specs, name), f"suite {suite.name}, model {name}")
        elif contexts[name] is None and path is not None:  # a GGUF file
            _check_gguf_top_k(path, _top_ks(specs, name), f"suite {suite.name}, model {name}")


def check_extras(suite: Suite, local: bool = True, executor_extra: str | None = None) -> None:
    """Refuse in one line, naming the extra to install, when a run of the suite (or its executor)
    needs a package that is not installed. `local` False: the workers load the models, so only the
    executor's own extra is needed here."""
    if executor_extra is not None:
        require(executor_extra, f"--executor {executor_extra}")
    if not local:
        return
    used = {name for spec in expand(suite) for name in spec.model_names}
    for name in sorted(used):
        model = suite.models[name]
        info = model.backend_info
        if info is not None and info.extra is not None:
            require(info.extra, f"suite {suite.name}: model {name} (backend {info.name})")
        elif model.backend == SERVING_BACKEND:
            require("serve", f"suite {suite.name}: model {name} (backend openai)")


def _local_models(specs: list[RunSpec]) -> dict[str, str]:
    """Suite-local names of every model a local run loads (targets, drafts, oracle cost models),
    each with the dtype of its first run."""
    dtypes: dict[str, str] = {}
    for spec in specs:
        dtypes.setdefault(spec.target, spec.dtype)
        if spec.draft_model is not None:
            dtypes.setdefault(spec.draft_model.name, spec.dtype)
        if spec.oracle_cost is not None:
            dtypes.setdefault(spec.oracle_cost, spec.dtype)
    return dtypes


def _backend_of(model: ModelSpec, path: Path | None) -> BackendInfo | None:
    """The backend whose checks the model's files get: the one a weights file names by its suffix
    (a .gguf path, a zoo model's GGUF export), else the model's own; None when nothing is local."""
    if path is None:
        return None
    implied = backend_for(path)
    return implied if implied.reads_file else model.backend_info


def _check_tokenizers(
    specs: list[RunSpec], paths: dict[str, Path | None], contexts: dict[str, int | None]
) -> None:
    """Each HF draft maps token ids to the same tokens as its HF target (`decode` checks this too,
    but only when the draft's group starts, after earlier groups' rows are stored)."""
    from specmoe.backends.tokenizer_digest import tokenizer_digest, tokenizer_mismatch

    digests: dict[str, str | None] = {}
    for spec in specs:
        draft = spec.draft_model
        # Only a draft model proposes its own tokens; an oracle proposes the target's.
        if draft is None or spec.draft is None or spec.draft.model_name is None:
            continue
        names = (draft.name, spec.target)
        if any(contexts.get(name) is None for name in names):  # not both HF models
            continue
        for name in names:
            if name not in digests:
                digests[name] = tokenizer_digest(paths[name])
        mismatch = tokenizer_mismatch(digests[draft.name], digests[spec.target])
        if mismatch:
            where = f"suite {spec.suite}, group {spec.group}, draft {draft.name} of target {spec.target}"
            raise SpecmoeError(f"{where}: {mismatch}")


def _check_devices(suite: Suite, specs: list[RunSpec], backends: dict[str, BackendInfo | None]) -> None:
    """Every device a local run asks for exists here, for the backend that runs it: torch's for HF
    models, llama.cpp's GPU offload for GGUF models. A llama.cpp model also runs llama.cpp's self-test
    (`llamacpp_check`) here, so a build that cannot run on this machine is found before the store."""
    fix = 'set device = "cpu" in the suite, or pass --set device=cpu'
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        backend = backends.get(spec.target)
        if backend is None or (backend.name, spec.device) in seen:
            continue
        seen.add((backend.name, spec.device))
        backend.check_device(spec.device, f"suite {suite.name}, group {spec.group}: device", fix)


def _top_ks(specs: list[RunSpec], target: str) -> list[int]:
    """The top-k values a sparsity sweep asks of `target`."""
    return sorted({s.moe_top_k for s in specs if s.target == target and s.moe_top_k is not None})


def _check_gguf_top_k(path: Path, top_ks: list[int], where: str) -> None:
    """A sparsity sweep's top-k within the GGUF model's experts (llama.cpp aborts on more)."""
    if top_ks:
        from specmoe.backends.llamacpp_load import llama_lib, top_k_override

        for top_k in top_ks:
            try:
                top_k_override(llama_lib(), path, top_k)
            except SpecmoeError as err:
                raise SpecmoeError(f"{where}: {err}") from None


def _check_loads(path: Path, dtype: str, top_ks: Sequence[int] = (), where: str = "") -> None:
    """Load an HF model once on the CPU and free it: `load_hf` refuses missing, unexpected and
    shape-mismatched weights, which only a load finds; each top-k a sparsity sweep asks of it must
    be within its experts (`set_moe_top_k` refuses it in one line)."""
    from specmoe.backends.hf import load_hf, set_moe_top_k

    backend = load_hf(path, dtype=dtype, device="cpu")
    for top_k in top_ks:
        try:
            set_moe_top_k(backend.model, top_k)
        except SpecmoeError as err:
            raise SpecmoeError(f"{where}: {err}") from None
    del backend
    gc.collect()


def _check_context(
    specs: list[RunSpec], paths: dict[str, Path | None], contexts: dict[str, int | None]
) -> None:
    """Each run's longest prompt + max_new_tokens + gamma within its models' context, as `decode`
    requires; HF models only, whose config.json states the context without loading anything."""
    from specmoe.api import load_tokenizer

    tokenizers: dict[str, object] = {}
    longest: dict[tuple, int] = {}
    for spec in specs:
        context = contexts.get(spec.target)
        if context is None:
            continue
        lookahead = spec.gamma if spec.draft is not None else 0
        if spec.draft_model is not None and contexts.get(spec.draft_model.name) is not None:
            context = min(context, contexts[spec.draft_model.name])
        key = (
            spec.target,
            spec.prompt_set,
            spec.prompt_length,
            spec.batch_size,
            spec.prompts,
            spec.prompt_batch,
            spec.chat,
        )
        if key not in longest:
            if spec.target not in tokenizers:
                tokenizers[spec.target] = load_tokenizer(paths[spec.target])
            longest[key] = _longest_prompt(spec, tokenizers[spec.target])
        need = longest[key] + spec.max_new_tokens + lookahead
        if need > context:
            models = spec.target + (f" and {spec.draft_model.name}" if spec.draft_model is not None else "")
            raise SpecmoeError(
                f"suite {spec.suite}, group {spec.group}: prompt ({longest[key]} tokens) + max_new_tokens "
                f"({spec.max_new_tokens}) + gamma ({lookahead}) = {need} exceeds the {context}-token "
                f"context of {models}; lower max_new_tokens or use shorter prompts"
            )


def _longest_prompt(spec: RunSpec, tokenizer) -> int:
    """The longest prompt of the run's batch, in tokens, as the runner will feed it."""
    if spec.prompt_length is not None:
        return spec.prompt_length
    lengths = [len(ids) for ids in prompt_ids(spec, tokenizer)]
    if min(lengths) == 0:
        raise SpecmoeError(
            f"prompt set {spec.prompt_set}: a prompt encodes to no tokens with {spec.target}'s tokenizer; "
            "remove the empty prompt"
        )
    return max(lengths)
