"""The conversations store: conversations and their messages in the database, and
managing them (rename, pin, scope, delete, answer versions)."""

from __future__ import annotations

import json
import time
from collections.abc import Collection

from app.chat.records import (
    Citation,
    Conversation,
    Message,
    Role,
    TurnContext,
    conversation_fields,
)
from llm.support import Unsupported
from retrieval.db import Database
from retrieval.display import shown

# A message with its place among its question's answers (questions count as 1 of 1).
SELECT_MESSAGES = (
    "SELECT m.*,"
    " (SELECT COUNT(*) FROM messages v WHERE v.reply_to = m.reply_to AND v.id <= m.id)"
    " AS version,"
    " (SELECT COUNT(*) FROM messages v WHERE v.reply_to = m.reply_to) AS versions"
    " FROM messages m"
)


def auto_title(first_question: str) -> str:
    """The title a conversation gets from its first question."""
    return shown(" ".join(first_question.split()))[:80] or "New conversation"


class Conversations:
    def __init__(self, db: Database):
        self.db = db

    def create(self, title: str, owner: int | None = None) -> Conversation:
        """A new conversation, and its owner (a user id) in the same transaction: one
        without an owner is visible to admins only (those from before accounts). Its id
        was never another conversation's: a link to a deleted one never opens a new one."""
        now = time.time()
        title = auto_title(title)
        with self.db.write() as db:
            issued = db.execute(
                "UPDATE issued_ids SET last = MAX(last, (SELECT COALESCE(MAX(id), 0)"
                " FROM conversations)) + 1 WHERE name = 'conversations' RETURNING last"
            ).fetchall()
            conversation_id = int(issued[0][0])
            db.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
                [conversation_id, title, now, now],
            )
            if owner is not None:
                db.execute(
                    "INSERT INTO conversation_owners (conversation_id, user_id) VALUES (?, ?)",
                    [conversation_id, owner],
                )
        return Conversation(conversation_id, title, now, now)

    def get(self, conversation_id: int) -> Conversation | None:
        rows = list(
            self.db.read().query("SELECT * FROM conversations WHERE id = ?", [conversation_id])
        )
        return Conversation.from_row(rows[0]) if rows else None

    def recent(self, limit: int = 50) -> list[Conversation]:
        rows = self.db.read().query(
            "SELECT * FROM conversations ORDER BY updated_at DESC LIMIT ?", [limit]
        )
        return [Conversation.from_row(row) for row in rows]

    def add_question(self, conversation_id: int, content: str) -> Message:
        return self._add(conversation_id, "user", content, (), reply_to=None)

    def add_answer(
        self,
        question: Message,
        content: str,
        citations: tuple[Citation, ...] = (),
        context: TurnContext | None = None,
        unsupported: tuple[Unsupported, ...] = (),
    ) -> Message:
        return self._add(
            question.conversation_id,
            "assistant",
            content,
            citations,
            question.id,
            context,
            unsupported,
        )

    def _add(
        self,
        conversation_id: int,
        role: Role,
        content: str,
        citations: tuple[Citation, ...],
        reply_to: int | None,
        context: TurnContext | None = None,
        unsupported: tuple[Unsupported, ...] = (),
    ) -> Message:
        now = time.time()
        payload = json.dumps([c.__dict__ for c in citations])
        shown = context.to_json() if context else None
        flagged = json.dumps([u.__dict__ for u in unsupported])
        with self.db.write() as db:
            cursor = db.execute(
                "INSERT INTO messages (conversation_id, role, content, citations, created_at,"
                " reply_to, context, unsupported) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [conversation_id, role, content, payload, now, reply_to, shown, flagged],
            )
            db.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?", [now, conversation_id]
            )
            versions = 1
            if reply_to is not None:  # the newest answer to its question
                counted = db.execute("SELECT COUNT(*) FROM messages WHERE reply_to = ?", [reply_to])
                versions = int(counted.fetchone()[0])
        message_id = int(cursor.lastrowid or 0)
        return Message(
            message_id,
            conversation_id,
            role,
            content,
            citations,
            now,
            reply_to,
            context,
            unsupported,
            versions,
            versions,
        )

    def messages(self, conversation_id: int) -> list[Message]:
        """The conversation as shown: its questions and their current answers (earlier
        versions of an answer are left out)."""
        rows = self.db.read().query(
            f"{SELECT_MESSAGES} WHERE m.conversation_id = ? AND m.superseded = 0 ORDER BY m.id",
            [conversation_id],
        )
        return [Message.from_row(row) for row in rows]

    def message(self, message_id: int) -> Message | None:
        """Any message, a superseded version of an answer included."""
        rows = list(self.db.read().query(f"{SELECT_MESSAGES} WHERE m.id = ?", [message_id]))
        return Message.from_row(rows[0]) if rows else None

    def answer_to(self, question: Message) -> Message | None:
        """The current answer to ``question``, if there is one yet."""
        rows = list(
            self.db.read().query(
                f"{SELECT_MESSAGES} WHERE m.reply_to = ? AND m.superseded = 0", [question.id]
            )
        )
        return Message.from_row(rows[0]) if rows else None

    def earlier_answers(self, question: Message) -> list[str]:
        """The texts of every answer ``question`` has had (superseded ones included)."""
        rows = self.db.read().execute(
            "SELECT content FROM messages WHERE reply_to = ? ORDER BY id", [question.id]
        )
        return [str(row[0]) for row in rows]

    def is_current(self, answer: Message) -> bool:
        """Whether ``answer`` is its question's current answer (not a superseded version)."""
        row = (
            self.db.read()
            .execute("SELECT superseded FROM messages WHERE id = ?", [answer.id])
            .fetchone()
        )
        return row is not None and row[0] == 0

    def supersede(self, answer: Message) -> None:
        """Keep ``answer`` as an earlier version: its question has no current answer until
        the next one is stored (regenerate)."""
        with self.db.write() as db:
            db.execute(
                "UPDATE messages SET superseded = 1 WHERE id = ? AND role = 'assistant'",
                [answer.id],
            )

    def choose_version(self, question_id: int, version: int) -> Message | None:
        """Make the ``version``-th answer to a question (1: the first) its current one, the
        one shown and repeated in later turns' prompts; None when there is no such version."""
        if version < 1:
            return None
        with self.db.write() as db:
            row = db.execute(
                "SELECT id FROM messages WHERE reply_to = ? ORDER BY id LIMIT 1 OFFSET ?",
                [question_id, version - 1],
            ).fetchone()
            if row is None:
                return None
            db.execute("UPDATE messages SET superseded = 1 WHERE reply_to = ?", [question_id])
            db.execute("UPDATE messages SET superseded = 0 WHERE id = ?", [row[0]])
        return self.message(int(row[0]))

    def turns_before(self, question: Message) -> list[tuple[Message, Message]]:
        """Earlier (question, answer) pairs of the conversation, oldest first."""
        return [t for t in self.turns(question.conversation_id) if t[0].id < question.id]

    def turns(self, conversation_id: int) -> list[tuple[Message, Message]]:
        """The conversation's answered (question, answer) pairs, oldest first."""
        messages = self.messages(conversation_id)
        answers = {m.reply_to: m for m in messages if m.reply_to is not None}
        return [(m, answers[m.id]) for m in messages if m.role == "user" and m.id in answers]

    # --- managing conversations from the UI (rename, pin, delete, edit, regenerate) ---------
    def listing(
        self, query: str = "", limit: int = 200, only: Collection[int] | None = None
    ) -> list[tuple[Conversation, bool]]:
        """Conversations with their pinned flag, pinned first, then most recent; ``query``
        keeps those whose title contains it (case-insensitive, taken literally); ``only``
        keeps those ids (filtered before the limit)."""
        pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        ids = [] if only is None else sorted(int(i) for i in only)
        if only is not None and not ids:
            return []
        in_ids = f" AND c.id IN ({', '.join('?' * len(ids))})" if ids else ""
        rows = self.db.read().query(
            "SELECT c.*, p.pinned_at IS NOT NULL AS pinned FROM conversations c"  # noqa: S608
            " LEFT JOIN conversation_pins p ON p.conversation_id = c.id"
            f" WHERE c.title LIKE ? ESCAPE '\\'{in_ids}"
            " ORDER BY pinned DESC, c.updated_at DESC LIMIT ?",
            [pattern, *ids, limit],
        )
        return [(Conversation(**conversation_fields(row)), bool(row["pinned"])) for row in rows]

    def is_pinned(self, conversation_id: int) -> bool:
        rows = self.db.read().execute(
            "SELECT 1 FROM conversation_pins WHERE conversation_id = ?", [conversation_id]
        )
        return rows.fetchone() is not None

    def rename(self, conversation_id: int, title: str) -> Conversation | None:
        """Set the title (whitespace collapsed, at most 80 characters); None if no such row."""
        title = shown(" ".join(title.split()))[:80]
        with self.db.write() as db:
            db.execute("UPDATE conversations SET title = ? WHERE id = ?", [title, conversation_id])
        return self.get(conversation_id)

    def retitle(self, conversation_id: int, old_first: str, new_first: str) -> bool:
        """The first question was edited: a title made from it follows the edit, one a
        person gave stays. Whether the title changed."""
        conversation = self.get(conversation_id)
        if conversation is None or conversation.title != auto_title(old_first):
            return False
        self.rename(conversation_id, auto_title(new_first))
        return True

    def set_model(self, conversation_id: int, model: str | None) -> None:
        """Answer the conversation with ``model`` from now on (None: the configured one)."""
        with self.db.write() as db:
            db.execute("UPDATE conversations SET model = ? WHERE id = ?", [model, conversation_id])

    def set_scope(self, conversation_id: int, scope: Collection[int] | None) -> None:
        """Search ``scope`` (collection ids; None: all the asker may read) from now on."""
        stored = None if scope is None else json.dumps(sorted(set(scope)))
        with self.db.write() as db:
            db.execute("UPDATE conversations SET scope = ? WHERE id = ?", [stored, conversation_id])

    def scope_of(self, conversation_id: int) -> frozenset[int] | None:
        """The collections chosen for the conversation (None: all; not yet narrowed to
        what anyone may read)."""
        found = self.get(conversation_id)
        return found.scope if found else None

    def names_of(self, collection_ids: Collection[int]) -> tuple[str, ...]:
        """The names of these collections, sorted (those deleted since are left out)."""
        if not collection_ids:
            return ()
        placeholders = ",".join("?" * len(collection_ids))
        rows = self.db.read().execute(
            f"SELECT name FROM collections WHERE id IN ({placeholders}) ORDER BY name",  # noqa: S608
            list(collection_ids),
        )
        return tuple(str(row[0]) for row in rows)

    def chosen_model(self, conversation_id: int) -> str | None:
        """The model chosen for the conversation while chat still offers it, else None."""
        row = (
            self.db.read()
            .execute(
                "SELECT c.model FROM conversations c"
                " JOIN chat_model_offers o ON o.name = c.model WHERE c.id = ?",
                [conversation_id],
            )
            .fetchone()
        )
        return str(row[0]) if row else None

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        with self.db.write() as db:
            if pinned:
                db.execute(
                    "INSERT OR IGNORE INTO conversation_pins (conversation_id, pinned_at)"
                    " VALUES (?, ?)",
                    [conversation_id, time.time()],
                )
            else:
                db.execute(
                    "DELETE FROM conversation_pins WHERE conversation_id = ?", [conversation_id]
                )

    def delete(self, conversation_id: int) -> bool:
        """Delete the conversation and its messages; False when there was none."""
        with self.db.write() as db:
            db.execute("DELETE FROM messages WHERE conversation_id = ?", [conversation_id])
            db.execute("DELETE FROM conversation_pins WHERE conversation_id = ?", [conversation_id])
            cursor = db.execute("DELETE FROM conversations WHERE id = ?", [conversation_id])
        return cursor.rowcount > 0

    def delete_answer(self, answer: Message) -> None:
        """Forget one answer (to write it again): its question stays, unanswered."""
        with self.db.write() as db:
            db.execute("DELETE FROM messages WHERE id = ? AND role = 'assistant'", [answer.id])

    def truncate_from(self, question: Message) -> None:
        """Delete ``question`` and every later message of its conversation (edit and resend)."""
        with self.db.write() as db:
            db.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                [question.conversation_id, question.id],
            )
