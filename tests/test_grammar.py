"""Grammars are bounded by what they expand to, and refused before any work (N1)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import TestClient

from llm.engine.grammar import (
    checked_grammar,
    gbnf_expansion,
    grammar_for_schema,
    schema_expansion,
)
from llm.params import InvalidRequest
from tests.conftest import fake_model, wait_for

HUGE_SCHEMAS = [
    {"type": "array", "items": {"type": "integer"}, "minItems": 100_000_000},
    {"type": "array", "items": {"type": "integer"}, "maxItems": 100_000_000},
    {"type": "string", "minLength": 100_000_000},
    {"type": "string", "maxLength": 1e300},
    {"type": "string", "pattern": "^a{100000000}$"},
    {"type": "string", "pattern": "^a{" + "9" * 5000 + "}$"},
    {  # a bound hidden under a property that is named like a bound
        "type": "object",
        "properties": {"minItems": {"type": "array", "items": {}, "minItems": 100_000_000}},
    },
    {"type": "string", "maxLength": 5000},  # one repetition nested too deep
    {  # a modest bound repeating a very long rule name
        "type": "object",
        "properties": {
            "p" * 60_000: {"type": "array", "items": {"type": "integer"}, "maxItems": 100}
        },
    },
]


@pytest.fixture
def no_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    """The converter is never reached: a refusal happens before any expansion."""
    from llama_cpp import llama_grammar

    def refuse(*_: object) -> str:
        raise AssertionError("the schema was expanded")

    monkeypatch.setattr(llama_grammar, "json_schema_to_gbnf", refuse)


@pytest.mark.usefixtures("no_conversion")
@pytest.mark.parametrize("schema", HUGE_SCHEMAS, ids=range(len(HUGE_SCHEMAS)))
def test_n1_a_schema_that_expands_into_a_gigabyte_grammar_is_refused_before_expanding(
    schema: dict[str, Any],
) -> None:
    with pytest.raises(InvalidRequest, match=r"expand|too large"):
        grammar_for_schema(schema)


@pytest.mark.parametrize(
    "grammar",
    [
        'root ::= "a"{100000000}',
        "root ::= [a-z]{0,100000000}",
        'root ::= ("ab"){10000000,}',
        'root ::= "' + "x" * 1000 + '"{1000}',
        'root ::= "a"{' + "9" * 5000 + "}",
        'root ::= "x"{400}{400}{400}',  # each quantifier repeats the one before's expansion
        'root ::= ("a" | ""){0,199000}',
    ],
)
def test_n1_a_gbnf_grammar_that_expands_past_the_bound_is_refused(grammar: str) -> None:
    with pytest.raises(InvalidRequest, match="expand"):
        checked_grammar(grammar)


def test_ordinary_grammars_and_schemas_pass() -> None:
    assert checked_grammar('root ::= "yes" | "no"  # {100000000} in a comment')
    assert checked_grammar('root ::= "{" [0-9]{1,3} "}" "[{]"{2}')
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 20},
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{4}$"},
        },
        "required": ["tags", "code"],
    }
    assert "root" in grammar_for_schema(schema)


@pytest.mark.parametrize(
    "bounded",
    [
        {"type": "array", "items": {"type": "integer"}, "minItems": 300, "maxItems": 900},
        {"type": "string", "minLength": 50, "maxLength": 2000},
        {"type": "string", "pattern": "^(ab|c){20,400}x{500}$"},
        {
            "type": "object",
            "properties": {
                "a" * 300: {"type": "array", "items": {"type": "integer"}, "maxItems": 200}
            },
        },
        {
            "$defs": {"item": {"type": "array", "items": {"type": "integer"}, "minItems": 100}},
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/item"}, "y": {"$ref": "#/$defs/item"}},
        },
    ],
)
def test_the_estimate_is_at_least_what_the_converter_writes(bounded: dict[str, Any]) -> None:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    unbounded = json.loads(
        json.dumps(bounded)
        .replace('"minItems": 100', '"minItems": 0')
        .replace('"minItems": 300', '"minItems": 0')
    )
    written = len(json_schema_to_gbnf(json.dumps(bounded)))
    assert written <= schema_expansion(bounded) + len(json_schema_to_gbnf(json.dumps({})))
    assert schema_expansion(unbounded) <= schema_expansion(bounded)


def test_the_estimate_of_a_gbnf_grows_with_its_repetitions() -> None:
    assert gbnf_expansion('root ::= "abc"{10}') >= 30
    assert gbnf_expansion("root ::= [a]{5,10}") >= 10
    assert gbnf_expansion('root ::= "a{99999}"') == len('root ::= "a{99999}"')  # a literal


def _ready(client: TestClient[Any]) -> None:
    wait_for(lambda: client.get("/health/ready").status_code == 200)


@pytest.mark.usefixtures("no_conversion")
def test_n1_every_door_answers_400_and_loads_no_model(
    client: TestClient[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _ready(client)
    backend = fake_model(client)
    registry = client.app.state.services.require_models()
    loaded: list[str] = []
    real_get = registry.get
    monkeypatch.setattr(registry, "get", lambda name: loaded.append(name) or real_get(name))
    schema = HUGE_SCHEMAS[0]
    native = client.post("/api/completions", json={"prompt": "x", "json_schema": schema})
    assert native.status_code == 400 and "expand" in native.json()["error"]["detail"]
    gbnf = client.post("/api/completions", json={"prompt": "x", "grammar": 'root ::= "a"{9999999}'})
    assert gbnf.status_code == 400 and "expand" in gbnf.json()["error"]["detail"]
    openai = client.post(
        "/v1/chat/completions",
        json={
            "model": "default",
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": schema},
            },
        },
    )
    assert openai.status_code == 400, openai.text
    assert openai.json()["error"]["param"] == "response_format.json_schema.schema"
    assert loaded == [] and backend.history == []
