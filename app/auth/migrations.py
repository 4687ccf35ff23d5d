"""The tables of identity and access: users, browser sessions, API keys, collection
membership, groups, single sign-on identities and the answer audit. Applied after
retrieval's (keys and members name collections), before chat's; see
``retrieval.migrations``."""

from __future__ import annotations

import time

import sqlite_utils

from retrieval.migrations import Migrations

MIGRATIONS = Migrations("auth")


@MIGRATIONS.add(was="m008_accounts")
def m008_accounts(db: sqlite_utils.Database) -> None:
    """Users, browser sessions, API keys, collection membership and the answer audit
    (conversations' owners are chat's ``m008_conversation_owners``: the same old record).

    Secrets are never stored: sessions and keys by their SHA-256, passwords as argon2
    hashes.
    """
    db.execute(
        """CREATE TABLE users (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE COLLATE NOCASE,
            role TEXT NOT NULL CHECK (role IN ('admin', 'staff')),
            password_hash TEXT NOT NULL,
            disabled INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE sessions (
            token_hash TEXT PRIMARY KEY,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            csrf_token TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL
        )"""
    )
    db.table("sessions").create_index(["user_id"])
    db.execute(
        """CREATE TABLE api_keys (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            prefix TEXT NOT NULL UNIQUE,
            key_hash TEXT NOT NULL,
            read_only INTEGER NOT NULL DEFAULT 0,
            scoped INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            last_used_at REAL,
            revoked_at REAL
        )"""
    )
    db.execute(
        """CREATE TABLE api_key_collections (
            key_id INTEGER NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
            collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
            PRIMARY KEY (key_id, collection_id)
        )"""
    )
    db.execute(
        """CREATE TABLE collection_members (
            collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            can_write INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (collection_id, user_id)
        )"""
    )
    db.execute(
        # No foreign keys: the audit outlives the messages, users and keys it names.
        """CREATE TABLE answer_sources (
            message_id INTEGER NOT NULL,
            chunk_id INTEGER NOT NULL,
            document_id INTEGER NOT NULL,
            user_id INTEGER,
            key_id INTEGER,
            shown_at REAL NOT NULL,
            PRIMARY KEY (message_id, chunk_id)
        )"""
    )


@MIGRATIONS.add(was="m010_api_answer_sources")
def m010_api_answer_sources(db: sqlite_utils.Database) -> None:
    """The answer audit for grounded ``/v1`` answers, which are not stored as messages:
    the passages shown per request id (``chatcmpl-…``), and to whom."""
    db.execute(
        """CREATE TABLE api_answer_sources (
            request_id TEXT NOT NULL,
            chunk_id INTEGER NOT NULL,
            document_id INTEGER NOT NULL,
            user_id INTEGER,
            key_id INTEGER,
            shown_at REAL NOT NULL,
            PRIMARY KEY (request_id, chunk_id)
        )"""
    )


@MIGRATIONS.add(was="m011_session_last_seen")
def m011_session_last_seen(db: sqlite_utils.Database) -> None:
    """When each browser session was last used, for the idle timeout. Sessions from before
    count as used at the upgrade, so the upgrade itself signs nobody out mid-work (their
    absolute lifetime still ends them)."""
    db.execute("ALTER TABLE sessions ADD COLUMN last_seen_at REAL NOT NULL DEFAULT 0")
    db.execute("UPDATE sessions SET last_seen_at = ?", [time.time()])


@MIGRATIONS.add()
def m018_groups_and_sso(db: sqlite_utils.Database) -> None:
    """Groups (members and collections, like a user's), single sign-on identities (a user
    is linked to a provider's issuer + subject, never by e-mail alone), the sign-ins under
    way (state, nonce and PKCE verifier: kept server-side, used once) and the ID token of
    a session (for the provider's logout).

    ``source`` says who manages a row: ``local`` (an admin, the API) or ``oidc`` (group
    claims, rewritten at each sign-in), ``settings`` (RAGDESK_OIDC_GROUP_COLLECTIONS)."""
    db.execute(
        """CREATE TABLE groups (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE COLLATE NOCASE,
            created_at REAL NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE group_members (
            group_id INTEGER NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            source TEXT NOT NULL CHECK (source IN ('local', 'oidc')),
            PRIMARY KEY (group_id, user_id)
        )"""
    )
    db.table("group_members").create_index(["user_id"])
    db.execute(
        """CREATE TABLE group_collections (
            group_id INTEGER NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
            collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
            can_write INTEGER NOT NULL DEFAULT 0,
            source TEXT NOT NULL CHECK (source IN ('local', 'settings')),
            PRIMARY KEY (group_id, collection_id)
        )"""
    )
    db.execute(
        """CREATE TABLE user_identities (
            issuer TEXT NOT NULL,
            subject TEXT NOT NULL,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            created_at REAL NOT NULL,
            last_sign_in_at REAL NOT NULL,
            PRIMARY KEY (issuer, subject)
        )"""
    )
    db.execute(
        """CREATE TABLE sso_logins (
            state_hash TEXT PRIMARY KEY,
            browser_hash TEXT NOT NULL,
            nonce TEXT NOT NULL,
            code_verifier TEXT NOT NULL,
            redirect_uri TEXT NOT NULL,
            next TEXT NOT NULL,
            created_at REAL NOT NULL
        )"""
    )
    db.execute("ALTER TABLE sessions ADD COLUMN id_token TEXT")


@MIGRATIONS.add()
def m021_collection_audit(db: sqlite_utils.Database) -> None:
    """Who created, renamed, changed or deleted which collection, and when. No foreign
    keys: the record outlives the collection, user and key it names (the name is kept)."""
    db.execute(
        """CREATE TABLE collection_audit (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            collection_id INTEGER NOT NULL,
            collection_name TEXT NOT NULL,
            action TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '',
            user_id INTEGER,
            key_id INTEGER,
            at REAL NOT NULL
        )"""
    )
    db.execute("CREATE INDEX collection_audit_collection ON collection_audit(collection_id, at)")
