"""Record which experts a transformers MoE model's routers select, one forward at a time.

Shape legend: T tokens of one forward (batch and sequence flattened, batch-major: b * seq_len + t),
K experts per token (top-k), L sparse layers in model order.

In transformers 5.x every MoE block we support owns a `...TopKRouter` module whose forward returns
`(router_logits, router_scores, router_indices)`; a forward hook on it sees the selected experts
without touching the model code. Routers are found by class, from an explicit list, not by module
name, so a renamed or new router class makes the trace report "not MoE" rather than record the
wrong tensor. Each hook clones a small [T, K] tensor on the model's device (no host sync), but hooks
break CUDA graphs and torch.compile full graphs: use the trace for measurement runs, not timed runs.

    with RouterTrace(model) as trace:
        model(input_ids)
    distinct_experts_per_layer(trace.records)  # e.g. [23, 25, 22, 24]
"""

import importlib
from types import TracebackType

import torch
from torch import nn

# (module, class) of every router class the trace recognises. Looked up lazily so that a
# transformers build without one of these models still works for the others.
ROUTER_CLASSES: tuple[tuple[str, str], ...] = (
    ("transformers.models.qwen3_moe.modeling_qwen3_moe", "Qwen3MoeTopKRouter"),
    ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeTopKRouter"),
    ("transformers.models.qwen3_next.modeling_qwen3_next", "Qwen3NextTopKRouter"),
    ("transformers.models.qwen2_moe.modeling_qwen2_moe", "Qwen2MoeTopKRouter"),
    ("transformers.models.mixtral.modeling_mixtral", "MixtralTopKRouter"),
    ("transformers.models.olmoe.modeling_olmoe", "OlmoeTopKRouter"),
    ("transformers.models.deepseek_v2.modeling_deepseek_v2", "DeepseekV2TopkRouter"),
    ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3TopkRouter"),
    ("transformers.models.gpt_oss.modeling_gpt_oss", "GptOssTopKRouter"),
)

# One forward's selections: for each sparse layer, the expert ids per token.
ForwardRecord = list[torch.Tensor]  # L x [T, K], int64


def _router_types() -> tuple[type, ...]:
    types = []
    for module_name, class_name in ROUTER_CLASSES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        router_type = getattr(module, class_name, None)
        if router_type is not None:
            types.append(router_type)
    return tuple(types)


def find_routers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, module) of each recognised router, in model (= layer) order."""
    router_types = _router_types()
    return [(name, module) for name, module in model.named_modules() if isinstance(module, router_types)]


class RouterTrace:
    """Context manager that records the selected experts of every forward while it is active.

    `records[i][layer]` is a `[T, K]` tensor of expert ids for the i-th forward. A forward is
    delimited by the first sparse layer's router firing, so `generate()` yields one record per
    decoding step (the first being the prefill). Dense models have no routers: `is_moe` is False
    and `records` stays empty.
    """

    def __init__(self, model: nn.Module) -> None:
        self.routers = find_routers(model)
        self.records: list[ForwardRecord] = []
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    @property
    def is_moe(self) -> bool:
        return bool(self.routers)

    @property
    def num_layers(self) -> int:
        return len(self.routers)

    def clear(self) -> None:
        self.records = []

    def __enter__(self) -> "RouterTrace":
        if self._handles:
            raise RuntimeError("RouterTrace is already active")
        for layer, (_, router) in enumerate(self.routers):
            self._handles.append(router.register_forward_hook(self._hook_for(layer)))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _hook_for(self, layer: int):
        def hook(module: nn.Module, args: tuple, output: tuple[torch.Tensor, ...]) -> None:
            router_indices = output[2]  # [T, K]
            if layer == 0:
                self.records.append([])
            # Cloned: the caller may reuse or mutate its buffers after the forward.
            self.records[-1].append(router_indices.detach().clone())

        return hook


def indices_per_layer(records: list[ForwardRecord]) -> list[torch.Tensor]:
    """Concatenate all forwards: for each layer, the expert ids of every traced token, [T_all, K]."""
    if not records:
        return []
    num_layers = len(records[0])
    if any(len(record) != num_layers for record in records):
        raise ValueError("records disagree on the number of sparse layers; was a forward cut short?")
    return [torch.cat([record[layer] for record in records]) for layer in range(num_layers)]


def distinct_experts_per_layer(records: list[ForwardRecord]) -> list[int]:
    """Per layer, how many different experts any traced token selected (the experts whose weights
    a verification pass over those tokens must read). Empty for no records / dense models."""
    return [int(torch.unique(ids).numel()) for ids in indices_per_layer(records)]
