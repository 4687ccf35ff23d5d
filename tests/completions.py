"""Reading a backend's ``Completion`` to its end in tests."""

from __future__ import annotations

from llm.channel import Completion
from llm.params import Finished, TextDelta


def collect(completion: Completion) -> tuple[str, Finished]:
    """The streamed text and the ``Finished`` event that ends it."""
    text = ""
    for event in completion:
        if isinstance(event, TextDelta):
            text += event.text
        else:
            return text, event
    raise AssertionError("the stream ended without Finished")
