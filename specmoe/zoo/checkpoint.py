"""The on-disk tensor layout of zoo checkpoints.

transformers 5 keeps each MoE layer's experts fused in memory (`mlp.experts.gate_up_proj` [E, 2I, H],
`mlp.experts.down_proj` [E, H, I]) but saves, and loads, the canonical Qwen3-MoE layout with one
tensor per expert and projection. The zoo writes that canonical layout too, so its checkpoints are
what `save_pretrained` would write and also load in vLLM, llama.cpp's converter and transformers 4.x.
"""

from collections.abc import Iterator

import torch

_GATE_UP = "mlp.experts.gate_up_proj"
_DOWN = "mlp.experts.down_proj"


def checkpoint_tensors(param_name: str, tensor: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint key, tensor) pairs for one in-memory parameter; fused experts are split."""
    if param_name.endswith(_GATE_UP):
        prefix = param_name.removesuffix("gate_up_proj")
        # [E, 2I, H]: rows [:I] feed the activation (gate), rows [I:] are the linear branch (up).
        gate, up = tensor.chunk(2, dim=1)
        for expert in range(tensor.shape[0]):
            yield f"{prefix}{expert}.gate_proj.weight", gate[expert].contiguous()
            yield f"{prefix}{expert}.up_proj.weight", up[expert].contiguous()
    elif param_name.endswith(_DOWN):
        prefix = param_name.removesuffix("down_proj")
        for expert in range(tensor.shape[0]):
            yield f"{prefix}{expert}.down_proj.weight", tensor[expert].contiguous()
    else:
        yield param_name, tensor
