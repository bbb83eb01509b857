"""Loading GGUF models into llama.cpp (llama-cpp-python's low-level API): the library, initialised
once with its log kept; the checks a file passes before llama.cpp reads it; the model pointer, with
every way a load can fail turned into one line; what a loaded model is (its metadata, vocabulary,
whether the backend can roll its cache back); and the handles freed when their owner goes.

A GGUF file with a multi-token-prediction layer (`{arch}.nextn_predict_layers` > 0, `specmoe.zoo.
gguf_mtp`) loads it too (`load_mtp`): one more decoder layer's weights, which only an MTP draft
context runs (`llamacpp_mtp`); the trunk's graph and KV cache leave it out.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections import deque
from pathlib import Path

from specmoe.backends.gguf_layout import check_gguf_layout
from specmoe.backends.llamacpp_check import check_llamacpp_runs
from specmoe.backends.llamacpp_state import ROLLBACK_HYBRIDS
from specmoe.errors import SpecmoeError
from specmoe.extras import install_hint, installed

GGUF_MAGIC = b"GGUF"

_LOG_KEEP = 20  # recent llama.cpp warnings and errors kept to explain a failed load

_lib = None
log_lines: deque[str] = deque(maxlen=_LOG_KEEP)
_log_callback = None  # keeps the ctypes callback alive for as long as llama.cpp may call it


def llama_lib():
    """The llama_cpp module, initialised once, with llama.cpp's log routed into `log_lines`; first, the
    self-test of `llamacpp_check` (once per process)."""
    global _lib, _log_callback
    if _lib is not None:
        return _lib
    if not installed("llama_cpp"):
        hint = install_hint("llamacpp")
        raise SpecmoeError(f"the llamacpp backend needs llama-cpp-python; install it: {hint}")
    check_llamacpp_runs()  # before this process loads the library: a build that cannot run here is a line
    import llama_cpp

    @llama_cpp.llama_log_callback
    def keep_problems(level: int, text: bytes, _user_data) -> None:
        # ggml_log_level: 3 warn, 4 error. Everything else (debug, info, continuations) is dropped:
        # a decode loop must not print, and a failed load is explained from what was kept.
        if level in (3, 4):
            log_lines.append(text.decode("utf-8", "replace").strip())

    _log_callback = keep_problems
    llama_cpp.llama_log_set(_log_callback, None)
    llama_cpp.llama_backend_init()
    _lib = llama_cpp
    return _lib


def check_gguf_file(path: Path) -> None:
    """Fail in one line on a path that is not a complete GGUF file, before llama.cpp sees it."""
    if not path.is_file():
        hint = " (a directory: pass the .gguf file inside it)" if path.is_dir() else ""
        raise SpecmoeError(
            f"GGUF file '{path}' not found{hint}; export zoo models with `specmoe zoo export-gguf --zoo DIR`"
        )
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != GGUF_MAGIC:
        raise SpecmoeError(
            f"'{path}' is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r}); "
            "the llamacpp backend reads .gguf files, the hf backend reads Hugging Face directories"
        )
    check_gguf_layout(path)  # a truncated file: one line here, before llama.cpp reads it


def gguf_metadata(path: Path, key: str):
    """One metadata value of a GGUF file (`{arch}` in key is its architecture), or None when the
    key is absent or the header cannot be read."""
    try:
        import gguf

        reader = gguf.GGUFReader(path)
        arch = reader.get_field("general.architecture")
        field = reader.get_field(key.format(arch=arch.contents() if arch is not None else ""))
        return None if field is None else field.contents()
    except (ImportError, OSError, ValueError, KeyError, IndexError):  # no gguf package, or a damaged
        return None  # header: the caller reports the load failure itself


def gguf_architecture(path: Path) -> str | None:
    return gguf_metadata(path, "general.architecture")


def load_model_pointer(path: Path, vocab_only: bool = False, n_gpu_layers: int = 0, overrides=None):
    """llama_model_load_from_file, with every way it can fail turned into one line."""
    lib = llama_lib()
    check_gguf_file(path)
    params = lib.llama_model_default_params()
    params.vocab_only = vocab_only
    params.n_gpu_layers = n_gpu_layers
    params.load_mtp = not vocab_only and bool(gguf_metadata(path, "{arch}.nextn_predict_layers"))
    if overrides is not None:
        params.kv_overrides = overrides
    log_lines.clear()
    model = lib.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise SpecmoeError(_load_failure(path))
    try:
        _check_decoder_only(lib, model, path)
    except SpecmoeError:
        lib.llama_model_free(model)
        raise
    return model


def _load_failure(path: Path) -> str:
    arch = gguf_architecture(path)
    errors = [line for line in log_lines if "error" in line.lower()] or list(log_lines)
    reason = errors[-1] if errors else "no reason given"
    version = getattr(llama_lib(), "__version__", "?")
    if "unknown model architecture" in reason:
        return (
            f"llama.cpp cannot run '{path}': architecture '{arch}' is not supported by this llama.cpp "
            f"(llama-cpp-python {version}); use a GGUF of a supported architecture, e.g. qwen3 or qwen3moe"
        )
    what = f" (architecture '{arch}')" if arch else ""
    return f"llama.cpp could not load '{path}'{what}: {reason}"


def _check_decoder_only(lib, model, path: Path) -> None:
    """Refuse, in one line, a model whose cache the backend cannot roll back to the kept tokens
    (SD on it would be silently wrong) or that does not decode token by token."""
    arch = model_metadata(lib, model, "general.architecture")
    if lib.llama_model_is_hybrid(model) and arch in ROLLBACK_HYBRIDS:
        _check_rope_sections(path, arch)
        return
    kinds = (
        ("an encoder-decoder", lib.llama_model_has_encoder, ""),
        ("a recurrent", lib.llama_model_is_recurrent, ": its state cannot drop rejected draft tokens"),
        (
            "a hybrid recurrent",
            lib.llama_model_is_hybrid,
            ": its rollback through state checkpoints is untested",
        ),
        ("a diffusion", lib.llama_model_is_diffusion, ""),
    )
    for kind, test, why in kinds:
        if test(model):
            raise SpecmoeError(
                f"'{path}' is {kind} model (architecture '{arch}'){why}; the llamacpp backend runs "
                f"decoder-only transformers and the hybrids {', '.join(sorted(ROLLBACK_HYBRIDS))}"
            )


def _check_rope_sections(path: Path, arch: str) -> None:
    """llama.cpp aborts the process on the first decode when a multimodal-RoPE model's sections
    sum to more than its rotary dimensions (Qwen3.5 files converted with the default [11, 11, 10]
    split from heads narrower than 64 rotary dimensions): refuse it here in one line instead."""
    sections = gguf_metadata(path, "{arch}.rope.dimension_sections")
    rotary = gguf_metadata(path, "{arch}.rope.dimension_count")
    if sections is not None and rotary is not None and sum(sections) > rotary:
        raise SpecmoeError(
            f"'{path}' splits its rotary pairs as {list(sections)} ({arch}.rope.dimension_sections), more "
            f"than its {rotary} rotary dimensions; llama.cpp would abort on the first token. Export it again "
            "with `specmoe zoo export-gguf`, which writes a split that fits"
        )


def top_k_override(lib, path: Path, top_k: int):
    """A kv_overrides array setting `<arch>.expert_used_count` (sparsity sweeps), NULL-terminated.

    Checked against the file's expert count first: llama.cpp aborts the process on a top-k larger
    than the number of experts rather than failing the load.
    """
    check_gguf_file(path)
    experts = gguf_metadata(path, "{arch}.expert_count")
    if not experts:
        raise SpecmoeError("moe_top_k was given for a model without MoE routers; drop it for dense models")
    if not 1 <= top_k <= experts:
        raise SpecmoeError(f"moe_top_k must be between 1 and the model's {experts} experts, got {top_k}")
    arch = gguf_architecture(path)
    overrides = (lib.llama_model_kv_override * 2)()
    overrides[0].key = f"{arch}.expert_used_count".encode()
    overrides[0].tag = lib.LLAMA_KV_OVERRIDE_TYPE_INT
    overrides[0].value.val_i64 = top_k
    overrides[1].key = b""
    return overrides


def library_versions() -> dict[str, str]:
    """The llama-cpp-python version a profile records beside torch's."""
    return {"llama_cpp_python": getattr(llama_lib(), "__version__", "?")}


def gpu_layers(lib, device: str, n_gpu_layers: int | None, asked: str = "--device") -> int:
    if device == "cpu":
        return 0 if n_gpu_layers is None else n_gpu_layers
    kind, sep, index = device.partition(":")
    if kind not in ("cuda", "mps") or (sep and (kind != "cuda" or not index.isdigit())):
        raise SpecmoeError(f"unknown device '{device}'; use cpu, cuda or mps")
    if not lib.llama_supports_gpu_offload():
        raise SpecmoeError(
            f"{asked} {device} was asked for but this llama-cpp-python has no GPU backend; rebuild it with "
            'CMAKE_ARGS="-DGGML_CUDA=on" (or -DGGML_METAL=on), or use the cpu device'
        )
    return -1 if n_gpu_layers is None else n_gpu_layers


def check_device(device: str, asked: str = "--device", fix: str | None = None) -> None:
    """Refuse, in one line, a device this llama-cpp-python cannot run on (suites check it before
    their first run); `asked` names where it was given. `fix` is the caller's advice, unused: each
    refusal names its own."""
    gpu_layers(llama_lib(), device, None, asked)


def model_metadata(lib, model, key: str) -> str | None:
    """A metadata value of a loaded model as text, or None when the key is absent."""
    buf = ctypes.create_string_buffer(256)
    if lib.llama_model_meta_val_str(model, key.encode(), buf, len(buf)) < 0:
        return None
    return buf.value.decode("utf-8", "replace")


def vocabulary(lib, vocab) -> tuple[int, frozenset[int], str]:
    """(size, end-of-generation ids, sha256 of every token's text in id order) of a llama vocab."""
    size = lib.llama_vocab_n_tokens(vocab)
    digest = hashlib.sha256()
    eog = []
    for token in range(size):
        digest.update(lib.llama_vocab_get_text(vocab, token) or b"")
        digest.update(b"\0")
        if lib.llama_vocab_is_eog(vocab, token):
            eog.append(token)
    return size, frozenset(eog), digest.hexdigest()


class Handles:
    """The llama.cpp objects a backend or tokenizer owns, freed once when their owner is collected;
    `dependents` (objects with a `free()`: an MTP draft context on the same model) go first."""

    def __init__(self, lib, model) -> None:
        self.lib, self.model, self.ctx, self.batch = lib, model, None, None
        self.dependents: list = []

    def free_context(self) -> None:
        if self.batch is not None:
            self.lib.llama_batch_free(self.batch)
        if self.ctx is not None:
            self.lib.llama_free(self.ctx)
        self.ctx = self.batch = None

    def free(self) -> None:
        for dependent in self.dependents:
            dependent.free()
        self.dependents = []
        self.free_context()
        if self.model is not None:
            self.lib.llama_model_free(self.model)
            self.model = None
