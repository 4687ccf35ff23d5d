"""Request and response bodies of the OpenAI-compatible ``/v1`` API (msgspec structs).

Unknown request fields are ignored, as OpenAI-compatible servers do, so SDKs and tools
that send extras keep working; fields that would change the answer but are not
supported (``n`` > 1, tools, logprobs) are refused by the routes with a clear 400.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from app.schemas import CitationOut, UnsupportedOut

MAX_PROMPT_CHARS = 1_000_000
ModelName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
StopText = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Stop = StopText | Annotated[list[StopText], msgspec.Meta(max_length=16)] | None


class Sampling(msgspec.Struct, kw_only=True):
    """OpenAI's sampling fields, plus llama.cpp's ``top_k``, ``min_p`` and
    ``repeat_penalty`` as extensions (pass them with the SDK's ``extra_body``)."""

    model: ModelName = "default"
    max_tokens: MaxTokens | None = None
    # OpenAI's schema lets optional fields be null; None means the default shown.
    temperature: Temperature | None = None  # 1.0
    top_p: TopP | None = None  # 1.0
    seed: Seed | None = None
    frequency_penalty: Penalty | None = None  # 0.0
    presence_penalty: Penalty | None = None  # 0.0
    stop: Stop = None
    n: int | None = None  # 1
    stream: bool | None = None  # False
    stream_options: StreamOptions | None = None
    logprobs: bool | int | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 40
    min_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.05
    repeat_penalty: Annotated[float, msgspec.Meta(gt=0.0, le=10.0)] = 1.0
    user: str | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ContentPart(msgspec.Struct):
    type: str
    text: str | None = None


class MessageIn(msgspec.Struct):
    # "developer" is what newer OpenAI models call the system role.
    role: Literal["system", "developer", "user", "assistant"]
    content: Annotated[str, msgspec.Meta(max_length=MAX_PROMPT_CHARS)] | list[ContentPart] | None
    name: str | None = None


class JsonSchemaSpec(msgspec.Struct):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] = "response"
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class ResponseFormat(msgspec.Struct):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


CollectionName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class RagdeskOptions(msgspec.Struct):
    """Ragdesk's extension (the SDK's ``extra_body={"ragdesk": {...}}``): answer from the
    documents of these collections, with citations."""

    collections: Annotated[list[CollectionName], msgspec.Meta(min_length=1, max_length=100)]


class ChatCompletionIn(Sampling, kw_only=True):
    messages: Annotated[list[MessageIn], msgspec.Meta(min_length=1, max_length=10_000)]
    max_completion_tokens: MaxTokens | None = None
    response_format: ResponseFormat | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    logit_bias: dict[str, float] | None = None
    ragdesk: RagdeskOptions | None = None


class CompletionIn(Sampling, kw_only=True):
    prompt: str | list[Any]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    logit_bias: dict[str, float] | None = None


class EmbeddingIn(msgspec.Struct, kw_only=True):
    input: str | list[Any]
    model: ModelName = "default"
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


# --- responses --------------------------------------------------------------------------------
class PromptTokensDetails(msgspec.Struct):
    cached_tokens: int


class UsageOut(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class MessageOut(msgspec.Struct):
    content: str
    role: str = "assistant"
    refusal: None = None


class GroundedMessageOut(MessageOut, kw_only=True):
    """A grounded answer: ``citations`` are the sources it cites, ``unsupported`` its
    sentences no cited passage supports (offsets into ``content``), ``grounded`` whether
    it cites any source at all."""

    citations: list[CitationOut] = msgspec.field(default_factory=list)
    unsupported: list[UnsupportedOut] = msgspec.field(default_factory=list)
    grounded: bool = False
    query: str | None = None  # what retrieval searched for (follow-ups carry their subject)


class ChatChoice(msgspec.Struct):
    index: int
    message: MessageOut | GroundedMessageOut
    finish_reason: str
    logprobs: None = None


class ChatCompletionOut(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageOut
    object: str = "chat.completion"
    system_fingerprint: None = None


class Delta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChunkChoice(msgspec.Struct):
    index: int
    delta: Delta
    finish_reason: str | None = None
    logprobs: None = None


class ChatChunk(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: UsageOut | None = None
    object: str = "chat.completion.chunk"
    system_fingerprint: None = None


class GroundedChunk(ChatChunk, kw_only=True):
    """The last chunk of a grounded stream carries the citations of the whole answer, its
    sentences no cited passage supports (offsets into the streamed text, all deltas
    joined) and whether it cites any source at all."""

    citations: list[CitationOut] = msgspec.field(default_factory=list)
    unsupported: list[UnsupportedOut] = msgspec.field(default_factory=list)
    grounded: bool = False
    query: str | None = None  # what retrieval searched for (follow-ups carry their subject)


class TextChoice(msgspec.Struct):
    index: int
    text: str
    finish_reason: str | None = None
    logprobs: None = None


class TextCompletionOut(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[TextChoice]
    usage: UsageOut | None = None
    object: str = "text_completion"
    system_fingerprint: None = None


class ModelOut(msgspec.Struct):
    id: str
    created: int
    owned_by: str = "ragdesk"
    object: str = "model"


class ModelList(msgspec.Struct):
    data: list[ModelOut]
    object: str = "list"


class EmbeddingOut(msgspec.Struct):
    index: int
    embedding: list[float] | str
    object: str = "embedding"


class EmbeddingUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct):
    data: list[EmbeddingOut]
    model: str
    usage: EmbeddingUsage
    object: str = "list"
