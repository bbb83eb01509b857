"""The optional extras of pyproject.toml, checked before the work that needs them starts.

A backend's or executor's package is imported only when it is used (its registry entry loads it
lazily), so a missing one used to surface late: after a download (`zoo fetch smollm2` fetched 98 MB,
then failed on `gguf`), at the first llama.cpp run of a suite, or with an empty store left behind
(`--executor ray`). `require` looks the modules up with `importlib.util.find_spec`, which imports
nothing, and refuses in one line that names the extra to install.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from specmoe.errors import SpecmoeError

# extra (pyproject.toml's [project.optional-dependencies]) -> the modules its code imports.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "llamacpp": ("llama_cpp", "gguf"),  # the llamacpp backend; GGUF files (zoo export, SmolLM2)
    "ray": ("ray",),  # --executor ray
    "serve": ("prometheus_client",),  # the openai backend reads each server's /metrics
    "parquet": ("pyarrow",),  # bench export --format parquet
}
# The llamacpp extra builds llama.cpp from source (a C/C++ compiler, minutes to half an hour), portable
# and never from pip's wheel cache, which keys a built wheel by its source and not by CMAKE_ARGS, so a
# native wheel cached earlier would come back (docs/llamacpp.md). The README's test command builds it so.
LLAMACPP_BUILD = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" pip install --no-cache-dir --no-deps --force-reinstall '
    "-c constraints.txt llama-cpp-python"
)
FIRST_STEP = {"llamacpp": f"{LLAMACPP_BUILD} && "}
BUILD_NOTE = {"llamacpp": " (it builds llama.cpp from source: see docs/llamacpp.md)"}


def installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it (nor running its package's code
    beyond its parents' __init__)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken __spec__
        return False


def missing_modules(extra: str, modules: Sequence[str] | None = None) -> list[str]:
    """The modules of `extra` (or just `modules` of it) that are not installed."""
    return [m for m in (modules or EXTRA_MODULES[extra]) if not installed(m)]


def install_hint(extra: str) -> str:
    install = f"pip install -c constraints.txt -e '.[{extra}]'"
    return f"{FIRST_STEP.get(extra, '')}{install}{BUILD_NOTE.get(extra, '')}"


def require(extra: str, what: str, modules: Sequence[str] | None = None) -> None:
    """Refuse, in one line, when `what` ("--executor ray", "model x (backend llamacpp)") needs a
    module of `extra` that is not installed; `modules` narrows the check to the ones it imports."""
    if missing := missing_modules(extra, modules):
        raise SpecmoeError(
            f"{what} needs the '{extra}' extra, which is not installed (no module {', '.join(missing)}); "
            f"install it: {install_hint(extra)}"
        )
