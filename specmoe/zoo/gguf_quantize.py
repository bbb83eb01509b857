"""K-quant GGUF exports through llama.cpp's own quantiser (`llama_model_quantize`).

gguf-py writes f32/f16/bf16/q8_0 itself but has no k-quant encoder, so a Q4_K_M export is made in
two steps: the checkpoint is written as an f32 GGUF (the bf16 weights widened bit for bit, so the
quantiser sees the checkpoint's exact values), then llama.cpp quantises that file with its own
recipe, exactly as `llama-quantize model-f32.gguf out.gguf Q4_K_M` would.

Q4_K_M is a recipe, not one type: most matrices become q4_K, while llama.cpp keeps some at q6_K
(the output matrix, attention values and half of the feed-forward down projections) and leaves norms
and the router in f32. K-quants pack rows in super-blocks of 256 values, so a matrix whose rows are
not a multiple of 256 cannot be q4_K: llama.cpp then falls back, per tensor, to a type whose block
fits (q4_K becomes q5_0, q6_K becomes q8_0; f16 where 32 does not divide either). The bench zoo's
widths are multiples of 256 except draft-moe's expert width (1152); most of the tiny zoo's are 64.

Which tensor got which type is read back from the written file and kept beside it as
`<file>.types.json` ({"types": {tensor: type}, "counts": {type: tensors}}), so nobody has to trust
a log. The metadata the f32 export wrote (source checkpoint's sha256, exporter version) is copied by
the quantiser, so the cache check of `specmoe.zoo.gguf` applies to the quantised file unchanged.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from specmoe.errors import SpecmoeError

# specmoe type name -> llama_ftype (llama.h), for the types llama.cpp itself must quantise
KQUANT_TYPES = {"q4_k_m": 15}  # LLAMA_FTYPE_MOSTLY_Q4_K_M
TYPES_SUFFIX = ".types.json"


def quantize_gguf(source: Path, out_path: Path, gguf_type: str, threads: int = 0) -> Path:
    """Quantise the GGUF at `source` to `gguf_type` with llama.cpp, atomically; return out_path.

    threads = 0 lets llama.cpp use every core (quantising is not a timing measurement).
    """
    from specmoe.backends.llamacpp_load import llama_lib, log_lines

    if gguf_type not in KQUANT_TYPES:
        raise SpecmoeError(f"unknown k-quant type '{gguf_type}'; use one of {', '.join(KQUANT_TYPES)}")
    lib = llama_lib()
    params = lib.llama_model_quantize_default_params()
    params.ftype = KQUANT_TYPES[gguf_type]
    params.nthread = threads
    partial = out_path.with_name(out_path.name + ".partial")
    log_lines.clear()
    status = lib.llama_model_quantize(str(source).encode(), str(partial).encode(), params)
    if status != 0:
        partial.unlink(missing_ok=True)
        reason = log_lines[-1] if log_lines else "no reason given"
        raise SpecmoeError(f"llama.cpp could not quantise '{source}' to {gguf_type}: {reason}")
    types = tensor_types(partial)
    os.replace(partial, out_path)
    types_path(out_path).write_text(json.dumps(types, indent=1) + "\n")
    return out_path


def types_path(gguf_path: Path) -> Path:
    """Where the per-tensor type record of a quantised export lives."""
    return gguf_path.with_name(gguf_path.name + TYPES_SUFFIX)


def tensor_types(gguf_path: Path) -> dict:
    """{"types": {tensor name: ggml type name}, "counts": {type name: tensors}} of a GGUF file."""
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    types = {t.name: t.tensor_type.name.lower() for t in reader.tensors}
    return {"types": types, "counts": dict(sorted(Counter(types.values()).items()))}


def describe_types(record: dict) -> str:
    """'q4_k 40, q6_k 9, f32 17': the tensor count per type, for a progress line."""
    return ", ".join(f"{name} {count}" for name, count in record["counts"].items())
