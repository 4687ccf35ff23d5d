"""Checks and conversions shared by the ``/v1`` generation routes."""

from __future__ import annotations

from typing import Any

from app.openai.errors import OpenAIError
from app.openai.schemas import MAX_PROMPT_CHARS, MessageIn, Sampling
from llm.chat_format import ChatMessage


def refuse_unsupported(data: Sampling, **extras: Any) -> None:
    """A clear 400 for what would change the answer but is not supported, rather than
    silently answering something else."""
    if data.n not in (None, 1):
        raise OpenAIError(
            f"n={data.n} is not supported: Ragdesk returns exactly one choice (n=1); "
            "send separate requests for more",
            param="n",
            code="unsupported_value",
        )
    if data.logprobs:
        raise OpenAIError("logprobs are not supported", param="logprobs", code="unsupported_value")
    for name, value in extras.items():
        if value:
            raise OpenAIError(f"{name} is not supported", param=name, code="unsupported_value")


def chat_messages(messages: list[MessageIn]) -> list[ChatMessage]:
    """OpenAI messages as plain text turns; ``developer`` is the system role."""
    converted = []
    total = 0
    for index, message in enumerate(messages):
        text = _content_text(message, index)
        total += len(text)
        if total > MAX_PROMPT_CHARS:
            raise OpenAIError(
                f"the messages are longer than {MAX_PROMPT_CHARS} characters",
                param="messages",
                code="context_length_exceeded",
            )
        role = "system" if message.role == "developer" else message.role
        converted.append(ChatMessage(role, text))
    return converted


def _content_text(message: MessageIn, index: int) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    texts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise OpenAIError(
                f"only text content parts are supported, not {part.type!r}",
                param=f"messages[{index}].content",
                code="unsupported_value",
            )
        texts.append(part.text)
    return "\n".join(texts)


def prompt_text(prompt: str | list[Any]) -> str:
    """``/v1/completions`` takes one string (or a list holding one string)."""
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise OpenAIError(
                "prompt must be a string or a list of exactly one string; batches and token "
                "arrays are not supported",
                param="prompt",
                code="unsupported_value",
            )
        prompt = prompt[0]
    if len(prompt) > MAX_PROMPT_CHARS:
        raise OpenAIError(
            f"the prompt is longer than {MAX_PROMPT_CHARS} characters",
            param="prompt",
            code="context_length_exceeded",
        )
    return prompt
