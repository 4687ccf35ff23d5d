"""Speculative decoding: which sequences draft this step, and how drafts are accepted.

The target model checks a sequence's next token and its ``k`` drafts in the one
``llama_decode`` of an engine step, with logits at every position. ``verify`` then samples
the target at each position in turn and stops at the first token that differs from the
draft: every drafted token that matched is emitted, then the target's own token where
they parted (or, when all matched, the token after the last draft).

Why this keeps the target's distribution exactly: our drafts are deterministic (prompt
lookup, or a draft model decoding greedily), so the draft distribution ``q`` is a point
mass on the drafted token ``d``. The speculative-sampling rule accepts ``d`` with
probability ``min(1, p(d)/q(d)) = p(d)`` and otherwise samples from ``max(0, p - q)``
normalised, which is ``p`` without ``d``. Drawing ``x ~ p`` and accepting iff ``x == d``
does both in one draw: ``d`` is kept with probability ``p(d)``, and a differing ``x`` is a
sample of ``p`` given ``x != d``. ``p`` is the request's whole sampler chain (penalties,
top-k/p, min-p, temperature), and each emitted token is one draw of it, exactly as
without speculation. Greedy output is the same token for token when every step decodes
the same number of rows (``RAGDESK_BATCH_INVARIANT``); otherwise a step that checks drafts
computes logits in a differently shaped batch, which can flip a near-tie, exactly as
batching with other requests already can (tests/test_speculative.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from llm.engine.drafting import Drafter, DraftRequest

if TYPE_CHECKING:
    from llm.engine.sequence import Seq

SpeculativeMethod = Literal["off", "prompt-lookup", "draft-model"]


@dataclass(frozen=True)
class SpeculativeConfig:
    method: SpeculativeMethod = "off"
    tokens: int = 4  # the most drafted tokens checked per sequence and step (K)
    max_running: int = 2  # speculate only while this many requests or fewer are running
    min_acceptance: float = 0.3  # recent share of drafts accepted below which a seq pauses

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.max_running < 1 or not 0 <= self.min_acceptance <= 1:
            raise ValueError(f"invalid speculative decoding settings {self}")


def verify(draft: Sequence[int], sample: Callable[[int], int]) -> tuple[list[int], int]:
    """Sample the target at draft positions 0, 1, ... (``sample(i)``: the token after the
    ``i``-th drafted token's predecessor) until one differs from the draft. Returns the
    tokens to emit, in order, and how many drafted tokens were accepted."""
    emitted = []
    for i, drafted in enumerate(draft):
        token = sample(i)
        emitted.append(token)
        if token != drafted:
            return emitted, i
    emitted.append(sample(len(draft)))
    return emitted, len(draft)


class Speculation:
    """Chooses who drafts this step and how much, and asks the drafter."""

    def __init__(self, config: SpeculativeConfig, drafter: Drafter, context_tokens: int):
        self.config = config
        self.drafter = drafter
        self.method = drafter.method
        self._context_tokens = context_tokens

    def drafts(self, seqs: list[Seq], running: int, room: int) -> list[list[int]]:
        """A draft (maybe empty) per decoding sequence; ``room``: spare rows in the batch."""
        none: list[list[int]] = [[] for _ in seqs]
        if running > self.config.max_running:
            return none
        wanted: list[tuple[int, DraftRequest]] = []
        for i, seq in enumerate(seqs):
            k = self._budget(seq, room)
            if k > 0:
                assert seq.slot is not None and seq.next_token is not None
                tokens = [*seq.slot.tokens, seq.next_token]
                wanted.append((i, DraftRequest(seq.slot.seq_id, tokens, k)))
                room -= k
        if not wanted:
            return none
        for (i, _), draft in zip(wanted, self.drafter.propose([r for _, r in wanted]), strict=True):
            none[i] = draft
        return none

    def _budget(self, seq: Seq, room: int) -> int:
        """How many tokens ``seq`` may draft: none with a grammar (its sampler state cannot be
        rewound) or while backing off; never past ``max_tokens`` or the context."""
        if seq.request.grammar is not None or not seq.spec.drafting(seq.generated):
            return 0
        assert seq.slot is not None
        left = seq.max_tokens - seq.generated - 1  # the step emits up to k + 1 tokens
        context = self._context_tokens - len(seq.slot.tokens) - 3
        return max(0, min(self.config.tokens, left, context, room))

    def record(self, seq: Seq, drafted: int, accepted: int) -> None:
        seq.spec.record(drafted, accepted, seq.generated, self.config.min_acceptance)

    def close(self) -> None:
        self.drafter.close()
