"""Chat messages -> prompt text for a completion backend.

A model whose GGUF carries a chat template gets that template (Jinja2, as llama.cpp and
Transformers render it). A base model without one, such as the bundled Gemma 3 270M,
gets a plain ``User:`` / ``Assistant:`` transcript that ends where the assistant speaks
next, with stop strings at the start of the next turn.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

from llm.engine.params import InvalidRequest
from llm.inert import Neutralizer

Role = Literal["system", "user", "assistant"]

DEFAULT_SYSTEM = "A conversation between a user and a helpful, concise AI assistant."
_SPEAKERS: dict[Role, str] = {"system": "System", "user": "User", "assistant": "Assistant"}


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str


@dataclass(frozen=True)
class ChatTemplate:
    """A model's own chat template (``tokenizer.chat_template``) and its special tokens."""

    template: str
    bos_token: str
    eos_token: str


@dataclass(frozen=True)
class ChatPrompt:
    """Prompt text, the stop strings that end the assistant's turn, and whether the
    reply's leading whitespace belongs to the format rather than to the answer."""

    text: str
    stop: tuple[str, ...]
    strip_leading_space: bool = False


class ChatFormat(Protocol):
    def render(self, messages: Sequence[ChatMessage]) -> ChatPrompt: ...


class TranscriptFormat:
    """For base models: a system line, then ``User:`` / ``Assistant:`` turns."""

    stop = ("\nUser:", "\nSystem:")

    def __init__(self, inert: Neutralizer | None = None):
        self.inert = inert or Neutralizer()

    def render(self, messages: Sequence[ChatMessage]) -> ChatPrompt:
        system = [m.content.strip() for m in messages if m.role == "system"]
        lines = ["\n\n".join(self.inert(s) for s in system if s) or DEFAULT_SYSTEM, ""]
        for message in messages:
            if message.role != "system":
                lines.append(f"{_SPEAKERS[message.role]}: {self.inert(message.content.strip())}")
        lines.append("Assistant:")
        return ChatPrompt("\n".join(lines), self.stop, strip_leading_space=True)


class TemplateFormat:
    """The model's own Jinja2 chat template, with a generation prompt at the end."""

    def __init__(self, template: ChatTemplate, inert: Neutralizer | None = None):
        self.template = template
        self.inert = inert or Neutralizer()

    def render(self, messages: Sequence[ChatMessage]) -> ChatPrompt:
        from jinja2 import TemplateError

        formatter = _formatter(self.template)
        plain = [{"role": m.role, "content": self.inert(m.content)} for m in messages]
        try:
            result = formatter(messages=cast(Any, plain))
        except (TemplateError, ValueError, TypeError) as exc:
            # Templates reject what they cannot lay out (raise_exception), e.g. roles
            # that do not alternate: that is the request's fault, not the server's.
            raise InvalidRequest(f"the model's chat template refused the messages: {exc}") from exc
        text = str(result.prompt)
        # The engine's tokenizer adds BOS itself; a second one from the template would
        # change the model's output (llama-cpp-python tokenizes such prompts without BOS).
        bos = self.template.bos_token
        if bos and text.startswith(bos):
            text = text[len(bos) :]
        eos = self.template.eos_token
        return ChatPrompt(text, (eos,) if eos else ())


@functools.lru_cache(maxsize=8)
def _formatter(template: ChatTemplate) -> Any:
    """Compiling a template takes milliseconds; rendering a compiled one is thread-safe."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter  # heavy: on use

    return Jinja2ChatFormatter(
        template.template, eos_token=template.eos_token, bos_token=template.bos_token
    )


def chat_format_for(backend: object) -> ChatFormat:
    """The chat format of a backend: its ``chat_template`` when it has one, else a
    transcript. Message text is neutralised with the backend's own control tokens."""
    prompt_format = getattr(backend, "prompt_format", None)
    inert = getattr(prompt_format, "inert", None)
    inert = inert if isinstance(inert, Neutralizer) else None
    template = getattr(backend, "chat_template", None)
    if isinstance(template, ChatTemplate):
        return TemplateFormat(template, inert)
    return TranscriptFormat(inert)
