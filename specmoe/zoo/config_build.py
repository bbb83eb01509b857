"""Random-weight models of any Hugging Face config, built on the device they will run on.

`specmoe zoo build --config FILE [--config ...]` writes each config's model as a normal Hugging Face
directory (config.json, safetensors shards, generation_config.json, the project tokenizer), plus
the zoo.json manifest every zoo has, so `generate`, `profile`, suites and `zoo list` read it as they
read any zoo. Layout and atomicity are the preset zoo's (`specmoe.zoo.build`): each model is written
into `<name>.partial/` and renamed, zoo.json comes last, one build at a time holds the folder's lock.

Speed: the model is constructed directly on the device in its dtype (transformers' own init, then
`config_init.init_routing_aware` in place), so on a GPU a 7B model is made in well under a second
of kernel time; writing it is then bounded by copying it to the host and the disk. The size is
known before anything is allocated (a copy on the meta device), so a model that cannot fit the
device or the disk is refused in one line first.

Without `--out` each model goes to its own folder in the per-user cache, named by the config's
digest, the seed and the dtype (`config_cache_dir`): the folder a suite's `config =` model uses, so
a model built once by hand or by a suite is reused by both.
"""

from __future__ import annotations

import gc
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from specmoe.dtypes import DTYPE_BYTES, DTYPE_NAMES, torch_dtype
from specmoe.errors import SpecmoeError
from specmoe.zoo.cache import cache_root
from specmoe.zoo.config_source import ConfigSource, moe_fields
from specmoe.zoo.files import sha256_file, write_json_atomic
from specmoe.zoo.manifest import (
    IN_PROGRESS_NAME,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    format_bytes,
    format_count,
    load_manifest,
)

CONFIG_PRESET = "config"  # the manifest's preset for config-built zoos
DEFAULT_DTYPE = "bfloat16"
SHARD_SIZE = "4GB"  # host memory while saving is about one shard


@dataclass(frozen=True)
class ParamSummary:
    """Parameter counts of a built model. Active: what one token's forward uses, every routed
    expert tensor counted at K/E of its size (shared experts, routers, embeddings in full), the
    convention of `specmoe.zoo.params`."""

    total: int
    active: int
    experts: int  # routed experts per MoE layer; 0 for a dense model
    top_k: int


def config_cache_dir(source: ConfigSource, seed: int, dtype: str) -> Path:
    """Where a config's model is cached: `<cache>/configs/<name>-<digest>-seed<seed>-<dtype>`."""
    return cache_root() / "configs" / f"{source.name}-{source.digest[:12]}-seed{seed}-{dtype}"


def build_config_zoo(
    sources: Sequence[ConfigSource],
    out_dir: Path,
    *,
    seed: int = 0,
    dtype: str = DEFAULT_DTYPE,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write every source's model under out_dir (a no-op when the same build is there) and return it."""
    from specmoe.zoo.build import build_lock, claim_out_dir

    _check_sources(sources, dtype)
    out_dir = Path(out_dir)
    build_args = _build_args(sources, seed, dtype)
    if _already_built(out_dir, build_args):
        return out_dir
    with build_lock(out_dir, progress):
        if _already_built(out_dir, build_args):  # built by another process while this one waited
            return out_dir
        claim_out_dir(out_dir, build_args)
        from specmoe.zoo.tokenizer import corpus_files, train_tokenizer

        tokenizer = train_tokenizer(corpus_files())
        models = {}
        for source in sources:
            models[source.name] = _write_model(source, out_dir, seed, dtype, device, tokenizer, progress)
        write_json_atomic(out_dir / MANIFEST_NAME, _manifest(build_args, models, out_dir))
        (out_dir / IN_PROGRESS_NAME).unlink()
    return out_dir


def build_cached(
    source: ConfigSource,
    *,
    seed: int = 0,
    dtype: str = DEFAULT_DTYPE,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The model directory of `source` in the per-user cache, built there first if it is not."""
    zoo = build_config_zoo(
        [source],
        config_cache_dir(source, seed, dtype),
        seed=seed,
        dtype=dtype,
        device=device,
        progress=progress,
    )
    return zoo / source.name


def config_model(source: ConfigSource, seed: int = 0, dtype: str = DEFAULT_DTYPE, device: str = "cpu"):
    """The model of `source` in memory, on `device`, exactly as a build writes it; nothing is saved."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from specmoe.backends.hf import resolve_device
    from specmoe.zoo.config_init import init_routing_aware
    from specmoe.zoo.tokenizer import EOS_TOKEN_ID

    torch_device = resolve_device(device)
    config = source.hf_config()
    _check_fits(source, config, dtype, torch_device)
    devices = [torch_device] if torch_device.type == "cuda" else []
    # transformers' own init covers the tensors no role names (norm gains, A_log, ...): seeded, and
    # in a forked RNG so the caller's stream is left as it was.
    with torch.random.fork_rng(devices=devices, device_type=torch_device.type), torch_device:
        torch.manual_seed(seed)
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype(dtype))
        except (ValueError, TypeError, KeyError, IndexError) as err:
            raise SpecmoeError(
                f"{source.path}: transformers cannot build this config ({_first_line(err)}); fix the file"
            ) from None
    init_routing_aware(model, seed, source.digest)
    model.generation_config = GenerationConfig(
        bos_token_id=None, eos_token_id=EOS_TOKEN_ID, pad_token_id=EOS_TOKEN_ID
    )
    return model.eval()


def count_model_params(model, config: dict) -> ParamSummary:
    """`ParamSummary` of a model (real or on the meta device): routed experts are the 3-D tensors
    under `.experts.` whose first dimension is the expert count."""
    experts, top_k = moe_fields(config)
    total = active = 0.0
    for name, param in model.named_parameters():
        n = param.numel()
        total += n
        routed = experts and param.dim() == 3 and ".experts." in name and param.shape[0] == experts
        active += n * top_k / experts if routed else n
    return ParamSummary(int(total), round(active), experts, top_k)


def _check_sources(sources: Sequence[ConfigSource], dtype: str) -> None:
    if not sources:
        raise SpecmoeError("no config given; pass --config FILE (repeatable)")
    if dtype not in DTYPE_NAMES:
        raise SpecmoeError(f"unknown dtype '{dtype}'; use one of {', '.join(DTYPE_NAMES)}")
    names = [s.name for s in sources]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SpecmoeError(
            f"two configs are named {twice[0]} (models are named by file stem); rename one file, or build "
            "them into separate --out folders"
        )


def _meta_summary(source: ConfigSource, config) -> ParamSummary:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        try:
            meta = AutoModelForCausalLM.from_config(config)
        except (ValueError, TypeError, KeyError, IndexError) as err:
            raise SpecmoeError(
                f"{source.path}: transformers cannot build this config ({_first_line(err)}); fix the file"
            ) from None
    return count_model_params(meta, source.shape)


def _check_fits(source: ConfigSource, config, dtype: str, device: torch.device) -> None:
    """Refuse a model larger than the device's free memory before allocating any of it."""
    need = _meta_summary(source, config).total * DTYPE_BYTES[dtype]
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        where = f"{device} has {format_bytes(free)} free"
    elif device.type == "cpu":
        import os

        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        where = f"this machine has {format_bytes(free)} of memory available"
    else:
        return
    if need > free:
        raise SpecmoeError(
            f"{source.name} needs {format_bytes(need)} in {dtype} and {where}; build it on a larger device "
            "or pick a smaller config"
        )


def _write_model(
    source: ConfigSource,
    out_dir: Path,
    seed: int,
    dtype: str,
    device: str,
    tokenizer,
    progress: Callable[[str], None] | None,
) -> dict:
    from specmoe.backends.weights import weights_fingerprint
    from specmoe.zoo.build import apply_umask
    from specmoe.zoo.tokenizer import VOCAB_SIZE, save_tokenizer

    final, staging = out_dir / source.name, out_dir / f"{source.name}.partial"
    for stale in (staging, final):  # leftovers of an interrupted build with the same arguments
        if stale.exists():
            shutil.rmtree(stale)
    summary = _meta_summary(source, source.hf_config())
    size = summary.total * DTYPE_BYTES[dtype]
    _check_disk(source, out_dir, size)
    if progress is not None:
        progress(
            f"building {source.name} ({source.model_type}, {format_count(summary.total)} parameters, "
            f"{format_bytes(size)} in {dtype}) on {device}"
        )
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # progress is this function's lines, on the log
    started = time.perf_counter()
    model = config_model(source, seed, dtype, device)
    made_s = time.perf_counter() - started
    model.save_pretrained(staging, max_shard_size=SHARD_SIZE)
    del model
    if device.startswith("cuda"):  # give the memory back, so the next model's size check sees it free
        gc.collect()
        torch.cuda.empty_cache()
    save_tokenizer(tokenizer, staging)
    for weights in staging.glob("*.safetensors"):
        apply_umask(weights)
    staging.rename(final)
    written_s = time.perf_counter() - started
    if progress is not None:
        progress(f"wrote {source.name} in {written_s:.1f} s (made on {device} in {made_s:.1f} s)")
    config = source.shape
    return {
        "path": source.name,
        "architecture": source.model_type,
        "total_params": summary.total,
        "active_params": summary.active,
        "bytes_bf16": summary.total * DTYPE_BYTES["bfloat16"],
        "layers": config.get("num_hidden_layers"),
        "hidden": config.get("hidden_size"),
        "experts": summary.experts,
        "top_k": summary.top_k,
        "vocab_size": config.get("vocab_size"),
        "tokenizer_tokens": VOCAB_SIZE,
        "tied_embeddings": bool(config.get("tie_word_embeddings", False)),
        "source": {
            "config": source.path.name,
            "config_sha256": source.sha256,
            "overrides": dict(source.overrides),
            "dropped": list(source.dropped),
        },
        "seed": seed,
        "dtype": dtype,
        "bytes": size,
        "built_on": _device_name(device),
        "make_s": round(made_s, 3),
        "write_s": round(written_s, 3),
        "weights_fingerprint": weights_fingerprint(final),
    }


def _check_disk(source: ConfigSource, out_dir: Path, size: int) -> None:
    free = shutil.disk_usage(out_dir).free
    if size > free:
        raise SpecmoeError(
            f"{source.name} takes {format_bytes(size)} on disk and {out_dir} has {format_bytes(free)} free; "
            "free space or pick another --out"
        )


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return device


def _build_args(sources: Sequence[ConfigSource], seed: int, dtype: str) -> dict:
    """What decides the files: compared against an existing build before reusing it."""
    configs = ", ".join(f"{s.name}@{s.digest}" for s in sources)
    return {
        "format": MANIFEST_FORMAT,
        "preset": CONFIG_PRESET,
        "seed": seed,
        "overrides": {"dtype": dtype, "configs": configs},
    }


def _already_built(out_dir: Path, build_args: dict) -> bool:
    if not (out_dir / MANIFEST_NAME).is_file():
        return False
    manifest = load_manifest(out_dir)
    if {key: manifest.get(key) for key in build_args} != build_args:
        raise SpecmoeError(
            f"{out_dir} already holds another zoo ({manifest.get('preset')}, seed {manifest.get('seed')}, "
            f"{manifest.get('overrides')}); pick another --out"
        )
    missing = [
        name
        for name, entry in manifest["models"].items()
        if not (out_dir / entry["path"] / "config.json").is_file()
    ]
    if missing:
        raise SpecmoeError(
            f"zoo at {out_dir} is missing {', '.join(missing)} although zoo.json lists them; "
            "delete the directory and rebuild, or pick another --out"
        )
    return True


def _manifest(build_args: dict, models: dict[str, dict], out_dir: Path) -> dict:
    from specmoe.zoo.build import library_versions
    from specmoe.zoo.tokenizer import EOS_TOKEN_ID

    first = next(iter(models.values()))["path"]
    return {
        **build_args,
        "eos_token_id": EOS_TOKEN_ID,
        "pad_token_id": EOS_TOKEN_ID,
        "tokenizer_sha256": sha256_file(out_dir / first / "tokenizer.json"),
        # random streams are only guaranteed stable within one torch version and device type
        "versions": library_versions(),
        "models": models,
    }


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
