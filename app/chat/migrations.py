"""The tables of conversations: conversations, their messages (questions and answers,
with what each answer was shown), pins and owners; and the models chat may answer with
(added local models, those offered). Applied after retrieval's and auth's (owners are
users); see ``retrieval.migrations``."""

from __future__ import annotations

import sqlite_utils

from retrieval.migrations import Migrations

MIGRATIONS = Migrations("chat")


@MIGRATIONS.add(was="m002_conversations")
def m002_conversations(db: sqlite_utils.Database) -> None:
    db.table("conversations").create(
        {"id": int, "title": str, "created_at": float, "updated_at": float}, pk="id"
    )
    db.execute(
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content TEXT NOT NULL,
            citations TEXT NOT NULL DEFAULT '[]',
            created_at REAL NOT NULL
        )
        """
    )
    db.table("messages").create_index(["conversation_id"])


@MIGRATIONS.add(was="m004_message_replies")
def m004_message_replies(db: sqlite_utils.Database) -> None:
    """An answer names the question it answers, so a late or repeated stream finds its own."""
    db.execute("ALTER TABLE messages ADD COLUMN reply_to INTEGER REFERENCES messages(id)")
    # Earlier answers: each belongs to the nearest unanswered question before it.
    pending: dict[int, int] = {}  # conversation -> its latest unanswered question
    for message_id, conversation_id, role in db.execute(
        "SELECT id, conversation_id, role FROM messages ORDER BY id"
    ).fetchall():
        if role == "user":
            pending[conversation_id] = message_id
        elif (question := pending.pop(conversation_id, None)) is not None:
            db.execute("UPDATE messages SET reply_to = ? WHERE id = ?", [question, message_id])
    db.execute(
        "CREATE UNIQUE INDEX messages_reply_to ON messages(reply_to) WHERE reply_to IS NOT NULL"
    )


@MIGRATIONS.add(was="m005_message_context")
def m005_message_context(db: sqlite_utils.Database) -> None:
    """What the model was shown and said for an answer: the sources listed with that turn
    (JSON) and its exact generated text, so the next turn's prompt repeats them verbatim
    and its KV-cache prefix matches."""
    db.execute("ALTER TABLE messages ADD COLUMN context TEXT")


@MIGRATIONS.add(was="m007_ui_conversation_pins")
def m007_ui_conversation_pins(db: sqlite_utils.Database) -> None:
    """Conversations pinned to the top of the sidebar (a table, so rows read as before)."""
    db.execute(
        """
        CREATE TABLE conversation_pins (
            conversation_id INTEGER PRIMARY KEY
                REFERENCES conversations(id) ON DELETE CASCADE,
            pinned_at REAL NOT NULL
        )
        """
    )


@MIGRATIONS.add(was="m008_accounts")
def m008_conversation_owners(db: sqlite_utils.Database) -> None:
    """Conversations get an owner, a user (their own table, so ``conversations`` rows keep
    their shape); those from before accounts have none and are admins' only. Until owners
    had their own migrations this was part of ``m008_accounts``, with auth's tables."""
    db.execute(
        """CREATE TABLE conversation_owners (
            conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE
        )"""
    )
    db.table("conversation_owners").create_index(["user_id"])


@MIGRATIONS.add()
def m013_answer_eval_runs(db: sqlite_utils.Database) -> None:
    """Answer-quality evaluation runs (``ragdesk eval --answers``), with the model and the
    settings they ran under, so runs can be compared over time."""
    db.table("answer_eval_runs").create(
        {
            "id": int,
            "created_at": float,
            "golden": str,
            "golden_sha256": str,
            "model": str,
            "settings": str,  # JSON: what shaped the answers (retrieval and generation)
            "questions": int,
            "correctness": float,
            "citation_precision": float,
            "unsupported": float,
            "abstention": float,
            "false_abstention": float,
            "uncited": float,
            "empty": int,
            "looped": int,
            "ttft_p50_s": float,
            "ttft_p95_s": float,
            "total_p50_s": float,
            "total_p95_s": float,
            "details": str,  # JSON: each question's answer and scores
        },
        pk="id",
        not_null={"created_at", "golden", "model", "settings", "questions"},
    )


@MIGRATIONS.add()
def m014_message_support(db: sqlite_utils.Database) -> None:
    """The sentences of an answer that no cited passage supports (JSON: start, end, reason),
    so the UI and the API can mark them."""
    db.execute("ALTER TABLE messages ADD COLUMN unsupported TEXT NOT NULL DEFAULT '[]'")


@MIGRATIONS.add()
def m015_chat_model_choice(db: sqlite_utils.Database) -> None:
    """Local models: GGUF files added with ``ragdesk models add`` (kept in the models
    directory); the models the admin offers in chat; each conversation's chosen model
    (NULL: the configured chat model)."""
    db.execute(
        """
        CREATE TABLE local_models (
            name TEXT PRIMARY KEY,
            file TEXT NOT NULL,
            size INTEGER NOT NULL,
            source TEXT NOT NULL,
            added_at REAL NOT NULL
        )
        """
    )
    db.execute("CREATE TABLE chat_model_offers (name TEXT PRIMARY KEY, offered_at REAL NOT NULL)")
    db.execute("ALTER TABLE conversations ADD COLUMN model TEXT")


@MIGRATIONS.add()
def m016_answer_feedback(db: sqlite_utils.Database) -> None:
    """👍/👎 on an answer, with an optional comment: one per user per answer (given again,
    it replaces the earlier one). Gone with the answer or the user."""
    db.execute(
        """
        CREATE TABLE answer_feedback (
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            rating TEXT NOT NULL CHECK (rating IN ('up', 'down')),
            comment TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (message_id, user_id)
        )
        """
    )
    db.execute("CREATE INDEX answer_feedback_updated ON answer_feedback(updated_at)")


@MIGRATIONS.add()
def m017_answer_versions(db: sqlite_utils.Database) -> None:
    """Regenerating keeps the earlier answer as a version: a question may have several
    answers, of which one at most is current (shown, and repeated in later turns' prompts);
    the others are ``superseded``. The one-answer-per-question index becomes one current
    answer per question."""
    db.execute("ALTER TABLE messages ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0")
    db.execute("DROP INDEX messages_reply_to")
    db.execute(
        "CREATE UNIQUE INDEX messages_reply_to ON messages(reply_to)"
        " WHERE reply_to IS NOT NULL AND superseded = 0"
    )
    db.execute("CREATE INDEX messages_versions ON messages(reply_to)")  # counting versions


@MIGRATIONS.add()
def m018_conversation_scope(db: sqlite_utils.Database) -> None:
    """The collections a conversation's questions search (JSON list of ids; NULL: all the
    asker may read). Always narrowed to what the asker may read when searching."""
    db.execute("ALTER TABLE conversations ADD COLUMN scope TEXT")


@MIGRATIONS.add()
def m019_issued_ids(db: sqlite_utils.Database) -> None:
    """The highest conversation id ever issued: SQLite gives a new row the largest id in
    the table plus one, so deleting the newest conversation handed its id to the next,
    and a link or bookmark to the deleted one opened the new one."""
    db.execute("CREATE TABLE issued_ids (name TEXT PRIMARY KEY, last INTEGER NOT NULL)")
    db.execute(
        "INSERT INTO issued_ids (name, last)"
        " SELECT 'conversations', COALESCE(MAX(id), 0) FROM conversations"
    )


@MIGRATIONS.add()
def m021_conversation_shares(db: sqlite_utils.Database) -> None:
    """Conversations shared read-only with a user or a group (exactly one of the two per
    row; gone with the conversation, the user or the group), and the sharing audit: who
    shared or revoked what with whom, and which cited passages a reader was shown in a
    shared conversation. The audit has no foreign keys: it outlives what it names."""
    db.execute(
        """
        CREATE TABLE conversation_shares (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            user_id INTEGER REFERENCES users(id) ON DELETE CASCADE,
            group_id INTEGER REFERENCES groups(id) ON DELETE CASCADE,
            shared_by INTEGER REFERENCES users(id) ON DELETE SET NULL,
            created_at REAL NOT NULL,
            CHECK ((user_id IS NULL) <> (group_id IS NULL))
        )
        """
    )
    db.execute(
        "CREATE UNIQUE INDEX conversation_shares_user"
        " ON conversation_shares(conversation_id, user_id) WHERE user_id IS NOT NULL"
    )
    db.execute(
        "CREATE UNIQUE INDEX conversation_shares_group"
        " ON conversation_shares(conversation_id, group_id) WHERE group_id IS NOT NULL"
    )
    db.execute("CREATE INDEX conversation_shares_to_user ON conversation_shares(user_id)")
    db.execute("CREATE INDEX conversation_shares_to_group ON conversation_shares(group_id)")
    db.execute(
        """
        CREATE TABLE conversation_share_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL,
            actor_id INTEGER,
            key_id INTEGER,
            action TEXT NOT NULL CHECK (action IN ('share', 'revoke')),
            target_kind TEXT NOT NULL CHECK (target_kind IN ('user', 'group')),
            target_id INTEGER NOT NULL,
            target_name TEXT NOT NULL,
            at REAL NOT NULL
        )
        """
    )
    db.execute(
        "CREATE INDEX conversation_share_events_conversation"
        " ON conversation_share_events(conversation_id, at)"
    )
    db.execute(
        """
        CREATE TABLE shared_answer_sources (
            message_id INTEGER NOT NULL,
            chunk_id INTEGER NOT NULL,
            document_id INTEGER NOT NULL,
            user_id INTEGER NOT NULL,
            key_id INTEGER,
            shown_at REAL NOT NULL,
            PRIMARY KEY (message_id, chunk_id, user_id)
        )
        """
    )


@MIGRATIONS.add()
def m025_v1_answer_citations(db: sqlite_utils.Database) -> None:
    """What each grounded ``/v1`` answer cited, per user, under a digest of its question
    and text (``app.chat.cited_answers``): a stateless client sends the answer back with
    its next question, and a follow-up that refers back then reads the documents it cited
    first, as in chat. Rows expire and are capped per user; gone with the user."""
    db.execute(
        """
        CREATE TABLE v1_answer_citations (
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            digest TEXT NOT NULL,
            citations TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (user_id, digest)
        )
        """
    )
    db.execute("CREATE INDEX v1_answer_citations_created ON v1_answer_citations(created_at)")
