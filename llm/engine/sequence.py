"""One request inside the engine: its prompt tokens, sampler, progress and text output."""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llm.channel import Completion
from llm.engine.acceptance import Acceptance
from llm.engine.kv_disk import SavedState
from llm.engine.slots import Slot
from llm.engine.stops import StopMatcher
from llm.params import CompletionRequest, Usage

if TYPE_CHECKING:
    from llm.engine.native import TokenSampler


@dataclass
class Seq:
    request: CompletionRequest
    completion: Completion
    prompt: list[int]
    sampler: TokenSampler
    saved: SavedState | None
    submitted: float
    max_tokens: int
    slot: Slot[Seq] | None = None
    done: int = 0  # prompt tokens in the KV cache
    cached: int = 0
    next_token: int | None = None  # sampled, not yet decoded
    generated: int = 0
    last_emit: float = 0.0
    spec: Acceptance = field(default_factory=Acceptance)  # its speculative drafts
    stops: StopMatcher = field(init=False)
    decoder: codecs.IncrementalDecoder = field(init=False)

    def __post_init__(self) -> None:
        self.stops = StopMatcher(self.request.params.stop)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    @property
    def prefilling(self) -> bool:
        return self.done < len(self.prompt)

    def usage(self) -> Usage:
        return Usage(len(self.prompt), self.cached, self.generated)

    def text(self, piece: bytes) -> str:
        """The text a token's bytes complete, less anything that may still become a stop."""
        return self.stops.feed(self.decoder.decode(piece))

    def tail(self) -> str:
        """What was held back, once nothing more will come."""
        return self.stops.flush() + self.decoder.decode(b"", final=True)
