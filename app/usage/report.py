"""The usage report over a period: totals, a time series and breakdowns by user, group,
API key, collection, model and channel, summed from the daily rollups (never from the
events), with thumbs from ``answer_feedback`` and documents from ``documents``.

Cheap by construction: counts are summed in SQL over rollup rows (a few per day for
most dimensions), and latency histograms are read only for the rows shown.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from app.usage.events import day_of
from app.usage.period import Period
from app.usage.rollups import COUNTS, Tally, ids_of, percentile, sum_hists
from retrieval.sql import RawConnection

BREAKDOWNS = ("user", "group", "key", "collection", "model", "channel")


@dataclass
class Thumbs:
    up: int = 0
    down: int = 0

    def add(self, rating: str) -> None:
        if rating == "up":
            self.up += 1
        else:
            self.down += 1


@dataclass(frozen=True)
class Row:
    """One line of a breakdown (or the totals, or one bucket of the series)."""

    key: str
    label: str
    questions: int
    answered: int
    declined: int
    withheld: int
    failed: int
    stopped: int
    prompt_tokens: int
    completion_tokens: int
    thumbs_up: int
    thumbs_down: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    total_p50_ms: float | None
    total_p95_ms: float | None
    documents: int = 0  # documents ingested (totals, series and collections only)

    @classmethod
    def of(
        cls, key: str, label: str, tally: Tally, thumbs: Thumbs | None = None, documents: int = 0
    ) -> Row:
        c, thumbs = tally.counts, thumbs or Thumbs()
        return cls(
            key, label, c["questions"], c["answered"], c["declined"], c["withheld"],
            c["failed"], c["stopped"], c["prompt_tokens"], c["completion_tokens"],
            thumbs.up, thumbs.down,
            _ms(percentile(tally.ttft, 0.5)), _ms(percentile(tally.ttft, 0.95)),
            _ms(percentile(tally.total, 0.5)), _ms(percentile(tally.total, 0.95)),
            documents,
        )  # fmt: skip


@dataclass(frozen=True)
class UsageReport:
    period: Period
    totals: Row
    series: list[Row]
    breakdowns: dict[str, list[Row]]
    counted: dict[str, int] = field(default_factory=dict)  # rows before the top cut


def build_report(conn: RawConnection, period: Period, top: int = 20) -> UsageReport:
    first, last = period.first.isoformat(), period.last.isoformat()
    thumbs = _thumbs(conn, period)
    documents = _documents(conn, period)
    names = _names(conn)
    by_bucket: dict[str, Tally] = defaultdict(Tally)
    totals = Tally()
    for day, tally in _days(conn, first, last):
        by_bucket[period.bucket_key(day)].add(tally)
        totals.add(tally)
    series = [
        Row.of(key, key, by_bucket.get(key, Tally()), thumbs["series"].get(key),
               documents["series"].get(key, 0))
        for key in period.bucket_keys()
    ]  # fmt: skip
    all_thumbs = thumbs["all"].get("", Thumbs())
    total_row = Row.of("", "all", totals, all_thumbs, sum(documents["series"].values()))
    breakdowns: dict[str, list[Row]] = {}
    counted: dict[str, int] = {}
    for dim in BREAKDOWNS:
        tallies, counted[dim] = _top_values(conn, dim, period, top)
        breakdowns[dim] = [
            Row.of(value, _label(names, dim, value), tally, thumbs[dim].get(value),
                   documents["collection"].get(value, 0) if dim == "collection" else 0)
            for value, tally in tallies
        ]  # fmt: skip
    return UsageReport(period, total_row, series, breakdowns, counted)


def _days(conn: RawConnection, first: str, last: str) -> list[tuple[str, Tally]]:
    """Each day's totals (one rollup row a day)."""
    rows = conn.execute(
        f"SELECT day, {', '.join(COUNTS)}, ttft_hist, total_hist FROM usage_daily"  # noqa: S608
        " WHERE dim = 'all' AND day BETWEEN ? AND ? ORDER BY day",
        [first, last],
    )
    return [(str(row["day"]), Tally.of_row(row)) for row in rows]


def _top_values(
    conn: RawConnection, dim: str, period: Period, top: int
) -> tuple[list[tuple[str, Tally]], int]:
    """The ``top`` values of a dimension by questions, and how many had any. Counts are
    summed in SQL (monthly rollups for the period's whole months, daily ones for the
    rest); latency histograms are read for the shown values alone and added with numpy."""
    sums = ", ".join(f"SUM({name}) AS {name}" for name in COUNTS)
    arms, params = _rollups(dim, period)
    rows = conn.execute(
        f"SELECT value, {sums}, COUNT(*) OVER () AS counted FROM ({arms})"  # noqa: S608
        " GROUP BY value ORDER BY questions DESC, value LIMIT ?",
        [*params, top],
    ).fetchall()
    shown = [(str(row["value"]), Tally({name: int(row[name]) for name in COUNTS})) for row in rows]
    counted = int(rows[0]["counted"]) if rows else 0
    if shown:
        ttft: dict[str, list[bytes]] = defaultdict(list)
        total: dict[str, list[bytes]] = defaultdict(list)
        values = [value for value, _ in shown]
        arms, params = _rollups(dim, period, values)
        for value, ttft_hist, total_hist in conn.execute(
            f"SELECT value, ttft_hist, total_hist FROM ({arms})",  # noqa: S608
            params,
        ):
            ttft[value].append(ttft_hist)
            total[value].append(total_hist)
        for value, tally in shown:
            tally.ttft, tally.total = sum_hists(ttft[value]), sum_hists(total[value])
    return shown, counted


def _rollups(dim: str, period: Period, values: list[str] | None = None) -> tuple[str, list[Any]]:
    """A UNION ALL of the rollup rows covering ``period`` for ``dim`` (only ``values``,
    when given): monthly rows for its whole calendar months, daily rows for the rest."""
    only = "" if values is None else f" AND value IN ({', '.join('?' for _ in values)})"
    arms, params = [], []
    for table, low, high in _ranges(period):
        arms.append(
            "SELECT value, " + ", ".join(COUNTS) + ", ttft_hist, total_hist"  # noqa: S608
            f" FROM {table} WHERE dim = ? AND day BETWEEN ? AND ?{only}"
        )
        params += [dim, low, high, *(values or [])]
    return " UNION ALL ".join(arms), params


def _ranges(period: Period) -> list[tuple[str, str, str]]:
    """(table, first, last) spans covering the period: whole months from the monthly table."""
    first, last = period.first, period.last
    start = first if first.day == 1 else _month_after(first)
    after_end = _month_after(last)
    end = after_end if after_end - timedelta(days=1) == last else last.replace(day=1)
    if start >= end:  # no whole month inside
        return [("usage_daily", first.isoformat(), last.isoformat())]
    spans = [("usage_monthly", start.isoformat()[:7], (end - timedelta(days=1)).isoformat()[:7])]
    if first < start:
        spans.append(("usage_daily", first.isoformat(), (start - timedelta(days=1)).isoformat()))
    if end <= last:
        spans.append(("usage_daily", end.isoformat(), last.isoformat()))
    return spans


def _month_after(day: date) -> date:
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)


def _thumbs(conn: RawConnection, period: Period) -> dict[str, dict[str, Thumbs]]:
    """Thumbs given in the period on answers with a usage event, per bucket and per
    dimension value of the answer's event ("series" and "all" besides the breakdowns).

    Counted per dimension in SQL (a year holds tens of thousands of thumbs), each count
    over the same join, written once."""
    found: dict[str, dict[str, Thumbs]] = {
        name: defaultdict(Thumbs) for name in ("series", "all", *BREAKDOWNS)
    }
    for column, name in _THUMB_COLUMNS:
        for value, up, down in conn.execute(
            f"{_THUMBS} SELECT {column}, SUM(up), SUM(down) FROM thumbs"  # noqa: S608
            f" WHERE {column} IS NOT NULL GROUP BY {column}",
            [period.start_ts, period.end_ts],
        ):
            for key in _keys_of(name, str(value), period):
                found[name][key].up += int(up)
                found[name][key].down += int(down)
                if name == "series":
                    found["all"][""].up += int(up)
                    found["all"][""].down += int(down)
    return found


_THUMBS = (
    "WITH thumbs AS (SELECT date(f.updated_at, 'unixepoch') AS day,"
    " CASE WHEN f.rating = 'up' THEN 1 ELSE 0 END AS up,"
    " CASE WHEN f.rating = 'down' THEN 1 ELSE 0 END AS down,"
    " e.user_id, e.key_id, e.groups, e.collections, e.model, e.channel"
    " FROM answer_feedback f JOIN usage_events e ON e.message_id = f.message_id"
    " WHERE f.updated_at >= ? AND f.updated_at < ?)"
)


_THUMB_COLUMNS = (
    ("day", "series"), ("user_id", "user"), ("key_id", "key"), ("groups", "group"),
    ("collections", "collection"), ("model", "model"), ("channel", "channel"),
)  # fmt: skip


def _keys_of(name: str, value: str, period: Period) -> tuple[str, ...]:
    """The rows a thumbs count goes to: the day's bucket, each of a list's ids, or itself."""
    if name == "series":
        return (period.bucket_key(value),)
    if name in ("group", "collection"):
        return tuple(str(i) for i in ids_of(value))
    return (value,)


def _documents(conn: RawConnection, period: Period) -> dict[str, dict[str, int]]:
    """Documents ingested (indexed) in the period, per bucket and per collection."""
    found: dict[str, dict[str, int]] = {"series": defaultdict(int), "collection": defaultdict(int)}
    rows = conn.execute(
        "SELECT created_at, collection_id FROM documents"
        " WHERE created_at >= ? AND created_at < ? AND status = 'indexed'",
        [period.start_ts, period.end_ts],
    )
    for created_at, collection_id in rows:
        found["series"][period.bucket_key(day_of(float(created_at)))] += 1
        found["collection"][str(collection_id)] += 1
    return found


def _names(conn: RawConnection) -> dict[str, dict[str, str]]:
    def named(sql: str) -> dict[str, str]:
        return {str(row[0]): str(row[1]) for row in conn.execute(sql)}

    return {
        "user": named("SELECT id, name FROM users"),
        "key": named(
            "SELECT k.id, u.name || ' · ' || k.name || ' (' || k.prefix || '…)'"
            " FROM api_keys k JOIN users u ON u.id = k.user_id"
        ),
        "group": named("SELECT id, name FROM groups"),
        "collection": named("SELECT id, name FROM collections"),
    }


def _label(names: dict[str, dict[str, str]], dim: str, value: str) -> str:
    if dim in names:
        return names[dim].get(value, f"(deleted {dim} {value})")
    if dim == "model" and not value:
        return "(none: nothing found)"
    return value


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
