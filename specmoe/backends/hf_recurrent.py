"""Rolling back the linear-attention state of hybrid transformers models (Qwen3-Next, Qwen3.5).

Shape legend: B batch rows (the static backend's padded S rows included), t tokens in one block,
N logged positions (capacity), H hidden size, C conv channels, K conv kernel, Hv value heads,
Dk / Dv key / value head dims.

Three of every four layers of these models are gated-DeltaNet linear attention. Such a layer keeps no
keys and values: it folds every token it sees into a recurrent state [B, Hv, Dk, Dv] and a short
convolution window [B, C, K]. Masking a rejected draft token's KV slots (the backends' rollback)
therefore leaves it inside these states, and every later token is computed from a wrong past.

The method here, a per-layer re-advance:

- *checkpoint*: after prefill and after every rollback, each linear layer's conv and recurrent
  state is copied aside, with each row's cached length;
- *log*: every later forward records each linear layer's input (its hidden states after the
  layer's input norm, [B, t, H]) into a static buffer [B, N, H] at the log position;
- *rollback*: a row that keeps every logged token keeps its state as it is. A row that keeps k of
  the T logged tokens (k < T) gets its checkpointed state back and is advanced through its first
  k logged inputs (`gated_delta.replay`: the layer's projections, conv and delta-rule state update,
  all such rows at once, each stopping at its own k; no output is computed). Then the checkpoint
  moves to the new state and the log empties.

Exact: in a causal model a layer's input at position j depends on tokens up to j only, and the
kept tokens are a prefix of the logged ones, so the re-advanced state is the state the layer would
hold had it seen only the kept tokens (tests/test_hybrid.py checks SD against plain decoding in
float64, token for token). The layers are independent given their logged inputs, so each is
re-advanced alone: no attention layer, MLP or expert runs again.

Cost (`seconds`, reported per round as the decode loop's `state_s`): one copy of every linear layer's
state per rollback, plus, for rows that rejected drafts, those layers' input projections, conv and
delta-rule state update over the kept tokens. For comparison, vLLM and SGLang keep the per-position states
their verify kernels compute and pick each row's (no recompute, γ + 1 states of memory per row);
llama.cpp checkpoints a sequence's recurrent state and decodes the kept tokens again through the
whole model (`llamacpp.py`).

Only mixers whose layout `gated_delta` knows are accepted (`LINEAR_MIXERS`); a model with any other
cache layer that cannot drop a suffix still decodes plainly, and SD on it is refused in one line
(`cache_layout` says why, the backend's `rollback_refused`).
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specmoe.backends.gated_delta import replay
from specmoe.backends.hf_sliding import sliding_layers
from specmoe.backends.slots import to_device
from specmoe.errors import SpecmoeError

# Gated-DeltaNet mixers whose projections and state update `gated_delta.replay` reproduces; each is
# covered by tests/test_hybrid.py against transformers' own forward.
LINEAR_MIXERS = frozenset({"Qwen3NextGatedDeltaNet", "Qwen3_5GatedDeltaNet", "Qwen3_5MoeGatedDeltaNet"})
SUPPORTED_HYBRIDS = "qwen3_next, qwen3_5, qwen3_5_moe"
LOG_CAPACITY = 64  # logged positions; a longer run of forwards without a rollback moves the checkpoint

# transformers cache layer classes -> what they are, for the refusal line.
_LAYER_KINDS = {
    "DynamicSlidingWindowLayer": "chunked attention (old keys are dropped chunk by chunk)",
    "LinearAttentionLayer": "a recurrent or convolution state",
    "LinearAttentionAndFullAttentionLayer": "a recurrent state beside attention",
    "LinearAttentionAndSlidingWindowAttentionLayer": "a recurrent state beside sliding-window attention",
    "DynamicIndexedLayer": "an indexed sparse-attention cache",
    "DummyLayer": "a shared or absent cache",
}


@dataclass(frozen=True)
class CacheLayout:
    """Which decoder layers keep keys and values, and which keep a linear-attention state."""

    kv_layers: tuple[int, ...]
    linear_layers: tuple[int, ...]
    sliding_layers: tuple[int, ...] = ()  # of kv_layers, kept whole and windowed by the mask (`hf_sliding`)
    rollback_refused: str | None = None  # why rejected draft tokens cannot be dropped (SD is refused)

    @property
    def is_hybrid(self) -> bool:
        return bool(self.linear_layers)


def keeps_cache(model) -> bool:
    """Whether the model keeps its past in a transformers Cache that specmoe can hand it
    (`past_key_values`, a DynamicCache or a StaticCache). Mamba, RWKV, xLSTM and some older models
    keep it in their own objects or not at all; MiniMax takes `past_key_values` but only of its own
    Cache class (`MiniMaxCache`, which refuses anything else), so a model whose modeling module
    defines a Cache class of its own counts as keeping its past outside too."""
    if "past_key_values" not in inspect.signature(model.forward).parameters:
        return False
    from transformers.cache_utils import Cache

    module = type(model).__module__
    defined = vars(sys.modules[module]).values() if module in sys.modules else ()
    own = [v for v in defined if isinstance(v, type) and issubclass(v, Cache) and v.__module__ == module]
    return not own


def cache_layout(model, name: str) -> CacheLayout:
    """The model's cache layout. When some layer's cache cannot drop a rejected suffix the layout
    carries the one-line reason instead of layer lists: plain decoding needs no rollback, and SD,
    which would be silently wrong, is refused with that line. A model that keeps its past outside
    transformers' Cache has no layout at all and is refused here (`hf_uncached` decodes it)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionLayer

    model_type = getattr(model.config, "model_type", "?")
    fix = f"use a transformer or a supported hybrid ({SUPPORTED_HYBRIDS}), or its GGUF through llama.cpp"
    if not keeps_cache(model):
        raise SpecmoeError(
            f"'{name}' is a {model_type} model, which keeps its past outside transformers' Cache, so "
            "specmoe's cache backends cannot run it; drop --compile to decode it plainly (without a cache)"
        )
    mixers = {m.layer_idx: m for m in model.modules() if type(m).__name__ in LINEAR_MIXERS}
    kv, linear, sliding = [], [], sliding_layers(model.config)
    for index, layer in enumerate(DynamicCache(config=model.config).layers):
        if type(layer) is DynamicLayer or (type(layer) is DynamicSlidingWindowLayer and index in sliding):
            kv.append(index)
        elif type(layer) is LinearAttentionLayer and index in mixers:
            linear.append(index)
        else:
            kind = _LAYER_KINDS.get(type(layer).__name__, type(layer).__name__)
            return CacheLayout(
                (),
                (),
                rollback_refused=refused_sd(name, model_type, f"whose layer {index} keeps {kind}", fix),
            )
    return CacheLayout(tuple(kv), tuple(linear), sliding)


def refused_sd(name: str, model_type: str, why: str, fix: str) -> str:
    """The one line that refuses SD on a model whose cache cannot drop rejected draft tokens."""
    return (
        f"'{name}' is a {model_type} model {why}, which specmoe cannot roll back, so speculative "
        f"decoding on it is refused (it would be silently wrong; plain decoding works); {fix}"
    )


class LinearStates:
    """The linear layers' states of one batch in a transformers cache, with a checkpoint and a log
    of layer inputs that let any row go back to any length since the checkpoint."""

    def __init__(self, model, layout: CacheLayout, capacity: int = LOG_CAPACITY) -> None:
        self._mixers = {m.layer_idx: m for m in model.modules() if type(m).__name__ in LINEAR_MIXERS}
        self.layers = self._layers = layout.linear_layers
        self._hidden = int(model.config.get_text_config().hidden_size)
        self._dtype = next(model.parameters()).dtype
        self.capacity = capacity
        self.seconds = 0.0  # checkpoint copies and re-advances, summed over the backend's life
        self.readvance_s = 0.0  # of which re-advancing rows (the rest is copying states)
        self._recording = False
        self._cache = None
        self._log: dict[int, torch.Tensor] = {}  # layer -> [B, N, H] inputs since the checkpoint
        self._saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # layer -> conv, recurrent
        self._logged = 0  # positions logged since the checkpoint (every row feeds the same t)
        self._position: torch.Tensor | None = None  # [] the log position, read inside compiled graphs
        self._steps: torch.Tensor | None = None  # [N] 0..N-1
        for index in self._layers:
            self._mixers[index].register_forward_pre_hook(self._record, with_kwargs=True)

    # -- the batch's lifecycle ------------------------------------------------------------------
    def begin(self, cache, rows: int, device: torch.device, static: bool = False) -> None:
        """A new batch was prefilled into `cache`: checkpoint its states and start logging."""
        self._cache = cache
        self._log = {
            i: torch.zeros(rows, self.capacity, self._hidden, dtype=self._dtype, device=device)
            for i in self._layers
        }
        self._position = torch.zeros((), dtype=torch.long, device=device)
        self._steps = torch.arange(self.capacity, device=device)
        if static:  # graphs write the log in place; a CUDA graph needs their addresses fixed
            for buffer in (*self._log.values(), self._position):
                torch._dynamo.mark_static_address(buffer)
        for index in self._layers:
            self._zero_if_unset(index, rows, device)
            cache.layers[index].has_previous_state[0] = True
        self.checkpoint()

    def rebind(self, cache) -> None:
        """The static backend moved these layers' state objects into a larger cache."""
        self._cache = cache

    def reserve(self, t: int) -> None:
        """A forward of t positions per row follows: log it. Past the capacity the checkpoint moves
        to the current state, so no rollback may reach back before it (plain decoding never rolls
        back). Only this backend's own forwards log: another backend may share the model."""
        self._recording = True
        if self._logged + t > self.capacity:
            if t > self.capacity:
                raise SpecmoeError(
                    f"a block of {t} tokens is wider than the hybrid rollback log ({self.capacity}); "
                    f"use gamma below {self.capacity}"
                )
            self.checkpoint()

    def advanced(self, t: int) -> None:
        """t positions were fed (and logged) for every row."""
        self._recording = False
        self._logged += t
        self._position.fill_(self._logged)

    def checkpoint(self) -> None:
        """The current states become the checkpoint; the log empties."""
        start = self._clock()
        self._saved = {i: tuple(s.clone() for s in self._states(i)) for i in self._layers}
        self._logged = 0
        if self._position is not None:
            self._position.fill_(0)
        self._stop(start)

    def rollback(self, drop: Sequence[int]) -> None:
        """Row r forgets its last drop[r] fed positions (at most those logged since the checkpoint);
        rows past len(drop) are the static batch's padding and are left alone."""
        start = self._clock()
        for row, dropped in enumerate(drop):
            if not 0 <= dropped <= self._logged:
                raise RuntimeError(
                    f"hybrid rollback of {dropped} positions in row {row}, "
                    f"{self._logged} logged since the checkpoint"
                )
        rows = [row for row, dropped in enumerate(drop) if dropped]
        if rows:
            self._readvance(rows, [self._logged - drop[row] for row in rows])
        self.readvance_s += self._stop(start)
        self.checkpoint()

    def retain(self, index: torch.Tensor, in_place: bool) -> None:
        """Keep these rows (index [b]) of the states, the checkpoint and the log. in_place writes the
        kept rows over the first b rows, keeping each tensor's address (the static cache)."""

        def take(x: torch.Tensor) -> torch.Tensor:
            return x.copy_(x[index]) if in_place else x[index]

        for i in self._layers:
            conv, recurrent = self._states(i)
            layer = self._cache.layers[i]
            layer.conv_states[0], layer.recurrent_states[0] = take(conv), take(recurrent)
            self._saved[i] = tuple(take(s) for s in self._saved[i])
            self._log[i] = take(self._log[i])

    def snapshot(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the current states (the compiled path's warm-up calls write into them)."""
        return {i: tuple(s.clone() for s in self._states(i)) for i in self._layers}

    def restore(self, states: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        for i, (conv, recurrent) in states.items():
            now_conv, now_recurrent = self._states(i)
            now_conv.copy_(conv)
            now_recurrent.copy_(recurrent)

    # -- internals ------------------------------------------------------------------------------
    def _zero_if_unset(self, index: int, rows: int, device: torch.device) -> None:
        """Give a layer that saw no token yet (every prompt was one token long, so prefill fed
        nothing) zero states, which `begin` marks as a previous state. A zero state is exactly no
        state: the causal conv pads with zeros and the delta rule starts from zeros."""
        layer, mixer = self._cache.layers[index], self._mixers[index]
        if layer.is_recurrent_states_initialized[0]:
            return
        conv = torch.zeros(rows, mixer.conv_dim, mixer.conv_kernel_size, dtype=self._dtype, device=device)
        # transformers' delta rules keep the state in float32 whatever the model's dtype
        shape = (rows, mixer.num_v_heads, mixer.head_k_dim, mixer.head_v_dim)
        layer.lazy_initialization(conv_states=conv, recurrent_states=torch.zeros(shape, device=device))

    def _states(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self._cache.layers[index]
        return layer.conv_states[0], layer.recurrent_states[0]  # [B, C, K], [B, Hv, Dk, Dv]

    def _record(self, module, args, kwargs) -> None:
        """Forward pre-hook of a linear mixer: log its input block at the log position."""
        if not self._recording:
            return
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]  # [B, t, H]
        slots = self._position + self._steps[: hidden.shape[1]]  # [t]
        self._log[module.layer_idx].index_copy_(1, slots, hidden.to(self._dtype))

    def _readvance(self, rows: list[int], keep: list[int]) -> None:
        """These rows go back to the checkpoint and through their first keep[r] logged inputs."""
        steps = max(keep)  # known here, so `replay` reads nothing back from the device
        device = self._position.device
        rows, keep = to_device(rows, device), to_device(keep, device)  # [b], [b]
        for i in self._layers:
            conv, recurrent = self._states(i)
            saved_conv, saved_recurrent = self._saved[i]
            logged = self._log[i][rows, : self._logged]  # [b, T, H]
            new_conv, new_recurrent = replay(
                self._mixers[i], saved_conv[rows], saved_recurrent[rows], logged, keep, steps
            )
            conv[rows] = new_conv.to(conv.dtype)
            recurrent[rows] = new_recurrent.to(recurrent.dtype)

    def _clock(self) -> float:
        if self._position is not None and self._position.device.type == "cuda":
            torch.cuda.synchronize(self._position.device)
        return time.perf_counter()

    def _stop(self, start: float) -> float:
        elapsed = self._clock() - start
        self.seconds += elapsed
        return elapsed
