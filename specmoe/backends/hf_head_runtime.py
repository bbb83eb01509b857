"""A head drafter's two parts beside a transformers target: the head bound to the target's model,
and the backend that runs it (`hf_heads` says what a head is).

Both are made once per target and head and handed to every drafter made for them after: a drafter
lives for one decode, but binding a head copies its weights (an MTP module is read from the
target's checkpoint) and a compiled head's graphs belong to its backend. A new batch resets the
backend's cache (`prefill_embeds`), so one decode after another may share it.
"""

from __future__ import annotations

import weakref

from specmoe.backends.base import Backend
from specmoe.backends.eagle3_head import Eagle3Checkpoint, eagle3_head
from specmoe.backends.hf import HFBackend
from specmoe.backends.hf_heads import Head
from specmoe.backends.hf_static import StaticHFBackend
from specmoe.backends.mtp_head import mtp_head

HeadBackend = HFBackend | StaticHFBackend
_BOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {key: (head, backend, source)}


def is_transformers(target: Backend) -> bool:
    """Whether the target runs through transformers, the runtime these heads are written for."""
    return isinstance(target, HFBackend | StaticHFBackend)


def mtp_for(target: HeadBackend) -> tuple[Head, HeadBackend]:
    """The target's own MTP module and the backend that runs it."""
    return _bound(target, "mtp", None, lambda: mtp_head(target.model, target.name))


def eagle3_for(checkpoint: Eagle3Checkpoint, target: HeadBackend) -> tuple[Head, HeadBackend]:
    """An EAGLE-3 head bound to the target and the backend that runs it."""
    return _bound(
        target, ("eagle3", id(checkpoint)), checkpoint, lambda: eagle3_head(checkpoint, target.model)
    )


def _bound(target: HeadBackend, key, source, make) -> tuple[Head, HeadBackend]:
    bound = _BOUND.setdefault(target, {})
    if key not in bound or bound[key][2] is not source:  # an id may be reused once its object is gone
        head = make()
        bound[key] = (head, head_backend(target, head), source)  # the source kept alive with its id
    head, backend, _ = bound[key]
    return head, backend


def head_backend(target: HeadBackend, head: Head) -> HeadBackend:
    """The backend that runs a head beside its target, of the target's own kind: eager beside an
    eager target; beside a compiled target, compiled the same way (mode and compiler), because a
    one-layer step is nearly all launch overhead on a GPU unless it is captured (vLLM captures its
    drafters' steps in CUDA graphs too), and a run should measure both parts the same way."""
    name = f"{target.name}:{head.kind}"
    if isinstance(target, StaticHFBackend):
        return StaticHFBackend(
            head.model,
            name,
            target.device,
            compile=target.compiled,
            mode=target.mode,
            compiler=target.compiler,
        )
    return HFBackend(head.model, name, target.device)
