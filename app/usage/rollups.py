"""Daily rollups of usage events: per day and per dimension value, the counts by outcome,
the tokens, and latency histograms from which percentiles are read.

A year of 500,000 questions is 500,000 events but only a few thousand rollup rows for
every dimension but users and keys, so the report sums rollups, never events. Latencies
are kept as counts in fixed buckets (:data:`BOUNDS_MS`): merging two days is adding
counts, and a percentile is read off the merged counts, within its bucket's width.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrieval.sql import RawConnection

# Upper bounds (ms) of the latency buckets; one more bucket holds everything slower.
BOUNDS_MS: tuple[int, ...] = (
    25, 50, 100, 150, 200, 300, 400, 500, 750, 1000, 1250, 1500, 2000, 2500, 3000,
    4000, 5000, 6000, 8000, 10000, 12500, 15000, 20000, 30000, 45000, 60000, 120000,
)  # fmt: skip
# A percentile read off these is within a bucket's width: about a quarter of its value.
BUCKETS = len(BOUNDS_MS) + 1
OUTCOMES = ("answered", "declined", "withheld", "failed", "stopped")
DIMENSIONS = ("all", "user", "key", "group", "collection", "model", "channel")
COUNTS = ("questions", *OUTCOMES, "prompt_tokens", "completion_tokens")


def bucket_of(ms: int) -> int:
    for index, bound in enumerate(BOUNDS_MS):
        if ms <= bound:
            return index
    return len(BOUNDS_MS)


def percentile(hist: Sequence[int], share: float) -> float | None:
    """The latency (ms) below which ``share`` of the counted ones fall, interpolated
    within its bucket (the slowest bucket reads as twice its lower bound); None if none."""
    total = sum(hist)
    if not total:
        return None
    rank = share * total
    seen = 0
    for index, count in enumerate(hist):
        if count and seen + count >= rank:
            low = 0 if index == 0 else BOUNDS_MS[index - 1]
            high = BOUNDS_MS[index] if index < len(BOUNDS_MS) else 2 * BOUNDS_MS[-1]
            return low + (high - low) * max(0.0, rank - seen) / count
        seen += count
    return float(2 * BOUNDS_MS[-1])


def parse_hist(blob: bytes | None) -> list[int]:
    """A stored histogram: little-endian int32 counts, empty when nothing was timed."""
    return sum_hists([blob or b""])


def format_hist(hist: Sequence[int]) -> bytes:
    return np.asarray(hist, dtype="<i4").tobytes() if any(hist) else b""


def sum_hists(blobs: Sequence[bytes]) -> list[int]:
    """Stored histograms added up in one numpy call (a year of them in milliseconds)."""
    joined = b"".join(blobs)
    if not joined:
        return [0] * BUCKETS
    counts = np.frombuffer(joined, dtype="<i4").reshape(-1, BUCKETS).sum(axis=0)
    return [int(n) for n in counts]


@dataclass
class Tally:
    """What is summed per rollup row (and per report row)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    ttft: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    total: list[int] = field(default_factory=lambda: [0] * BUCKETS)

    def add_event(
        self, outcome: str, ttft_ms: int | None, total_ms: int | None, prompt: int, completion: int
    ) -> None:
        self.counts["questions"] += 1
        self.counts[outcome] += 1
        self.counts["prompt_tokens"] += prompt
        self.counts["completion_tokens"] += completion
        if ttft_ms is not None:
            self.ttft[bucket_of(ttft_ms)] += 1
        if total_ms is not None:
            self.total[bucket_of(total_ms)] += 1

    def add(self, other: Tally) -> None:
        for name, value in other.counts.items():
            self.counts[name] += value
        self.ttft = [a + b for a, b in zip(self.ttft, other.ttft, strict=True)]
        self.total = [a + b for a, b in zip(self.total, other.total, strict=True)]

    @classmethod
    def of_row(cls, row: Any) -> Tally:
        tally = cls({name: int(row[name]) for name in COUNTS})
        tally.ttft = parse_hist(row["ttft_hist"])
        tally.total = parse_hist(row["total_hist"])
        return tally


@dataclass(frozen=True)
class EventFacts:
    """What a rollup needs of one event."""

    day: str
    user_id: int | None
    key_id: int | None
    groups: tuple[int, ...]
    collections: tuple[int, ...]
    model: str
    channel: str
    outcome: str
    ttft_ms: int | None
    total_ms: int | None
    prompt_tokens: int
    completion_tokens: int

    def dimensions(self) -> Iterator[tuple[str, str]]:
        """The (dimension, value) rows this event counts in."""
        yield "all", ""
        if self.user_id is not None:
            yield "user", str(self.user_id)
        if self.key_id is not None:
            yield "key", str(self.key_id)
        for group in self.groups:
            yield "group", str(group)
        for collection in self.collections:
            yield "collection", str(collection)
        yield "model", self.model
        yield "channel", self.channel


def tally_events(events: Iterable[EventFacts]) -> dict[tuple[str, str, str], Tally]:
    """Rollup rows keyed (dim, day, value) for ``events``."""
    rows: dict[tuple[str, str, str], Tally] = {}
    for event in events:
        for dim, value in event.dimensions():
            tally = rows.get((dim, event.day, value))
            if tally is None:
                tally = rows[(dim, event.day, value)] = Tally()
            tally.add_event(
                event.outcome, event.ttft_ms, event.total_ms,
                event.prompt_tokens, event.completion_tokens,
            )  # fmt: skip
    return rows


def merge_into(conn: RawConnection, rows: dict[tuple[str, str, str], Tally]) -> None:
    """Add daily ``rows`` to the stored rollups, daily and monthly (inside the caller's
    transaction): a year's report reads twelve monthly rows per user, not 365 daily ones."""
    monthly: dict[tuple[str, str, str], Tally] = defaultdict(Tally)
    for (dim, day, value), tally in rows.items():
        monthly[(dim, day[:7], value)].add(tally)
    _merge(conn, "usage_daily", rows)
    _merge(conn, "usage_monthly", monthly)


def _merge(conn: RawConnection, table: str, rows: dict[tuple[str, str, str], Tally]) -> None:
    """Add ``rows`` to ``table``'s: one read of the rows they meet and one batch of upserts,
    whatever the number of dimensions (an answer counts in seven or more)."""
    if not rows:
        return
    columns = ", ".join(COUNTS)
    marks = ", ".join("?" for _ in COUNTS)
    updates = ", ".join(
        f"{name} = excluded.{name}" for name in (*COUNTS, "ttft_hist", "total_hist")
    )
    keys = list(rows)
    for start in range(0, len(keys), _READ_BATCH):
        batch = keys[start : start + _READ_BATCH]
        matches = " OR ".join("(dim = ? AND day = ? AND value = ?)" for _ in batch)
        found = conn.execute(
            f"SELECT dim, day, value, {columns}, ttft_hist, total_hist"  # noqa: S608
            f" FROM {table} WHERE {matches}",
            [part for key in batch for part in key],
        ).fetchall()
        for row in found:
            rows[(row["dim"], row["day"], row["value"])].add(Tally.of_row(row))
    conn.executemany(
        f"INSERT INTO {table} (dim, day, value, {columns}, ttft_hist,"  # noqa: S608
        f" total_hist) VALUES (?, ?, ?, {marks}, ?, ?) ON CONFLICT (dim, day, value)"
        f" DO UPDATE SET {updates}",
        [[dim, day, value, *(tally.counts[name] for name in COUNTS),
          format_hist(tally.ttft), format_hist(tally.total)]
         for (dim, day, value), tally in rows.items()],
    )  # fmt: skip


# Rollup rows read in one statement (three parameters each, well under SQLite's limit).
_READ_BATCH = 200


def rebuild(conn: RawConnection, batch: int = 50_000) -> int:
    """Recompute every rollup from the events (after a bulk import, or to repair);
    returns how many events were read. The caller holds the write transaction."""
    conn.execute("DELETE FROM usage_daily")
    conn.execute("DELETE FROM usage_monthly")
    rows: dict[tuple[str, str, str], Tally] = {}
    read = 0
    cursor = conn.execute(
        "SELECT day, user_id, key_id, groups, collections, model, channel, outcome,"
        " ttft_ms, total_ms, prompt_tokens, completion_tokens FROM usage_events"
    )
    while chunk := cursor.fetchmany(batch):
        read += len(chunk)
        for dim_key, tally in tally_events(facts_of(row) for row in chunk).items():
            found = rows.get(dim_key)
            if found is None:
                rows[dim_key] = tally
            else:
                found.add(tally)
    merge_into(conn, rows)
    return read


def facts_of(row: Sequence[object]) -> EventFacts:
    day, user, key, groups, collections, model, channel, outcome, ttft, total, p, c = row
    return EventFacts(
        str(day), _int_or_none(user), _int_or_none(key), ids_of(str(groups)),
        ids_of(str(collections)), str(model), str(channel), str(outcome),
        _int_or_none(ttft), _int_or_none(total), int(p), int(c),  # type: ignore[call-overload]
    )  # fmt: skip


def ids_of(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part)


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
