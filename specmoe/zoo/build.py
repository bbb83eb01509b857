"""Build a zoo: every model of a preset as a Hugging Face directory, plus the zoo.json manifest.

Layout of out_dir:
    zoo.json            written last; its presence means the build is complete
    .zoo-build.json     the build's arguments, present only while a build runs (or was interrupted)
    <model>/            config.json, generation_config.json, model.safetensors (bf16), tokenizer files
    eagle3/             a trained preset's EAGLE-3 head (`zoo.heads`), when it has one; an MTP
                        module is saved inside its target's model.safetensors (mtp.*)

Each model is written into `<model>.partial/` and renamed into place when complete, so a model
directory that exists is never half-written. Rebuilding with the same arguments is a no-op;
different arguments into a non-empty directory are refused rather than mixed.
"""

import fcntl
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import tokenizers
import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, GenerationConfig, PretrainedConfig, PreTrainedModel

import specmoe
from specmoe.errors import SpecmoeError
from specmoe.zoo.checkpoint import checkpoint_tensors
from specmoe.zoo.files import apply_umask, sha256_file, write_json_atomic
from specmoe.zoo.heads import record_acceptance, write_heads
from specmoe.zoo.hf_config import hf_config
from specmoe.zoo.init import init_weights
from specmoe.zoo.manifest import (
    IN_PROGRESS_NAME,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    format_bytes,
    format_count,
    load_manifest,
)
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import MTP, ModelShape, ZooPreset, get_preset
from specmoe.zoo.tokenizer import EOS_TOKEN_ID, corpus_files, save_tokenizer, train_tokenizer

if TYPE_CHECKING:
    from specmoe.zoo.train import TrainedFamily

WEIGHTS_NAME = "model.safetensors"


def build_zoo(
    preset: str,
    out_dir: Path,
    seed: int = 0,
    num_experts: int | None = None,
    top_k: int | None = None,
    *,
    train_steps: int | None = None,
    progress: Callable[[str], None] | None = None,
    reuse: Path | None = None,
) -> Path:
    """Write every model of `preset` under out_dir and return out_dir.

    The same (preset, seed, overrides) give byte-identical model.safetensors files on the same
    torch version (for a trained preset: and the same Python, whose standard library it reads, on
    the same machine). `train_steps` shortens a trained preset's training (for tests). `progress`,
    if given, receives one line per model as it is trained or written. `reuse`: another folder
    that may hold a finished build with the same arguments (the per-user cache); when it does, its
    files are copied instead of training minutes again.
    """
    out_dir = Path(out_dir)
    zoo = get_preset(preset, num_experts, top_k, train_steps)
    overrides: dict[str, int | None] = {"num_experts": num_experts, "top_k": top_k}
    if train_steps is not None:  # only when given, so zoos built before the option still match
        overrides["train_steps"] = train_steps
    build_args = {"format": MANIFEST_FORMAT, "preset": preset, "seed": seed, "overrides": overrides}
    if _already_built(out_dir, build_args, zoo):
        return out_dir
    with build_lock(out_dir, progress):
        # Another process may have built it while this one waited for the lock: reuse it.
        if _already_built(out_dir, build_args, zoo):
            return out_dir
        if reuse is not None and _holds_build(Path(reuse), out_dir, build_args, zoo):
            return _copy_build(Path(reuse), out_dir, zoo, build_args, progress)
        return _build(out_dir, zoo, build_args, seed, progress)


def _holds_build(source: Path, out_dir: Path, build_args: dict, zoo: ZooPreset) -> bool:
    """Whether source is another folder holding a finished build with exactly these arguments (and
    the preset's heads: a build made before a preset had them is not one)."""
    if not (source / MANIFEST_NAME).is_file() or source.resolve() == out_dir.resolve():
        return False
    manifest = _read_json(source / MANIFEST_NAME) or {}
    heads = set(zoo.training.heads if zoo.training else ())
    return (
        {key: manifest.get(key) for key in build_args} == build_args
        and all((source / s.name / WEIGHTS_NAME).is_file() for s in zoo.models)
        and heads <= set(manifest.get("heads") or {})
    )


def _copy_build(
    source: Path, out_dir: Path, zoo: ZooPreset, build_args: dict, progress: Callable[[str], None] | None
) -> Path:
    """Copy a finished build into out_dir as `_build` would write it: each model through
    `<model>.partial/`, zoo.json last, so an interrupted copy is resumed like an interrupted build."""
    claim_out_dir(out_dir, build_args)
    if progress is not None:
        progress(f"copying the {_describe(build_args)} zoo already built in {source} (no training)")
    for name in zoo.model_names + zoo.head_models:
        final, staging = out_dir / name, out_dir / f"{name}.partial"
        for stale in (staging, final):
            if stale.exists():
                shutil.rmtree(stale)
        shutil.copytree(source / name, staging)
        staging.rename(final)
    write_json_atomic(out_dir / MANIFEST_NAME, load_manifest(source))
    (out_dir / IN_PROGRESS_NAME).unlink()
    return out_dir


@contextmanager
def build_lock(out_dir: Path, progress: Callable[[str], None] | None) -> Iterator[None]:
    """Hold an exclusive lock for building out_dir. Two builds of one zoo at once (two `specmoe demo`
    on a fresh cache) would both train, and the first to finish would delete the other's
    .zoo-build.json under it; with the lock the second waits, then finds zoo.json and reuses it. The
    lock file sits in the parent folder, so out_dir itself stays empty until the build claims it,
    and is never deleted: unlinking a lock file lets a third process lock a new file meanwhile."""
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        handle = (out_dir.parent / f".{out_dir.name}.zoo-lock").open("a")
    except OSError as err:
        raise SpecmoeError(
            f"cannot create the build lock beside {out_dir} ({err.strerror}); "
            "pick a writable folder (--out, or --zoo for a suite)"
        ) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress is not None:
                progress(f"waiting for another process building the zoo in {out_dir}")
            fcntl.flock(handle, fcntl.LOCK_EX)  # released by the kernel if that process dies
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(
    out_dir: Path,
    zoo: ZooPreset,
    build_args: dict,
    seed: int,
    progress: Callable[[str], None] | None,
) -> Path:
    """Train or initialise every model of the preset into out_dir, zoo.json last (under the lock)."""
    claim_out_dir(out_dir, build_args)
    tokenizer = train_tokenizer(corpus_files())
    family = None
    if zoo.training is not None:
        from specmoe.zoo.train import train_family  # torch training code, only for trained presets

        family = train_family(zoo, seed, tokenizer, progress)
    models = {}
    heads = {} if family is None else family.heads
    for shape in zoo.models:
        if progress is not None:
            count = count_params(shape, zoo.vocab_size)
            size = f"{format_count(count.total)} parameters, {format_bytes(count.bf16_bytes)}"
            progress(f"writing {shape.name} ({size})")
        carried = heads[MTP].tensors if MTP in heads and shape.name == zoo.training.teacher else {}
        weights = _weights(shape, zoo, seed, family)
        models[shape.name] = _write_model(shape, zoo, weights, tokenizer, out_dir, carried)
        if family is not None:
            models[shape.name].update(family.models[shape.name].manifest())
    manifest = _manifest(build_args, zoo, models, out_dir)
    if family is not None:
        manifest["training"] = family.manifest()
    if heads:
        manifest["heads"] = write_heads(heads, zoo, tokenizer, out_dir)
        record_acceptance(manifest, zoo, out_dir, progress)
    write_json_atomic(out_dir / MANIFEST_NAME, manifest)
    (out_dir / IN_PROGRESS_NAME).unlink()
    return out_dir


def _weights(
    shape: ModelShape, zoo: ZooPreset, seed: int, family: "TrainedFamily | None"
) -> Iterator[tuple[str, torch.Tensor]]:
    """(in-memory parameter name, tensor) pairs: the routing-aware random init, or what training made."""
    if family is None:
        return init_weights(_param_shapes(hf_config(shape, zoo)), shape, seed)
    return iter(family.models[shape.name].weights.items())


def library_versions() -> dict[str, str]:
    """The versions a build's random streams and files depend on, recorded in its manifest."""
    return {
        "specmoe": specmoe.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def _manifest(build_args: dict, zoo: ZooPreset, models: dict[str, dict], out_dir: Path) -> dict:
    return {
        **build_args,
        "vocab_size": zoo.vocab_size,
        "eos_token_id": EOS_TOKEN_ID,
        "pad_token_id": EOS_TOKEN_ID,
        "tokenizer_sha256": sha256_file(out_dir / zoo.models[0].name / "tokenizer.json"),
        # torch.randn's stream is only guaranteed stable within one torch version.
        "versions": library_versions(),
        "models": models,
    }


def _describe(args: dict) -> str:
    overrides = ", ".join(f"{k}={v}" for k, v in args["overrides"].items() if v is not None)
    return f"preset={args['preset']}, seed={args['seed']}" + (f", {overrides}" if overrides else "")


def _already_built(out_dir: Path, build_args: dict, zoo: ZooPreset) -> bool:
    if not (out_dir / MANIFEST_NAME).is_file():
        return False
    manifest = load_manifest(out_dir)
    existing = {key: manifest.get(key) for key in build_args}
    if existing != build_args:
        raise SpecmoeError(
            f"{out_dir} already holds a zoo built with {_describe(existing)}; "
            f"pick another --out to build {_describe(build_args)}"
        )
    missing = [s.name for s in zoo.models if not (out_dir / s.name / WEIGHTS_NAME).is_file()]
    if missing:
        raise SpecmoeError(
            f"zoo at {out_dir} is missing {', '.join(missing)} although zoo.json lists them; "
            "delete the directory and rebuild, or pick another --out"
        )
    return True


def claim_out_dir(out_dir: Path, build_args: dict) -> None:
    """Make out_dir ours: empty, or holding an interrupted build with the same arguments."""
    if out_dir.exists() and not out_dir.is_dir():
        raise SpecmoeError(f"--out {out_dir} is a file, not a directory; pick another --out")
    marker = out_dir / IN_PROGRESS_NAME
    # A non-empty directory is only ours to write into if it is our own interrupted build.
    if out_dir.is_dir() and any(out_dir.iterdir()) and _read_json(marker) != build_args:
        raise SpecmoeError(
            f"{out_dir} is not empty and holds no zoo build with {_describe(build_args)}; pick another --out"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(marker, build_args)


def _read_json(path: Path) -> dict | None:
    """The JSON object in path, or None if it is missing or unreadable (say, cut short)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _param_shapes(config: PretrainedConfig) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes as transformers lays them out, from a model on the meta device
    (no memory allocated)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return {name: tuple(param.shape) for name, param in model.named_parameters()}


def zoo_model(
    shape: ModelShape, zoo: ZooPreset, seed: int = 0, dtype: torch.dtype = torch.float32
) -> PreTrainedModel:
    """One random-weight zoo model built in memory, equal to loading its built checkpoint with
    `dtype` (weights are rounded to bf16 first, as on disk). For tests and experiments; nothing is
    written. A trained preset's weights exist only after training: build it and load the files."""
    if zoo.training is not None:
        raise SpecmoeError(
            f"preset '{zoo.name}' is trained; build it with `specmoe zoo build --preset {zoo.name}` "
            "and load the files"
        )
    config = hf_config(shape, zoo)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    weights = {
        name: t.to(torch.bfloat16).to(dtype) for name, t in init_weights(_param_shapes(config), shape, seed)
    }
    model.load_state_dict(weights, strict=True)
    return model.eval()


def _bf16_checkpoint(weights: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """Checkpoint (key, bf16 tensor) pairs from (in-memory parameter name, tensor) pairs."""
    for param_name, tensor in weights:
        yield from checkpoint_tensors(param_name, tensor.to(torch.bfloat16))


def _write_model(
    shape: ModelShape,
    zoo: ZooPreset,
    weights: Iterator[tuple[str, torch.Tensor]],
    tokenizer: tokenizers.Tokenizer,
    out_dir: Path,
    carried: dict[str, torch.Tensor] | None = None,
) -> dict:
    """Write one model's folder; `carried`: tensors its checkpoint holds beyond the model's own
    (an MTP module's mtp.*), counted apart."""
    final, staging = out_dir / shape.name, out_dir / f"{shape.name}.partial"
    for stale in (staging, final):  # leftovers of an interrupted build with the same arguments
        if stale.exists():
            shutil.rmtree(stale)
    staging.mkdir()
    config = hf_config(shape, zoo)
    config.save_pretrained(staging)
    GenerationConfig(bos_token_id=None, eos_token_id=EOS_TOKEN_ID, pad_token_id=EOS_TOKEN_ID).save_pretrained(
        staging
    )
    save_tokenizer(tokenizer, staging)
    tensors = dict(_bf16_checkpoint(weights))
    count = count_params(shape, zoo.vocab_size)
    written = sum(t.numel() for t in tensors.values())
    if written != count.total:
        raise AssertionError(f"{shape.name}: wrote {written} parameters, the analytic count is {count.total}")
    tensors.update(carried or {})
    save_file(tensors, staging / WEIGHTS_NAME, metadata={"format": "pt"})
    del tensors
    apply_umask(staging / WEIGHTS_NAME)
    staging.rename(final)
    return {
        "path": shape.name,
        "architecture": shape.model_type,
        "total_params": count.total,
        "active_params": count.active,
        "bytes_bf16": count.bf16_bytes,
        "layers": shape.num_layers,
        "hidden": shape.hidden_size,
        "experts": shape.num_experts,
        "top_k": shape.top_k,
        "safetensors_sha256": sha256_file(final / WEIGHTS_NAME),
    }
