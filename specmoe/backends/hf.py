"""PyTorch + transformers backend: any local Hugging Face causal-LM directory.

Cache layout (B sequences, L physical slots, H kv heads, D head dim). Every layer keeps keys and values
as [B, H, L, D] in one transformers `DynamicCache`; a mask [B, L], kept on the host
(`slots.SlotMap`), marks which slots hold a live token of that row. Rows differ in length (ragged
prompts, ragged acceptance), so:

- a prompt is left-padded; pad slots are invalid;
- a verify block is appended to every row at the same physical slots; when row i rejects part of it,
  those slots are marked invalid (a hole) and the common tail that no row uses is cropped;
- rotary positions come from each row's count of valid slots, never from the physical index, so a
  hole changes nothing a later token sees: masked keys get exactly zero attention weight.

Masking beats rewriting the cache on every round (a copy of the whole cache per round); holes cost
attention work, so when they outgrow the live tokens the cache is compacted once (`_compact`).
Everything decided about the layout between forwards is decided on the host, so a round reads no
device value back; transformers gets the attention mask ready, or none when no row has padding or a
hole (`hf_mask.py`).

Hybrid models (Qwen3-Next, Qwen3.5) also keep a linear-attention state per row that no mask can
edit; `hf_recurrent.LinearStates` checkpoints it and re-advances rows that dropped tokens, and its
seconds are this backend's `state_s`. A model whose cache can neither be masked nor rolled back
(`hf_recurrent.cache_layout`) decodes plainly, and SD on it is refused (`rollback_refused`); one
that keeps its past outside transformers' Cache decodes without a cache (`hf_uncached`).
Sliding-window layers keep their whole past like full attention, and the window is applied by the
mask (`hf_sliding`).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from specmoe.backends import hf_experts
from specmoe.backends.base import BackendBase, HiddenAccess
from specmoe.backends.eagle3_head import Eagle3Checkpoint, is_eagle3, load_eagle3
from specmoe.backends.hf_mask import DeviceMask
from specmoe.backends.hf_model import (
    CapturedHidden,
    batch_refusal,
    check_causal,
    hidden_request,
    padded_nan_refusal,
    set_model_facts,
    stacked_hidden,
)
from specmoe.backends.hf_recurrent import LinearStates, cache_layout, keeps_cache
from specmoe.backends.hf_sliding import keep_whole_past, sliding_window
from specmoe.backends.hf_uncached import UncachedHFBackend
from specmoe.backends.mtp_head import PREFIX as MTP_PREFIX
from specmoe.backends.pickle_weights import from_pickle
from specmoe.backends.slots import SlotMap, left_padded, to_device
from specmoe.backends.tokenizer_digest import tokenizer_digest
from specmoe.backends.weights import check_safetensors_dir, read_config
from specmoe.dtypes import DEFAULT_DTYPE, DTYPE_NAMES, torch_dtype
from specmoe.errors import SpecmoeError

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def default_experts_implementation(dtype: str, compile: bool = False, device: str = "cpu") -> str:
    """Eager on CPU: grouped_mm measured fastest in bf16 and fp32 (docs/decoding.md); it has no
    float64 path, so the exact reference uses the model's per-expert loop. Eager on a GPU: what
    transformers' `generate()` decodes with there, batched_mm for decode-sized blocks and grouped_mm
    for prefill (`hf_experts.SIZED`). Compiled on CPU: the gathered contraction (`hf_experts.py`),
    which inductor fuses into one kernel per projection. Compiled on a GPU: outside bf16
    grouped_mm falls back to a per-expert loop that reads its offsets on the host, which a CUDA
    graph cannot capture, so batched_mm."""
    on_cpu = device.partition(":")[0] == "cpu"
    if compile and on_cpu:
        return hf_experts.NAME
    if dtype == "float64":
        return "batched_mm" if compile else "eager"
    if compile and dtype != "bfloat16":
        return "batched_mm"
    if not compile and not on_cpu:
        return hf_experts.SIZED
    return "grouped_mm"


def resolve_device(device: str, asked: str = "--device", fix: str = "use --device cpu") -> torch.device:
    """The torch device a device string names, refused in one line when it is malformed or absent
    here; `asked` and `fix` name where it was given and how to change it (a suite key, say)."""
    kind, sep, index = device.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (sep and (kind != "cuda" or not index.isdigit())):
        raise SpecmoeError(f"unknown device '{device}'; use cpu, cuda, cuda:<index> or mps")
    if kind == "cuda" and not torch.cuda.is_available():
        raise SpecmoeError(f"{asked} {device} was asked for but torch sees no CUDA GPU; {fix}")
    if kind == "cuda" and index and int(index) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise SpecmoeError(
            f"{asked} {device}: torch sees {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}; "
            "pick one of them (nvidia-smi lists them; CUDA_VISIBLE_DEVICES may hide some)"
        )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise SpecmoeError(f"{asked} mps was asked for but torch sees no Apple GPU; {fix}")
    return torch.device(device)


def stated_context(path: Path) -> int:
    """`check_model_dir` as a suite checks a model before its runs (no pickle checkpoints): the
    context in tokens its config.json states (unbounded when it states none)."""
    config = check_model_dir(path, allow_pickle=False)
    return int(config.get("max_position_embeddings") or 1 << 30)


def check_model_dir(path: Path, allow_pickle: bool) -> dict:
    """Fail early, in one line, on anything that would make transformers fail late or reach a hub."""
    if path.is_file():
        raise SpecmoeError(
            f"'{path}' is a file, not a model directory; pass the folder that holds config.json and the "
            "weights (or a .gguf file, for llama.cpp)"
        )
    if not path.is_dir():
        raise SpecmoeError(
            f"model directory '{path}' not found; build local models with "
            "`specmoe zoo build --preset tiny --out zoo` or pass a local Hugging Face model directory"
        )
    config_file = path / "config.json"
    if not config_file.is_file():
        raise SpecmoeError(f"'{path}' has no config.json; pass a Hugging Face model directory")
    names = [p.name for p in path.iterdir()]
    if any(n.endswith(".safetensors") for n in names):
        check_safetensors_dir(path)
    else:
        if any(n.endswith(_PICKLE_SUFFIXES) for n in names):
            if not allow_pickle:
                raise SpecmoeError(
                    f"'{path}' holds only pickle weights, which can run code when loaded; convert them to "
                    "safetensors, or pass --allow-pickle if you trust the files"
                )
        else:
            raise SpecmoeError(f"'{path}' holds no weights (*.safetensors); is the download complete?")
    return read_config(path)


def load_hf(
    path: str | Path,
    dtype: str | None = None,
    device: str = "cpu",
    experts_implementation: str | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    moe_top_k: int | None = None,
    compile: bool = False,
    compile_mode: str | None = None,
) -> HFBackend | UncachedHFBackend | Eagle3Checkpoint:
    """Load a local Hugging Face causal LM. Never contacts a hub (HF_HUB_OFFLINE semantics).

    compile=True gives the compiled path (`hf_static.py`): a static KV cache and torch.compile'd
    fixed-shape forwards; compile_mode is torch.compile's mode, "reduce-overhead" (CUDA graphs) by
    default on CUDA and inductor's default elsewhere.

    An EAGLE-3 head's directory (its config.json names the architecture) loads as an
    `Eagle3Checkpoint`: a draft that `make_drafter` binds to its target, run beside it."""
    path = Path(path)
    config = check_model_dir(path, allow_pickle)  # before importing transformers: seconds earlier
    os.environ["HF_HUB_OFFLINE"] = "1"
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    if "auto_map" in config and not trust_remote_code:
        raise SpecmoeError(
            f"'{path}' needs its own Python code (auto_map in config.json); "
            "pass --trust-remote-code only if you trust that code"
        )
    dtype = dtype or DEFAULT_DTYPE
    if dtype not in DTYPE_NAMES:
        raise SpecmoeError(f"unknown dtype '{dtype}'; use one of {', '.join(DTYPE_NAMES)}")
    torch_device = resolve_device(device)
    if is_eagle3(config):  # a head, not a model: bound to its target when the drafter is made
        return load_eagle3(path, config, torch_dtype(dtype), torch_device)
    verbosity = hf_logging.get_verbosity()
    # transformers reports missing or unexpected weights as a multi-line notice and goes on with
    # random ones; that is an error here (`check_loading_info`), so the notice is not printed.
    hf_logging.set_verbosity_error()
    options = {
        "dtype": torch_dtype(dtype),
        "output_loading_info": True,
        "ignore_mismatched_sizes": True,  # reported in `info` and refused below, with names
    }
    try:
        # --allow-pickle promises to load a pickle checkpoint, not only what torch's weights-only
        # unpickler admits (`pickle_weights`: an older checkpoint pickles numpy scalars and such)
        loaded = from_pickle(path, trust_remote_code, **options) if allow_pickle else None
        model, info = loaded or AutoModelForCausalLM.from_pretrained(
            path,
            local_files_only=True,
            use_safetensors=None if allow_pickle else True,
            trust_remote_code=trust_remote_code,
            **options,
        )
    # Beyond the builtin failures: a pickle file that is not one (cut short, another format), and a
    # config.json value of the wrong type, which transformers' strict config classes refuse.
    except (ValueError, KeyError, OSError, RuntimeError, TypeError, EOFError, pickle.UnpicklingError,
            StrictDataclassError) as err:  # fmt: skip
        raise SpecmoeError(f"transformers could not load '{path}': {_load_error(err)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    check_loading_info(path, info)
    default = default_experts_implementation(dtype, compile, device)
    hf_experts.set_kernel(model, path.name, experts_implementation, default, torch_dtype(dtype))
    model.to(torch_device).eval()
    check_causal(model, path.name)
    if moe_top_k is not None:
        set_moe_top_k(model, moe_top_k)
    if compile:
        backend = compiled_backend(model, path.name, torch_device, compile_mode)
    elif not keeps_cache(model):
        backend = UncachedHFBackend(model, name=path.name, device=torch_device)
    else:
        backend = HFBackend(model, name=path.name, device=torch_device)
    backend.tokenizer_digest = tokenizer_digest(path)  # checked against its target's by `decode`
    return backend


def compiled_backend(model, name: str, device: torch.device, mode: str | None = None):
    """The static-cache backend with compiled forwards (CUDA graphs on CUDA unless a mode is named)."""
    from specmoe.backends.hf_static import StaticHFBackend, check_compile_device

    check_compile_device(device)
    if mode is None and device.type == "cuda":
        mode = "reduce-overhead"
    return StaticHFBackend(model, name=name, device=device, compile=True, mode=mode)


def _load_error(err: Exception) -> str:
    """transformers' reason in one line; a shape mismatch keeps the tensor name and both shapes."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    mismatch = next((line for line in lines if "size mismatch" in line), None)
    if mismatch is not None:
        return f"{mismatch}; config.json does not match the weights, restore the model's own config.json"
    first = lines[0] if lines else type(err).__name__
    if first.endswith(":") and len(lines) > 1:  # "Validation error for field 'x':" then the reason
        first = f"{first} {lines[1]}"
    return first + "; check the model directory"


def check_loading_info(path: Path, info: dict) -> None:
    """Refuse a model whose weights did not all load: transformers would run it with randomly
    initialised tensors where weights are missing or shaped differently from config.json, and
    every number measured on it would be wrong."""
    missing = sorted(info.get("missing_keys") or ())
    # An MTP module's tensors (mtp.*) are read apart by --draft mtp (`mtp_head`), as Qwen3.5's and
    # Qwen3-Next's transformers classes leave them to be; any other family's loader would list them.
    unexpected = sorted(k for k in info.get("unexpected_keys") or () if not k.startswith(MTP_PREFIX))
    mismatched = sorted(info.get("mismatched_keys") or (), key=str)  # (name, file shape, model shape)
    fix = "restore the model's own config.json and weights"
    if mismatched:
        name, *shapes = mismatched[0] if isinstance(mismatched[0], tuple) else (mismatched[0],)
        detail = (
            f"{name}: {tuple(shapes[0])} in the weights, {tuple(shapes[1])} from config.json"
            if len(shapes) == 2
            else name
        )
        raise SpecmoeError(
            f"'{path}': config.json does not match the weights ({len(mismatched)} tensor(s) differ in shape, "
            f"first {detail}); {fix}"
        )
    problems = (
        ("missing from the checkpoint", missing, "the model would run with random weights there"),
        ("in the checkpoint that the model has no place for", unexpected, "config.json names another model"),
    )
    for kind, names, why in problems:
        if names:
            more = f" and {len(names) - 1} more" if len(names) > 1 else ""
            raise SpecmoeError(
                f"'{path}': {len(names)} weight tensor(s) {kind} ({names[0]}{more}); {why}; {fix}"
            )


def set_moe_top_k(model, top_k: int) -> None:
    """Route every token to top_k experts instead of the trained number (sparsity sweeps)."""
    routers = [m for m in model.modules() if hasattr(m, "top_k") and hasattr(m, "num_experts")]
    if not routers:
        raise SpecmoeError("moe_top_k was given for a model without MoE routers; drop it for dense models")
    experts = routers[0].num_experts
    if not 1 <= top_k <= experts:
        raise SpecmoeError(f"moe_top_k must be between 1 and the model's {experts} experts, got {top_k}")
    for router in routers:
        router.top_k = top_k
    model.config.num_experts_per_tok = top_k


class HFBackend(CapturedHidden, BackendBase):
    """A transformers model plus a ragged, maskable KV cache for one batch of sequences."""

    hidden_access = HiddenAccess.ALL

    def __init__(self, model, name: str, device: torch.device) -> None:
        from transformers import DynamicCache

        set_model_facts(self, model, name, device)
        config = model.config
        layout = cache_layout(model, name)
        self.rollback_refused = layout.rollback_refused  # a cache that cannot drop a rejected suffix
        self.batch_refused = batch_refusal(model, name)  # positions a left-padded batch would shift
        self._linear = LinearStates(model, layout) if layout.is_hybrid else None
        self._new_cache = lambda: keep_whole_past(DynamicCache(config=config), layout.sliding_layers)
        self._cache = self._new_cache()
        self._slots = SlotMap()  # the layout of live slots, on the host: no step reads the device
        self._masks = DeviceMask(self._slots, model, device, sliding_window(config))
        self._trace = None
        self._capture: tuple[int, ...] = ()  # hidden-state layers every forward keeps
        self._hidden: torch.Tensor | None = None  # [B, t, K, H] of the last prefill or forward

    # -- protocol -------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        width = max((len(p) for p in prompts), default=0)
        ids = np.zeros((len(prompts), width), dtype=np.int64)  # [B, W] left-padded; pads never seen
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = prompt
        self._prefill([len(p) for p in prompts], {"input_ids": to_device(ids, self.device)})

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._forward({"input_ids": tokens}, tokens.shape[1])  # tokens [B, t]

    # -- input vectors instead of token ids (a head drafter's model, `hf_heads`) ---------------
    @torch.inference_mode()
    def prefill_embeds(self, rows: Sequence[torch.Tensor]) -> None:
        """`prefill` of input vectors: row i's [n_i, E] (n_i may be 0), left-padded with zeros."""
        width = max((len(r) for r in rows), default=0)
        embeds = left_padded(rows, width, self.device)  # [B, W, E]
        self._prefill([len(r) for r in rows], {"inputs_embeds": embeds})

    @torch.inference_mode()
    def forward_embeds(self, embeds: torch.Tensor) -> torch.Tensor:
        """`forward` of input vectors: embeds [B, t, E] -> logits [B, t, V]."""
        return self._forward({"inputs_embeds": embeds}, embeds.shape[1])

    def _prefill(self, lengths: list[int], inputs: dict[str, torch.Tensor]) -> None:
        self._cache = self._new_cache()
        self._slots.reset(lengths)
        width = self._slots.width
        self._hidden = self._no_hidden(len(lengths))
        if width:
            valid = self._slots.valid
            positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0)  # [B, W]
            out = self.model(
                **inputs,
                attention_mask=to_device(valid.copy(), self.device),
                position_ids=to_device(positions, self.device),
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=1,
                **hidden_request(self._capture),
            )
            self._hidden = self._right_aligned(stacked_hidden(out, self._capture), valid)
            if not self._slots.dense and torch.isnan(out.logits).any():  # one read, at a padded prefill
                raise SpecmoeError(padded_nan_refusal(self.model, self.name))
        if self._linear is not None:
            self._linear.begin(self._cache, len(lengths), self.device)

    def _forward(self, inputs: dict[str, torch.Tensor], t: int) -> torch.Tensor:
        if self._linear is not None:
            self._linear.reserve(t)
        positions = to_device(self._slots.positions(t), self.device)  # [B, t]
        start = self._slots.append(t)
        out = self.model(
            **inputs,
            attention_mask=self._masks.for_block(start, t),
            position_ids=positions,
            past_key_values=self._cache,
            use_cache=True,
            **hidden_request(self._capture),
        )
        if self._linear is not None:
            self._linear.advanced(t)
        self._hidden = stacked_hidden(out, self._capture)
        return out.logits  # [B, t, V]

    @torch.inference_mode()
    def rollback(self, lengths: Sequence[int]) -> None:
        dropped = self._slots.keep(lengths)  # [B]
        if self.rollback_refused is not None and dropped.any():  # the decode loop refuses SD first: a bug
            raise RuntimeError(f"rollback asked of a cache that cannot roll back: {self.rollback_refused}")
        if self._linear is not None:
            self._linear.rollback(dropped.tolist())
        if dropped.any():
            self._trim()

    def retain(self, rows: Sequence[int]) -> None:
        index = to_device(np.asarray(rows, dtype=np.int64), self.device)
        self._slots.retain(rows)
        if self.rollback_refused is not None:
            # Layers this backend cannot edit (recurrent states, sliding windows) select their own
            # rows; their slots are never cropped, as cropping is dropping positions.
            self._cache.reorder_cache(index)
            return
        self._apply(lambda kv: kv[index])
        if self._linear is not None:
            self._linear.retain(index, in_place=False)
        self._trim()

    def cached_lengths(self) -> list[int]:
        return self._slots.lengths.tolist()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elif self.device.type == "mps":
            torch.mps.synchronize()

    def router_trace(self):
        if not self.is_moe:
            return None
        if self._trace is None:
            from specmoe.backends.router_trace import RouterTrace

            self._trace = RouterTrace(self.model)
        return self._trace

    def _no_hidden(self, rows: int) -> torch.Tensor | None:
        """[B, 0, K, H]: what a prefill that fed no token captured (None when nothing is captured)."""
        if not self._capture:
            return None
        size = int(self.model.config.get_text_config().hidden_size)
        return torch.zeros(rows, 0, len(self._capture), size, dtype=self.dtype, device=self.device)

    def _right_aligned(self, hidden: torch.Tensor | None, valid: np.ndarray) -> torch.Tensor | None:
        """Prefill's hidden states [B, W, K, H] with the left padding zeroed, as `Backend.hidden` says."""
        if hidden is None:
            return None
        pad = ~to_device(valid.copy(), self.device)  # [B, W]
        return hidden.masked_fill(pad[:, :, None, None], 0)

    # -- cache housekeeping ---------------------------------------------------------------------
    def _apply(self, fn) -> None:
        """Apply fn to every layer's keys and values ([B, H, L, D] each)."""
        for layer in self._cache.layers:
            if getattr(layer, "is_initialized", False) and layer.keys.numel():
                layer.keys, layer.values = fn(layer.keys), fn(layer.values)

    def _trim(self) -> None:
        """Drop physical slots no row uses at either end; compact when holes outnumber live tokens."""
        lo, hi = self._slots.used()
        if (lo, hi) != (0, self._slots.width):
            self._apply(lambda kv: kv[:, :, lo:hi])
            self._slots.crop(lo, hi)
        if self._slots.width > 2 * self._slots.longest + 64:
            self._compact()

    def _compact(self) -> None:
        """Move each row's live slots to the right end, in order; left-pad the rest."""
        index = to_device(self._slots.compaction("right"), self.device)  # [B, longest]
        self._apply(lambda kv: kv.gather(2, index[:, None, :, None].expand(-1, kv.shape[1], -1, kv.shape[3])))
