"""The OpenAI-compatible API: ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``
(and ``/v1/embeddings`` from ``openai_embeddings``), so the official SDKs work unmodified.

Everything that can be refused (unknown model, prompt too long, full queue, bad schema)
is refused before a stream starts: the request is admitted and its first event awaited
before the response begins. ``openai_router`` is the one place to add guards (API keys).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, Router, get, post
from litestar.di import Provide
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage

from app.auth.guards import may_load_any_model
from app.chat.local_models import ChatModels
from app.openai.errors import OpenAIError, error_body, openai_error_handler
from app.openai.generation import FINISH_REASONS, Started, collect, failed, start, usage_out
from app.openai.grounded import grounded_completion, is_grounded, rag_model_names
from app.openai.messages import chat_messages, prompt_text, refuse_unsupported
from app.openai.schemas import (
    ChatChoice,
    ChatChunk,
    ChatCompletionIn,
    ChatCompletionOut,
    ChunkChoice,
    CompletionIn,
    Delta,
    MessageOut,
    ModelList,
    ModelOut,
    Sampling,
    TextChoice,
    TextCompletionOut,
)
from app.state import Services
from app.web.deps import provide_services
from app.web.openai_embeddings import create_embeddings, embedding_model_name
from llm.chat_format import ChatPrompt, chat_format_for
from llm.params import Finished, TextDelta

_STARTED = int(time.time())


def _sse(value: object) -> ServerSentEventMessage:
    return ServerSentEventMessage(data=msgspec.json.encode(value).decode())


def _error_event(event: Finished) -> ServerSentEventMessage:
    """Mid-stream failure: the SDKs raise APIError on a chunk with an ``error`` key."""
    error = failed(event)
    return _sse(error_body(error.status, error.message, None, None))


_DONE = ServerSentEventMessage(data="[DONE]")


async def _respond(
    data: Sampling,
    started: Started,
    request: Request[Any, Any, Any],
    chunks: Callable[[Started, bool], AsyncIterator[ServerSentEventMessage]],
    whole: Callable[[Started, str, Finished], object],
) -> Response[Any]:
    """A started completion as the request asks for it: streamed as ``chunks`` (the last
    one with the usage when ``stream_options.include_usage``), or collected and answered
    at once as ``whole`` makes it of the text and the final event."""
    if data.stream:
        include_usage = data.stream_options is not None and data.stream_options.include_usage
        return ServerSentEvent(chunks(started, include_usage))
    text, done = await collect(started, request)
    return Response(whole(started, text, done), media_type=MediaType.JSON)


# --- routes -------------------------------------------------------------------------------------
def _models(services: Services, request: Request[Any, Any, Any]) -> list[ModelOut]:
    """What the caller may name: every model for an admin; for anyone else, what is
    offered (app.chat.local_models.ChatModels.open_to_everyone)."""
    models = services.require_models()
    names = [*models.names, *sorted(set(models.aliases) - set(models.names))]
    if not may_load_any_model(request):
        allowed = ChatModels(services.db, services.settings).open_to_everyone(models.aliases)
        names = [name for name in names if name in allowed]
    if services.retrieval is not None:
        names.append(embedding_model_name(services))
        names += rag_model_names(services)
    return [ModelOut(name, _STARTED) for name in names]


@get("/models", sync_to_thread=True)
def list_models(services: Services, request: Request[Any, Any, Any]) -> ModelList:
    """Registered models and aliases the caller may use (and the embedding model, once
    loaded), and the grounded ``rag`` / ``rag:<collection>`` for the collections the
    caller may read."""
    return ModelList(_models(services, request))


@get("/models/{model_id:str}", sync_to_thread=True)
def retrieve_model(model_id: str, services: Services, request: Request[Any, Any, Any]) -> ModelOut:
    for model in _models(services, request):
        if model.id == model_id:
            return model
    raise OpenAIError(f"no model named {model_id!r}", status=404, code="model_not_found")


@post("/chat/completions", status_code=200)
async def chat_completions(
    data: ChatCompletionIn, services: Services, request: Request[Any, Any, Any]
) -> Response[Any]:
    refuse_unsupported(data, tools=data.tools, logit_bias=data.logit_bias)
    messages = chat_messages(data.messages)
    if is_grounded(data):
        return await grounded_completion(data, messages, services, request)
    started = await start(
        services,
        data,
        lambda backend: chat_format_for(backend).render(messages),
        max_tokens=data.max_completion_tokens or data.max_tokens,
        response_format=data.response_format,
        prefix="chatcmpl",
        may_load_any=may_load_any_model(request),
    )
    return await _respond(data, started, request, _chat_chunks, _chat_completion)


def _chat_completion(started: Started, text: str, done: Finished) -> ChatCompletionOut:
    choice = ChatChoice(0, MessageOut(text), FINISH_REASONS[done.reason])
    created = int(time.time())
    return ChatCompletionOut(started.id, created, done.model, [choice], usage_out(done.usage))


async def _chat_chunks(
    started: Started, include_usage: bool
) -> AsyncIterator[ServerSentEventMessage]:
    created = int(time.time())

    def chunk(choices: list[ChunkChoice], model: str = started.model) -> ChatChunk:
        return ChatChunk(started.id, created, model, choices)

    yield _sse(chunk([ChunkChoice(0, Delta(role="assistant", content=""))]))
    async for event in started.events():
        if isinstance(event, TextDelta):
            yield _sse(chunk([ChunkChoice(0, Delta(content=event.text))]))
        elif event.reason == "error":
            yield _error_event(event)
            return
        else:
            reason = FINISH_REASONS[event.reason]
            yield _sse(chunk([ChunkChoice(0, Delta(), reason)], event.model))
            if include_usage:
                last = ChatChunk(started.id, created, event.model, [], usage_out(event.usage))
                yield _sse(last)
    yield _DONE


@post("/completions", status_code=200)
async def completions(
    data: CompletionIn, services: Services, request: Request[Any, Any, Any]
) -> Response[Any]:
    refuse_unsupported(data, logit_bias=data.logit_bias)
    if data.echo or data.suffix or (data.best_of or 1) != 1:
        raise OpenAIError("echo, suffix and best_of are not supported", code="unsupported_value")
    prompt = ChatPrompt(prompt_text(data.prompt), ())
    started = await start(
        services,
        data,
        lambda _: prompt,
        max_tokens=data.max_tokens or 16,
        prefix="cmpl",
        may_load_any=may_load_any_model(request),
    )
    return await _respond(data, started, request, _text_chunks, _text_completion)


def _text_completion(started: Started, text: str, done: Finished) -> TextCompletionOut:
    choice = TextChoice(0, text, FINISH_REASONS[done.reason])
    created = int(time.time())
    return TextCompletionOut(started.id, created, done.model, [choice], usage_out(done.usage))


async def _text_chunks(
    started: Started, include_usage: bool
) -> AsyncIterator[ServerSentEventMessage]:
    created = int(time.time())
    async for event in started.events():
        if isinstance(event, TextDelta):
            choice = TextChoice(0, event.text)
            yield _sse(TextCompletionOut(started.id, created, started.model, [choice]))
        elif event.reason == "error":
            yield _error_event(event)
            return
        else:
            choice = TextChoice(0, "", FINISH_REASONS[event.reason])
            yield _sse(TextCompletionOut(started.id, created, event.model, [choice]))
            if include_usage:
                usage = usage_out(event.usage)
                yield _sse(TextCompletionOut(started.id, created, event.model, [], usage))
    yield _DONE


openai_router = Router(
    path="/v1",
    route_handlers=[list_models, retrieve_model, chat_completions, completions, create_embeddings],
    dependencies={"services": Provide(provide_services, sync_to_thread=False)},
    exception_handlers={Exception: openai_error_handler},
)
