"""JSON schema -> GBNF grammar, so structured output is enforced by the sampler in C."""

from __future__ import annotations

import json
from typing import Any

from llm.params import InvalidRequest

MAX_SCHEMA_CHARS = 64_000


def grammar_for_schema(schema: dict[str, Any] | None) -> str:
    """A grammar for values matching ``schema``; None or ``{}`` means any JSON object."""
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf  # heavy: on use

    if not schema:
        return str(JSON_GBNF)
    text = json.dumps(schema)
    if len(text) > MAX_SCHEMA_CHARS:
        raise InvalidRequest(f"the JSON schema is longer than {MAX_SCHEMA_CHARS} characters")
    try:
        return str(json_schema_to_gbnf(text))
    except Exception as exc:  # the converter raises bare Exceptions and KeyErrors
        raise InvalidRequest(f"unsupported JSON schema: {exc}") from exc
