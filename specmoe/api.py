"""The Python API: load models, decode with or without a draft, read the stats.

from specmoe import api
target = api.load_model("zoo/moe", dtype="float64")
draft = api.ModelDrafter(api.load_model("zoo/draft-xs", dtype="float64"))
tokenizer = api.load_tokenizer("zoo/moe")
config = api.DecodeConfig(max_new_tokens=32, gamma=4)
result = api.decode(target, [tokenizer.encode("Hello")], config, drafter=draft)
print(tokenizer.decode(result.outputs[0].token_ids), api.summary(result))
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specmoe.backends import backend_for, load_backend
from specmoe.backends.base import Backend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.divergence import find_divergences
from specmoe.decoding.drafters import ModelDrafter
from specmoe.decoding.make_drafter import make_drafter
from specmoe.decoding.ngram import NgramDrafter
from specmoe.decoding.oracle import OracleDrafter
from specmoe.decoding.records import DecodeResult
from specmoe.decoding.sampling import SamplingParams
from specmoe.drafts import DraftSpec
from specmoe.errors import SpecmoeError
from specmoe.metrics import invariant_violations, summary

__all__ = [
    "DecodeConfig",
    "DecodeResult",
    "ModelDrafter",
    "NgramDrafter",
    "OracleDrafter",
    "SamplingParams",
    "chat_prompt_ids",
    "decode",
    "generate_text",
    "load_model",
    "load_tokenizer",
    "summary",
]


def load_model(path: str | Path, backend: str | None = None, **options: Any) -> Backend:
    """Load a model through a registered backend (options: dtype, device, ...); by default
    llamacpp for a .gguf file and hf for anything else."""
    return load_backend(backend or backend_for(path).name, str(path), **options)


def display_text(tokenizer, token_ids: Sequence[int]) -> str:
    """Generated tokens as text for a reader: special tokens such as an instruct model's end of turn
    (`<|im_end|>`) are left out; the token ids keep them."""
    return tokenizer.decode(list(token_ids), skip_special_tokens=True)


def load_tokenizer(path: str | Path):
    """The model's tokenizer: tokenizer.json of an HF directory, or the vocabulary inside a GGUF file."""
    if backend_for(path).self_contained:
        from specmoe.backends.gguf_tokenizer import GGUFTokenizer

        return GGUFTokenizer(path)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoTokenizer

    from specmoe.backends.weights import read_config

    # AutoTokenizer reads config.json too, and would blame a broken one on tokenizer.json.
    if (Path(path) / "config.json").is_file():
        read_config(Path(path))
    from huggingface_hub.errors import StrictDataclassError

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except StrictDataclassError as err:  # a config.json value of the wrong type, in transformers' words
        reason = " ".join(line.strip() for line in str(err).splitlines()[:2])
        raise SpecmoeError(
            f"'{Path(path) / 'config.json'}': {reason}; restore the model's own config.json"
        ) from None
    except (OSError, ValueError) as err:
        raise SpecmoeError(
            f"no usable tokenizer in '{path}' ({type(err).__name__}); "
            "the model directory needs tokenizer.json"
        ) from None
    # A prompt longer than the model's context is refused with the context's arithmetic in one line
    # (`decode`); transformers' own notice of it, a second line that speaks of indexing errors, is
    # marked as already given.
    tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
    return tokenizer


def chat_prompt_ids(tokenizer, text: str) -> list[int]:
    """Token ids of `text` as one user message in the tokenizer's chat template, with the
    assistant's turn opened (`add_generation_prompt`): what a chat server feeds the model.

    The template decides everything else, a system message and BOS included (SmolLM2's adds a
    default system message and no BOS). Works for transformers tokenizers and `GGUFTokenizer`; both
    give the same ids for the same template. A tokenizer without a template is refused in one line.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise SpecmoeError(
            "the model's tokenizer has no chat template; drop --chat (or chat = true) for base models"
        )
    messages = [{"role": "user", "content": text}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(rendered, add_special_tokens=False))


def as_path(spec: str) -> Path:
    """A model directory or .gguf file named by its path: the default resolver of `generate_text`
    (the CLI passes one that also knows zoo names and hub IDs, `zoo.manifest.resolve_model_file`)."""
    return Path(spec).expanduser()


def check_invariants(result: DecodeResult) -> None:
    """Every run is checked; a violation is a bug in the decode loop, never the user's fault."""
    problems = invariant_violations(result)
    if problems:
        raise AssertionError("decode invariants violated: " + "; ".join(problems[:5]))


def _check_text(prompts: Sequence[str]) -> None:
    """Refuse prompts that are not text: bytes that are not UTF-8 reach Python from a command line
    as lone surrogates (PEP 383), which no tokenizer can encode."""
    for index, text in enumerate(prompts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise SpecmoeError(
                f"prompt {index + 1} is not valid UTF-8 text (bad byte at character {err.start + 1}); "
                "pass UTF-8 text (check the terminal's or the file's encoding)"
            ) from None


def generate_text(
    target: str,
    prompts: Sequence[str],
    draft: DraftSpec | None = None,
    resolve: Callable[[str], Path] = as_path,
    gamma: int = 4,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    max_new_tokens: int = 64,
    ignore_eos: bool = False,
    check: bool = False,
    chat: bool = False,
    **model_options: Any,
) -> dict:
    """Decode text prompts as one batch; return the JSON-ready report `specmoe generate` prints.
    chat: each prompt goes in as a user message of the model's chat template (`chat_prompt_ids`)."""
    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    config = DecodeConfig(
        max_new_tokens=max_new_tokens, gamma=gamma, sampling=sampling, seed=seed, ignore_eos=ignore_eos
    )
    if draft is not None and gamma < 1:
        raise SpecmoeError(f"--gamma must be >= 1 (tokens drafted per round), got {gamma}")
    target_dir = resolve(target)
    if model_options.get("compile") and not backend_for(target_dir).can_compile:
        raise SpecmoeError("--compile applies to transformers models; drop it for .gguf models")
    if draft is not None and draft.needs_cost_model:
        raise SpecmoeError(
            f"--draft {draft}: oracle drafts need a cost model; run them from a suite file (docs/suites.md)"
        )
    draft_dir = resolve(draft.model_name) if draft is not None and draft.model_name is not None else None
    _check_text(prompts)
    tokenizer = load_tokenizer(target_dir)
    if chat:
        token_prompts = [chat_prompt_ids(tokenizer, text) for text in prompts]
    else:
        token_prompts = [tokenizer.encode(text, add_special_tokens=False) for text in prompts]
    if any(not p for p in token_prompts):
        raise SpecmoeError("empty prompt: every --prompt needs at least one token of text")
    target_model = load_model(target_dir, **model_options)
    drafter = None
    if draft is not None:
        draft_model = None if draft_dir is None else load_model(draft_dir, **model_options)
        drafter = make_drafter(draft, target_model, draft_model)
    result = decode(target_model, token_prompts, config, drafter=drafter)
    check_invariants(result)
    report: dict = {
        "outputs": [
            {
                "token_ids": list(o.token_ids),
                "text": display_text(tokenizer, o.token_ids),
                "finish_reason": o.finish_reason,
            }
            for o in result.outputs
        ],
        "stats": summary(result),
    }
    if check and drafter is not None:
        plain = decode(target_model, token_prompts, config)
        found = find_divergences(
            target_model,
            token_prompts,
            [o.token_ids for o in result.outputs],
            [o.token_ids for o in plain.outputs],
        )
        report["divergences"] = [
            {"sequence": d.sequence, "position": d.position, "margin": d.margin} for d in found
        ]
    return report
