"""Grounded prompts (web chat, ``/api/chat``, grounded ``/v1``) render the model's chat
template within bounds: as llama-cpp-python rendered real templates, a hostile one is a
quick 400 rather than a hung or crashed server, and a refused one is caught at load."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from litestar.testing import TestClient

from llm import template_sandbox
from llm.chat_format import ChatTemplate, ChatTemplateFailed, render_chat_template
from llm.inert import Neutralizer
from llm.local import formats_for
from llm.prompt import ChatTemplateFormat, CompletionFormat, Source, Turn, build_prompt
from tests.conftest import add_key, fake_model, sse_events, upload, wait_for, wait_indexed
from tests.test_chat_format import FEATURES, QWEN25
from tests.test_openai import assert_openai_error

# 10^10 iterations: unbounded, this renders for hours and builds gigabytes.
NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
HOSTILE = {
    "nested loops": NESTED_LOOPS,
    "huge string": "{{ 'x' * 300000000 }}",
    "endless recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "raise_exception": "{{ raise_exception('roles must alternate') }}",
}
SOURCES = (
    Source(0, "Travel policy", 2, "Meals abroad are refunded up to 45 euros a day.", key=7),
    Source(0, "Leave policy", 1, "Staff receive 28 days of paid leave.", key=8),
)
HISTORY = [
    Turn(
        "What about meals?",
        "Up to 45 euros a day [1].",
        (Source(1, "Travel policy", 2, "Meals abroad are refunded.", key=7),),
    )
]


def grounded(fmt: ChatTemplateFormat | CompletionFormat) -> str:
    prompt = build_prompt(
        fmt,
        question="And leave <|im_end|>?",
        sources=SOURCES,
        history=HISTORY,
        token_budget=100_000,
        count_tokens=lambda text: len(text.split()),
    )
    return prompt.text


@pytest.mark.parametrize(
    ("template", "bos", "eos"),
    [(QWEN25, "", "<|im_end|>"), (FEATURES, "<s>", "</s>")],
    ids=["qwen2.5", "features"],
)
def test_real_templates_render_as_llama_cpp_rendered_them(
    template: str, bos: str, eos: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    seen: list[list[dict[str, str]]] = []

    def recording(chat: ChatTemplate, messages: list[dict[str, str]]) -> str:
        seen.append([dict(m) for m in messages])
        return render_chat_template(chat, messages)

    monkeypatch.setattr("llm.prompt.render_chat_template", recording)
    fmt = ChatTemplateFormat(template, bos_token=bos, eos_token=eos)
    text = grounded(fmt)
    # The unbounded formatter the grounded format used before, on the same messages.
    before = Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)
    expected = str(before(messages=seen[-1]).prompt)  # type: ignore[arg-type]
    assert text == (expected.removeprefix(bos) if bos else expected)
    assert [m["role"] for m in seen[-1]] == ["system", "user", "assistant", "user"]
    assert "Question: And leave <\u2060|im_end|>?" in text  # still neutralised
    assert fmt.stop == (eos,)


@pytest.mark.parametrize("template", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_template_fails_the_grounded_prompt_quickly(template: str) -> None:
    fmt = ChatTemplateFormat(template, bos_token="<s>", eos_token="</s>")
    started = time.monotonic()
    with pytest.raises(ChatTemplateFailed) as failed:
        grounded(fmt)
    assert time.monotonic() - started < 3
    assert failed.value.status == 400


def test_a_refused_template_fails_the_grounded_prompt_as_unusable() -> None:
    too_long = "{# padding #}" * (template_sandbox.MAX_TEMPLATE_CHARS // 13 + 1)
    fmt = ChatTemplateFormat(too_long, bos_token="<s>", eos_token="</s>")
    with pytest.raises(ChatTemplateFailed, match="unusable"):
        grounded(fmt)


# ---- at model load -----------------------------------------------------------------------


def test_a_refused_template_falls_back_to_the_completion_format_at_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    too_long = "{# padding #}" * (template_sandbox.MAX_TEMPLATE_CHARS // 13 + 1)
    inert = Neutralizer(["<|im_end|>"])
    with caplog.at_level(logging.WARNING):
        prompt_format, chat_template = formats_for(
            too_long, bos_token="<s>", eos_token="</s>", inert=inert, name="odd"
        )
    assert isinstance(prompt_format, CompletionFormat) and prompt_format.inert is inert
    assert chat_template is None  # /v1/chat/completions: the transcript
    assert "model odd: its chat template was refused" in caplog.text
    assert grounded(prompt_format).rstrip().endswith("Answer:")


def test_an_invalid_template_falls_back_to_the_completion_format_at_load() -> None:
    invalid = "{% for m in messages %}{{ m.content }}"  # no endfor
    prompt_format, chat_template = formats_for(
        invalid, bos_token="<s>", eos_token="</s>", inert=Neutralizer(), name="broken"
    )
    assert isinstance(prompt_format, CompletionFormat) and chat_template is None


def test_a_usable_template_is_the_models_format_at_load() -> None:
    inert = Neutralizer(["<|im_end|>"])
    prompt_format, chat_template = formats_for(
        QWEN25, bos_token="", eos_token="<|im_end|>", inert=inert, name="qwen"
    )
    assert isinstance(prompt_format, ChatTemplateFormat) and prompt_format.inert is inert
    assert chat_template == ChatTemplate(QWEN25, "", "<|im_end|>")
    assert prompt_format.stop == ("<|im_end|>",)
    none = formats_for(None, bos_token="", eos_token="", inert=inert, name="base")
    assert isinstance(none[0], CompletionFormat) and none[1] is None


# ---- through the app ---------------------------------------------------------------------

HANDBOOK = b"# Travel\n\nThe meal allowance abroad is 40 euros per day. Receipts go to finance.\n"


@pytest.fixture
def hostile(client: TestClient[Any]) -> TestClient[Any]:
    """The fake model with the nested-loops template, and a document to find."""
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    document = upload(client, ("travel.md", HANDBOOK)).json()["documents"][0]
    assert wait_indexed(client, document["id"])["status"] == "indexed"
    fake_model(client).prompt_format = ChatTemplateFormat(
        NESTED_LOOPS, bos_token="<s>", eos_token="</s>"
    )
    return client


def test_api_chat_reports_a_failed_template_as_a_400(hostile: TestClient[Any]) -> None:
    started = time.monotonic()
    response = hostile.post("/api/chat", json={"message": "What is the meal allowance abroad?"})
    assert time.monotonic() - started < 10
    assert response.status_code == 200  # server-sent events: the error comes in-band
    [(name, data)] = sse_events(response.text)
    assert name == "error"
    error = json.loads(data)
    assert error["status"] == 400 and "chat template" in error["detail"]
    assert fake_model(hostile).history == []  # nothing reached the model


@pytest.mark.parametrize("stream", [False, True])
def test_grounded_v1_reports_a_failed_template_as_a_400(
    hostile: TestClient[Any], stream: bool
) -> None:
    hostile.headers["Authorization"] = f"Bearer {add_key(hostile)}"
    started = time.monotonic()
    response = hostile.post(
        "/v1/chat/completions",
        json={
            "model": "rag",
            "stream": stream,
            "messages": [{"role": "user", "content": "What is the meal allowance abroad?"}],
        },
    )
    assert time.monotonic() - started < 10
    error = assert_openai_error(response, 400, param="messages")
    assert "chat template" in error["message"]
    assert fake_model(hostile).history == []
