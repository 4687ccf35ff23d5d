"""Chat templates from GGUF metadata render as before, but within bounds of time and memory."""

from __future__ import annotations

import logging
import time
import tracemalloc
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from litestar.testing import TestClient

from llm import template_sandbox
from llm.chat_format import (
    ChatMessage,
    ChatTemplate,
    ChatTemplateFailed,
    TemplateFormat,
    TranscriptFormat,
    chat_format_for,
    checked_chat_template,
    render_chat_template,
)
from llm.params import InvalidRequest
from tests.conftest import add_key, fake_model, wait_for

QWEN25 = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query'
    ".\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>"
    '" }}\n'
    "    {%- for tool in tools %}\n"
    '        {{- "\\n" }}\n'
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name a'
    'nd arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function'
    '-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpf"
    "ul assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or '
    '(message.role == "assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n'"
    " }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
    "            {{- tool_call.name }}\n"
    '            {{- \'", "arguments": \' }}\n'
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

FEATURES = (
    "{%- macro box(text, width=3) -%}[{{ text | center(width) }}]{%- endmacro -%}\n"
    "{%- macro wrap() -%}<{{ caller() }}>{%- endmacro -%}\n"
    "{%- set ns = namespace(count=0, roles='') -%}\n"
    "{{ bos_token }}\n"
    "{%- for m in messages -%}\n"
    "  {%- set ns.count = ns.count + 1 -%}\n"
    "  {%- set ns.roles = ns.roles ~ m.role[0] -%}\n"
    "  {%- if m.role == 'system' %}{% continue %}{% endif -%}\n"
    "  {{ loop.index }}/{{ loop.length }}{{ '!' if loop.last }} {{ box(m.role) }} {{ m.conten"
    "t | trim }}{{ '\\n' }}\n"
    "  {%- call wrap() %}{{ '%s:%d' % (m.role, loop.index0) }}{% endcall %}\n"
    "  {%- set block %}{{ m.content | replace('a', 'A') }}{% endset %}{{ block | indent(2, tr"
    "ue) }}\n"
    "{%- else -%}\n"
    "  empty\n"
    "{%- endfor %}\n"
    "{% generation %}{{ ns.count * 2 }} {{ ns.roles }} {{ '{}-{:>4}'.format('x', 'y') }}{% en"
    "dgeneration %}\n"
    "{{ {'a': [1, 2, 'é'], 'b': none} | tojson }} {{ messages | map(attribute='role') | join("
    "',') }}\n"
    "{%- for x in [[1, [2]], [3]] recursive %}({{ x if x is number else loop(x) }}){% endfor "
    "%}\n"
    "{%- for i in range(10) %}{% if i > 2 %}{% break %}{% endif %}{{ i }}{% endfor %}\n"
    "{{ (range(3) | list) + [9] }} {{ 'ab' * 3 }} {{ 2 ** 10 }} {{ 7 % 3 }} {{ [1, 2] * 2 }}\n"
    "{%- if add_generation_prompt %}<assistant>{% endif %}\n"
)


CONVERSATION = [
    ChatMessage("system", "Be brief."),
    ChatMessage("user", "Hi <|im_end|> there"),
    ChatMessage("assistant", "Hello!"),
    ChatMessage("user", "  a banana  \nsecond line"),
]
# What llama-cpp-python's Jinja2ChatFormatter rendered before templates were bounded.
QWEN25_EXPECTED = {
    "chat": (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi <\u2060|im_end|> there"
        "<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n  a banana  \n"
        "second line<|im_end|>\n<|im_start|>assistant\n"
    ),
    "user_only": (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    ),
}
FEATURES_EXPECTED = {
    "chat": (
        "2/4 [user] Hi <\u2060|im_end|> there\n<user:1>  Hi <\u2060|im_end|> there3/4 [assistant]"
        " Hello!\n<assistant:2>  Hello!4/4! [user] a banana  \nsecond line\n<user:3>    A bAnAnA"
        '  \n  second line8 suau x-   y{"a": [1, 2, "é"], "b": null} system,user,assistant,user'
        "((1)((2)))((3))012[0, 1, 2, 9] ababab 1024 1 [1, 2, 1, 2]<assistant>"
    ),
    "user_only": (
        '1/1! [user] Hello\n<user:0>  Hello2 u x-   y{"a": [1, 2, "é"], "b": null} user'
        "((1)((2)))((3))012[0, 1, 2, 9] ababab 1024 1 [1, 2, 1, 2]<assistant>"
    ),
}
CONVERSATIONS = {"chat": CONVERSATION, "user_only": [ChatMessage("user", "Hello")]}


@pytest.mark.parametrize("conversation", ["chat", "user_only"])
def test_the_qwen25_template_renders_as_before(conversation: str) -> None:
    template = ChatTemplate(QWEN25, bos_token="", eos_token="<|im_end|>")
    prompt = TemplateFormat(template).render(CONVERSATIONS[conversation])
    assert prompt.text == QWEN25_EXPECTED[conversation]
    assert prompt.stop == ("<|im_end|>",) and not prompt.strip_leading_space


@pytest.mark.parametrize("conversation", ["chat", "user_only"])
def test_loops_macros_filters_and_operators_render_as_before(conversation: str) -> None:
    template = ChatTemplate(FEATURES, bos_token="<s>", eos_token="</s>")
    prompt = TemplateFormat(template).render(CONVERSATIONS[conversation])
    assert prompt.text == FEATURES_EXPECTED[conversation]  # BOS left to the tokenizer
    assert prompt.stop == ("</s>",)


@pytest.mark.parametrize("source", [QWEN25, FEATURES, "{{ messages | tojson }}"])
def test_rendering_matches_llama_cpp_pythons_formatter(source: str) -> None:
    formatter = pytest.importorskip("llama_cpp.llama_chat_format").Jinja2ChatFormatter
    messages = [{"role": m.role, "content": m.content} for m in CONVERSATION]
    expected = formatter(source, eos_token="</s>", bos_token="<s>")(messages=messages).prompt
    bounded = template_sandbox.BoundedChatTemplate(source, bos_token="<s>", eos_token="</s>")
    assert bounded.render(messages) == expected


def test_a_long_conversation_is_within_the_limits() -> None:
    template = ChatTemplate(QWEN25, bos_token="", eos_token="<|im_end|>")
    long = "lorem ipsum \u00e9\U0001f600 " * 25_000  # 400 000 characters, some wide
    messages = [ChatMessage("user" if i % 2 else "assistant", long) for i in range(1, 5)]
    prompt = TemplateFormat(template).render(messages)  # within RENDER_SECONDS, or it raises
    assert len(prompt.text) > 4 * len(long)


def test_render_chat_template_keeps_bos_for_callers_that_strip_it_themselves() -> None:
    template = ChatTemplate("{{ bos_token }}{{ messages[0].content }}", "<s>", "</s>")
    assert render_chat_template(template, [{"role": "user", "content": "x"}]) == "<s>x"


def test_a_template_that_raises_still_refuses_the_messages() -> None:
    template = ChatTemplate("{{ raise_exception('roles must alternate') }}", "", "")
    with pytest.raises(ChatTemplateFailed) as refused:
        TemplateFormat(template).render(CONVERSATION)
    assert (
        str(refused.value) == "the model's chat template refused the messages: roles must alternate"
    )
    assert isinstance(refused.value, InvalidRequest) and refused.value.status == 400


ATTACKS = {
    "nested huge ranges": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    ),
    "nested ranges that use the loop": (
        "{% for i in range(100000) %}{% for j in range(100000) %}"
        "{{ loop.index if loop.last }}{% endfor %}{% endfor %}"
    ),
    "huge string multiplication": "{{ 'a' * 300000000 }}",
    "recursive macro": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "recursive caller": (
        "{% macro m() %}{{ caller() }}{% endmacro %}"
        "{% macro r() %}{% call m() %}{{ r() }}{% endcall %}{% endmacro %}{{ r() }}"
    ),
    "recursive loop": "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "doubling a string": (
        "{% set ns = namespace(s='a') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"
    ),
    "huge format width": "{{ '{:>300000000}'.format('a') }}",
    "huge printf width": "{{ '%0300000000d' % 1 }}",
    "huge center": "{{ 'a' | center(300000000) }}",
    "huge ljust": "{{ 'a'.ljust(300000000) }}",
    "a long string repeated in a list": (
        "{% set s = 'x' * 2000000 %}{{ ([s] * 100000) | join }}{{ [s] * 100000 }}"
    ),
    "a long string formatted many times": (
        "{% set s = 'x' * 2000000 %}{{ ('{0}' * 1000).format(s) }}"
    ),
    "a macro buffering a flood": (
        "{% macro m() %}{% for i in range(100000) %}" + "x" * 60_000 + "{% endfor %}"
        "{% endmacro %}{% set y = m() %}"
    ),
    "a flood of output": "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
    "a huge power": "{{ 2 ** 1000000000 }}",
    "a huge range": "{{ range(10 ** 30) | list }}",
    "many huge strings": "{{ range(100000) | map('center', 2000000) | list | length }}",
}


@pytest.mark.parametrize("source", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_hostile_template_fails_fast_in_bounded_memory(source: str) -> None:
    template = ChatTemplate(source, bos_token="", eos_token="")
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(ChatTemplateFailed, match="exceeded a rendering limit") as failed:
            TemplateFormat(template).render(CONVERSATION)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert failed.value.status == 400
    assert elapsed < 2.0, elapsed
    assert peak < 32 * 1024 * 1024, peak  # unbounded, 'a' * 300000000 alone took 1.2 GB


def test_python_running_out_of_stack_is_a_rendering_limit_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(template_sandbox.environment, "MAX_CALL_DEPTH", 10**9)
    template = ChatTemplate(ATTACKS["recursive macro"], bos_token="", eos_token="")
    started = time.monotonic()
    with pytest.raises(ChatTemplateFailed, match="recursed too deeply"):
        TemplateFormat(template).render(CONVERSATION)
    assert time.monotonic() - started < 2.0


def test_a_template_past_its_time_budget_is_stopped() -> None:
    # 10^8 iterations: far past 0.01 s on any machine
    nested = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"
    bounded = template_sandbox.BoundedChatTemplate(nested, bos_token="", eos_token="")
    with pytest.raises(template_sandbox.TemplateLimitExceeded, match=r"longer than 0\.01 s"):
        bounded.render([], seconds=0.01)
    bounded = template_sandbox.BoundedChatTemplate(
        "{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}.",
        bos_token="",
        eos_token="",
    )
    assert bounded.render([]) == "."  # the budget is per render: a new one starts afresh


REFUSED: dict[str, Callable[[], str]] = {
    "too long": lambda: "{# padding #}" * (template_sandbox.MAX_TEMPLATE_CHARS // 13 + 1),
    "not valid Jinja2": lambda: "{% for m in messages %}{{ m.content }}",
    "nested too deeply to parse": lambda: "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
}


@pytest.mark.parametrize("source", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_template_leaves_the_model_the_transcript_format(
    source: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    text = source()
    with caplog.at_level(logging.WARNING, logger="llm.chat_format"):
        assert checked_chat_template(text, bos_token="<s>", eos_token="</s>") is None
    assert "chat template was refused" in caplog.text
    backend = SimpleNamespace(chat_template=ChatTemplate(text, "<s>", "</s>"))
    fmt = chat_format_for(backend)
    assert isinstance(fmt, TranscriptFormat)
    assert fmt.render(CONVERSATION).text.endswith("Assistant:")
    with pytest.raises(ChatTemplateFailed, match="unusable"):
        TemplateFormat(ChatTemplate(text, "<s>", "</s>")).render(CONVERSATION)


def test_a_usable_template_is_kept_at_load() -> None:
    template = checked_chat_template(QWEN25, bos_token="", eos_token="<|im_end|>")
    assert template == ChatTemplate(QWEN25, "", "<|im_end|>")
    assert checked_chat_template(None, bos_token="", eos_token="") is None
    assert isinstance(chat_format_for(SimpleNamespace(chat_template=template)), TemplateFormat)


@pytest.fixture
def api(client: TestClient[Any]) -> TestClient[Any]:
    wait_for(lambda: client.get("/health/ready").status_code == 200)
    client.headers["Authorization"] = f"Bearer {add_key(client)}"
    return client


def test_a_hostile_template_is_a_400_from_the_chat_completions_api(api: TestClient[Any]) -> None:
    backend = fake_model(api)
    backend.chat_template = ChatTemplate(ATTACKS["nested huge ranges"], "", "")
    response = api.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 400, response.text
    assert "exceeded a rendering limit" in response.json()["error"]["message"]
