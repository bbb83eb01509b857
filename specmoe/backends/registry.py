"""The backends registered by name, each with the facts its callers ask of it; no backend is imported.

A caller that needs to know what a backend can do (compile, trace its routers, read one weights
file) asks its entry instead of comparing its name, so that adding a backend is one entry here and
its module. Importing this module loads neither torch nor llama_cpp: the suite, the report and the
findings read these facts without a model runtime.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmoe.errors import SpecmoeError


@dataclass(frozen=True)
class BackendInfo:
    """One backend: where its loader lives and what it can do.

    `name` is how suites, stored runs and profiles spell it (part of a run's key: never renamed).
    Engine profiles of `specmoe.perf.engines` are named after it (`hf-eager-cpu`, `llamacpp-cuda`).
    """

    name: str
    loader: str  # "module:attr"; the loader takes (path, **options) and returns a Backend
    label: str  # the engine as a reader knows it: "transformers", "llama.cpp"
    engine: str  # the engine as folder names spell it (`profiles-<engine>/`)
    weights_suffix: str | None = None  # the one weights file it reads (".gguf"); None: a directory
    extra: str | None = None  # the pyproject extra its modules come from; None: the base install
    can_compile: bool = False  # takes `compile` (torch.compile'd forwards)
    traces_routers: bool = False  # its `router_trace()` reports the experts an MoE's routers select
    # The weights file fixes the weights' types (a GGUF export's quantization) and the tokenizer
    # travels inside it: no compute dtype is chosen at load, no tokenizer.json is read beside it.
    self_contained: bool = False
    # Allocates its KV cache for `n_ctx` positions and its threads when it loads (llama.cpp), so a
    # caller sizes both; transformers grows its cache and reads torch's thread count.
    sized_at_load: bool = False
    versions: str | None = None  # "module:attr" of a function giving {library: version} for a profile
    # "module:attr" of the checks a suite runs before anything loads (`specmoe.bench.preflight`):
    # the model's files, (path) -> the context in tokens they state or None; a device, (device,
    # asked, fix) -> None, refused in one line naming where it was asked and how to fix it.
    files_check: str | None = None
    device_check: str | None = None

    @property
    def reads_file(self) -> bool:
        """A single weights file (GGUF) rather than a model directory or a hub ID."""
        return self.weights_suffix is not None

    def load(self, path: str, **options: Any) -> Any:
        """The model at `path` through this backend, its module imported only now."""
        return _by_name(self.loader)(path, **options)

    def check_files(self, path: Path) -> int | None:
        """Refuse, in one line, model files this backend would fail on late; the context in tokens
        they state (a config.json's), None when they state none or there is no check."""
        return None if self.files_check is None else _by_name(self.files_check)(path)

    def check_device(self, device: str, asked: str, fix: str) -> None:
        """Refuse, in one line, a device this backend cannot run on here (nothing without a check)."""
        if self.device_check is not None:
            _by_name(self.device_check)(device, asked, fix)

    def library_versions(self) -> dict[str, str]:
        """{library: version} of what it runs on, beyond torch ({} when there is nothing to add)."""
        return {} if self.versions is None else _by_name(self.versions)()


def _by_name(target: str) -> Callable[..., Any]:
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)


HF = BackendInfo(
    name="hf",
    loader="specmoe.backends.hf:load_hf",
    label="transformers",
    engine="transformers",
    can_compile=True,
    traces_routers=True,
    files_check="specmoe.backends.hf:stated_context",
    device_check="specmoe.backends.hf:resolve_device",
)
LLAMACPP = BackendInfo(
    name="llamacpp",
    loader="specmoe.backends.llamacpp:load_llamacpp",
    label="llama.cpp",
    engine="llamacpp",
    weights_suffix=".gguf",
    extra="llamacpp",
    self_contained=True,
    sized_at_load=True,
    versions="specmoe.backends.llamacpp_load:library_versions",
    files_check="specmoe.backends.llamacpp_load:check_gguf_file",
    device_check="specmoe.backends.llamacpp_load:check_device",
)
BACKENDS: dict[str, BackendInfo] = {info.name: info for info in (HF, LLAMACPP)}
DEFAULT_BACKEND = HF  # for a model directory, a hub ID, or a model a suite builds


def available_backends() -> list[str]:
    return sorted(BACKENDS)


def backend_info(name: str) -> BackendInfo:
    """The backend registered as `name`; an unknown name is refused in one line."""
    if name not in BACKENDS:
        raise SpecmoeError(f"unknown backend '{name}'; available: {', '.join(available_backends())}")
    return BACKENDS[name]


def backend_for(path: str | Path) -> BackendInfo:
    """The backend a model path implies: the one whose weights file the path names by its suffix
    (llama.cpp for .gguf), else the default, which reads directories and hub IDs. The one place a
    backend is chosen from a path."""
    for info in BACKENDS.values():
        if info.weights_suffix is not None and str(path).endswith(info.weights_suffix):
            return info
    return DEFAULT_BACKEND


def file_backends() -> list[str]:
    """The names of the backends that read one weights file, for messages that point to them."""
    return [name for name, info in sorted(BACKENDS.items()) if info.reads_file]
