"""Usage analytics at scale (#28): ``/admin/usage`` for a synthetic year of 1,000 staff and
500,000 questions, timed over real HTTP, against the bar of 1 s at p95 on 2 cores.

    python -m bench.usage [--users 1000] [--questions 500000] [--requests 30]

A temporary data directory gets the year written straight into SQLite (users, groups,
API keys, collections, documents ingested, answers with thumbs, and one usage event per
question, with its daily rollups rebuilt by ``app.usage.rollups.rebuild``, the same code
that repairs them); a real ``ragdesk serve`` (fake chat model; ``--embedder`` real by
default, for the content gaps) then serves it. Each page and API call is requested
``--requests`` times after a warm-up; reported: p50, p95 and max, and the content gaps'
first view and cached views. The year is written straight into SQLite, so no question
has the vector the recorder keeps for an unanswered one: the first view embeds every
distinct unanswered wording, the worst case (a server upgraded with a year of events).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.server import ServerProcess

DAY = 86_400.0
GROUPS = 20
COLLECTIONS = 8
KEYS = 60
DOCUMENTS = 3_000
MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "gemma-3-270m")
CHANNELS = (("web", 0.70), ("api", 0.20), ("v1", 0.08), ("mcp", 0.02))
OUTCOMES = (("answered", 0.77), ("declined", 0.15), ("withheld", 0.05), ("failed", 0.02),
            ("stopped", 0.01))  # fmt: skip
TOPICS = (
    "VPN password", "parking fee for visitors", "office Christmas closing", "gym in the building",
    "expense a taxi", "travel insurance abroad", "parental leave", "laptop replacement",
    "printer on floor 3", "meeting room booking", "pension contribution", "bike to work scheme",
)  # fmt: skip
FORMS = ("How do I handle the {t}?", "What is the rule for {t}?", "{t}: who do I ask?",
         "Where can I find the {t} policy?", "Is there anything about {t}?")  # fmt: skip


def build_year(db_path: Path, users: int, questions: int, seed: int = 28) -> float:
    """Write the synthetic year; returns the seconds it took."""
    from app.migrations import open_database
    from app.usage.rollups import rebuild

    started = time.perf_counter()
    rng = random.Random(seed)
    now = time.time()
    db = open_database(db_path)
    db.close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    with conn:
        conn.executemany(
            "INSERT INTO users (name, role, password_hash, created_at) VALUES (?, 'staff', 'x', ?)",
            [(f"staff{n:04d}", now - 400 * DAY) for n in range(users)],
        )
        user_ids = [r[0] for r in conn.execute("SELECT id FROM users ORDER BY id")]
        conn.executemany(
            "INSERT INTO groups (name, created_at) VALUES (?, ?)",
            [(f"team-{n:02d}", now) for n in range(GROUPS)],
        )
        group_ids = [r[0] for r in conn.execute("SELECT id FROM groups ORDER BY id")]
        membership = {u: [group_ids[i % GROUPS]] for i, u in enumerate(user_ids)}
        for u in user_ids[: users // 10]:  # a tenth are in a second group
            membership[u].append(rng.choice(group_ids))
        conn.executemany(
            "INSERT OR IGNORE INTO group_members (group_id, user_id, source)"
            " VALUES (?, ?, 'local')",
            [(g, u) for u, gs in membership.items() for g in gs],
        )
        conn.executemany(
            "INSERT OR IGNORE INTO collections (name, created_at) VALUES (?, ?)",
            [(f"collection-{n}", now) for n in range(COLLECTIONS)],
        )
        collection_ids = [r[0] for r in conn.execute("SELECT id FROM collections ORDER BY id")]
        conn.executemany(
            "INSERT INTO api_keys (user_id, name, prefix, key_hash, created_at)"
            " VALUES (?, ?, ?, 'x', ?)",
            [(rng.choice(user_ids), f"tool-{n}", f"rdk{n:05d}", now) for n in range(KEYS)],
        )
        key_ids = [r[0] for r in conn.execute("SELECT id FROM api_keys ORDER BY id")]
        conn.executemany(
            "INSERT INTO documents (collection_id, content_hash, filename, stored_name, kind,"
            " size, status, created_at, updated_at) VALUES (?, ?, ?, ?, 'md', 100, ?, ?, ?)",
            [
                (rng.choice(collection_ids), f"hash{n}", f"doc{n}.md", f"doc{n}.md",
                 "indexed" if n % 20 else "failed", at, at)
                for n in range(DOCUMENTS)
                for at in [now - rng.random() * 365 * DAY]
            ],
        )  # fmt: skip
        conn.execute(
            "INSERT INTO conversations (title, created_at, updated_at) VALUES ('bench', ?, ?)",
            [now, now],
        )
        conversation = conn.execute("SELECT MAX(id) FROM conversations").fetchone()[0]
        weights = [1 / (rank + 1) ** 0.6 for rank in range(users)]  # some ask far more
        events, feedback = [], []
        for n in range(questions):
            at = now - rng.random() * 365 * DAY
            user = rng.choices(user_ids, weights)[0]
            channel = _pick(rng, CHANNELS)
            outcome = _pick(rng, OUTCOMES)
            key = rng.choice(key_ids) if channel != "web" else None
            model = "" if outcome == "declined" and rng.random() < 0.5 else rng.choice(MODELS)
            ttft = int(rng.lognormvariate(7.0, 0.5))  # ~1.1 s median
            total = ttft + int(rng.lognormvariate(8.4, 0.4))
            topic = rng.choice(TOPICS) if outcome in ("declined", "withheld") else "the canteen"
            question = rng.choice(FORMS).format(t=topic) + (
                "" if rng.random() < 0.7 else f" #{n % 997}"
            )
            collections = ",".join(
                str(c) for c in sorted(rng.sample(collection_ids, rng.randint(1, 2)))
            )
            groups = ",".join(str(g) for g in sorted(set(membership[user])))
            events.append((at, time.strftime("%Y-%m-%d", time.gmtime(at)), user, key, groups,
                           collections, model, channel, outcome, ttft, total,
                           rng.randint(300, 1500), rng.randint(20, 200), question))  # fmt: skip
            if rng.random() < 0.05:
                feedback.append((at, user, "up" if rng.random() < 0.7 else "down"))
        conn.executemany(
            "INSERT INTO usage_events (at, day, user_id, key_id, groups, collections, model,"
            " channel, outcome, ttft_ms, total_ms, prompt_tokens, completion_tokens, question)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            events,
        )
        _feedback(conn, conversation, feedback)
        rebuild(conn)
    conn.close()
    return time.perf_counter() - started


def _feedback(
    conn: sqlite3.Connection, conversation: int, given: list[tuple[float, int, str]]
) -> None:
    """An answer message per thumb, tied to a usage event, so thumbs join as in the app."""
    event_ids = [
        r[0]
        for r in conn.execute(
            "SELECT id, at FROM usage_events ORDER BY random() LIMIT ?", [len(given)]
        )
    ]
    for event_id, (at, user, rating) in zip(event_ids, given, strict=False):
        cursor = conn.execute(
            "INSERT INTO messages (conversation_id, role, content, created_at)"
            " VALUES (?, 'assistant', 'x', ?)",
            [conversation, at],
        )
        message = cursor.lastrowid
        conn.execute("UPDATE usage_events SET message_id = ? WHERE id = ?", [message, event_id])
        conn.execute(
            "INSERT OR IGNORE INTO answer_feedback"
            " (message_id, user_id, rating, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
            [message, user, rating, at, at],
        )


def _pick(rng: random.Random, choices: tuple[tuple[str, float], ...]) -> str:
    return rng.choices([c for c, _ in choices], [w for _, w in choices])[0]


def timed(client: httpx.Client, path: str, requests: int) -> list[float]:
    for _ in range(3):  # warm-up: the reader connection, the template, the OS cache
        client.get(path).raise_for_status()
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
    return times


def p95(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--questions", type=int, default=500_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--embedder", choices=("real", "fake"), default="real")
    parser.add_argument("--reuse", type=Path, help="a data directory an earlier run built")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-usage-"))
    data = args.reuse or root / "data"
    if args.reuse is None:
        data.mkdir()
        built = build_year(data / "ragdesk.db", args.users, args.questions)
        size = (data / "ragdesk.db").stat().st_size / 2**20
        print(f"built {args.questions:,} questions of {args.users:,} users in {built:.1f} s")
        print(f"({size:.0f} MiB) in {data}")
    else:  # the content gaps' first view embeds every wording anew
        with sqlite3.connect(data / "ragdesk.db") as conn:
            conn.execute("DELETE FROM usage_question_vectors")
    backend = "sentence-transformers" if args.embedder == "real" else "fake"
    server = ServerProcess(
        data, root / "server.log", generator_backend="fake", embedder_backend=backend
    ).start()
    print("\n| request | p50 (s) | p95 (s) | max (s) |\n| --- | --- | --- | --- |", flush=True)
    try:
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=900) as client:
            for path in ("/admin/usage", "/admin/usage?period=90d", "/admin/usage?period=365d",
                         "/admin/usage?period=365d&bucket=week", "/api/usage?period=365d",
                         "/api/usage.csv?period=365d"):  # fmt: skip
                report(path, timed(client, path, args.requests))
            for period in ("30d", "365d"):
                path = f"/admin/usage/gaps?period={period}"
                started = time.perf_counter()
                client.get(path).raise_for_status()
                first = time.perf_counter() - started
                label = f"{path}, cached (first view, every wording embedded: {first:.1f} s)"
                report(label, timed(client, path, args.requests))
    finally:
        server.stop()


def report(path: str, times: list[float]) -> None:
    p50, worst = statistics.median(times), max(times)
    print(f"| `{path}` | {p50:.3f} | {p95(times):.3f} | {worst:.3f} |", flush=True)


if __name__ == "__main__":
    main()
