"""Head drafters distilled from the frozen target: an MTP module and an EAGLE-3 head.

Shape legend: b windows, T tokens per window, Q = T - 1 head positions, H hidden size, K target
layers the head reads, V vocabulary, Vd an EAGLE-3 head's draft vocabulary, S unrolled steps.

A head's position q reads the target's state at q (features of its hidden states) and the token
x_{q+1}, and is taught the target's own next-token distribution at q + 1 (the one that picks
x_{q+2}): loss KL(target || head), on the drafts' mixture of windows (`distill`: of each batch of
the family's order, `teacher_windows` are the target's own greedy continuation of the text, which
is what a drafter reads when the target writes), the family's batches in its order. Drafting
γ > 1 tokens runs the head on its own states, so training unrolls it as it drafts (EAGLE-3's
"training-time test"):
step s of position q reads the head's step s - 1 state at q - 1, and attends to step 1 at
positions up to q - s + 1 and to its own earlier steps at q - s + 2 .. q, exactly the cache it has
when it drafts its s-th token; a position's step-s loss counts only from q >= s - 1 on (earlier
ones would read a state before the window). Every step is one forward of the head over all Q
positions, its keys and values appended to one cache, with that mask.

Initialisation (seeded per tensor, so the heads come out the same bits on the same machine):
the MTP module's layer and final norm start as a copy of the target's last full-attention layer and
final norm, its fusion as the sum of the two normed halves; the EAGLE-3 head's lm_head rows are the
target's for its draft vocabulary (the target's most frequent training tokens), its fc reads the
highest layer, its embeddings are a frozen copy of the target's, and its decoder layer is drawn
at random; each on the family's learning-rate schedule scaled to its own peak (`mtp_lr`,
`eagle3_lr`). The target's embeddings and LM head stay frozen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from specmoe.backends.eagle3_head import ARCHITECTURES, LAYER_IDS_KEY, Eagle3Features, Eagle3Model
from specmoe.backends.hf_heads import STATE_LAYER, FinalLayer
from specmoe.backends.mtp_head import MtpModel, build_mtp_model, checkpoint_names
from specmoe.zoo import train_experts
from specmoe.zoo.checkpoint import checkpoint_tensors
from specmoe.zoo.distill import greedy_continuations
from specmoe.zoo.init import tensor_seed
from specmoe.zoo.presets import EAGLE3, MTP, ModelShape, TrainingPlan, ZooPreset
from specmoe.zoo.train_data import TrainingData
from specmoe.zoo.train_loop import Clock, learning_rate, set_lr

HEADS = (MTP, EAGLE3)
EVAL_WINDOWS = 64  # held-out windows the per-step agreement is measured on


@dataclass(frozen=True)
class TrainedHead:
    name: str  # "mtp" or "eagle3"
    tensors: dict[str, torch.Tensor] = field(repr=False)  # bf16, checkpoint names
    config: dict | None  # an EAGLE-3 head's config.json; None for an MTP module (in the target's)
    params: int  # its own parameters (an MTP module shares the target's embeddings and LM head)
    active_params: int  # of which one token uses: an MoE layer's routed experts at top_k / experts
    train_s: float  # wall seconds of the head's steps (the teacher's forwards on each batch included)
    train_cpu_s: float
    teacher_s: float  # wall seconds the teacher spent writing its windows
    held_out_agreement: tuple[float, ...]  # [S] teacher-forced top-1 agreement per unrolled step

    def manifest(self) -> dict:
        return {
            "params": self.params,
            "active_params": self.active_params,
            "bytes_bf16": 2 * self.params,
            "train_s": round(self.train_s, 2),
            "train_cpu_s": round(self.train_cpu_s, 2),
            "teacher_written_s": round(self.teacher_s, 2),
            "held_out_agreement_by_step": [round(a, 4) for a in self.held_out_agreement],
        }


@dataclass
class _Parts:
    """A head being trained: its model, how it reads the target, and its draft vocabulary."""

    model: nn.Module
    features: nn.Module
    embed: nn.Module
    layers: tuple[int, ...]
    vocab: torch.Tensor | None  # [Vd] target ids of an EAGLE-3 head's draft vocabulary; None: all


def train_head(
    name: str, teacher: PreTrainedModel, shape: ModelShape, zoo: ZooPreset, seed: int, data: TrainingData,
    order: torch.Tensor,
) -> TrainedHead:  # fmt: skip
    """Distil one head from the frozen teacher (float32, the saved bf16 weights), one batch of
    `order` per step."""
    plan = zoo.training
    assert plan is not None and name in HEADS
    steps, peak = plan.steps, plan.mtp_lr if name == MTP else plan.eagle3_lr
    teacher.requires_grad_(False)
    parts = _mtp(teacher, seed) if name == MTP else _eagle3(teacher, shape, zoo, seed, data)
    trainable = [p for p in parts.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=peak, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    clock, teacher_clock = Clock(), Clock()
    text_rows = plan.batch_size - plan.teacher_windows
    with teacher_clock.timing():  # the drafts' mixture: windows the teacher wrote beside the text
        prefixes = data.train[order[:steps, text_rows:].flatten(), : plan.teacher_prefix]
        written = greedy_continuations(teacher, prefixes, plan.seq_len).view(steps, -1, plan.seq_len)
    for step, indices in enumerate(order[:steps]):
        with clock.timing():
            set_lr(optimizer, learning_rate(step, plan) * peak / plan.lr)
            windows = torch.cat([data.train[indices[:text_rows]], written[step]])  # [batch_size, T]
            losses = _unrolled(parts, teacher, windows, plan.head_unroll)
            loss = sum(losses) / len(losses)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, plan.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    parts.model.eval()
    agreement = _held_out_agreement(parts, teacher, data.held_out[:EVAL_WINDOWS], plan.head_unroll)
    tensors = _checkpoint(name, parts)
    config = eagle3_config(shape, zoo) if name == EAGLE3 else None
    params = sum(t.numel() for t in tensors.values() if t.is_floating_point())
    routed = sum(t.numel() for key, t in tensors.items() if ".mlp.experts." in key)
    active = params - routed + routed * shape.top_k // max(shape.num_experts, 1)
    return TrainedHead(
        name, tensors, config, params, active, clock.wall, clock.cpu, teacher_clock.wall, agreement
    )


def _unrolled(
    parts: _Parts, teacher: PreTrainedModel, windows: torch.Tensor, steps: int, agree: list | None = None
):
    """[S] mean KL per step over a batch of windows ([b, T]); `agree` collects top-1 agreement."""
    with torch.no_grad():
        out = teacher(input_ids=windows, output_hidden_states=True, use_cache=False)
        hidden = torch.stack([out.hidden_states[i] for i in parts.layers], -2)[:, :-1]  # [b, Q, K, Ht]
        wanted = out.logits[:, 1:]  # [b, Q, V]: the target's distribution at q + 1
        if parts.vocab is not None:
            wanted = wanted[..., parts.vocab]  # an EAGLE-3 head learns it over its draft vocabulary
        wanted = F.log_softmax(wanted.float(), -1)
    losses = []
    for step, logits in enumerate(unrolled_logits(parts, hidden, windows, steps), start=1):
        if parts.vocab is not None:
            logits = logits[..., parts.vocab]  # [b, Q, Vd]
        drafted = F.log_softmax(logits.float(), -1)[:, step - 1 :]
        kl = F.kl_div(drafted, wanted[:, step - 1 :], log_target=True, reduction="sum")
        losses.append(kl / (drafted.shape[0] * drafted.shape[1]))
        if agree is not None:
            agree[step - 1].append(
                (drafted.argmax(-1) == wanted[:, step - 1 :].argmax(-1)).float().mean().item()
            )
    return losses


def unrolled_logits(parts: _Parts, hidden: torch.Tensor, windows: torch.Tensor, steps: int) -> Iterator:
    """The head's logits [b, Q, V] at each unrolled step s = 1..S, position q drafting x_{q+2} after
    s - 1 steps on its own states; hidden [b, Q, K, Ht] the target's at positions 0..Q-1."""
    from transformers import DynamicCache

    batch, positions = windows.shape[0], windows.shape[1] - 1
    following = parts.embed(windows[:, 1:])  # [b, Q, H] x_{q+1}
    state = parts.features(hidden)  # [b, Q, H] step 1 reads the target's states
    cache = DynamicCache(config=parts.model.config)
    position_ids = torch.arange(positions)[None].expand(batch, -1)
    for step in range(1, steps + 1):
        mask = _unroll_mask(positions, step)[None, None].expand(batch, 1, -1, -1)
        out = parts.model(
            inputs_embeds=torch.cat([state, following], -1),
            attention_mask=mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        yield out.logits
        # Step s + 1 at q reads step s's state at q - 1 (zero at q = 0, outside its loss).
        state = F.pad(out.hidden_states[STATE_LAYER][:, :-1], (0, 0, 1, 0))


def _unroll_mask(positions: int, step: int) -> torch.Tensor:
    """[Q, step * Q] which keys step `step`'s queries see: step 1 at positions up to q - step + 1,
    step s (2 <= s <= step) at position q - step + s exactly (True: attend)."""
    q = torch.arange(positions)[:, None]
    k = torch.arange(positions)[None, :]
    blocks = [k <= q - step + 1] + [k == q - step + s for s in range(2, step + 1)]
    return torch.cat(blocks, 1)


@torch.no_grad()
def _held_out_agreement(parts: _Parts, teacher, windows: torch.Tensor, steps: int) -> tuple[float, ...]:
    agree: list[list[float]] = [[] for _ in range(steps)]
    for start in range(0, windows.shape[0], 16):
        _unrolled(parts, teacher, windows[start : start + 16], steps, agree)
    return tuple(sum(a) / len(a) for a in agree)


# --- the two heads ---------------------------------------------------------------------------------


def _generator(seed: int, head: str, name: str) -> torch.Generator:
    return torch.Generator().manual_seed(tensor_seed(seed, head, name))


def _mtp(teacher: PreTrainedModel, seed: int) -> _Parts:
    module = build_mtp_model(teacher)
    text = teacher.config.get_text_config()
    last = max(i for i, kind in enumerate(_layer_types(text)) if kind == "full_attention")
    body = teacher.model if hasattr(teacher, "model") else teacher
    module.body.layers[0].load_state_dict(body.layers[last].state_dict())
    module.body.norm.load_state_dict(body.norm.state_dict())
    size = int(text.hidden_size)
    with torch.no_grad():
        module.fc.weight.copy_(torch.cat([torch.eye(size), torch.eye(size)], 1))
    if int(getattr(text, "num_experts", 0) or 0):
        module.body.set_experts_implementation(train_experts.register())
    module.lm_head.requires_grad_(False)
    layers = (int(text.num_hidden_layers),)
    return _Parts(module.train(), FinalLayer(), teacher.get_input_embeddings(), layers, None)


def _eagle3(
    teacher: PreTrainedModel, shape: ModelShape, zoo: ZooPreset, seed: int, data: TrainingData
) -> _Parts:
    from transformers import LlamaConfig

    plan: TrainingPlan = zoo.training
    config = LlamaConfig.from_dict(eagle3_config(shape, zoo))
    config._attn_implementation = "sdpa"
    module = Eagle3Model(config, shape.hidden_size, zoo.vocab_size, own_embeddings=True)
    vocab = draft_vocabulary(data, plan.eagle3_draft_vocab)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.dim() > 1:
                std = 1.0 / param.shape[1] ** 0.5
                param.copy_(torch.randn(param.shape, generator=_generator(seed, EAGLE3, name)) * std)
        module.embed_tokens.weight.copy_(teacher.get_input_embeddings().weight)
        module.lm_head.weight.copy_(teacher.get_output_embeddings().weight[vocab])
        module.fc.weight.zero_()
        module.fc.weight[:, -shape.hidden_size :] = torch.eye(shape.hidden_size)  # the highest layer
        module.d2t.copy_(vocab - torch.arange(len(vocab)))
        module.t2d.zero_()
        module.t2d[vocab] = True
    module.embed_tokens.requires_grad_(False)
    layers = tuple(eagle3_layers(shape))
    return _Parts(module.train(), Eagle3Features(module.fc), module.embed_tokens, layers, vocab)


def eagle3_layers(shape: ModelShape) -> list[int]:
    """The target layers the zoo's EAGLE-3 head reads: vLLM's default (2, L // 2, L - 3) where the
    target is deep enough, else the embeddings, the middle and the final hidden state."""
    depth = shape.num_layers
    if depth >= 6:
        return [2, depth // 2, depth - 3]
    return [0, max(1, depth // 2), depth]


def eagle3_config(shape: ModelShape, zoo: ZooPreset) -> dict:
    """The zoo EAGLE-3 head's config.json: a Llama decoder layer of the target's width and heads."""
    plan = zoo.training
    return {
        "architectures": [ARCHITECTURES[0]],
        "model_type": "llama",
        "hidden_size": shape.hidden_size,
        "intermediate_size": 3 * shape.hidden_size,
        "num_attention_heads": shape.num_q_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": zoo.rope_theta},
        "max_position_embeddings": zoo.max_position_embeddings,
        "vocab_size": zoo.vocab_size,
        "draft_vocab_size": plan.eagle3_draft_vocab,
        "target_hidden_size": shape.hidden_size,
        LAYER_IDS_KEY: eagle3_layers(shape),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def draft_vocabulary(data: TrainingData, size: int) -> torch.Tensor:
    """[Vd] the target ids of the draft vocabulary: the most frequent tokens of the training text
    (ties by id), ascending, as EAGLE-3's trainers pick theirs."""
    counts = torch.bincount(data.train.flatten(), minlength=size)
    top = torch.sort(counts, descending=True, stable=True).indices[:size]
    return torch.sort(top).values


def _layer_types(config) -> list[str]:
    return list(getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers)


def _checkpoint(name: str, parts: _Parts) -> dict[str, torch.Tensor]:
    """The head's tensors as saved: bf16 floats under checkpoint names (an MTP module's experts
    one tensor each), an EAGLE-3 head's maps as they are."""
    state = parts.model.state_dict()
    if name == MTP:
        assert isinstance(parts.model, MtpModel)
        pairs: Iterator = (
            pair
            for param, key in checkpoint_names(parts.model).items()
            for pair in checkpoint_tensors(key, state[param].detach().to(torch.bfloat16))
        )
        return {key: t.contiguous() for key, t in pairs}
    return {
        k: (v.detach().to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
        for k, v in state.items()
    }
