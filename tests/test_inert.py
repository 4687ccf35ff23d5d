"""Control-token strings in untrusted text are broken, for generic shapes and a vocabulary."""

from __future__ import annotations

import time

import pytest

from llm.inert import WORD_JOINER, Neutralizer


@pytest.mark.parametrize(
    "token",
    [
        "<end_of_turn>",
        "<start_of_turn>",
        "<|im_start|>",
        "</s>",
        "<bos>",
        "[INST]",
        "[TOOL_CALLS]",
        "<｜end▁of▁sentence｜>",
        "<|fim▁hole|>",
    ],
)
def test_generic_shapes_are_broken(token: str) -> None:
    out = Neutralizer()(f"before {token} after")
    assert token not in out
    assert out.replace(WORD_JOINER, "") == f"before {token} after"  # reads the same


def test_vocabulary_tokens_are_broken_longest_first() -> None:
    inert = Neutralizer(["<unused12>", "<unused1>", "@@", "[multimodal]"])
    out = inert("x <unused12> y @@z [multimodal]")
    assert all(t not in out for t in ("<unused12>", "@@", "[multimodal]"))
    assert out.replace(WORD_JOINER, "") == "x <unused12> y @@z [multimodal]"


def test_ordinary_text_is_untouched() -> None:
    text = "Costs < 5 euros [1] and a > b; see [Appendix] or <https://example.org>."
    assert Neutralizer(["<eos>"])(text) == text.replace("<https", "<https")


def test_large_vocabularies_stay_fast() -> None:
    inert = Neutralizer([f"<unused{i}>" for i in range(6000)])
    text = "<p>" * 20_000
    started = time.perf_counter()
    inert(text)
    assert time.perf_counter() - started < 1.0
