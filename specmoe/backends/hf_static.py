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
  or gamma + 1 (verify); L grows in steps of 256 only when compaction cannot make room.

The first call of each shape compiles it. That call runs once as a warm-up whose effects are undone
(its writes sit past the pointer and are masked), and its seconds go to `compile_s`, so the engine
can keep compile time out of decode time. Prefill runs eagerly: its length varies per batch.

Hybrid models' linear-attention layers keep a state per row, not slots: `hf_recurrent.LinearStates`
logs their inputs into static buffers from inside the graphs and rolls rows back outside them;
the warm-up calls' writes into those states are undone from a copy.

Kernels on CPU, chosen by measurement (docs/engine.md): an MoE's experts run the gathered
contraction of `hf_experts.py` (the loader's default with compile), and a dense model's one-row
matmuls are written by inductor rather than called from BLAS (`_one_row_matmuls_fused`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from specmoe.backends.hf_model import set_model_facts
from specmoe.backends.hf_recurrent import LinearStates, cache_layout
from specmoe.errors import SpecmoeError

SLOT_STEP = 256  # static cache slots grow in steps of this many
_RECOMPILE_LIMIT = 64  # shapes per compiled function: t in {1, 2, gamma + 1} x S buckets x L steps


class StaticHFBackend:
    """A transformers model over a static, maskable KV cache, with compiled fixed-shape forwards.

    compile=False runs the same static-cache code eagerly (what the exactness tests exercise fast);
    mode is torch.compile's mode (None: inductor's default; "reduce-overhead" uses CUDA graphs);
    compiler is torch.compile's backend ("eager" captures graphs without generating code: tests).
    """

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
        layout = cache_layout(model, name)  # refuses a cache that cannot drop a rejected suffix
        self._kv_layers = layout.kv_layers
        self._linear = LinearStates(model, layout) if layout.is_hybrid else None
        self.compiled = compile
        self.compile_s = 0.0  # seconds spent compiling new shapes, summed over the backend's life
        self._clone_logits = mode == "reduce-overhead"  # a CUDA graph overwrites its output buffer
        # CUDA graph trees run a new shape eagerly, record it on the next call, then replay it.
        self._warm_calls = 3 if mode == "reduce-overhead" else 1
        self._eager_step = self._build_step()
        self._step = (
            self._compile(self._eager_step, mode, compiler, self.is_moe) if compile else self._eager_step
        )
        self._seen: set[tuple[int, int, int]] = set()  # (S, t, L) shapes already compiled
        self._cache = None
        self._rows = 0  # S
        self._slots = 0  # L
        self._live = 0  # B
        self._pointer = 0  # next physical slot to write; every slot at or past it is invalid
        self._valid = torch.zeros(0, 0, dtype=torch.bool, device=device)  # [S, L]
        self._lengths = torch.zeros(0, dtype=torch.long, device=device)  # [S] live tokens per row

    def _build_step(self):
        """The forward over a block: [S, t] ids and positions, [S, L] valid -> [S, t, V] logits."""
        model, fmin = self.model, torch.finfo(self.dtype).min

        first_kv = self._kv_layers[0]

        def step(ids: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, cache, padding=None):
            # ids, positions [S, t]; valid [S, L]. Slot k is visible to query j of row r when it is
            # valid for r and not past the query's own slot (pointer + j). padding [S, t] (prefill of
            # a hybrid model only): which block positions are real tokens, for the linear layers.
            t, slots = ids.shape[1], valid.shape[1]
            query_slot = cache.layers[first_kv].cumulative_length + torch.arange(t, device=ids.device)  # [t]
            causal = torch.arange(slots, device=ids.device)[None, :] <= query_slot[:, None]  # [t, L]
            allowed = valid[:, None, None, :] & causal[None, None]  # [S, 1, t, L]
            zero = torch.zeros((), dtype=self.dtype, device=ids.device)
            mask = torch.where(allowed, zero, torch.full_like(zero, fmin))  # additive, finite
            if padding is not None:  # a 4D mask alone would leave left padding in the linear states
                mask = {"full_attention": mask, "linear_attention": padding}
            out = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
            return out.logits  # [S, t, V]

        return step

    @staticmethod
    def _compile(step, mode: str | None, compiler: str, is_moe: bool):
        # Each (S, t, L) is its own graph by design (dynamic=False); the default limit of 8 graphs
        # per function would silently fall back to eager past it.
        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(limit, _RECOMPILE_LIMIT)
        # Measured on this CPU: fusing one-row matmuls speeds dense models' steps and slows the MoE's
        # (bench moe T(1,1) 16.5 -> 21.5 ms in float32, 18.5 -> 21 ms in bf16; docs/engine.md).
        fuse = mode is None and compiler == "inductor" and not is_moe
        options = _one_row_matmuls_fused() if fuse else None
        return torch.compile(step, mode=mode, dynamic=False, backend=compiler, options=options)

    # -- protocol -------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        width = max((len(p) for p in prompts), default=0)
        rows = _bucket(len(prompts))
        # L never shrinks for the same S: a new L is a new graph.
        slots = max(_round_up(width + SLOT_STEP // 2, SLOT_STEP), self._slots if rows == self._rows else 0)
        self._allocate(rows, slots)
        self._live = len(prompts)
        ids = torch.zeros(self._rows, width, dtype=torch.long)  # [S, W] left-padded
        valid = torch.zeros(self._rows, self._slots, dtype=torch.bool)  # [S, L]
        for row, prompt in enumerate(prompts):
            if prompt:
                ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
                valid[row, width - len(prompt) : width] = True
        self._valid.copy_(valid)
        self._lengths = self._valid.sum(1)
        self._set_pointer(0)
        padding = None
        if self._linear is not None:
            for index in self._linear.layers:
                self._cache.layers[index].reset()  # a reused cache still holds the last batch's states
            padding = self._valid[:, :width]
        if width:
            positions = (self._valid[:, :width].cumsum(1) - 1).clamp(min=0)  # [S, W]
            self._eager_step(ids.to(self.device), positions, self._valid, self._cache, padding)
        self._set_pointer(width)
        if self._linear is not None:
            self._linear.begin(self._cache, self._rows, self.device, static=True)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        live, t = tokens.shape  # [B, t]
        if live != self._live:
            raise RuntimeError(f"forward got {live} rows, the batch has {self._live}")
        if self._pointer + t > self._slots:
            self._make_room(t)
        if self._linear is not None:
            self._linear.reserve(t)
        ids = torch.zeros(self._rows, t, dtype=torch.long, device=self.device)  # [S, t]
        ids[:live] = tokens
        positions = self._lengths[:, None] + torch.arange(t, device=self.device)  # [S, t]
        key = (self._rows, t, self._slots)
        if self.compiled and key not in self._seen:
            self._warm_up(ids, positions)
            self._seen.add(key)
        logits = self._run(ids, positions, compiled=True)
        self._lengths = self._lengths + t
        self._pointer += t
        if self._linear is not None:
            self._linear.advanced(t)
        return logits[:live]  # [B, t, V]

    @property
    def state_s(self) -> float:
        """Seconds spent checkpointing and re-advancing linear-attention state (0 without any)."""
        return self._linear.seconds if self._linear is not None else 0.0

    @torch.inference_mode()
    def rollback(self, lengths: Sequence[int]) -> None:
        if self._linear is not None:
            now = self._lengths[: len(lengths)].tolist()
            self._linear.rollback([n - k for n, k in zip(now, lengths, strict=True)])
        keep = torch.zeros(self._rows, dtype=torch.long, device=self.device)  # padded rows keep 0
        keep[: len(lengths)] = torch.as_tensor(lengths, dtype=torch.long, device=self.device)
        rank = self._valid.cumsum(1)  # [S, L] live tokens up to and including each slot
        self._valid &= rank <= keep[:, None]
        self._lengths = torch.minimum(self._lengths, keep)
        self._set_pointer(self._last_used())

    @torch.inference_mode()
    def retain(self, rows: Sequence[int]) -> None:
        index = torch.as_tensor([*rows, *[rows[0]] * (self._rows - len(rows))], device=self.device)  # [S]
        for layer in self._kv():
            layer.keys.copy_(layer.keys[index])
            layer.values.copy_(layer.values[index])
        if self._linear is not None:
            self._linear.retain(index, in_place=True)
        self._valid.copy_(self._valid[index])
        self._valid[len(rows) :] = False
        self._lengths = self._lengths[index]
        self._lengths[len(rows) :] = 0
        self._live = len(rows)
        self._set_pointer(self._last_used())

    def cached_lengths(self) -> list[int]:
        return self._lengths[: self._live].tolist()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def router_trace(self):
        """None: a hook on a compiled graph would change the graph it measures; trace eagerly."""
        return None

    # -- the static cache -----------------------------------------------------------------------
    def _run(self, ids: torch.Tensor, positions: torch.Tensor, compiled: bool) -> torch.Tensor:
        t = ids.shape[1]
        self._valid[:, self._pointer : self._pointer + t] = True  # the block's own slots
        step = self._step if compiled else self._eager_step
        logits = step(ids, positions, self._valid, self._cache)
        return logits.clone() if self._clone_logits and compiled else logits

    def _warm_up(self, ids: torch.Tensor, positions: torch.Tensor) -> None:
        """Compile this shape on throwaway calls: their writes land past the pointer and are undone."""
        self.synchronize()
        start = time.perf_counter()
        states = self._linear.snapshot() if self._linear is not None else None
        for _ in range(self._warm_calls):
            self._run(ids, positions, compiled=True)
            self._valid[:, self._pointer :] = False
            self._set_pointer(self._pointer)
            if states is not None:
                self._linear.restore(states)
        self.synchronize()
        self.compile_s += time.perf_counter() - start

    def _allocate(self, rows: int, slots: int) -> None:
        """A fresh static cache of S x L slots, reused while the shape stays (graphs guard on it)."""
        if (rows, slots) == (self._rows, self._slots):
            return
        from transformers import StaticCache

        config = self.model.config
        cache = StaticCache(config=config, max_cache_len=slots)
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
        longest = int(self._lengths.max())
        order = torch.sort((~self._valid).to(torch.int8), dim=1, stable=True).indices  # [S, L] live first
        for layer in self._kv():
            for kv in (layer.keys, layer.values):
                kv.copy_(kv.gather(2, order[:, None, :, None].expand(-1, kv.shape[1], -1, kv.shape[3])))
        self._valid.copy_(torch.arange(self._slots, device=self.device)[None, :] < self._lengths[:, None])
        if longest + t > self._slots:
            self._allocate(self._rows, _round_up(longest + t + SLOT_STEP // 2, SLOT_STEP))
        self._set_pointer(longest)

    def _last_used(self) -> int:
        slots = torch.arange(1, self._slots + 1, device=self.device)
        return int((self._valid.any(0) * slots).max()) if self._slots else 0

    def _set_pointer(self, pointer: int) -> None:
        """Move the shared write position of every KV layer (in place: graphs read these tensors)."""
        self._pointer = pointer
        for layer in self._kv():
            layer.cumulative_length.fill_(pointer)

    def _kv(self) -> list:
        """The cache layers that keep keys and values in slots."""
        return [self._cache.layers[index] for index in self._kv_layers]


def _one_row_matmuls_fused() -> dict:
    """Inductor options that write each one-row matmul (decode and draft steps) as its own fused
    multiply-and-sum instead of a BLAS call. On this CPU the BLAS matrix-vector product streams
    weights at about half the read bandwidth; inductor's generated reduction does better (bench
    dense-s T(1,1) measured 31 -> 19 ms in float32 and 34 -> 19 ms in bf16, docs/engine.md).
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


def _round_up(n: int, step: int) -> int:
    return -(-max(n, 1) // step) * step


def check_compile_device(device: torch.device) -> None:
    if device.type == "mps":
        raise SpecmoeError("--compile is not supported on Apple GPUs; drop --compile or use --device cpu")
