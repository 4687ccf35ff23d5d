"""The period a report covers, from what a caller asked for: a preset (``7d`` … ``365d``,
ending today) or ``from``/``to`` dates (inclusive, UTC days), and the bucket its charts
sum by (day, week starting Monday, month). Anything else is a 422, never a 500."""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from app.errors import UnprocessableInput

PRESETS = {"7d": 7, "30d": 30, "90d": 90, "365d": 365}
DEFAULT_PRESET = "30d"
Bucket = Literal["day", "week", "month"]
BUCKETS: tuple[Bucket, ...] = ("day", "week", "month")
MAX_DAYS = 3660  # ten years: beyond that a report is a data export, not a page
MAX_POINTS = 400  # a chart of more buckets than this is unreadable (and slow to draw)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Period:
    first: date
    last: date  # inclusive
    bucket: Bucket
    preset: str | None = None

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    @property
    def start_ts(self) -> float:
        return _midnight(self.first)

    @property
    def end_ts(self) -> float:
        """The first second after the period."""
        return _midnight(self.last + timedelta(days=1))

    def bucket_start(self, day: date) -> date:
        if self.bucket == "week":
            return day - timedelta(days=day.weekday())
        if self.bucket == "month":
            return day.replace(day=1)
        return day

    def bucket_key(self, day: str) -> str:
        """The bucket a ``YYYY-MM-DD`` day falls in, as the ISO date it starts on."""
        return self.bucket_start(date.fromisoformat(day)).isoformat()

    def bucket_keys(self) -> list[str]:
        """Every bucket of the period in order, empty ones included."""
        keys: list[str] = []
        day = self.bucket_start(self.first)
        while day <= self.last:
            keys.append(day.isoformat())
            day = _next_bucket(day, self.bucket)
        return keys

    def query(self) -> str:
        """The period as a query string (links, the CSV export)."""
        if self.preset is not None:
            return f"period={self.preset}&bucket={self.bucket}"
        return f"from={self.first.isoformat()}&to={self.last.isoformat()}&bucket={self.bucket}"


def parse_period(
    period: str | None = None,
    first: str | None = None,
    last: str | None = None,
    bucket: str | None = None,
    *,
    today: date | None = None,
) -> Period:
    """A validated period; ``UnprocessableInput`` (422) saying what is wrong otherwise."""
    today = today or datetime.now(UTC).date()
    if period and (first or last):
        raise UnprocessableInput("give either period or from/to, not both")
    preset: str | None = None
    if first or last:
        start = _date("from", first) if first else None
        end = _date("to", last) if last else today
        if start is None:
            raise UnprocessableInput("from is needed with to (YYYY-MM-DD)")
        if start > end:
            raise UnprocessableInput("from is after to")
    else:
        preset = period or DEFAULT_PRESET
        if preset not in PRESETS:
            raise UnprocessableInput(f"period must be one of {', '.join(PRESETS)}")
        end = today
        start = today - timedelta(days=PRESETS[preset] - 1)
    days = (end - start).days + 1
    if days > MAX_DAYS:
        raise UnprocessableInput(f"a period is at most {MAX_DAYS} days")
    chosen = _bucket(bucket, days)
    found = Period(start, end, chosen, preset)
    if len(found.bucket_keys()) > MAX_POINTS:
        raise UnprocessableInput(f"more than {MAX_POINTS} {chosen}s: choose a longer bucket")
    return found


def _bucket(raw: str | None, days: int) -> Bucket:
    if not raw:
        return "day" if days <= 31 else "week" if days <= 180 else "month"
    for bucket in BUCKETS:
        if raw == bucket:
            return bucket
    raise UnprocessableInput("bucket must be day, week or month")


def _date(name: str, raw: str) -> date:
    if len(raw) != 10 or not _DATE.fullmatch(raw):
        raise UnprocessableInput(f"{name} must be a date, YYYY-MM-DD")
    try:
        found = date.fromisoformat(raw)
    except ValueError:
        raise UnprocessableInput(f"{name} is not a calendar date") from None
    if not 2000 <= found.year <= 2999:
        raise UnprocessableInput(f"{name} is not between 2000 and 2999")
    return found


def _midnight(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def _next_bucket(day: date, bucket: Bucket) -> date:
    if bucket == "day":
        return day + timedelta(days=1)
    if bucket == "week":
        return day + timedelta(days=7)
    return day + timedelta(days=calendar.monthrange(day.year, day.month)[1])
