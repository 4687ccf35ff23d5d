"""Admitting a ``/v1`` generation request and reading its events, shared by the chat and
text completion routes."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from litestar import Request

from app.chat.disconnect import cancel_on_disconnect
from app.chat.local_models import ChatModels
from app.openai.errors import OpenAIError
from app.openai.schemas import PromptTokensDetails, ResponseFormat, Sampling, UsageOut
from app.state import Services
from llm.backend import Backend
from llm.channel import Completion
from llm.chat_format import ChatPrompt
from llm.engine.grammar import grammar_for_schema
from llm.params import (
    CompletionEvent,
    CompletionRequest,
    Finished,
    InvalidRequest,
    SamplingParams,
    TextDelta,
    Usage,
)
from llm.registry import Registry
from llm.repetition import RepetitionGuard

FINISH_REASONS = {"stop": "stop", "length": "length", "deadline": "length", "cancelled": "stop"}


@dataclass
class Started:
    """An admitted request whose first event has arrived (so it did not fail at once)."""

    id: str
    model: str  # the backend that serves it; the final event names it again
    completion: Completion
    strip_leading_space: bool

    async def events(self) -> AsyncGenerator[CompletionEvent, None]:
        """The completion's events, less the whitespace a transcript format puts after
        ``Assistant:``. Leaving early cancels generation (the client disconnected)."""
        strip = self.strip_leading_space
        try:
            async for event in self.completion:
                if isinstance(event, TextDelta) and strip:
                    event = TextDelta(event.text.lstrip())
                    if not event.text:
                        continue
                    strip = False
                yield event
        finally:
            if self.completion.finished is None:
                self.completion.cancel()

    async def guarded(self, guard: RepetitionGuard) -> AsyncIterator[CompletionEvent]:
        """``events`` through ``guard`` (a grounded answer's, as chat's): text comes out
        only as ``guard.shown`` allows, so a sentence it must not say (the prompt's worked
        example) is never streamed; generation is cancelled when the answer repeats
        itself, and the final event still comes (reason ``cancelled`` then)."""
        sent = 0
        async with aclosing(self.events()) as events:  # closed with this: cancels
            async for event in events:
                if isinstance(event, TextDelta):
                    if guard.repeated:
                        continue  # cut: what is left comes in before the final event
                    if guard.feed(event.text):
                        self.completion.cancel()
                else:
                    guard.end()
                shown = guard.shown
                if len(shown) > sent:
                    yield TextDelta(shown[sent:])
                    sent = len(shown)
                if isinstance(event, Finished):
                    yield event


PromptFor = Callable[[Backend], ChatPrompt]


async def start(
    services: Services,
    data: Sampling,
    prompt_for: PromptFor,
    *,
    max_tokens: int | None,
    response_format: ResponseFormat | None = None,
    prefix: str,
    may_load_any: bool,
) -> Started:
    models = services.require_models()
    settings = services.settings
    deadline = time.monotonic() + settings.generation.request_timeout_s
    chat_models = ChatModels(services.db, settings)

    def submit() -> tuple[str, Completion, bool]:
        chat_models.refuse_unoffered(data.model, aliases=models.aliases, may_load_any=may_load_any)
        return _submit(models, data, prompt_for, max_tokens, response_format, deadline)

    model, completion, strip = await asyncio.to_thread(submit)
    first = await completion.first()
    if isinstance(first, Finished) and first.reason == "error":
        raise InvalidRequest(first.error or "generation failed")
    return Started(f"{prefix}-{uuid.uuid4().hex}", model, completion, strip)


def _submit(
    models: Registry,
    data: Sampling,
    prompt_for: PromptFor,
    max_tokens: int | None,
    response_format: ResponseFormat | None,
    deadline: float,
) -> tuple[str, Completion, bool]:
    """Off the event loop, in one hop: model loading, templating, grammar, tokenisation."""
    grammar = _grammar(response_format)  # refused before any model is loaded
    backend = models.get(data.model)
    prompt = prompt_for(backend)
    stop = [data.stop] if isinstance(data.stop, str) else list(data.stop or [])
    params = SamplingParams(
        max_tokens=max_tokens,  # None: as much as the context leaves, as OpenAI does
        temperature=1.0 if data.temperature is None else data.temperature,
        top_k=data.top_k,
        top_p=1.0 if data.top_p is None else data.top_p,
        min_p=data.min_p,
        repeat_penalty=data.repeat_penalty,
        frequency_penalty=data.frequency_penalty or 0.0,
        presence_penalty=data.presence_penalty or 0.0,
        # llama.cpp takes 32 bits, and 0xFFFFFFFF there means "random".
        seed=None if data.seed is None else data.seed % (2**32 - 1),
        stop=tuple(dict.fromkeys([*prompt.stop, *stop])),
    )
    request = CompletionRequest(prompt.text, params, grammar, deadline=deadline)
    return backend.name, backend.submit(request), prompt.strip_leading_space


def _grammar(response_format: ResponseFormat | None) -> str | None:
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return grammar_for_schema(None)
    spec = response_format.json_schema
    if spec is None:
        raise OpenAIError(
            "response_format of type json_schema needs a json_schema object",
            param="response_format.json_schema",
        )
    try:
        return grammar_for_schema(spec.schema)
    except InvalidRequest as exc:
        raise OpenAIError(exc.detail, param="response_format.json_schema.schema") from exc


def usage_out(usage: Usage) -> UsageOut:
    return UsageOut(
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.total_tokens,
        PromptTokensDetails(usage.cached_tokens),
    )


def failed(event: Finished) -> OpenAIError:
    return OpenAIError(f"generation failed: {event.error or 'unknown error'}", status=event.status)


async def collect(
    started: Started, request: Request[Any, Any, Any], guard: RepetitionGuard | None = None
) -> tuple[str, Finished]:
    """The whole answer (with ``guard``: its ``text``, so neither the worked example nor
    a loop's start); generation stops if the client hangs up meanwhile."""
    parts: list[str] = []
    events = started.events() if guard is None else started.guarded(guard)
    async with cancel_on_disconnect(request, started.completion):
        async for event in events:
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif event.reason == "error":
                raise failed(event)
            else:
                return ("".join(parts) if guard is None else guard.text), event
    raise AssertionError("a completion always ends with Finished")
