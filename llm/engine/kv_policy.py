"""When the KV disk cache writes a state: the two rules of ``llm/engine/kv_disk.py``.

``worth_rewriting``: a key's state is written again only once it is ``growth`` times the
prefix its saved state already covers. ``WriteRate``: the bytes written stay within the
cache's budget per ``turnover_s`` on average (a token bucket: a quarter of the budget may
go at once). Both are pure and take the clock as an argument, so they are tested alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llm.engine.slots import common_prefix


@dataclass(frozen=True)
class WritePolicy:
    growth: float = 2.0  # rewrite a key's state once it is this many times what is saved
    turnover_s: float = 3600.0  # write at most the budget per this long; 0: no cap
    burst_share: float = 0.25  # of the budget, writable at once after a quiet spell

    def __post_init__(self) -> None:
        if self.growth < 1 or self.turnover_s < 0 or not 0 < self.burst_share <= 1:
            raise ValueError(f"invalid KV write policy {self}")


def worth_rewriting(saved: Sequence[int] | None, tokens: Sequence[int], growth: float) -> bool:
    """Whether to write ``tokens``' state when ``saved`` (None: nothing) is on disk for
    the same key: only when it is at least ``growth`` times the prefix that ``saved``
    already covers, so an unchanged state, or one a few tokens longer, is never rewritten,
    and one that left the saved prefix early (older turns dropped to fit) is."""
    if saved is None:
        return True
    covered = common_prefix(saved, tokens, len(tokens))
    return len(tokens) > covered and len(tokens) >= growth * covered


class WriteRate:
    """A token bucket of bytes: refilled at ``budget / turnover_s`` per second up to
    ``burst_share`` of the budget. A write is allowed while the bucket is not empty and
    then charged in full, so a state larger than the burst is written too, once the
    bucket has refilled, and the average rate holds."""

    def __init__(self, budget_bytes: int, policy: WritePolicy, now: float):
        self.unlimited = policy.turnover_s == 0
        self.rate = budget_bytes / policy.turnover_s if policy.turnover_s else 0.0
        self.capacity = budget_bytes * policy.burst_share
        self.allowance = self.capacity
        self._last = now

    def allows(self, now: float) -> bool:
        if self.unlimited:
            return True
        self.allowance = min(self.capacity, self.allowance + max(0.0, now - self._last) * self.rate)
        self._last = now
        return self.allowance > 0

    def charge(self, size: int) -> None:
        if not self.unlimited:
            self.allowance -= size
