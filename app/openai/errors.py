"""Errors of the ``/v1`` API in OpenAI's shape: ``{"error": {message, type, param, code}}``.

The status decides which exception the OpenAI SDKs raise (400 BadRequestError, 404
NotFoundError, 413/422 APIStatusError subclasses, 429 RateLimitError, 5xx
InternalServerError), so each refusal keeps the status the rest of Ragdesk gives it;
malformed or missing fields are 400 ``invalid_request_error``, as OpenAI answers them.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException

from app.errors import AppError, as_disk_full
from llm.params import ContextOverflow, EngineError, Overloaded, UnknownModel

log = logging.getLogger(__name__)


class OpenAIError(Exception):
    """A refusal with OpenAI's ``param`` (the offending field) and ``code``."""

    def __init__(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.message, self.status, self.param, self.code = message, status, param, code


def error_body(status: int, message: str, param: str | None, code: str | None) -> dict[str, Any]:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


# The request field that holds the prompt, by endpoint (for context-length errors).
_PROMPT_PARAMS = {"/v1/completions": "prompt", "/v1/embeddings": "input"}


def describe(
    exc: Exception, path: str = "/v1/chat/completions"
) -> tuple[int, str, str | None, str | None, dict[str, str]]:
    """(status, message, param, code, headers) of any exception a /v1 route may raise."""
    if isinstance(exc, OpenAIError):
        return exc.status, exc.message, exc.param, exc.code, {}
    if isinstance(exc, ContextOverflow):
        param = _PROMPT_PARAMS.get(path.rstrip("/"), "messages")
        return 400, exc.detail, param, "context_length_exceeded", {}
    if isinstance(exc, UnknownModel):
        return 404, exc.detail, "model", "model_not_found", {}
    if isinstance(exc, Overloaded):
        return 503, exc.detail, None, "overloaded", {"Retry-After": str(exc.retry_after_s)}
    if isinstance(exc, EngineError):
        return exc.status, exc.detail, None, None, {}
    if isinstance(exc, AppError):
        return exc.status, exc.detail, None, None, exc.headers
    if isinstance(exc, ValidationException):
        return (400, *_validation_message(exc), "invalid_value", {})
    if isinstance(exc, HTTPException):
        code = "request_too_large" if exc.status_code == 413 else None
        return exc.status_code, exc.detail, None, code, dict(exc.headers or {})
    if isinstance(exc, RecursionError):  # msgspec decoding JSON nested ~1000 deep
        log.warning("refused a /v1 request nested too deeply to decode")
        return 400, "the request body is nested too deeply", None, "invalid_json", {}
    log.exception("unhandled error in the /v1 API", exc_info=exc)
    return 500, "something went wrong on our side", None, None, {}


def _validation_message(exc: ValidationException) -> tuple[str, str | None]:
    extra = exc.extra if isinstance(exc.extra, list) else []
    messages, param = [], None
    for item in extra:
        if isinstance(item, dict):
            message = str(item.get("message", "invalid"))
            key = item.get("key")
            if isinstance(key, str) and key != "data":  # "data": the body as a whole
                param = param or key
            messages.append(f"{key}: {message}" if key and key != "data" else message)
        else:
            messages.append(str(item))
    return "; ".join(messages) or exc.detail, param


def openai_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    status, message, param, code, headers = describe(as_disk_full(request, exc), request.url.path)
    return Response(
        error_body(status, message, param, code),
        status_code=status,
        headers=headers,
        media_type=MediaType.JSON,
    )
