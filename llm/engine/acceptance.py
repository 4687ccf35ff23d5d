"""One request's speculative drafts: how many were accepted, and when it stops drafting
for a while because too few were (llm/engine/speculative.py)."""

from __future__ import annotations

from dataclasses import dataclass

# Back-off of one sequence: the running acceptance rate is an average over recent steps
# (weight of the newest); below the floor, the sequence drafts nothing for a while.
RATE_WEIGHT = 0.3
PAUSE_TOKENS = 32
RATE_AFTER_PAUSE = 0.5


@dataclass
class Acceptance:
    """One request's drafts: totals for the metrics, and its back-off state."""

    drafted: int = 0
    accepted: int = 0
    rate: float = 1.0
    paused_until: int = 0  # no drafts before the request has generated this many tokens

    def drafting(self, generated: int) -> bool:
        return generated >= self.paused_until

    def record(self, drafted: int, accepted: int, generated: int, floor: float) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.rate += RATE_WEIGHT * (accepted / drafted - self.rate)
        if self.rate < floor:
            self.paused_until = generated + PAUSE_TOKENS
            self.rate = max(RATE_AFTER_PAUSE, floor)
