"""What a profile needs to know about a GGUF file: its weight type, MoE shape and weight bytes.

Bytes are the tensors' stored sizes (quantised blocks included), split as `specmoe.perf.profile`
splits a transformers model: routed experts (`ffn_{gate,up,down}_exps`), the input embedding table
(`token_embd`; a token reads one row), and everything else a pass reads in full. Shared experts
(`*_shexp`) count as dense, as they do there.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from specmoe.errors import SpecmoeError

_EXPERT_MARK = "_exps."
_EMBEDDING = "token_embd.weight"


def describe_gguf(path: Path, moe_top_k: int | None = None) -> dict:
    """dtype (the file's type name, e.g. "q8_0"), is_moe, num_experts, top_k, bytes_dense,
    bytes_experts, bytes_embedding and tensor_types ({ggml type: tensors}) of a GGUF file."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as err:
        raise SpecmoeError(f"cannot read the GGUF header of '{path}' ({err}); re-export the file") from None
    arch = _field(reader, "general.architecture") or ""
    experts = int(_field(reader, f"{arch}.expert_count") or 0)
    top_k = int(moe_top_k or _field(reader, f"{arch}.expert_used_count") or 0) if experts else 0
    dense = routed = embedding = 0
    for tensor in reader.tensors:
        size = int(tensor.n_bytes)
        if tensor.name == _EMBEDDING:
            embedding += size
        elif _EXPERT_MARK in tensor.name:
            routed += size
        else:
            dense += size
    types = Counter(t.tensor_type.name.lower() for t in reader.tensors)
    return {
        "dtype": _file_type_name(reader),
        "is_moe": experts > 0,
        "num_experts": experts,
        "top_k": top_k,
        "bytes_dense": dense,
        "bytes_experts": routed,
        "bytes_embedding": embedding,
        "tensor_types": dict(sorted(types.items())),
    }


def _field(reader, key: str):
    field = reader.get_field(key)
    return None if field is None else field.contents()


def _file_type_name(reader) -> str:
    """general.file_type as a lower-case name ("mostly_q4_k_m" -> "q4_k_m"), or "unknown"."""
    import gguf

    value = _field(reader, "general.file_type")
    if value is None:
        return "unknown"
    try:
        name = gguf.LlamaFileType(int(value)).name.lower()
    except ValueError:
        return f"file_type_{value}"
    return name.removeprefix("mostly_").removeprefix("all_")
