"""Focus long passages on the sentences that answer the question.

A retrieved passage is a chunk of ~200 embedder tokens; a small model reads every one of
them before its first token (prefill dominates time to first token), and a long passage
buries the one sentence that matters. Focusing keeps, from each passage longer than the
budget, the run of consecutive sentences most similar to the question (the embedder
scores every sentence of every long passage in one batch), so the prompt stays short and
the answer's sentence stays in context. A passage's citation still points at the whole
chunk: only the text the model reads is shortened.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from retrieval.embedder import Embedder
from retrieval.types import Hit

# Sentence ends: . ! ? followed by a space, or a line break (lists, table rows).
_SENTENCE = re.compile(r"[^\n]+?(?:[.!?](?=\s)|$)", re.MULTILINE)
ELLIPSIS = "…"


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def focus(question: str, hits: Sequence[Hit], embedder: Embedder, max_chars: int) -> list[Hit]:
    """``hits`` with each passage over ``max_chars`` cut to its best window of sentences."""
    long = [(i, sentences(hit.text)) for i, hit in enumerate(hits) if len(hit.text) > max_chars]
    long = [(i, parts) for i, parts in long if len(parts) > 1]
    if not long:
        return list(hits)
    flat = [s for _, parts in long for s in parts]
    vectors = np.asarray(embedder.embed_batch([question, *flat]), dtype=np.float32)
    similarity = vectors[1:] @ vectors[0]
    focused = list(hits)
    offset = 0
    for i, parts in long:
        scores = similarity[offset : offset + len(parts)]
        offset += len(parts)
        first, last = best_window(parts, [float(s) for s in scores], max_chars)
        # A table's rows stay one to a line, so they still read as a Markdown table.
        joint = "\n" if hits[i].table else " "
        text = joint.join(parts[first : last + 1])
        text = (ELLIPSIS + joint if first > 0 else "") + text
        text += joint + ELLIPSIS if last < len(parts) - 1 else ""
        focused[i] = replace(hits[i], text=text)
    return focused


def best_window(parts: Sequence[str], scores: Sequence[float], max_chars: int) -> tuple[int, int]:
    """The consecutive sentences (first, last) that fit ``max_chars`` with the best score:
    the best sentence, grown towards whichever neighbour scores higher while it fits."""
    best = max(range(len(parts)), key=lambda n: scores[n])
    first = last = best
    size = len(parts[best])
    while True:
        candidates = []
        if first > 0 and size + 1 + len(parts[first - 1]) <= max_chars:
            candidates.append((scores[first - 1], -1))
        if last < len(parts) - 1 and size + 1 + len(parts[last + 1]) <= max_chars:
            candidates.append((scores[last + 1], 1))
        if not candidates:
            return first, last
        _, side = max(candidates)
        if side < 0:
            first -= 1
            size += 1 + len(parts[first])
        else:
            last += 1
            size += 1 + len(parts[last])
