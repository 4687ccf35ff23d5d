"""What a completion request asks for and what comes back, independent of any backend."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "cancelled", "deadline", "error"]


def token_budget(max_tokens: int | None, prompt_tokens: int, context: int, cap: int) -> int:
    """Tokens a request may generate: what it asked for, or what the context leaves when
    it did not ask; at most ``cap``. Callers refuse a prompt that leaves no room."""
    if max_tokens is None:
        return max(1, min(context - prompt_tokens, cap))
    return min(max_tokens, cap)


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling, done in C by a llama.cpp sampler chain.

    ``temperature`` 0 is greedy. ``stop`` strings end the text and are never emitted.
    ``max_tokens`` None is OpenAI's default: as many as the context leaves (see
    :func:`token_budget`).
    """

    max_tokens: int | None = 256
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def has_penalties(self) -> bool:
        return (
            self.repeat_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )


@dataclass(frozen=True)
class CompletionRequest:
    """A prompt (text, tokenised by the backend) and how to continue it.

    ``grammar`` is GBNF (see ``llm.engine.grammar`` for JSON schemas). ``cache_key`` names
    a conversation whose KV state may be kept on disk between turns. ``deadline`` is a
    ``time.monotonic()`` instant after which the request is abandoned.

    A ``prefill_only`` request computes its prompt's KV cells for a later request that
    starts the same way (prefetch on a draft question) and generates nothing. It has the
    lowest priority: refused while anything else runs or waits, and cancelled between two
    of its chunks as soon as a real request comes; what it computed by then stays cached.

    ``own_grammar``: the grammar is the server's own (the answer check's), known to compile
    at once: it never waits for a compile slot that clients' grammars may hold
    (``llm.engine.grammar_compile``). Never set for a client's grammar.
    """

    prompt: str
    params: SamplingParams = field(default_factory=SamplingParams)
    grammar: str | None = None
    cache_key: str | None = None
    deadline: float | None = None
    prefill_only: bool = False
    own_grammar: bool = False

    def expired(self, now: float | None = None) -> bool:
        return self.deadline is not None and (now or time.monotonic()) >= self.deadline


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class BackendStats:
    """What a model is doing now (read by /metrics and the status bar)."""

    running: int
    waiting: int
    sequences: int
    kv_cells_used: int
    kv_cells: int
    # The on-disk KV cache of conversations (llm/engine/kv_disk.py), since start.
    kv_disk_hits: int = 0
    kv_disk_misses: int = 0
    kv_disk_bytes_written: int = 0
    # Sliding-window models: prompts whose cached prefix the window had moved past, resumed
    # from a checkpoint of the window or prefilled from the start (llm/engine/prefix_cache.py).
    kv_window_resumes: int = 0
    kv_window_prefills: int = 0
    # Prefetches' chunks stopped mid-decode by a request they stood in the way of.
    prefetch_interrupts: int = 0


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Finished:
    """The end of a completion; with reason ``error``, ``error`` says why and ``status`` is
    the HTTP status it maps to (400: the request's own grammar; 503: try again later)."""

    reason: FinishReason
    usage: Usage
    model: str
    error: str | None = None
    status: int = 500


CompletionEvent = TextDelta | Finished


class EngineError(Exception):
    """A request that cannot be served; ``status`` is the HTTP status it maps to."""

    status = 500

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class Overloaded(EngineError):
    status = 503

    def __init__(self, detail: str, retry_after_s: int = 1):
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class ContextOverflow(EngineError):
    status = 400

    def __init__(self, prompt_tokens: int, max_tokens: int, context_tokens: int):
        super().__init__(
            f"the prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) exceeds the "
            f"model's context of {context_tokens} tokens"
        )
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.context_tokens = context_tokens


class InvalidRequest(EngineError):
    status = 400


class UnknownModel(EngineError):
    status = 404


class ModelUnavailable(EngineError):
    """A model that exists but could not be loaded (a broken or missing file, no memory)."""

    status = 503


class BackendFailed(EngineError):
    status = 502
