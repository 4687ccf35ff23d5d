"""Chat messages -> prompt text for a completion backend.

A model whose GGUF carries a chat template gets that template (Jinja2, as llama.cpp and
Transformers render it), rendered within bounds of time and memory
(:mod:`llm.template_sandbox`); any failure to render is a :class:`ChatTemplateFailed`,
a 400. A base model without one, such as the bundled Gemma 3 270M, or one whose template
is refused (too long, not valid Jinja2), gets a plain ``User:`` / ``Assistant:``
transcript that ends where the assistant speaks next, with stop strings at the start of
the next turn.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from llm.inert import Neutralizer
from llm.params import InvalidRequest

if TYPE_CHECKING:
    from llm.template_sandbox import BoundedChatTemplate

log = logging.getLogger(__name__)

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


class ChatTemplateFailed(InvalidRequest):
    """The model's chat template could not lay out these messages: it raised an error
    (``raise_exception``, an undefined value) or went past a rendering bound (time, size,
    nesting; see :mod:`llm.template_sandbox`). An :class:`InvalidRequest`, so a 400."""


_LIMIT = "the model's chat template exceeded a rendering limit"


class TemplateFormat:
    """The model's own Jinja2 chat template, with a generation prompt at the end.

    Rendered in :class:`llm.template_sandbox.BoundedEnvironment`: exactly as llama.cpp's
    Python bindings render it, but bounded in time and memory. Every failure to render
    raises :class:`ChatTemplateFailed`."""

    def __init__(self, template: ChatTemplate, inert: Neutralizer | None = None):
        self.template = template
        self.inert = inert or Neutralizer()

    def render(self, messages: Sequence[ChatMessage]) -> ChatPrompt:
        plain = [{"role": m.role, "content": self.inert(m.content)} for m in messages]
        text = render_chat_template(self.template, plain)
        # The engine's tokenizer adds BOS itself; a second one from the template would
        # change the model's output (llama-cpp-python tokenizes such prompts without BOS).
        bos = self.template.bos_token
        if bos and text.startswith(bos):
            text = text[len(bos) :]
        eos = self.template.eos_token
        return ChatPrompt(text, (eos,) if eos else ())


def render_chat_template(template: ChatTemplate, messages: Sequence[Mapping[str, str]]) -> str:
    """``messages`` (role and content; content already neutralised) laid out by the
    model's template, with a generation prompt at the end, BOS included. Raises
    :class:`ChatTemplateFailed` for every failure."""
    from llm.template_sandbox import TemplateLimitExceeded

    compiled = _compiled(template)
    if isinstance(compiled, str):
        raise ChatTemplateFailed(f"the model's chat template is unusable: {compiled}")
    try:
        return compiled.render(messages)
    except TemplateLimitExceeded as exc:
        raise ChatTemplateFailed(f"{_LIMIT}: {exc}") from exc
    except RecursionError as exc:
        raise ChatTemplateFailed(f"{_LIMIT}: it recursed too deeply") from exc
    except MemoryError as exc:
        raise ChatTemplateFailed(f"{_LIMIT}: it ran out of memory") from exc
    except Exception as exc:
        # Templates reject what they cannot lay out (raise_exception), e.g. roles
        # that do not alternate: that is the request's fault, not the server's.
        detail = str(exc) or type(exc).__name__
        if len(detail) > 500:
            detail = detail[:500] + "..."
        raise ChatTemplateFailed(
            f"the model's chat template refused the messages: {detail}"
        ) from exc


@functools.lru_cache(maxsize=8)
def _compiled(template: ChatTemplate) -> BoundedChatTemplate | str:
    """The compiled template (thread-safe to render), or why it was refused: longer than
    ``MAX_TEMPLATE_CHARS`` or not valid Jinja2. Compiling takes milliseconds."""
    from llm.template_sandbox import BoundedChatTemplate, TemplateRejected

    try:
        return BoundedChatTemplate(
            template.template, bos_token=template.bos_token, eos_token=template.eos_token
        )
    except TemplateRejected as exc:
        log.warning(
            "a model's chat template was refused (%s); its chat requests get the plain "
            "User:/Assistant: transcript instead",
            exc,
        )
        return str(exc)


def checked_chat_template(
    template: str | None, *, bos_token: str, eos_token: str
) -> ChatTemplate | None:
    """For model load: the model's ``tokenizer.chat_template``, or None (with a warning
    logged) when it has none or it is refused, so that the model is served with the
    transcript format rather than not at all."""
    if not template:
        return None
    chat_template = ChatTemplate(template, bos_token, eos_token)
    return None if isinstance(_compiled(chat_template), str) else chat_template


def chat_format_for(backend: object) -> ChatFormat:
    """The chat format of a backend: its ``chat_template`` when it has a usable one, else
    a transcript. Message text is neutralised with the backend's own control tokens."""
    prompt_format = getattr(backend, "prompt_format", None)
    inert = getattr(prompt_format, "inert", None)
    inert = inert if isinstance(inert, Neutralizer) else None
    template = getattr(backend, "chat_template", None)
    if isinstance(template, ChatTemplate) and not isinstance(_compiled(template), str):
        return TemplateFormat(template, inert)
    return TranscriptFormat(inert)  # also when the template is refused (logged once)
