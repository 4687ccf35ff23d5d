"""Grounded chat follow-ups: how much of a follow-up turn's prompt the KV cache covers.

    python -m bench.chat [--documents N] [--pairs N]

Each pair is a question and a follow-up on the same topic, asked through the real
``ChatService`` (retrieval over the stdlib-docs corpus, SQLite conversations, the bundled
model on the engine, greedy). The follow-up's time to first token (warm: the first turn
is in the KV cache) is compared with the same prompt text sent to a freshly loaded
engine (cold: nothing cached, not even the instructions). Both are measured by the
engine from submit to first token, so retrieval time is left out of both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.chat.conversations import Conversations
from app.chat.service import ChatConfig, ChatService
from app.migrations import migrate_all
from bench.query import indexed_corpus
from llm.channel import Completion
from llm.local import LocalModel, LocalModelConfig
from llm.models import small_model
from llm.params import CompletionRequest, FinishReason, Usage
from llm.registry import Registry
from retrieval.embedder import Embedder
from retrieval.index import FaissIndex
from retrieval.search import Retriever
from retrieval.store import DocumentStore

PAIRS = [
    ("How do I parse command line arguments?", "How do I add a help message to an option?"),
    ("How can I encode binary data as base64 text?", "How do I decode it back to bytes?"),
    ("How do I compress data with bzip2?", "How do I decompress a bzip2 file?"),
    ("How can I read a CSV file?", "How do I write rows to a CSV file?"),
    ("How do I copy a file?", "How do I copy a whole directory tree?"),
    ("How do I compare two sequences and show differences?", "How do I get a unified diff?"),
]
MAX_TOKENS = 48
BAR = 0.2


@dataclass
class Recorder:
    """An engine observer keeping each request's time to first token and usage."""

    ttfts: list[float] = field(default_factory=list)
    usages: list[Usage] = field(default_factory=list)

    def first_token(self, model: str, seconds: float) -> None:
        self.ttfts.append(seconds)

    def token_gap(self, model: str, seconds: float) -> None:
        pass

    def finished(self, model: str, usage: Usage, reason: FinishReason) -> None:
        self.usages.append(usage)

    def rejected(self, model: str, reason: str) -> None:
        pass


class RecordingModel(LocalModel):
    """The real local model, keeping every request it was sent."""

    requests: list[CompletionRequest]

    def submit(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        return super().submit(request)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=60)
    parser.add_argument("--pairs", type=int, default=len(PAIRS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        embedder, store, index = indexed_corpus(root, args.documents)
        migrate_all(store.db)  # the conversations' tables beside the corpus's
        config = LocalModelConfig(name="gemma", path=small_model(root / "models"))
        warm = Recorder()
        model = RecordingModel(config, warm)
        model.requests = []
        try:
            rows = ask_pairs(model, warm, config, embedder, store, index, args.pairs)
        finally:
            model.close()  # its engine thread would keep the process from exiting
    report(rows)


def ask_pairs(
    model: RecordingModel,
    warm: Recorder,
    config: LocalModelConfig,
    embedder: Embedder,
    store: DocumentStore,
    index: FaissIndex,
    pairs: int,
) -> list[tuple[Usage, float, float]]:
    """Each pair asked in a conversation of its own: the follow-up's usage, its warm time
    to first token, and the cold one of the same prompt."""
    chat = ChatService(
        Conversations(store.db),
        Retriever(embedder, index, store),
        Registry.single(model, "default"),
        ChatConfig(
            model="default",
            top_k=4,
            min_score=0.0,
            max_answer_tokens=MAX_TOKENS,
            temperature=0.0,
        ),
    )
    rows = []
    for first, follow_up in PAIRS[:pairs]:
        conversation = asyncio.run(ask(chat, first, None))
        asyncio.run(ask(chat, follow_up, conversation))
        request, usage, ttft = model.requests[-1], warm.usages[-1], warm.ttfts[-1]
        rows.append((usage, ttft, cold_ttft(config, request)))
    return rows


async def ask(chat: ChatService, question: str, conversation: int | None) -> int:
    _, message = chat.ask(question, conversation)
    async for _ in chat.answer(message):
        pass
    return message.conversation_id


def cold_ttft(config: LocalModelConfig, request: CompletionRequest) -> float:
    recorder = Recorder()
    fresh = LocalModel(config, recorder)
    try:
        for _ in fresh.submit(request):
            pass
    finally:
        fresh.close()
    return recorder.ttfts[0]


def report(rows: list[tuple[Usage, float, float]]) -> None:
    print("| follow-up | prompt tokens | cached | warm TTFT | cold TTFT | warm / cold |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, (usage, warm, cold) in enumerate(rows, 1):
        print(
            f"| {i} | {usage.prompt_tokens} | {usage.cached_tokens} | {warm:.3f} s "
            f"| {cold:.3f} s | {warm / cold:.2f} |"
        )
    ratio = statistics.median(warm / cold for _, warm, cold in rows)
    cached = statistics.median(u.cached_tokens / u.prompt_tokens for u, _, _ in rows)
    verdict = "✓" if ratio <= BAR else "✗"
    print(f"\nmedian warm / cold: {ratio:.2f} (bar ≤ {BAR}) {verdict}; cached share {cached:.0%}")


if __name__ == "__main__":
    main()
