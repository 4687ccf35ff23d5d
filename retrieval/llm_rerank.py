"""A pointwise LLM reranker on a local GGUF model (by default the bundled Gemma 3 270M).

Each (question, passage) pair is scored by one forward pass: the model reads a short
instruction in Gemma's turn format and the score is how much more it expects the reply
to start with "yes" than with "no" (a difference of next-token log-probabilities, summed
over the spellings "yes", "Yes", " yes", " Yes"). No text is generated.

The question comes before the passage, so every candidate of one question shares the
prompt up to the passage: that prefix stays in the KV cache and only the passage and the
closing tokens are evaluated per candidate. Question and passage are tokenized without
special tokens, so a document cannot close the turn or open another. Another GGUF can be
given; it gets the same prompt, Gemma's turn markers included.

On the bundled model this hurts retrieval badly (docs/BENCHMARKS.md): it is a 270M base
model. The stage is off by default and exists for larger GGUF judges.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrieval.rerank import ordered
from retrieval.types import Hit

# Gemma's turn format, with four worked examples first: the bundled model is a 270M base
# model, and without examples its yes/no is close to a coin toss (it put "Bananas are
# yellow" above "Paris is the capital of France" for the capital of France). The examples
# are invented office snippets, nothing from the benchmark corpus; they are the same for
# every question, so they stay in the KV cache and cost nothing after the first call.
# The pieces meet at a newline or a turn marker, so each tokenizes alone as it would in
# the whole prompt.
ASK = "<start_of_turn>user\nDoes the passage answer the question? Reply with yes or no.\n\n"
EXAMPLES = (
    (
        "When does the canteen open?",
        "The canteen opens at 11:30 and serves hot meals until 14:00 on weekdays.",
        "yes",
    ),
    (
        "How many days of annual leave do staff get?",
        "If the fire alarm sounds, leave by the nearest stairs and gather in the car park.",
        "no",
    ),
    (
        "Who approves travel expenses?",
        "Travel expenses are approved by the head of department before the trip is booked.",
        "yes",
    ),
    (
        "What is the password policy?",
        "The library lends books for up to three weeks; renewals can be made online.",
        "no",
    ),
)
MIDDLE = "\n\nPassage:\n"
TAIL = "<end_of_turn>\n<start_of_turn>model\n"
HEAD = (
    "".join(f"{ASK}Question:\n{q}{MIDDLE}{p}{TAIL}{a}<end_of_turn>\n" for q, p, a in EXAMPLES)
    + f"{ASK}Question:\n"
)
YES = ("yes", "Yes", " yes", " Yes")
NO = ("no", "No", " no", " No")


class LlmReranker:
    """Thread-safe; the model is loaded on the first ``rerank`` call, not here."""

    def __init__(
        self,
        model_path: Path,
        *,
        n_threads: int | None = None,
        max_passage_tokens: int = 256,
        max_query_tokens: int = 64,
    ):
        if not model_path.is_file():
            raise FileNotFoundError(f"no GGUF model at {model_path}")
        self.model_path = model_path
        self.n_threads = n_threads or _available_cpus()
        self.max_passage_tokens = max_passage_tokens
        self.max_query_tokens = max_query_tokens
        self._lock = threading.Lock()
        self._model: Any = None
        self._yes: list[int] = []
        self._no: list[int] = []

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        return ordered(hits, self.scores(query, [hit.reading for hit in hits]))

    def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        """log P(yes) - log P(no) for each passage, in the order given."""
        if not passages:
            return []
        with self._lock:
            model = self._loaded()
            examples = [model.token_bos(), *self._tokens(HEAD, special=True)]
            question = self._tokens(query)[: self.max_query_tokens]
            question += self._tokens(MIDDLE, special=True)
            tail = self._tokens(TAIL, special=True)
            return [
                self._score(
                    model, [examples, question, self._tokens(p)[: self.max_passage_tokens] + tail]
                )
                for p in passages
            ]

    def _score(self, model: Any, parts: list[list[int]]) -> float:
        """Evaluate the parts not already cached, each as one batch of its own.

        How a prompt is cut into batches moves this small model's yes/no logits by up to
        ~0.25 (other kernel paths, other rounding). Giving every part its own batch, cached
        or not, and keeping the KV cache in f32 makes a passage's score the same whatever
        was scored before it (tested).
        """
        import llama_cpp

        tokens = [t for part in parts for t in part]
        cached = model.longest_token_prefix(model.input_ids[: model.n_tokens].tolist(), tokens)
        start = 0
        for part in parts[:-1]:  # the passage part is always evaluated
            if start + len(part) > cached:
                break
            start += len(part)
        model.n_tokens = start  # Llama.eval drops the KV cells from here on
        end = 0
        for part in parts:
            end += len(part)
            if end > start:
                model.eval(part)
        logits = llama_cpp.llama_get_logits_ith(model.ctx, -1)
        return _logsumexp([logits[i] for i in self._yes]) - _logsumexp(
            [logits[i] for i in self._no]
        )

    def _tokens(self, text: str, *, special: bool = False) -> list[int]:
        return list(self._model.tokenize(text.encode(), add_bos=False, special=special))

    def _loaded(self) -> Any:
        if self._model is None:
            from llama_cpp import GGML_TYPE_F32, Llama  # heavy: imported on use

            # Characters bound the tokens of the fixed pieces from above.
            fixed = 1 + len(HEAD) + len(MIDDLE) + len(TAIL)
            n_ctx = fixed + self.max_query_tokens + self.max_passage_tokens
            self._model = Llama(
                str(self.model_path),
                n_ctx=n_ctx,
                n_batch=n_ctx,
                n_threads=self.n_threads,
                logits_all=False,
                swa_full=True,  # Gemma 3's sliding-window cache keeps no reusable prefix else
                type_k=GGML_TYPE_F32,
                type_v=GGML_TYPE_F32,
                verbose=False,
            )
            self._yes = sorted({t for w in YES for t in self._tokens(w)[:1]})
            self._no = sorted({t for w in NO for t in self._tokens(w)[:1]})
        return self._model


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects taskset and container CPU sets
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
