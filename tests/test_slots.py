"""The host's slot map says what the device mask would say: random rounds of appends, rollbacks,
crops, compactions and retains, checked against the mask computed the old way, with torch."""

from __future__ import annotations

import random

import numpy as np
import torch

from specmoe.backends.slots import SlotMap, to_device


class _Reference:
    """The layout as the backends computed it before, from a mask alone ([B, W] bool tensor)."""

    def __init__(self, lengths: list[int]) -> None:
        width = max(lengths)
        self.valid = torch.arange(width)[None, :] >= width - torch.tensor(lengths)[:, None]

    def append(self, t: int) -> None:
        self.valid = torch.cat([self.valid, torch.ones(self.valid.shape[0], t, dtype=torch.bool)], 1)

    def keep(self, lengths: list[int]) -> None:
        self.valid &= self.valid.cumsum(1) <= torch.tensor(lengths)[:, None]

    def used(self) -> tuple[int, int]:
        used = self.valid.any(0).nonzero()
        width = self.valid.shape[1]
        return (int(used[0]), int(used[-1]) + 1) if len(used) else (width, width)


def test_the_host_map_follows_the_device_mask_through_random_rounds():
    rng = random.Random(0)
    for _ in range(20):
        rows = rng.randint(1, 4)
        lengths = [rng.randint(1, 6) for _ in range(rows)]  # prompts, left-padded
        slots, reference = SlotMap(), _Reference(lengths)
        slots.reset(lengths)
        for _ in range(30):
            t = rng.randint(1, 5)
            assert (slots.positions(t) == (slots.lengths[:, None] + np.arange(t))).all()
            slots.append(t)
            reference.append(t)
            before = slots.lengths.tolist()
            keep = [n - rng.randint(0, min(t, n)) for n in before]
            dropped = slots.keep(keep)
            reference.keep(keep)
            assert dropped.tolist() == [n - k for n, k in zip(before, keep, strict=True)]
            assert (slots.valid == reference.valid.numpy()).all()
            assert slots.lengths.tolist() == reference.valid.sum(1).tolist() == keep
            assert slots.used() == reference.used()
            lo, hi = slots.used()
            slots.crop(lo, hi)
            reference.valid = reference.valid[:, lo:hi]
            assert slots.dense == bool(reference.valid.all())
            if rng.random() < 0.2:  # compaction moves each row's live slots together, in order
                index = slots.compaction(rng.choice(["left", "right"]))
                reference.valid = torch.from_numpy(slots.valid.copy())
                assert slots.lengths.tolist() == reference.valid.sum(1).tolist() == keep
                assert index.shape == (rows, slots.longest)


def test_keep_reports_each_rows_dropped_tokens_and_never_grows_a_row():
    slots = SlotMap()
    slots.reset([3, 1])
    slots.append(4)
    assert slots.keep([5, 9]).tolist() == [2, 0]  # asking for more than a row holds keeps it all
    assert slots.lengths.tolist() == [5, 5]
    assert slots.valid.tolist() == [[True] * 5 + [False] * 2, [False, False, True, True, True, True, True]]


def test_compaction_gathers_each_rows_live_slots_in_order():
    slots = SlotMap()
    slots.reset([2, 1])  # slot 0 is row 1's padding
    slots.append(3)  # slots 2..4
    slots.keep([3, 4])  # row 0 drops slots 3 and 4
    right = slots.compaction("right")  # [B, longest = 4]
    assert right[0, 1:].tolist() == [0, 1, 2] and right[1].tolist() == [1, 2, 3, 4]
    assert slots.valid.tolist() == [[False, True, True, True], [True] * 4]
    slots.reset([2, 1])
    slots.append(3)
    slots.keep([3, 4])
    left = slots.compaction("left")
    assert left[0, :3].tolist() == [0, 1, 2] and left[1].tolist() == [1, 2, 3, 4]
    assert slots.valid.tolist() == [[True, True, True, False], [True] * 4]


def test_retain_keeps_rows_in_order_and_pads_with_empty_rows():
    slots = SlotMap()
    slots.reset([1, 2, 3])
    slots.retain([2, 0], pad_to=4)
    assert slots.lengths.tolist() == [3, 1, 0, 0]
    assert slots.valid.tolist() == [[True] * 3, [False, False, True], [False] * 3, [False] * 3]


def test_on_cpu_the_device_copy_shares_the_host_memory():
    host = np.zeros((2, 3), dtype=bool)
    copy = to_device(host, torch.device("cpu"))
    host[0, 1] = True
    assert copy[0, 1] and copy.dtype == torch.bool
    assert to_device([[1, 2]], torch.device("cpu")).tolist() == [[1, 2]]
