"""llama.cpp backend: GGUF models through llama-cpp-python's low-level API (`specmoe[llamacpp]`).

Shape legend: B live sequences, t new tokens per sequence, V vocabulary.

One llama.cpp context per model. Its KV cache has one stream per batch row (`n_seq_max` sequences,
`kv_unified = false`), so rows never attend to each other and each keeps its own positions:
row i of the decode loop's batch is llama.cpp sequence `_seq[i]`, and its tokens sit at positions
0..length-1 of that sequence. A verify block is one `llama_decode` of B x t tokens with an output
at every position, so the logits of every new position come back in one call. Rollback is
`llama_memory_seq_rm(seq, keep, -1)`: llama.cpp frees those cells and the next block reuses them,
so unlike the HF backend there are no masked holes and nothing to compact. `retain` drops the
sequences of finished rows and renumbers nothing: the surviving rows keep their sequence ids.

Logits are copied out of llama.cpp's output buffer into a float32 torch tensor on the CPU (the
buffer is overwritten by the next decode), so the decode loop's acceptance code runs unchanged. With
GPU offload the weights and KV cache live on the GPU; the logits still arrive on the host.

Decoder-only transformers are accepted, and the hybrids whose recurrent state the backend can roll
back (`llamacpp_state`: Qwen3.5, Qwen3.5-MoE, Qwen3-Next): through llama.cpp's per-position
snapshots where it keeps them (`n_rs_seq`: qwen35, qwen35moe) and per-sequence checkpoints and a
re-decode of the kept tokens where it does not, as `recurrent_rollback` says; the time it takes is
`state_s`. Other hybrids, pure recurrent models (their state cannot drop a suffix), encoder-decoder
and diffusion models are refused when they load. Router tracing is unsupported (`router_trace()`
returns None): llama.cpp exposes no hook on its expert selection.

Hidden states (`HiddenAccess.FINAL`, for an MTP drafter): on the hybrids above llama.cpp's graph
keeps the trunk's final normed hidden state of every decoded position (`h_nextn`), which
`capture_hidden` turns on and `hidden()` hands back ([B, t, 1, H]); `mtp_context()` opens the MTP
draft context on the same model (`llamacpp_mtp`).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from specmoe.backends.base import BackendBase, HiddenAccess, check_hidden_layers
from specmoe.backends.llamacpp_load import (
    Handles,
    gguf_metadata,
    gpu_layers,
    llama_lib,
    load_model_pointer,
    log_lines,
    model_metadata,
    top_k_override,
    vocabulary,
)
from specmoe.backends.llamacpp_mtp import NEXTN_ARCHITECTURES, MtpContext, nextn_api
from specmoe.backends.llamacpp_state import ROLLBACK_METHODS, RecurrentCheckpoints, Snapshots
from specmoe.errors import SpecmoeError

# Positions per sequence when the model allows more; the KV cache is allocated up front.
DEFAULT_CONTEXT = 4096
_BATCH_TOKENS = 2048  # tokens per llama_decode call (prefill chunks)
_OUTPUTS_PER_SEQ = 32  # logit rows per sequence and call: covers a verify block of gamma <= 31
# Blocks this wide are decoded one position at a time. llama.cpp's CPU kernels run a 2-token batch
# far slower than two 1-token steps on a small model (bench draft-xs, q8_0, 1 thread: 4.2 ms vs
# 2 x 1.2 ms; the bench MoE: equal), and the model drafter feeds a 2-token block after every fully
# accepted round.
_STEPWISE_WIDTH = 2
CACHE_TYPES = {"f16": 1, "f32": 0}  # KV cache element type -> ggml_type; f16 is llama.cpp's default
# Recurrent-state snapshots per row (n_rs_seq): rollbacks of up to this many tokens skip the
# re-decode. Each costs one more copy of a row's recurrent state (on Qwen3.5-35B-A3B about 60 MiB).
DEFAULT_SNAPSHOTS = 8


def load_llamacpp(
    path: str | Path,
    dtype: str | None = None,
    device: str = "cpu",
    moe_top_k: int | None = None,
    n_threads: int | None = None,
    n_gpu_layers: int | None = None,
    n_ctx: int | None = None,
    cache_type: str = "f16",
    flash_attn: bool | None = None,
    experts_implementation: str | None = None,
    recurrent_rollback: str = "auto",
    recurrent_snapshots: int = DEFAULT_SNAPSHOTS,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> LlamaCppBackend:
    """Load a GGUF model. Options shared with the hf backend keep their meaning where llama.cpp has one.

    dtype: None or "float32" (the logits' type); the weights' type is the GGUF file's own.
    device: "cpu" keeps everything on the host; "cuda"/"mps" offload all layers (n_gpu_layers = -1)
        when this llama-cpp-python was built with a GPU backend. n_gpu_layers overrides the count.
    n_threads: threads for single-token and batched decoding; default torch.get_num_threads(), so
        both backends use the same number of cores.
    n_ctx: positions per sequence (default min(model's training context, 4096)).
    cache_type, flash_attn: the KV cache's element type and flash attention (None: llama.cpp's
        automatic choice). llama.cpp's defaults (f16 cache, flash attention on CPU) round keys and
        values to f16; cache_type="f32", flash_attn=False with an f32 GGUF reproduces the hf
        backend's float32 logits to about 1e-6 (docs/llamacpp.md).
    recurrent_rollback, recurrent_snapshots: how a hybrid's recurrent state is rolled back.
        "snapshots": llama.cpp keeps the states of each row's last `recurrent_snapshots` positions
        (`n_rs_seq`) and steps back to one, with checkpoints for the rollbacks they cannot serve;
        refused where this llama.cpp keeps none for the architecture. "checkpoints": a checkpoint
        and a re-decode of the kept tokens only. "auto": snapshots where llama.cpp keeps them,
        checkpoints elsewhere. The backend's `recurrent_rollback` says which runs.
    allow_pickle, trust_remote_code: accepted for the common command line; GGUF has neither.
    """
    path = Path(path).expanduser()
    if dtype not in (None, "float32"):
        raise SpecmoeError(
            f"the llamacpp backend computes with the GGUF file's weight type and float32 activations; "
            f"dtype '{dtype}' cannot be honoured: use dtype float32 (or none), or export another GGUF type"
        )
    if experts_implementation is not None:
        raise SpecmoeError("--experts-implementation selects a transformers kernel; drop it for llamacpp")
    lib = llama_lib()
    layers = gpu_layers(lib, device, n_gpu_layers)
    overrides = None if moe_top_k is None else top_k_override(lib, path, moe_top_k)
    model = load_model_pointer(path, n_gpu_layers=layers, overrides=overrides)
    threads = n_threads if n_threads is not None else torch.get_num_threads()
    if threads < 1:
        raise SpecmoeError(f"n_threads must be >= 1, got {threads}")
    if cache_type not in CACHE_TYPES:
        raise SpecmoeError(f"unknown cache_type '{cache_type}'; use one of {', '.join(CACHE_TYPES)}")
    if recurrent_rollback not in ROLLBACK_METHODS:
        raise SpecmoeError(
            f"unknown recurrent_rollback '{recurrent_rollback}'; use one of {', '.join(ROLLBACK_METHODS)}"
        )
    if recurrent_snapshots < 1:
        raise SpecmoeError(f"recurrent_snapshots must be >= 1, got {recurrent_snapshots}")
    snapshots = 0 if recurrent_rollback == "checkpoints" else recurrent_snapshots
    settings = _ContextSettings(
        threads, n_ctx, CACHE_TYPES[cache_type], flash_attn, recurrent_rollback, snapshots
    )
    handles = Handles(lib, model)
    try:
        return LlamaCppBackend(handles, path, settings, overrides)
    except SpecmoeError:
        handles.free()  # idempotent: the half-built backend's finalizer finds nothing left to free
        raise


@dataclass(frozen=True)
class _ContextSettings:
    n_threads: int
    n_ctx: int | None  # positions per sequence; None: min(training context, DEFAULT_CONTEXT)
    cache_type: int  # ggml_type of keys and values
    flash_attn: bool | None  # None: llama.cpp decides
    rollback: str = "checkpoints"  # the recurrent_rollback option
    snapshots: int = 0  # recurrent-state snapshots asked for (n_rs_seq; 0: checkpoints only)


class LlamaCppBackend(BackendBase):
    """A llama.cpp model and context holding one batch of sequences (see the module docstring)."""

    def __init__(self, handles: Handles, path: Path, settings: _ContextSettings, overrides) -> None:
        self._handles = handles
        weakref.finalize(self, handles.free)  # the handles, not self: finalize must not keep self alive
        lib, model = handles.lib, handles.model
        self._lib = lib
        self._model = model
        self._overrides = overrides  # llama.cpp keeps a pointer to it for the model's lifetime
        self.name = path.stem
        self.path = path
        self.device = torch.device("cpu")  # where the logits land, whatever holds the weights
        self.settings = settings
        arch = model_metadata(lib, model, "general.architecture")
        self.is_moe = int(model_metadata(lib, model, f"{arch}.expert_count") or 0) > 0
        vocab = lib.llama_model_get_vocab(model)
        self.vocab_size, self.eos_token_ids, self.vocab_digest = vocabulary(lib, vocab)
        self.num_layers = int(lib.llama_model_n_layer(model))
        self._width = int(lib.llama_model_n_embd(model))  # H
        trained = lib.llama_model_n_ctx_train(model)
        self.max_context = int(settings.n_ctx or min(trained, DEFAULT_CONTEXT))
        self._capacity = 0  # sequences the current context holds
        self._seq: list[int] = []  # llama.cpp sequence id of each live row
        self._lengths: list[int] = []  # cached tokens of each live row
        self._nextn = nextn_api(lib) if arch in NEXTN_ARCHITECTURES else None
        self.hidden_access = HiddenAccess.FINAL if self._nextn is not None else HiddenAccess.NONE
        self._capturing = False  # h_nextn asked for (`capture_hidden`)
        self._captured: list[np.ndarray] | None = None  # [n, H] per decode of this prefill / forward
        self._hidden: torch.Tensor | None = None
        self._mtp: MtpContext | None = None
        self._new_context(1)
        # a hybrid's recurrent state cannot drop a suffix: snapshots where llama.cpp keeps them
        # (it keeps none for some architectures: n_rs_seq reads 0 back), checkpoints besides
        self._states = None
        self.recurrent_rollback: str | None = None  # "snapshots" | "checkpoints" | None (no state)
        if lib.llama_model_is_hybrid(model):
            kept = int(lib.llama_n_rs_seq(self._handles.ctx))
            if settings.rollback == "snapshots" and not kept:
                raise SpecmoeError(
                    f"this llama.cpp keeps no recurrent-state snapshots (n_rs_seq) for '{arch}' models; "
                    "load with recurrent_rollback='checkpoints' or 'auto'"
                )
            self._states = RecurrentCheckpoints(lib, Snapshots(kept) if kept else None)
            self.recurrent_rollback = self._states.method

    # -- protocol -------------------------------------------------------------------------------
    def prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        if len(prompts) > self._capacity:
            self._new_context(len(prompts))
        else:
            self._lib.llama_memory_clear(self._memory(), True)
        self._seq = list(range(len(prompts)))
        self._lengths = [0] * len(prompts)
        if self._states is not None:
            self._states.clear()
        self._captured = [] if self._capturing else None
        self._feed([(row, token) for row, prompt in enumerate(prompts) for token in prompt])
        if self._captured is not None:
            self._hidden = _right_aligned(self._captured, [len(p) for p in prompts], self._width)
            self._captured = None
        if self._states is not None:
            with self._states.timed():
                self._states.begin(self._handles.ctx, self._seq, self._lengths)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, t = tokens.shape  # [B, t]
        if batch != len(self._seq):
            raise RuntimeError(f"forward got {batch} rows but {len(self._seq)} sequences are live")
        if self._states is not None:
            with self._states.timed():
                self._states.reserve(self._handles.ctx, self._seq, self._lengths, t)
        rows = tokens.tolist()
        self._captured = [] if self._capturing else None
        # stepwise decoding would leave snapshots of the last step only: one decode instead
        if 1 < t <= _STEPWISE_WIDTH and self.recurrent_rollback != "snapshots":
            logits = torch.cat([self._logits([[row[j]] for row in rows]) for j in range(t)], 1)
            steps = [torch.from_numpy(h) for h in self._captured or []]  # t x [B, H]
            hidden = torch.stack(steps, 1) if steps else None  # [B, t, H]
        else:
            logits = self._logits(rows)
            hidden = None if not self._captured else torch.from_numpy(np.concatenate(self._captured))
        if hidden is not None:
            self._hidden = hidden.view(batch, t, 1, self._width)  # [B, t, K = 1, H]
        self._captured = None
        return logits

    def capture_hidden(self, layers: tuple[int, ...]) -> None:
        check_hidden_layers(self, layers)
        self._capturing = bool(layers)
        if self._nextn is not None:
            self._nextn.set(self._handles.ctx, self._capturing, False)  # every position, not just outputs

    def hidden(self) -> torch.Tensor:
        """The trunk's final normed hidden states (h_nextn) of the last prefill or forward."""
        if self._hidden is None:
            raise RuntimeError(f"backend '{self.name}' captured no hidden states")  # a bug: asked first
        return self._hidden

    def mtp_context(self) -> MtpContext:
        """An MTP draft context on this model (`llamacpp_mtp`), refused in one line where the file has
        no MTP layer or this llama.cpp cannot run one; freed with the model."""
        lib, arch = self._lib, model_metadata(self._lib, self._model, "general.architecture")
        if not lib.llama_model_n_layer_nextn(self._model):
            raise SpecmoeError(
                f"'{self.path}' has no MTP layer ({arch}.nextn_predict_layers is 0); export a checkpoint "
                "that has one (mtp.* tensors) with `specmoe zoo export-gguf`, or pick another draft"
            )
        if not gguf_metadata(self.path, "{arch}.nextn_predict_layers"):  # how the loader chose load_mtp
            raise SpecmoeError(
                f"'{self.path}' was loaded without its MTP layer: reading that it has one needs the gguf "
                "package; install the llamacpp extra (pip install -c constraints.txt -e '.[llamacpp]')"
            )
        if self._nextn is None:
            version = getattr(lib, "__version__", "?")
            raise SpecmoeError(
                f"this llama-cpp-python ({version}) cannot draft with the MTP layer of '{arch}' models: its "
                "libllama lacks llama_set_embeddings_nextn or the architecture's MTP graph; use "
                "llama-cpp-python 0.3.36 or the transformers backend"
            )
        if self._mtp is None:
            self._mtp = MtpContext(
                lib, self._nextn, self._model, self.settings, self.max_context, self.vocab_size
            )
            self._handles.dependents.append(self._mtp)
        return self._mtp

    def _logits(self, rows: list[list[int]]) -> torch.Tensor:
        """Decode a rectangular block (one list of token ids per live row); logits [B, t, V]."""
        entries = [(row, token) for row, ids in enumerate(rows) for token in ids]  # row-major, like logits
        step = self._outputs_max
        chunks = [self._decode(entries[i : i + step], outputs=True) for i in range(0, len(entries), step)]
        logits = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)  # [B * t, V]
        return torch.from_numpy(logits).view(len(rows), len(rows[0]), self.vocab_size)  # [B, t, V]

    def rollback(self, lengths: Sequence[int]) -> None:
        memory = self._memory()
        if self._states is not None:  # a hybrid: restore checkpoints, decode the kept tokens again
            self._states.rollback(self._handles.ctx, memory, self._seq, self._lengths, lengths, self._feed)
            return
        for row, keep in enumerate(lengths):
            if keep < self._lengths[row]:
                if not self._lib.llama_memory_seq_rm(memory, self._seq[row], keep, -1):
                    raise RuntimeError(f"llama.cpp refused to drop positions >= {keep} of row {row}")
                self._lengths[row] = keep

    def retain(self, rows: Sequence[int]) -> None:
        kept = set(rows)
        memory = self._memory()
        for row, seq in enumerate(self._seq):
            if row not in kept:
                self._lib.llama_memory_seq_rm(memory, seq, -1, -1)
        self._seq = [self._seq[r] for r in rows]
        self._lengths = [self._lengths[r] for r in rows]
        if self._states is not None:
            self._states.retain(rows)

    def cached_lengths(self) -> list[int]:
        return list(self._lengths)

    @property
    def state_s(self) -> float:
        """Seconds spent checkpointing and rolling back a hybrid's recurrent state (0 otherwise)."""
        return 0.0 if self._states is None else self._states.seconds

    def synchronize(self) -> None:
        self._lib.llama_synchronize(self._handles.ctx)

    def router_trace(self):
        return None  # llama.cpp exposes no hook on expert selection

    # -- llama.cpp plumbing ---------------------------------------------------------------------
    def _memory(self):
        return self._lib.llama_get_memory(self._handles.ctx)

    def _new_context(self, sequences: int) -> None:
        """A context for `sequences` rows (rounded up to a power of two, so growing is rare)."""
        lib = self._lib
        capacity = 1 << (sequences - 1).bit_length()
        params = lib.llama_context_default_params()
        params.n_seq_max = capacity
        params.n_ctx = capacity * self.max_context
        params.kv_unified = False  # one KV stream per sequence: rows never share cells
        params.n_batch = _BATCH_TOKENS
        params.n_outputs_max = min(_BATCH_TOKENS, _OUTPUTS_PER_SEQ * capacity)
        params.n_outputs_max_per_seq = 0  # no per-sequence cap: a verify block outputs every position
        params.n_threads = self.settings.n_threads
        params.n_threads_batch = self.settings.n_threads
        params.type_k = params.type_v = self.settings.cache_type
        if self.settings.flash_attn is not None:
            params.flash_attn_type = int(self.settings.flash_attn)  # LLAMA_FLASH_ATTN_TYPE_DISABLED/ENABLED
        params.no_perf = True
        if lib.llama_model_is_hybrid(self._model):
            params.n_rs_seq = self.settings.snapshots  # llama.cpp reads back 0 where it keeps none
        self._handles.free_context()
        ctx = lib.llama_init_from_model(self._model, params)
        if not ctx:
            reason = log_lines[-1] if log_lines else "no reason given"
            raise SpecmoeError(f"llama.cpp could not create a context for '{self.path}': {reason}")
        self._handles.ctx = ctx
        if self._nextn is not None:
            self._nextn.set(ctx, self._capturing, False)
        self._handles.batch = batch = lib.llama_batch_init(_BATCH_TOKENS, 0, 1)
        self._outputs_max = params.n_outputs_max
        self._capacity = capacity
        # numpy views on the batch's C arrays, so filling a batch is a few vector writes
        n = _BATCH_TOKENS
        self._tokens = np.ctypeslib.as_array(batch.token, shape=(n,))
        self._pos = np.ctypeslib.as_array(batch.pos, shape=(n,))
        self._outputs = np.ctypeslib.as_array(batch.logits, shape=(n,))
        np.ctypeslib.as_array(batch.n_seq_id, shape=(n,))[:] = 1
        self._slot_seq = [-1] * n  # the sequence id currently written in each batch slot

    def _feed(self, entries: list[tuple[int, int]]) -> None:
        """Decode (row, token) entries without outputs, n_batch tokens per llama_decode."""
        for start in range(0, len(entries), _BATCH_TOKENS):
            self._decode(entries[start : start + _BATCH_TOKENS], outputs=False)

    def _decode(self, entries: list[tuple[int, int]], outputs: bool) -> np.ndarray | None:
        """One llama_decode of (row, token) entries at each row's next positions; logits if outputs."""
        n = len(entries)
        if n == 0:
            return None
        lengths = list(self._lengths)  # committed only once llama.cpp has taken the batch
        batch = self._handles.batch
        for slot, (row, token) in enumerate(entries):
            seq = self._seq[row]
            if self._slot_seq[slot] != seq:  # seq_id is a pointer per slot: write it only on change
                batch.seq_id[slot][0] = seq
                self._slot_seq[slot] = seq
            self._pos[slot] = lengths[row]
            self._tokens[slot] = token
            lengths[row] += 1
        if max(lengths) > self.max_context:
            raise SpecmoeError(
                f"a sequence outgrew the llamacpp context of {self.max_context} positions; "
                "pass n_ctx to the loader or shorten the prompt"
            )
        self._outputs[:n] = 1 if outputs else 0
        batch.n_tokens = n
        status = self._lib.llama_decode(self._handles.ctx, batch)
        if status != 0:
            reason = log_lines[-1] if log_lines else "no reason given"
            raise RuntimeError(f"llama_decode failed with status {status}: {reason}")
        self._lengths = lengths
        if self._states is not None:
            self._states.record(entries)
        if self._captured is not None:
            self._captured.append(self._nextn.rows(self._handles.ctx, n, self._width))  # [n, H]
        if not outputs:
            return None
        pointer = self._lib.llama_get_logits(self._handles.ctx)
        return np.ctypeslib.as_array(pointer, shape=(n, self.vocab_size)).copy()  # [n, V]


def _right_aligned(chunks: list[np.ndarray], lengths: list[int], width: int) -> torch.Tensor:
    """Prefill's h_nextn rows (row-major over the prompts, [sum n_i, H] in decode chunks) as
    [B, W, 1, H], row i's n_i positions at W - n_i .. W - 1 and zeros before them."""
    rows = np.concatenate(chunks) if chunks else np.zeros((0, width), np.float32)
    out = np.zeros((len(lengths), max(lengths, default=0), 1, width), np.float32)
    start = 0
    for i, n in enumerate(lengths):
        if n:
            out[i, out.shape[1] - n :, 0] = rows[start : start + n]
        start += n
    return torch.from_numpy(out)
