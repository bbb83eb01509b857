"""A trained family's head drafters on disk and in its manifest, with their held-out acceptance.

An MTP module is written inside its target's model.safetensors, under Qwen3.5's names (mtp.*, its
experts one tensor each), and the target's config.json says `mtp_num_hidden_layers: 1`, as
Qwen3.5's does; an EAGLE-3 head is its own folder, `eagle3/`, in the layout vLLM and SGLang load
(config.json naming `LlamaForCausalLMEagle3`, safetensors with fc, midlayer.*, norm, lm_head, d2t,
t2d, embed_tokens), plus the family's tokenizer files. zoo.json lists both under "heads", apart
from "models" (a head is no model a GGUF export or a table of model shapes would read), each with
its greedy acceptance at γ = 1..4 on the built-in prompt kinds (held out from training) beside
draft-xs's (`agreement.acceptance_by_gamma`, float32, one thread).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import tokenizers
from safetensors.torch import save_file

from specmoe.zoo.agreement import acceptance_by_gamma
from specmoe.zoo.files import apply_umask, sha256_file
from specmoe.zoo.presets import EAGLE3, MTP, ZooPreset
from specmoe.zoo.tokenizer import save_tokenizer
from specmoe.zoo.train_heads import TrainedHead

WEIGHTS_NAME = "model.safetensors"
GAMMAS = (1, 2, 3, 4)
COMPARED = "draft-xs"  # the draft whose acceptance the manifest records beside the heads'


def write_heads(
    heads: dict[str, TrainedHead], zoo: ZooPreset, tokenizer: tokenizers.Tokenizer, out_dir: Path
) -> dict[str, dict]:
    """Write the heads that live in folders of their own (an MTP module went into its target's
    checkpoint with the target); return zoo.json's "heads" table."""
    teacher = zoo.training.teacher
    table = {}
    for name, head in heads.items():
        entry = {"kind": name, "target": teacher, **head.manifest()}
        if name == MTP:
            entry.update(path=teacher, layers=1)
        else:
            entry.update(_write_eagle3(head, tokenizer, out_dir))
        table[name] = entry
    return table


def _write_eagle3(head: TrainedHead, tokenizer: tokenizers.Tokenizer, out_dir: Path) -> dict:
    final, staging = out_dir / EAGLE3, out_dir / f"{EAGLE3}.partial"
    for stale in (staging, final):
        if stale.exists():
            shutil.rmtree(stale)
    staging.mkdir()
    (staging / "config.json").write_text(json.dumps(head.config, indent=2) + "\n", encoding="utf-8")
    save_tokenizer(tokenizer, staging)
    save_file(head.tensors, staging / WEIGHTS_NAME, metadata={"format": "pt"})
    apply_umask(staging / WEIGHTS_NAME)
    staging.rename(final)
    assert head.config is not None
    return {
        "path": EAGLE3,
        "architecture": head.config["architectures"][0],
        "reads_layers": head.config["eagle_aux_hidden_state_layer_ids"],
        "draft_vocab": head.config["draft_vocab_size"],
        "safetensors_sha256": sha256_file(final / WEIGHTS_NAME),
    }


def record_acceptance(
    manifest: dict, zoo: ZooPreset, out_dir: Path, progress: Callable[[str], None] | None = None
) -> None:
    """Each head's greedy acceptance at γ = 1..4 against its target, and draft-xs's beside it, into
    the manifest (measured on one thread, so the same build records the same numbers)."""
    from specmoe.zoo.train import reproducible

    target = out_dir / manifest["models"][zoo.training.teacher]["path"]
    drafts = {name: entry for name, entry in manifest["heads"].items()}
    if COMPARED in manifest["models"]:
        drafts[COMPARED] = manifest["models"][COMPARED]
    with reproducible():
        for name, entry in drafts.items():
            spelling = MTP if name == MTP else str(out_dir / entry["path"])
            entry["acceptance"] = acceptance_by_gamma(target, spelling, GAMMAS)
            if progress is not None:
                rates = ", ".join(f"γ={g} {a:.2f}" for g, a in entry["acceptance"].items())
                progress(f"held-out acceptance of {name} against {zoo.training.teacher}: {rates}")
