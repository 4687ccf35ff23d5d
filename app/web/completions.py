"""``POST /api/completions``: raw text completion on any registered model, streamed (SSE)
or not. Refusals (queue full, prompt too long, bad grammar) are answered before any
stream starts, with their own status codes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, post
from litestar.di import Provide
from litestar.enums import MediaType
from litestar.response import Response, ServerSentEvent
from litestar.response.sse import ServerSentEventMessage

from app.auth.guards import may_load_any_model
from app.chat.disconnect import cancel_on_disconnect
from app.chat.local_models import ChatModels
from app.errors import from_engine
from app.state import Services
from app.web.deps import provide_services
from llm.channel import Completion
from llm.engine.grammar import checked_grammar, grammar_for_schema
from llm.params import (
    CompletionRequest,
    EngineError,
    Finished,
    InvalidRequest,
    SamplingParams,
    TextDelta,
    Usage,
)
from llm.registry import Registry

MAX_PROMPT_CHARS = 1_000_000
Probability = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
Stop = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class CompletionIn(msgspec.Struct, forbid_unknown_fields=True):
    prompt: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PROMPT_CHARS)]
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] = "default"
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 256
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] = 0.8
    top_k: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 40
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.95
    min_p: Probability = 0.05
    repeat_penalty: Annotated[float, msgspec.Meta(gt=0.0, le=10.0)] = 1.0
    frequency_penalty: Penalty = 0.0
    presence_penalty: Penalty = 0.0
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)] | None = None
    stop: Annotated[list[Stop], msgspec.Meta(max_length=16)] = msgspec.field(default_factory=list)
    stream: bool = False
    grammar: Annotated[str, msgspec.Meta(min_length=1, max_length=64_000)] | None = None
    json_schema: dict[str, Any] | None = None
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] | None = None


class UsageOut(msgspec.Struct):
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, usage: Usage) -> UsageOut:
        return cls(
            usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens, usage.total_tokens
        )


class CompletionOut(msgspec.Struct):
    model: str
    text: str
    finish_reason: str
    usage: UsageOut


class CompletionsApi(Controller):
    path = "/api/completions"
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @post(status_code=200)
    async def complete(
        self, data: CompletionIn, services: Services, request: Request[Any, Any, Any]
    ) -> Response[Any]:
        """Continue ``prompt``. With ``stream``: server-sent ``token`` events, then ``done``
        (model, finish reason, usage) or ``error``."""
        models = services.require_models()
        timeout = data.timeout_s or services.settings.generation.request_timeout_s
        chat_models = ChatModels(services.db, services.settings)
        may_load_any = may_load_any_model(request)

        def submit() -> Completion:
            chat_models.refuse_unoffered(
                data.model, aliases=models.aliases, may_load_any=may_load_any
            )
            return _submit(models, data, time.monotonic() + timeout)

        try:
            completion = await asyncio.to_thread(submit)
            first = await completion.first()
        except EngineError as exc:
            raise from_engine(exc) from exc
        if isinstance(first, Finished) and first.reason == "error":
            raise from_engine(InvalidRequest(first.error or "generation failed"))
        if data.stream:
            return ServerSentEvent(_events(completion))
        # Response[...] rather than the body's type: Litestar would stamp a plain return
        # type's media type (JSON) on the event stream too.
        async with cancel_on_disconnect(request, completion):
            out = await _collect(completion)
        return Response(out, media_type=MediaType.JSON)


def _submit(models: Registry, data: CompletionIn, deadline: float) -> Completion:
    """Off the event loop, in one hop: grammar building (refused before any model is
    loaded), model loading, tokenisation."""
    request = _request(data, deadline)
    return models.get(data.model).submit(request)


def _request(data: CompletionIn, deadline: float) -> CompletionRequest:
    if data.grammar is not None and data.json_schema is not None:
        raise InvalidRequest("give either grammar or json_schema, not both")
    grammar = None if data.grammar is None else checked_grammar(data.grammar)
    if data.json_schema is not None:
        grammar = grammar_for_schema(data.json_schema)
    return CompletionRequest(
        prompt=data.prompt,
        params=SamplingParams(
            max_tokens=data.max_tokens,
            temperature=data.temperature,
            top_k=data.top_k,
            top_p=data.top_p,
            min_p=data.min_p,
            repeat_penalty=data.repeat_penalty,
            frequency_penalty=data.frequency_penalty,
            presence_penalty=data.presence_penalty,
            seed=data.seed,
            stop=tuple(data.stop),
        ),
        grammar=grammar,
        deadline=deadline,
    )


async def _collect(completion: Completion) -> CompletionOut:
    parts: list[str] = []
    async for event in completion:
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif event.reason == "error":
            raise from_engine(InvalidRequest(event.error or "generation failed"))
        else:
            return CompletionOut(
                event.model, "".join(parts), event.reason, UsageOut.of(event.usage)
            )
    raise AssertionError("a completion always ends with Finished")


async def _events(completion: Completion) -> AsyncIterator[ServerSentEventMessage]:
    async for event in completion:
        if isinstance(event, TextDelta):
            yield ServerSentEventMessage(data=_json({"text": event.text}), event="token")
        elif event.reason == "error":
            body = {"status": event.status, "detail": event.error or "generation failed"}
            yield ServerSentEventMessage(data=_json(body), event="error")
        else:
            done = {"model": event.model, "finish_reason": event.reason}
            body = {**done, "usage": UsageOut.of(event.usage)}
            yield ServerSentEventMessage(data=_json(body), event="done")


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()
