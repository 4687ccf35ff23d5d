"""What the app needs from a model, whoever serves it: the local engine, a remote
OpenAI-compatible server or the deterministic fake. One required method, ``submit``."""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from llm.channel import Completion
from llm.chat_format import ChatTemplate
from llm.engine.engine import EngineObserver
from llm.params import (
    BackendStats,
    CompletionRequest,
    ContextOverflow,
    Finished,
    FinishReason,
    TextDelta,
    Usage,
    token_budget,
)
from llm.prompt import CompletionFormat, PromptFormat


class Backend(Protocol):
    name: str  # the model that serves: reported in every response
    device: str
    context_tokens: int
    prompt_format: PromptFormat
    memory_bytes: int  # what keeping it loaded costs (0 for remote models)

    def submit(self, request: CompletionRequest) -> Completion:
        """Admit a request (or raise ``EngineError`` at once) and stream its events."""
        ...

    def count_tokens(self, text: str) -> int: ...

    def stats(self) -> BackendStats: ...

    @property
    def idle(self) -> bool: ...

    def close(self) -> None: ...


@runtime_checkable
class Prefetching(Protocol):
    """A backend that may take prefill-only requests (``CompletionRequest.prefill_only``):
    the local engine and the fake, when ``prefetches``."""

    prefetches: bool

    @property
    def serving(self) -> bool:
        """Whether real requests (not prefill-only ones) run or wait: a prefetch would then
        be refused."""
        ...


_SOURCE_LINE = re.compile(r"^\[1\] [^\n]*?\(page \d+\): ([^\n]+)$", re.MULTILINE)


@dataclass
class FakeBackend:
    """Deterministic stand-in: quotes the last prompt's first source, one word per token.

    ``enqueue`` scripts the next responses (a list of tokens each); ``history`` records
    every request, as simonw/llm's MockModel does. Streams run concurrently, each on its
    own thread, and honour ``max_tokens``, stop strings, cancellation and deadlines.
    """

    name: str = "fake"
    device: str = "CPU"
    context_tokens: int = 4096
    max_tokens_cap: int = 2048
    token_delay_s: float = 0.0
    memory_bytes: int = 0
    observer: EngineObserver | None = None
    prompt_format: PromptFormat = field(default_factory=CompletionFormat)
    chat_template: ChatTemplate | None = None  # set one to test template rendering
    history: list[CompletionRequest] = field(default_factory=list)
    prefetched: list[CompletionRequest] = field(default_factory=list)  # prefill-only ones
    prefetches: bool = True  # takes prefill-only requests (see ``CompletionRequest``)
    prefetch_s: float = 0.0  # how long a prefill-only request reads (cancelling ends it)
    _scripted: deque[list[str]] = field(default_factory=deque)
    _running: int = 0  # requests streaming, prefill-only ones included
    _prefetching: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enqueue(self, tokens: Sequence[str]) -> None:
        self._scripted.append(list(tokens))

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def submit(self, request: CompletionRequest) -> Completion:
        prompt_tokens = self.count_tokens(request.prompt)
        budget = self._budget(request, prompt_tokens)
        if prompt_tokens + budget > self.context_tokens:
            raise ContextOverflow(prompt_tokens, budget, self.context_tokens)
        if request.prefill_only:  # a prefetch: recorded, nothing scripted is spent on it
            self.prefetched.append(request)
            done = Completion()
            if not self.prefetch_s:
                done.push(Finished("stop", Usage(prompt_tokens, 0, 0), self.name))
                return done
            with self._lock:
                self._running += 1
                self._prefetching += 1
            threading.Thread(target=self._prefill, args=(prompt_tokens, done), daemon=True).start()
            return done
        with self._lock:
            self.history.append(request)
            tokens = self._scripted.popleft() if self._scripted else _quote(request.prompt)
            self._running += 1
        completion = Completion()
        threading.Thread(
            target=self._produce, args=(request, tokens, prompt_tokens, completion), daemon=True
        ).start()
        return completion

    def _budget(self, request: CompletionRequest, prompt_tokens: int) -> int:
        max_tokens, context = request.params.max_tokens, self.context_tokens
        return token_budget(max_tokens, prompt_tokens, context, self.max_tokens_cap)

    def _produce(
        self, request: CompletionRequest, tokens: list[str], prompt: int, out: Completion
    ) -> None:
        reason: FinishReason = "length"
        sent = 0
        text = ""
        budget = self._budget(request, prompt)
        try:
            for token in tokens[:budget]:
                if out.wait_cancelled(self.token_delay_s):
                    reason = "cancelled"
                    break
                if request.expired():
                    reason = "deadline"
                    break
                text += token
                if any(stop in text for stop in request.params.stop if stop):
                    reason = "stop"
                    break
                if self.observer is not None and sent == 0:
                    self.observer.first_token(self.name, 0.0)
                out.push(TextDelta(token))
                sent += 1
            else:
                reason = "stop" if len(tokens) <= budget else "length"
            if out.cancelled:
                reason = "cancelled"
        finally:
            with self._lock:
                self._running -= 1
            usage = Usage(prompt, 0, sent)
            out.push(Finished(reason, usage, self.name))
            if self.observer is not None:
                self.observer.finished(self.name, usage, reason)

    def _prefill(self, prompt: int, out: Completion) -> None:
        reason: FinishReason = "cancelled" if out.wait_cancelled(self.prefetch_s) else "stop"
        with self._lock:
            self._running -= 1
            self._prefetching -= 1
        out.push(Finished(reason, Usage(prompt, 0, 0), self.name))

    def stats(self) -> BackendStats:
        return BackendStats(self._running, 0, 8, 0, 0)

    @property
    def idle(self) -> bool:
        return self._running == 0

    @property
    def serving(self) -> bool:
        return self._running > self._prefetching

    def close(self) -> None:
        pass


def _quote(prompt: str) -> list[str]:
    sources = _SOURCE_LINE.findall(prompt)
    if len(sources) < 2:  # the first is the worked example in the instructions
        return ["The", " documents", " do", " not", " cover", " that."]
    words = sources[-1].split()[:30]
    return [" " + w if i else w for i, w in enumerate(["According", "to", "[1],", *words])]


def wait_idle(backend: Backend, timeout_s: float = 5.0) -> bool:
    """For tests and shutdown: poll until nothing runs."""
    end = time.monotonic() + timeout_s
    while not backend.idle:
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True
