"""The KV side of the engine: which slot holds what, and seating a prompt on the longest
prefix already computed (kept in place, copied from another slot, or restored from disk).
Only the engine thread uses it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Generic, TypeVar

from llm.engine.kv_disk import SavedState
from llm.engine.slots import Slot, cells_used, common_prefix, place

if TYPE_CHECKING:
    from llm.engine.native import NativeModel

log = logging.getLogger(__name__)
T = TypeVar("T")


class PrefixCache(Generic[T]):
    def __init__(self, native: NativeModel, sequences: int, *, aligned_to: int = 0):
        """``aligned_to``: reuse only prefixes computed by prefill, cut to a multiple of it
        (batch-invariant mode: reused cells must equal what a cold run computes)."""
        self.native = native
        self.slots: list[Slot[T]] = [Slot(i) for i in range(sequences)]
        self._aligned_to = aligned_to

    def has_free_slot(self) -> bool:
        return any(s.busy is None for s in self.slots)

    def busy(self) -> list[T]:
        return [s.busy for s in self.slots if s.busy is not None]

    def cells_used(self) -> int:
        return cells_used(self.slots)

    def seat(self, owner: T, prompt: list[int], saved: SavedState | None) -> tuple[Slot[T], int]:
        """Give ``owner`` a free slot holding the longest reusable prefix of ``prompt``;
        returns the slot and how many prompt tokens it already holds."""
        placement = place(self.slots, prompt)
        assert placement is not None  # the caller checked for a free slot
        slot = self.slots[placement.target]
        source = self.slots[placement.source if placement.source is not None else slot.seq_id]
        reuse = placement.reuse
        if self._aligned_to:
            reuse = min(reuse, source.prefilled) // self._aligned_to * self._aligned_to
            saved = None  # restored cells were not computed in aligned chunks
        n = self.native
        if placement.source is not None and reuse > 0:
            n.seq_remove(slot.seq_id)
            n.seq_copy(source.seq_id, slot.seq_id, reuse)
            slot.tokens = source.tokens[:reuse]
            slot.prefilled = min(source.prefilled, reuse)
        if saved is not None:
            reuse = self._restore(slot, prompt, saved, reuse)
        n.seq_remove(slot.seq_id, reuse)
        del slot.tokens[reuse:]
        slot.prefilled = min(slot.prefilled, reuse)
        slot.busy = owner
        return slot, reuse

    def _restore(self, slot: Slot[T], prompt: list[int], saved: SavedState, reuse: int) -> int:
        """Load a conversation's saved KV state when it covers more than memory does."""
        gain = common_prefix(saved.tokens, prompt, len(prompt) - 1)
        if gain <= reuse:
            return reuse
        self.native.seq_remove(slot.seq_id)
        if self.native.set_seq_state(slot.seq_id, saved.state):
            slot.tokens = list(saved.tokens)
            slot.prefilled = 0
            return gain
        log.warning("a saved KV state did not load; prefilling instead")
        self.native.seq_remove(slot.seq_id)
        slot.tokens, slot.prefilled = [], 0
        return 0

    def evict_idle(self) -> bool:
        """Free the cells of the least recently used idle slot; False when none holds any."""
        idle = [s for s in self.slots if s.busy is None and s.tokens]
        if not idle:
            return False
        slot = min(idle, key=lambda s: s.last_used)
        self.native.seq_remove(slot.seq_id)
        slot.tokens, slot.prefilled = [], 0
        return True
