"""The states a gated-DeltaNet layer reaches after a prefix of logged inputs, one prefix per row.

Shape legend: R rows, T logged positions, H hidden size, C conv channels (q, k and v together),
K conv kernel, Hk / Hv key / value heads, Dk / Dv their head sizes.

`hf_recurrent` re-advances rows that dropped tokens. Running a layer's own transformers forward
per group of rows works, but computes what a rollback throws away (the layer's output, its gated
norm and out_proj) and, on a CPU, pays the PyTorch fallback's chunked delta rule, which pads every
block to a 64-token chunk: most of a hybrid round's rollback on this CPU. Here only the state is
computed, for every rejecting row at once, each stopping at its own kept count: the layer's input
projections (q, k, v, β and the decay's input), the causal conv window, and the delta rule's state
update, the same arithmetic as transformers' recurrent rule (`torch_recurrent_gated_delta_rule`:
float32, keys l2-normalised, each value head reading its key head). vLLM and SGLang keep the same
per-position states from their verify kernels instead of replaying them.

Only the mixers `hf_recurrent.LINEAR_MIXERS` names reach here: Qwen3-Next's fused q/k/v/z and β/a
projections, and Qwen3.5's separate ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_L2_EPS = 1e-6  # transformers' l2norm epsilon inside the delta rule


def projections(mixer, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mixed q/k/v [R, T, C], β logits [R, T, Hv], decay input a [R, T, Hv]) of hidden [R, T, H]."""
    if hasattr(mixer, "in_proj_qkvz"):  # Qwen3-Next: fused, interleaved per key head
        query, key, value, _, beta, decay = mixer.fix_query_key_value_ordering(
            mixer.in_proj_qkvz(hidden), mixer.in_proj_ba(hidden)
        )
        mixed = torch.cat([x.reshape(x.shape[0], x.shape[1], -1) for x in (query, key, value)], dim=-1)
        return mixed, beta, decay
    return mixer.in_proj_qkv(hidden), mixer.in_proj_b(hidden), mixer.in_proj_a(hidden)


def replay(
    mixer,
    conv: torch.Tensor,  # [R, C, K] conv window at the checkpoint
    recurrent: torch.Tensor,  # [R, Hv, Dk, Dv] state at the checkpoint
    hidden: torch.Tensor,  # [R, T, H] the layer's logged inputs since the checkpoint
    keep: torch.Tensor,  # [R] positions each row keeps, 0..T
    steps: int | None = None,  # keep's largest value when the caller knows it (no device read)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's (conv window [R, C, K], recurrent state [R, Hv, Dk, Dv]) after its kept inputs."""
    if steps is None:
        steps = int(keep.max()) if keep.numel() else 0
    if steps == 0:
        return conv.clone(), recurrent.clone()
    hidden = hidden[:, :steps]
    mixed, beta_logits, decay_input = projections(mixer, hidden)
    window = torch.cat([conv, mixed.transpose(1, 2).to(conv.dtype)], dim=-1)  # [R, C, K + T]
    kernel = conv.shape[-1]
    slots = keep[:, None] + torch.arange(kernel, device=keep.device)  # [R, K]: the last K kept columns
    new_conv = window.gather(2, slots[:, None, :].expand(-1, window.shape[1], -1))
    weight = mixer.conv1d.weight.squeeze(1).to(window.dtype)  # [C, K]
    convolved = F.conv1d(window, weight[:, None, :], mixer.conv1d.bias, groups=window.shape[1])[:, :, 1:]
    convolved = F.silu(convolved).transpose(1, 2)  # [R, T, C]
    _, key, value = torch.split(convolved, [mixer.key_dim, mixer.key_dim, mixer.value_dim], dim=-1)
    rows = key.shape[0]
    key = key.reshape(rows, steps, -1, mixer.head_k_dim).float()  # [R, T, Hk, Dk]
    value = value.reshape(rows, steps, -1, mixer.head_v_dim).float()  # [R, T, Hv, Dv]
    key = key.repeat_interleave(value.shape[2] // key.shape[2], dim=2)  # each value head's key head
    key = key * torch.rsqrt((key * key).sum(dim=-1, keepdim=True) + _L2_EPS)
    # rounded as transformers does: β and g in the model dtype (g in float64 for float64), then float32
    beta = beta_logits.sigmoid().float()  # [R, T, Hv]
    decay = (-mixer.A_log.float().exp() * F.softplus(decay_input.float() + mixer.dt_bias)).float().exp()
    state = recurrent.float()
    for step in range(steps):
        moved = state * decay[:, step, :, None, None]
        k_step = key[:, step, :, :, None]  # [R, Hv, Dk, 1]
        remembered = (moved * k_step).sum(dim=-2)  # [R, Hv, Dv]
        delta = (value[:, step] - remembered) * beta[:, step, :, None]
        moved = moved + k_step * delta[:, :, None, :]
        state = torch.where((step < keep)[:, None, None, None], moved, state)
    return new_conv, state.to(recurrent.dtype)
