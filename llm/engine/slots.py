"""Which tokens each llama.cpp sequence holds in the KV cache, and where a new prompt goes.

A slot is one sequence id of the shared context. Its ``tokens`` are exactly the KV
contents of that sequence (positions 0..n-1). Finished requests leave their tokens in
place, so the next prompt that starts the same way (the system prompt, or the previous
turn of the same conversation) only prefills what is new.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(frozen=True)
class Checkpoint:
    """The window layers' cells of a sequence when it held its first ``length`` tokens: a
    sliding-window model resumes there after a cut its window no longer covers."""

    length: int
    state: bytes


@dataclass
class Slot(Generic[T]):
    seq_id: int
    tokens: list[int] = field(default_factory=list)
    busy: T | None = None
    last_used: float = 0.0
    prefilled: int = 0  # leading tokens computed by prompt prefill (not by decoding)
    checkpoint: Checkpoint | None = None  # windowed caches only; its length <= len(tokens)

    def forget(self) -> None:
        """What the slot holds is gone (its cells were removed)."""
        self.tokens, self.prefilled, self.checkpoint = [], 0, None

    def cut(self, length: int) -> None:
        """The slot keeps its first ``length`` tokens (its cells past them were removed)."""
        del self.tokens[length:]
        self.prefilled = min(self.prefilled, length)
        if self.checkpoint is not None and self.checkpoint.length > length:
            self.checkpoint = None


@dataclass(frozen=True)
class Placement:
    """Put the prompt in ``target``; first copy ``reuse`` tokens from ``source`` when it is
    another slot, then drop whatever ``target`` holds past ``reuse``."""

    target: int
    source: int | None
    reuse: int


def place(slots: Sequence[Slot[T]], prompt: Sequence[int]) -> Placement | None:
    """Choose a free slot for ``prompt`` and the longest cached prefix to start from.

    At least the last prompt token is always recomputed: its logits pick the first
    generated token. A free slot whose cache would be cut short is only reused in place
    when no empty slot is left, so one conversation's cache does not evict another's.
    Returns None when every slot is busy.
    """
    free = [s for s in slots if s.busy is None]
    if not free:
        return None
    limit = len(prompt) - 1
    best, best_len = None, 0
    for slot in slots:
        n = common_prefix(slot.tokens, prompt, limit)
        # on a tie a free slot wins: it can be extended in place instead of copied from
        if n > best_len or (n == best_len > 0 and best and best.busy and slot.busy is None):
            best, best_len = slot, n
    if best is not None and best.busy is None and best_len >= len(best.tokens):
        return Placement(best.seq_id, None, best_len)  # extends what it holds: nothing lost
    empty = [s for s in free if not s.tokens]
    if empty:
        target = empty[0]
    elif best is not None and best.busy is None:
        target = best
    else:
        target = min(free, key=lambda s: s.last_used)
    if best is None:
        return Placement(target.seq_id, None, 0)
    return Placement(target.seq_id, None if best is target else best.seq_id, best_len)


def cells_used(slots: Sequence[Slot[T]]) -> int:
    """KV cells held, counting a prefix shared by several slots once (copies share cells)."""
    ordered = sorted(s.tokens for s in slots if s.tokens)
    total, previous = 0, list[int]()
    for tokens in ordered:
        total += len(tokens) - common_prefix(previous, tokens, len(tokens))
        previous = tokens
    return total
