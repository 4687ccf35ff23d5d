"""The KV side of the engine: which slot holds what, and seating a prompt on the longest
prefix already computed (kept in place, copied from another slot, or restored from disk).
Only the engine thread uses it.

Sliding-window models (Gemma 2/3, gpt-oss) add one condition. Their window layers attend
to the last ``n_swa`` positions only, and llama.cpp overwrites cells a window has moved
past: always when the window layers keep only the window (``swa_full`` off), and after a
reload from disk or when their cache runs full otherwise. A prefix is reusable only while
the window before its end is still there: when a prompt is cut where it no longer is, the
slot resumes from its checkpoint (windowed caches save the window's cells a few tokens
before the end of each prompt, like llama-server's context checkpoints) when that lies
within the prefix, else from nothing.
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
        # Prompts whose prefix a sliding window had moved past: resumed from a checkpoint,
        # or prefilled from the start.
        self.window_resumes = 0
        self.window_prefills = 0

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
            slot.checkpoint = source.checkpoint
        if saved is not None:
            reuse = self._restore(slot, prompt, saved, reuse)
        reuse = self._within_window(slot, reuse)
        n.seq_remove(slot.seq_id, reuse)
        slot.cut(reuse)
        slot.busy = owner
        return slot, reuse

    def _restore(self, slot: Slot[T], prompt: list[int], saved: SavedState, reuse: int) -> int:
        """Load a conversation's saved KV state when it covers more than memory does."""
        gain = common_prefix(saved.tokens, prompt, len(prompt) - 1)
        if gain <= reuse:
            return reuse
        self.native.seq_remove(slot.seq_id)
        if self.native.set_seq_state(slot.seq_id, saved.state):
            slot.tokens, slot.prefilled, slot.checkpoint = list(saved.tokens), 0, None
            return gain
        log.warning("a saved KV state did not load; prefilling instead")
        self.native.seq_remove(slot.seq_id)
        slot.forget()
        return 0

    def _within_window(self, slot: Slot[T], reuse: int) -> int:
        """``reuse``, or less where a sliding-window model's window before it is gone: the
        slot's checkpoint when it lies within, else nothing (see the module's docstring)."""
        n = self.native
        if not n.n_swa or reuse == 0:
            return reuse
        first = n.seq_pos_min(slot.seq_id)
        if 0 <= first <= max(0, reuse - n.n_swa + 1):  # the window of position reuse
            return reuse
        checkpoint = slot.checkpoint
        if checkpoint is not None and checkpoint.length <= reuse:
            if n.set_window_state(slot.seq_id, checkpoint.state):
                self.window_resumes += 1
                return checkpoint.length
            log.warning("a window checkpoint did not load; prefilling instead")
        self.window_prefills += 1
        n.seq_remove(slot.seq_id)
        slot.forget()
        return 0

    def evict_idle(self) -> bool:
        """Free the cells of the least recently used idle slot; False when none holds any."""
        idle = [s for s in self.slots if s.busy is None and s.tokens]
        if not idle:
            return False
        slot = min(idle, key=lambda s: s.last_used)
        self.native.seq_remove(slot.seq_id)
        slot.forget()
        return True
