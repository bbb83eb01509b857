"""The compiled path of the transformers backend: a static KV cache and `torch.compile`d forwards.

Shape legend: B live sequences, S static batch rows (B rounded up to a power of two), t new tokens
per row, L static cache slots, H kv heads, D head dim, V vocabulary.

A compiled graph is specialised to its input shapes, so every tensor a forward touches has a shape
that changes rarely (gpt-fast's recipe, extended to ragged batches):

- keys and values live in one transformers `StaticCache`, [S, H, L, D] per layer, written in place
  at a *physical pointer* shared by all rows (the cache's own `cumulative_length`); `_valid` [S, L]
  marks which slots hold a live token of each row, exactly as in the eager backend (`hf.py`), so a
  row that kept fewer tokens than another has masked holes, and rotary positions come from each
  row's count of valid slots;
- the batch is padded to S rows; padded rows compute on token 0 and their logits are dropped;
- the attention mask is built inside the compiled graph from `_valid` and the pointer tensor, so
  the graph takes [S, t] ids and positions and nothing else that varies;
- one graph per (S, t, L): t is 1 (decode, draft steps), 2 (a draft step after a full acceptance)
  or gamma + 1 (verify); L is sized at prefill for the whole run from the horizon the decode loop
  passes (`reserve`: longest prompt + max_new_tokens + gamma + 1), on a doubling ladder (256, 512,
  1024, ...), so a run compiles one L; without a horizon L doubles when compaction cannot make room;
- at most MAX_SHAPES graphs per backend: a shape past them runs eagerly on the same static cache
  (same tokens), said once in a warning, so a suite's compile time stays bounded.

The first call of each shape compiles it. That call runs once as a warm-up whose effects are undone
(its writes sit past the pointer and are masked), and its seconds go to `compile_s`, so the decode loop
can keep compile time out of decode time; each shape is logged as it compiles, with its seconds.
Prefill runs eagerly: its length varies per batch.

Between forwards the layout of live slots is kept on the host (`slots.SlotMap`): a rollback or a
retain sends the new mask to the device and moves the pointer without reading anything back, so
the host queues the next graph while the GPU still runs the last.

Sliding-window layers keep every slot like full attention; the graph applies their window in its
mask, counted in each row's tokens (`hf_sliding`).

Hybrid models' linear-attention layers keep a state per row, not slots: `hf_recurrent.LinearStates`
logs their inputs into static buffers from inside the graphs and rolls rows back outside them;
the warm-up calls' writes into those states are undone from a copy.

Kernels on CPU, chosen by measurement (docs/decoding.md): an MoE's experts run the gathered
contraction of `hf_experts.py` (the loader's default with compile), and a dense model's one-row
matmuls are written by inductor rather than called from BLAS (`_one_row_matmuls_fused`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from specmoe.backends.base import BackendBase, HiddenAccess
from specmoe.backends.hf_model import (
    CapturedHidden,
    batch_refusal,
    hidden_request,
    set_model_facts,
    stacked_hidden,
)
from specmoe.backends.hf_recurrent import LinearStates, cache_layout
from specmoe.backends.hf_sliding import keep_whole_past, key_positions, sliding_window, windowed
from specmoe.backends.slots import SlotMap, left_padded, to_device
from specmoe.errors import SpecmoeError

SLOT_STEP = 256  # the smallest static cache; larger ones double it (256, 512, 1024, ...)
MAX_SHAPES = 24  # compiled (S, t, L) shapes per backend; a shape past them runs eagerly (warned)
# Every backend's `step` shares one code object, whose compiled graphs dynamo counts together.
_RECOMPILE_LIMIT = 4 * MAX_SHAPES


class _Shape(NamedTuple):
    """What one compiled graph is specialised to."""

    rows: int  # S
    t: int
    slots: int  # L
    layers: tuple[int, ...]  # hidden states it returns


log = logging.getLogger(__name__)


class StaticHFBackend(CapturedHidden, BackendBase):
    """A transformers model over a static, maskable KV cache, with compiled fixed-shape forwards.

    compile=False runs the same static-cache code eagerly (what the exactness tests exercise fast);
    mode is torch.compile's mode (None: inductor's default; "reduce-overhead" uses CUDA graphs);
    compiler is torch.compile's backend ("eager" captures graphs without generating code: tests).
    """

    hidden_access = HiddenAccess.ALL

    def __init__(
        self,
        model,
        name: str,
        device: torch.device,
        compile: bool = True,
        mode: str | None = None,
        compiler: str = "inductor",
    ) -> None:
        set_model_facts(self, model, name, device)
        layout = cache_layout(model, name)
        if layout.rollback_refused is not None:  # the static cache's slots are all it can edit
            refused = layout.rollback_refused
            raise SpecmoeError(f"--compile is for models whose cache can roll back: {refused}")
        self.batch_refused = batch_refusal(model, name)  # positions a left-padded batch would shift
        self._kv_layers = layout.kv_layers
        self._sliding_layers = layout.sliding_layers  # kept whole; the mask applies the window
        self._linear = LinearStates(model, layout) if layout.is_hybrid else None
        self.compiled = compile
        self.mode, self.compiler = mode, compiler  # a head drafter's backend is compiled alike
        self.compile_s = 0.0  # seconds spent compiling new shapes, summed over the backend's life
        self._clone_logits = mode == "reduce-overhead"  # a CUDA graph overwrites its output buffer
        # CUDA graph trees run a new shape eagerly, record it on the next call, then replay it.
        self._warm_calls = 3 if mode == "reduce-overhead" else 1
        self._eager_step = self._build_step()
        self._step = (
            self._compile(self._eager_step, mode, compiler, self.is_moe) if compile else self._eager_step
        )
        self._seen: set[_Shape] = set()  # (S, t, L, hidden layers) graphs already compiled
        self._eager_shapes: set[_Shape] = set()  # graphs past MAX_SHAPES, run eagerly
        self._capture: tuple[int, ...] = ()  # hidden-state layers every forward keeps
        self._hidden: torch.Tensor | None = None  # [B, t, K, H] of the last prefill or forward
        self._horizon = 0  # tokens the longest row may reach in this run (`reserve`), 0: unknown
        self._cache = None
        self._rows = 0  # S
        self._slots = 0  # L
        self._live = 0  # B
        self._layout = SlotMap()  # [S, L] live slots on the host; its width is the write pointer
        self._valid = torch.zeros(0, 0, dtype=torch.bool, device=device)  # [S, L] its device copy

    def _build_step(self):
        """The forward over a block: [S, t] ids (or [S, t, E] input vectors) and positions, [S, L]
        valid -> [S, t, V] logits, and the hidden states at `layers` ([S, t, K, H]; None when none
        are asked for)."""
        model, fmin = self.model, torch.finfo(self.dtype).min
        window = sliding_window(model.config)
        first_kv = self._kv_layers[0]

        def step(
            ids: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, cache, padding=None, layers=()
        ):
            # ids, positions [S, t] (ids [S, t, E]: a head's input vectors); valid [S, L]. Slot k is
            # visible to query j of row r when it is valid for r and not past the query's own slot
            # (pointer + j). padding [S, t] (prefill of a hybrid model only): which block positions
            # are real tokens, for the linear layers. layers is a constant of each graph (part of
            # its shape key).
            t, slots = ids.shape[1], valid.shape[1]
            query_slot = cache.layers[first_kv].cumulative_length + torch.arange(t, device=ids.device)  # [t]
            causal = torch.arange(slots, device=ids.device)[None, :] <= query_slot[:, None]  # [t, L]
            allowed = valid[:, None, None, :] & causal[None, None]  # [S, 1, t, L]
            zero = torch.zeros((), dtype=self.dtype, device=ids.device)

            def additive(allowed: torch.Tensor) -> torch.Tensor:  # finite, so no row is all -inf
                return torch.where(allowed, zero, torch.full_like(zero, fmin))

            mask = additive(allowed)
            if window is not None:  # counted in tokens, not slots: holes and padding sit between
                sliding = windowed(allowed, key_positions(valid), positions, window.size)
                mask = window.masks(mask, additive(sliding))
            if padding is not None:  # a 4D mask alone would leave left padding in the linear states
                mask = {
                    **(mask if isinstance(mask, dict) else {"full_attention": mask}),
                    "linear_attention": padding,
                }
            inputs = {"inputs_embeds" if ids.is_floating_point() else "input_ids": ids}  # fixed per graph
            out = model(
                **inputs,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                **hidden_request(layers),
            )
            return out.logits, stacked_hidden(out, layers)  # [S, t, V], [S, t, K, H] or None

        return step

    @staticmethod
    def _compile(step, mode: str | None, compiler: str, is_moe: bool):
        # Each (S, t, L) is its own graph by design (dynamic=False); the default limit of 8 graphs
        # per function would silently fall back to eager past it.
        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(limit, _RECOMPILE_LIMIT)
        # Measured on this CPU: fusing one-row matmuls speeds dense models' steps and slows the MoE's
        # (bench moe T(1,1) 16.5 -> 21.5 ms in float32, 18.5 -> 21 ms in bf16; docs/decoding.md).
        fuse = mode is None and compiler == "inductor" and not is_moe
        options = _one_row_matmuls_fused() if fuse else None
        return torch.compile(step, mode=mode, dynamic=False, backend=compiler, options=options)

    # -- protocol -------------------------------------------------------------------------------
    def reserve(self, tokens: int) -> None:
        """The next batch's longest row will hold at most `tokens` tokens (prompt, generated tokens
        and lookahead): its cache is sized for them at once, so a run compiles one L, not one per
        growth step. Optional: without it the cache grows when a row needs room."""
        self._horizon = tokens

    @torch.inference_mode()
    def prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        width = max((len(p) for p in prompts), default=0)
        ids = np.zeros((_bucket(len(prompts)), width), dtype=np.int64)  # [S, W] left-padded
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = prompt
        self._prefill([len(p) for p in prompts], to_device(ids, self.device))

    @torch.inference_mode()
    def prefill_embeds(self, rows: Sequence[torch.Tensor]) -> None:
        """`prefill` of input vectors: row i's [n_i, E] (n_i may be 0), left-padded with zeros."""
        width = max((len(r) for r in rows), default=0)
        embeds = left_padded(rows, width, self.device)  # [B, W, E]
        padded = _bucket(len(rows)) - len(rows)
        self._prefill([len(r) for r in rows], torch.nn.functional.pad(embeds, (0, 0, 0, 0, 0, padded)))

    def _prefill(self, lengths: list[int], inputs: torch.Tensor) -> None:
        """A new batch of left-padded rows (inputs [S, W] ids or [S, W, E] vectors), prefilled eagerly."""
        width = max(lengths, default=0)
        rows = _bucket(len(lengths))
        # L never shrinks for the same S: a new L is a new graph.
        needed = max(width + SLOT_STEP // 2, self._horizon)
        self._allocate(rows, max(_rung(needed), self._slots if rows == self._rows else 0))
        self._horizon = 0
        self._live = len(lengths)
        self._layout.reset(lengths, rows=rows, capacity=self._slots)
        self._send_valid()
        self._set_pointer(0)
        padding = None
        if self._linear is not None:
            for index in self._linear.layers:
                self._cache.layers[index].reset()  # a reused cache still holds the last batch's states
            padding = self._valid[:, :width]
        self._hidden = self._prefill_hidden(len(lengths), width, None)
        if width:
            positions = np.maximum(np.cumsum(self._layout.valid, axis=1) - 1, 0)  # [S, W]
            _, hidden = self._eager_step(
                inputs, to_device(positions, self.device), self._valid, self._cache, padding, self._capture
            )
            self._hidden = self._prefill_hidden(len(lengths), width, hidden)
        self._set_pointer(width)
        if self._linear is not None:
            self._linear.begin(self._cache, self._rows, self.device, static=True)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._forward(tokens)  # tokens [B, t]

    @torch.inference_mode()
    def forward_embeds(self, embeds: torch.Tensor) -> torch.Tensor:
        """`forward` of input vectors: embeds [B, t, E] -> logits [B, t, V]."""
        return self._forward(embeds)

    def _forward(self, inputs: torch.Tensor) -> torch.Tensor:
        live, t = inputs.shape[:2]  # [B, t] ids or [B, t, E] vectors
        if live != self._live:
            raise RuntimeError(f"forward got {live} rows, the batch has {self._live}")
        if self._layout.width + t > self._slots:
            self._make_room(t)
        if self._linear is not None:
            self._linear.reserve(t)
        rows = (0, 0) * (inputs.dim() - 1) + (0, self._rows - live)  # pad the batch dimension only
        ids = inputs if live == self._rows else torch.nn.functional.pad(inputs, rows)
        positions = to_device(self._layout.positions(t), self.device)  # [S, t]
        key = _Shape(self._rows, t, self._slots, self._capture)
        compiled = self.compiled and self._admit(key)
        if compiled and key not in self._seen:
            self._warm_up(ids, positions, key)
            self._seen.add(key)
        logits, hidden = self._run(ids, positions, compiled=compiled)
        self._layout.append(t)  # the graph moved every KV layer's write position by t itself
        if self._linear is not None:
            self._linear.advanced(t)
        self._hidden = None if hidden is None else hidden[:live]
        return logits[:live]  # [B, t, V]

    @torch.inference_mode()
    def rollback(self, lengths: Sequence[int]) -> None:
        dropped = self._layout.keep(lengths)  # [S]; padded rows keep 0 and have none
        if self._linear is not None:
            self._linear.rollback(dropped[: len(lengths)].tolist())
        if dropped.any():
            self._move_pointer_back()

    @torch.inference_mode()
    def retain(self, rows: Sequence[int]) -> None:
        index = to_device(np.asarray([*rows, *[rows[0]] * (self._rows - len(rows))]), self.device)  # [S]
        for layer in self._kv():
            layer.keys.copy_(layer.keys[index])
            layer.values.copy_(layer.values[index])
        if self._linear is not None:
            self._linear.retain(index, in_place=True)
        self._layout.retain(rows, pad_to=self._rows)
        self._live = len(rows)
        self._move_pointer_back()

    def cached_lengths(self) -> list[int]:
        return self._layout.lengths[: self._live].tolist()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def router_trace(self):
        """None: a hook on a compiled graph would change the graph it measures; trace eagerly."""
        return None

    # -- the static cache -----------------------------------------------------------------------
    def _run(self, ids: torch.Tensor, positions: torch.Tensor, compiled: bool):
        """One block through the graph: logits [S, t, V] and hidden states [S, t, K, H] or None."""
        t, pointer = ids.shape[1], self._layout.width
        self._valid[:, pointer : pointer + t] = True  # the block's own slots
        step = self._step if compiled else self._eager_step
        logits, hidden = step(ids, positions, self._valid, self._cache, None, self._capture)
        if self._clone_logits and compiled:  # the next replay overwrites a CUDA graph's outputs
            logits, hidden = logits.clone(), None if hidden is None else hidden.clone()
        return logits, hidden

    def _prefill_hidden(self, rows: int, width: int, hidden: torch.Tensor | None) -> torch.Tensor | None:
        """Prefill's hidden states for the live rows, [B, W, K, H], left padding zeroed (None when
        nothing is captured)."""
        if not self._capture:
            return None
        if hidden is None:  # every prompt was one token: prefill fed nothing
            size = int(self.model.config.get_text_config().hidden_size)
            return torch.zeros(rows, 0, len(self._capture), size, dtype=self.dtype, device=self.device)
        pad = ~self._valid[:rows, :width]  # [B, W]
        return hidden[:rows].masked_fill(pad[:, :, None, None], 0)

    def _admit(self, key: _Shape) -> bool:
        """Whether this shape runs compiled: it already is, or fewer than MAX_SHAPES are. Past the
        limit a shape runs eagerly on the same static cache (same tokens, eager speed), so a
        suite's compile time stays bounded; it is said once per shape."""
        if key in self._seen or len(self._seen) < MAX_SHAPES:
            return True
        if key not in self._eager_shapes:
            self._eager_shapes.add(key)
            rows, t, slots, _ = key
            log.warning(
                "%s: %d shapes are compiled already (the limit); batch %d, block %d, %d cache slots runs "
                "eagerly; fewer batch sizes, gammas or prompt lengths per suite keep every shape compiled",
                self.name,
                MAX_SHAPES,
                rows,
                t,
                slots,
            )
        return False

    def _warm_up(self, ids: torch.Tensor, positions: torch.Tensor, key: _Shape) -> None:
        """Compile this shape on throwaway calls: their writes land past the pointer and are undone."""
        rows, t, slots, _ = key
        log.info("%s: compiling batch %d, block %d, %d slots (once per shape)", self.name, rows, t, slots)
        self.synchronize()
        start = time.perf_counter()
        states = self._linear.snapshot() if self._linear is not None else None
        pointer = self._layout.width
        for _ in range(self._warm_calls):
            self._run(ids, positions, compiled=True)
            self._valid[:, pointer:] = False
            self._set_pointer(pointer)
            if states is not None:
                self._linear.restore(states)
        self.synchronize()
        seconds = time.perf_counter() - start
        self.compile_s += seconds
        log.info("%s: compiled batch %d, block %d, %d slots in %.1f s", self.name, rows, t, slots, seconds)

    def _allocate(self, rows: int, slots: int) -> None:
        """A fresh static cache of S x L slots, reused while the shape stays (graphs guard on it)."""
        if (rows, slots) == (self._rows, self._slots):
            return
        from transformers import StaticCache

        config = self.model.config
        cache = keep_whole_past(StaticCache(config=config, max_cache_len=slots), self._sliding_layers, slots)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        cache.early_initialization(rows, config.num_key_value_heads, head_dim, self.dtype, self.device)
        old, old_valid = self._cache, self._valid
        self._cache, self._rows, self._slots = cache, rows, slots
        self._valid = torch.zeros(rows, slots, dtype=torch.bool, device=self.device)
        torch._dynamo.mark_static_address(self._valid)
        if old is not None and old_valid.shape[0] == rows:  # growing L mid-decode: keep the contents
            used = old_valid.shape[1]
            for index in self._kv_layers:
                cache.layers[index].keys[:, :, :used].copy_(old.layers[index].keys)
                cache.layers[index].values[:, :, :used].copy_(old.layers[index].values)
            for index in self._linear.layers if self._linear is not None else ():
                cache.layers[index] = old.layers[index]  # no slots: the state object carries over
            self._valid[:, :used].copy_(old_valid)
            if self._linear is not None:
                self._linear.rebind(cache)

    def _make_room(self, t: int) -> None:
        """Compact each row's live slots to the left; grow L if the longest row still does not fit."""
        index = to_device(self._layout.compaction("left"), self.device)  # [S, longest]
        longest = index.shape[1]
        for layer in self._kv():
            for kv in (layer.keys, layer.values):
                moved = kv.gather(2, index[:, None, :, None].expand(-1, kv.shape[1], -1, kv.shape[3]))
                kv[:, :, :longest].copy_(moved)
        if longest + t > self._slots:
            self._allocate(self._rows, _rung(longest + t + SLOT_STEP // 2))
        self._send_valid()
        self._set_pointer(longest)

    def _move_pointer_back(self) -> None:
        """After rows dropped tokens: the write position goes back to just past the last used slot."""
        pointer = self._layout.used()[1]
        self._layout.crop(0, pointer)
        self._send_valid()
        self._set_pointer(pointer)

    def _send_valid(self) -> None:
        """The device copy of the host's live slots ([S, L], in place: graphs read its address)."""
        host = np.zeros((self._rows, self._slots), dtype=bool)
        host[:, : self._layout.width] = self._layout.valid
        self._valid.copy_(to_device(host, self.device))

    def _set_pointer(self, pointer: int) -> None:
        """Move the shared write position of every KV layer (in place: graphs read these tensors)."""
        for layer in self._kv():
            layer.cumulative_length.fill_(pointer)

    def _kv(self) -> list:
        """The cache layers that keep keys and values in slots."""
        return [self._cache.layers[index] for index in self._kv_layers]


def _one_row_matmuls_fused() -> dict:
    """Inductor options that write each one-row matmul (decode and draft steps) as its own fused
    multiply-and-sum instead of a BLAS call. On this CPU the BLAS matrix-vector product streams
    weights at about half the read bandwidth; inductor's generated reduction does better (bench
    dense-s T(1,1) measured 31 -> 19 ms in float32 and 34 -> 19 ms in bf16, docs/decoding.md).
    Inductor applies it to CPU tensors only, and by default only to matrices up to 2048 on a side;
    the limit is lifted so real vocabularies and hidden sizes qualify (it lives in the pass's
    module, read at its import)."""
    try:
        from torch._inductor.fx_passes import decompose_mem_bound_mm as decompose

        decompose.cpu_max_other_dimension_decomposition = max(
            decompose.cpu_max_other_dimension_decomposition, 1 << 20
        )
    except (ImportError, AttributeError):  # another torch: its own limits apply
        pass
    return {"post_grad_fusion_options": {"decompose_mm_pass": {}}}


def _bucket(batch: int) -> int:
    """Static batch rows for B live sequences: the next power of two, so few graphs cover all B."""
    return 1 << max(batch - 1, 0).bit_length()


def _rung(n: int) -> int:
    """Static cache slots for n: SLOT_STEP doubled until n fit, so few L (and graphs) cover all n."""
    slots = SLOT_STEP
    while slots < n:
        slots *= 2
    return slots


def check_compile_device(device: torch.device) -> None:
    if device.type == "mps":
        raise SpecmoeError("--compile is not supported on Apple GPUs; drop --compile or use --device cpu")
