"""llama.cpp's multi-token-prediction (MTP) draft context, on the target's own model.

Shape legend: B rows, H hidden size (llama.cpp's n_embd), V vocabulary, k entries in one decode.

A Qwen3.5 / Qwen3-Next GGUF with an MTP layer (`specmoe.zoo.gguf_mtp`) is loaded with it
(`llamacpp_load`), and llama.cpp runs it in a second context on the same model, made with
`ctx_type = LLAMA_CONTEXT_TYPE_MTP`: a plain attention KV cache holding the MTP layer alone, one
stream per row, and the graph `graph_mtp` of src/models/qwen35moe.cpp. One entry of that context at
position p is a token x_p with a hidden state h (`llama_batch_ext_set_embd_token`): the MTP layer
reads [enorm(embedding(x_p)), hnorm(h)] through `eh_proj`, one full-attention decoder layer with
the target's MLP over the row's earlier entries, its own final norm and the target's LM head, and
returns logits for x_{p+1} and its own final hidden state (`h_nextn`). llama-server
(common/speculative.cpp, `common_speculative_impl_draft_mtp`) pairs x_p with the target's final
hidden state at p - 1 (zeros at p = 0) for every committed token, and drafts recursively: each
proposal is the next entry, paired with the MTP's own `h_nextn` of the step before.

The target hands its final hidden states out the same way: a context told
`llama_set_embeddings_nextn(ctx, true, masked)` keeps the trunk's final normed hidden state of every
position it decodes (masked = false: every token, by batch index). Those functions are in
llama.cpp's staging header (src/llama-ext.h), exported by libllama as C++ symbols and absent from
llama-cpp-python's bindings: `NextnApi` binds them by their mangled names. With masked = true the
MTP graph hands back the first rows of a decode instead of its output rows when not every entry
has an output (checked here against the rows it should give); this module asks for every row
(masked = false) and picks the output rows itself.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from specmoe.errors import SpecmoeError

# llama.cpp architectures whose graph returns h_nextn (and has an MTP graph) among those the
# llamacpp backend loads; other trunks leave the buffer unwritten.
NEXTN_ARCHITECTURES = frozenset({"qwen35", "qwen35moe", "qwen3next"})
_SYMBOLS = {  # llama-ext.h, Itanium C++ mangling
    "set": "_Z26llama_set_embeddings_nextnP13llama_contextbb",
    "get": "_Z26llama_get_embeddings_nextnP13llama_context",
}
_BATCH_TOKENS = 2048  # entries per decode (the context's n_batch), as the target's
_OUTPUTS_PER_SEQ = 32  # outputs per row and decode, as the target's (llama.cpp aborts past them)


class NextnApi:
    """llama.cpp's staging calls for h_nextn, bound from libllama by their mangled names."""

    def __init__(self, lib) -> None:
        cdll = lib.llama_cpp._lib
        self.set = getattr(cdll, _SYMBOLS["set"])
        self.set.argtypes, self.set.restype = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None
        self.get = getattr(cdll, _SYMBOLS["get"])
        self.get.argtypes, self.get.restype = [ctypes.c_void_p], ctypes.POINTER(ctypes.c_float)

    def rows(self, ctx, n: int, width: int) -> np.ndarray:
        """[n, H] copy of the last decode's h_nextn (unmasked: one row per entry, in batch order)."""
        return np.ctypeslib.as_array(self.get(ctx), shape=(n, width)).copy()


def nextn_api(lib) -> NextnApi | None:
    """The bound calls, or None where this libllama lacks them (another llama.cpp build)."""
    try:
        return NextnApi(lib)
    except AttributeError:
        return None


@dataclass(frozen=True)
class Entry:
    """One MTP input: token x at position pos of llama.cpp sequence seq, with hidden state h [H]."""

    seq: int
    pos: int
    token: int
    hidden: np.ndarray  # [H] float32
    output: bool  # logits and h_nextn wanted


class MtpContext:
    """An MTP draft context on a loaded target model: decode entries, drop positions, start over.

    Made by `LlamaCppBackend.mtp_context()`; freed before the model (`Handles.dependents`)."""

    def __init__(self, lib, api: NextnApi, model, settings, max_context: int, vocab_size: int) -> None:
        self._lib, self._api, self._model, self._settings = lib, api, model, settings
        self.max_context = max_context
        self.vocab_size = vocab_size
        self.width = int(lib.llama_model_n_embd(model))  # H
        self.capacity = 0  # sequences the current context holds
        self.ctx = self._batch = None

    def reset(self, rows: int) -> None:
        """Empty every sequence, with room for `rows` (a new context when the current one is smaller)."""
        if rows > self.capacity:
            self._new_context(rows)
        else:
            self._lib.llama_memory_clear(self._lib.llama_get_memory(self.ctx), True)

    def decode(self, entries: list[Entry]) -> tuple[np.ndarray, np.ndarray]:
        """Decode the entries (n_batch at a time); (logits [k, V], h_nextn [k, H]) of the k entries
        with an output, in their order."""
        logits, hidden = [], []
        for start in range(0, len(entries), _BATCH_TOKENS):
            got = self._decode(entries[start : start + _BATCH_TOKENS])
            logits.append(got[0])
            hidden.append(got[1])
        return np.concatenate(logits), np.concatenate(hidden)

    def drop(self, seq: int, start: int) -> None:
        """Forget positions >= start of sequence seq (a plain KV cache: always possible)."""
        if not self._lib.llama_memory_seq_rm(self._lib.llama_get_memory(self.ctx), seq, start, -1):
            raise RuntimeError(f"llama.cpp refused to drop MTP positions >= {start} of sequence {seq}")

    def synchronize(self) -> None:
        self._lib.llama_synchronize(self.ctx)

    def free(self) -> None:
        if self._batch is not None:
            self._lib.llama_batch_ext_free(self._batch)
        if self.ctx is not None:
            self._lib.llama_free(self.ctx)
        self.ctx = self._batch = None
        self.capacity = 0

    def _decode(self, entries: list[Entry]) -> tuple[np.ndarray, np.ndarray]:
        lib, batch = self._lib, self._batch
        lib.llama_batch_ext_clear(batch)
        states = np.ascontiguousarray(np.stack([e.hidden for e in entries]), dtype=np.float32)  # [k, H]
        row_bytes = self.width * states.itemsize
        position = (ctypes.c_int32 * 1)()
        for i, entry in enumerate(entries):
            index = lib.llama_batch_ext_add_token(batch, entry.seq, entry.token)
            position[0] = entry.pos
            pointer = ctypes.cast(states.ctypes.data + i * row_bytes, ctypes.POINTER(ctypes.c_float))
            if not (
                index == i
                and lib.llama_batch_ext_set_pos(batch, index, position)
                and lib.llama_batch_ext_set_embd_token(batch, index, lib.llama_embd(pointer, 1, self.width))
                and lib.llama_batch_ext_set_output_logits(batch, index, entry.output)
            ):
                raise RuntimeError(f"llama.cpp refused MTP batch entry {i} ({entry.seq}, {entry.pos})")
        status = lib.llama_process(self.ctx, lib.LLAMA_PROCESS_TYPE_DECODE, batch)
        if status != 0:
            raise RuntimeError(f"llama_process of the MTP context failed with status {status}")
        outputs = [i for i, e in enumerate(entries) if e.output]
        logits = np.ctypeslib.as_array(lib.llama_get_logits(self.ctx), shape=(len(outputs), self.vocab_size))
        hidden = self._api.rows(self.ctx, len(entries), self.width)[outputs]  # [k, H]
        return logits.copy(), hidden

    def _new_context(self, rows: int) -> None:
        lib, settings = self._lib, self._settings
        capacity = 1 << (rows - 1).bit_length()
        params = lib.llama_context_default_params()
        params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        params.n_seq_max = capacity
        params.n_ctx = capacity * self.max_context
        params.kv_unified = False  # one stream per row, as the target's
        params.n_batch = _BATCH_TOKENS
        params.n_outputs_max = min(_BATCH_TOKENS, _OUTPUTS_PER_SEQ * capacity)  # a drafter asks 1 a row
        params.n_threads = params.n_threads_batch = settings.n_threads
        params.type_k = params.type_v = settings.cache_type
        if settings.flash_attn is not None:
            params.flash_attn_type = int(settings.flash_attn)
        params.no_perf = True
        self.free()
        ctx = lib.llama_init_from_model(self._model, params)
        if not ctx:
            raise SpecmoeError("llama.cpp could not create an MTP draft context on this model")
        self.ctx, self.capacity = ctx, capacity
        self._batch = lib.llama_batch_ext_init(ctx)
        self._api.set(ctx, True, False)  # h_nextn of every entry (see the module docstring)
