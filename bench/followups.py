"""Follow-up questions: retrieval, and optionally answers, against the same questions asked
with their subject named, in one run.

    python -m bench.followups [--sets handbook factbook] [--answers] [--models ...]

For each set (``bench/data/<set>/followups.jsonl``: two-turn conversations whose second
question names its subject only through the first) the corpus is ingested once with the
real embedder and FAISS index, then:

- recall@5 of each follow-up searched for as asked (retrieval before conversation-aware
  queries), as the conversation's query (``retrieval.followup``), and standalone;
- with ``--answers``, every conversation is asked through the chat pipeline (first turn,
  then the follow-up in the same conversation), and each follow-up again standalone in a
  conversation of its own: correctness of both, as ``ragdesk eval --answers`` scores it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.chat.service import ChatConfig, ChatService
from app.config.models import build_registry
from app.config.retrieval import read_only_retriever
from app.config.settings import Settings
from app.documents.answer_eval import ScratchConversations, ask_conversations
from app.documents.ingest_command import run_ingest
from app.metrics import Metrics
from app.migrations import open_database
from bench.answers import DATA, MODELS_DIR, share
from llm.models import DEFAULT_MODEL, bundled_model
from retrieval.followup_eval import follow_up_recall, load_conversations
from retrieval.store import DocumentStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=["handbook", "factbook"])
    parser.add_argument("--answers", action="store_true", help="also ask the chat model")
    parser.add_argument("--models", nargs="+", default=[DEFAULT_MODEL])
    args = parser.parse_args()
    recall_rows: list[str] = []
    answer_rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ragdesk-followups-") as scratch:
        for name in args.sets:
            data_dir = Path(scratch) / name
            status = run_ingest(
                Settings(data_dir=data_dir),
                [DATA / name / "corpus"],
                collection="default",
                batch_documents=16,
            )
            if status:
                raise SystemExit(f"ingesting {name} failed")
            conversations = load_conversations(DATA / name / "followups.jsonl")
            settings = Settings(data_dir=data_dir)
            db = open_database(settings.db_path)
            store = DocumentStore(db)
            retriever = read_only_retriever(settings, store)
            files = {d.id: d.filename for d in store.list_documents()}
            recall = follow_up_recall(retriever, conversations, 5, files)
            recall_rows.append(
                f"| {name} | {recall.follow_ups} | {recall.as_asked:.2f} | "
                f"**{recall.in_conversation:.2f}** | {recall.standalone:.2f} | "
                f"{_ratio(recall.in_conversation, recall.standalone)} |"
            )
            print(recall_rows[-1], flush=True)
            for model in args.models if args.answers else []:
                settings = Settings(
                    data_dir=data_dir, generator_model=bundled_model(MODELS_DIR, model)
                )
                registry = build_registry(settings, Metrics(lambda: [], lambda: None))
                scratch_db = ScratchConversations()
                try:
                    chat = ChatService(
                        scratch_db.conversations,
                        retriever,
                        registry,
                        ChatConfig.from_settings(settings),
                    )
                    result = asyncio.run(ask_conversations(chat, conversations, progress=True))
                finally:
                    registry.close()
                    scratch_db.close()
                followed, alone = result.in_conversation, result.standalone
                answer_rows.append(
                    f"| {name} | {model} | {followed.factual} | "
                    f"**{share(followed.correctness)}** | {share(alone.correctness)} | "
                    f"{_ratio(followed.correctness, alone.correctness)} | "
                    f"{share(followed.false_abstention)} | {share(alone.false_abstention)} |"
                )
                print(answer_rows[-1], flush=True)
            db.close()
    print("\n| set | follow-ups | recall@5 as asked | in conversation | standalone | ratio |")
    print("| --- " * 6 + "|")
    print("\n".join(recall_rows))
    if answer_rows:
        print(
            "\n| set | model | follow-ups | correct in conversation | correct standalone "
            "| ratio | declined in conversation | declined standalone |"
        )
        print("| --- " * 8 + "|")
        print("\n".join(answer_rows))


def _ratio(part: float | None, whole: float | None) -> str:
    return "–" if part is None or not whole else f"{part / whole:.2f}x"


if __name__ == "__main__":
    main()
