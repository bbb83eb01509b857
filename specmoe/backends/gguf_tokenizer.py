"""The tokenizer stored in a GGUF file, through llama.cpp's vocabulary (the `llamacpp` extra)."""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from pathlib import Path

from specmoe.backends.llamacpp_load import Handles, llama_lib, load_model_pointer


class GGUFTokenizer:
    """The tokenizer stored in a GGUF file, tokenizing exactly as llama.cpp does.

    Provides the two methods the decode loop's edges use: encode(text, add_special_tokens=False) and
    decode(ids).
    """

    def __init__(self, path: str | Path) -> None:
        lib = llama_lib()
        self.path = Path(path).expanduser()
        model = load_model_pointer(self.path, vocab_only=True)
        self._lib = lib
        self._vocab = lib.llama_model_get_vocab(model)
        template = lib.llama_model_chat_template(model, None)
        self._chat_template = template.decode("utf-8") if template else None
        handles = Handles(lib, model)
        weakref.finalize(self, handles.free)

    @property
    def chat_template(self) -> str | None:
        """The chat template stored in the file (`tokenizer.chat_template`), or None."""
        return self._chat_template

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = False):
        """The messages rendered by the file's chat template, as transformers renders it (Jinja in a
        sandbox, with the vocabulary's BOS and EOS texts); tokenize=True also encodes the text."""
        from transformers.utils.chat_template_utils import render_jinja_template

        special = {"bos_token": self._token_text("bos"), "eos_token": self._token_text("eos")}
        rendered, _ = render_jinja_template(
            conversations=[messages],
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            **special,
        )
        return self.encode(rendered[0]) if tokenize else rendered[0]

    def _token_text(self, which: str) -> str:
        token = getattr(self._lib, f"llama_vocab_{which}")(self._vocab)
        return "" if token < 0 else (self._lib.llama_vocab_get_text(self._vocab, token) or b"").decode()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of text; special tokens written in it (`<|im_start|>`) are recognised, as
        transformers' tokenizers do, so both backends tokenize chat-formatted text alike."""
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (self._lib.llama_token * size)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, size, add_special_tokens, True)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of the ids; llama.cpp never renders special tokens here (`unparse_special` off),
        so `skip_special_tokens` is accepted, as transformers' tokenizers take it, and always holds."""
        return self.decode_bytes(ids).decode("utf-8", "replace")

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The concatenated bytes of the tokens' pieces, as llama.cpp's tools print them."""
        ids = list(ids)
        tokens = (self._lib.llama_token * max(len(ids), 1))(*ids)
        size = 16 * len(ids) + 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._lib.llama_detokenize(self._vocab, tokens, len(ids), buf, size, False, False)
            if n >= 0:
                return buf.raw[:n]
            size = -n
