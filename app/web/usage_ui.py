"""Usage and quality analytics for admins: the page ``/admin/usage`` (inside the app
window), its content-gaps partial, and the same data as JSON (``/api/usage``) and CSV
(``/api/usage.csv`` or ``?format=csv``). Every view of question texts is audited."""

from __future__ import annotations

import asyncio
import csv
import io
from dataclasses import asdict, fields
from typing import Annotated, Any

import msgspec
from litestar import Controller, Response, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.params import Parameter
from litestar.response import Template

from app.errors import UnprocessableInput
from app.state import Services
from app.usage.audit import QuestionViews
from app.usage.charts import bar, columns, lines
from app.usage.gaps import Gap, GapFinder, GapReport
from app.usage.period import BUCKETS, PRESETS, Period, parse_period
from app.usage.report import BREAKDOWNS, Row, UsageReport, build_report
from app.web.admin_pages import ADMIN
from app.web.deps import provide_services

DateParam = Annotated[str | None, Parameter(query="from", max_length=10)]
ToParam = Annotated[str | None, Parameter(max_length=10)]
Short = Annotated[str | None, Parameter(max_length=10)]
Top = Annotated[int, Parameter(ge=1, le=500)]
GapLimit = Annotated[int, Parameter(ge=1, le=500)]
TITLES = {
    "user": "By user", "group": "By group", "key": "By API key",
    "collection": "By collection", "model": "By model", "channel": "By channel",
}  # fmt: skip


class PeriodOut(msgspec.Struct):
    start: str  # "from" in the query
    end: str
    bucket: str
    preset: str | None
    days: int


class UsageOut(msgspec.Struct):
    period: PeriodOut
    totals: Row
    series: list[Row]
    by: dict[str, list[Row]]
    counted: dict[str, int]  # how many users, groups, keys … had questions (before ``top``)


class GapsOut(msgspec.Struct):
    period: PeriodOut
    gaps: list[Gap]
    questions: int
    distinct: int
    truncated: bool


def provide_period(
    period: Short = None, start: DateParam = None, to: ToParam = None, bucket: Short = None
) -> Period:
    """The period a request asks for: a preset (``period``) or ``from``/``to``, and a
    ``bucket``; checked (422 saying what is wrong, and for both a preset and dates)."""
    return parse_period(period or None, start or None, to or None, bucket or None)


def provide_form_period(
    period: Short = None, start: DateParam = None, to: ToParam = None, bucket: Short = None
) -> Period:
    """As :func:`provide_period`, for the page's form, which sends its preset choice with
    any dates: dates given win."""
    return provide_period(None if start or to else period, start, to, bucket)


PERIOD = {"chosen": Provide(provide_period, sync_to_thread=False)}
SERVICES = {"services": Provide(provide_services, sync_to_thread=False)}


def _report(services: Services, period: Period, top: int) -> UsageReport:
    return build_report(services.db.read().conn, period, top)


def _period_out(period: Period) -> PeriodOut:
    return PeriodOut(
        period.first.isoformat(), period.last.isoformat(), period.bucket, period.preset,
        period.days,
    )  # fmt: skip


def _finder(state: State, services: Services) -> GapFinder:
    """One finder per embedder, kept on the app's state: it caches groupings."""
    embedder = services.require_retrieval().embedder
    finder: GapFinder | None = state.get("usage_gaps")
    if finder is None or finder.embedder is not embedder:
        finder = GapFinder(services.db, embedder)
        state["usage_gaps"] = finder
    return finder


def _gaps(state: State, services: Services, period: Period, limit: int, what: str) -> GapReport:
    found = _finder(state, services).find(period, limit)
    shown = sum(1 + len(gap.examples) for gap in found.gaps)
    QuestionViews(services.db).record(what, period, shown)
    return found


def usage_csv(report: UsageReport) -> str:
    """The report as one CSV table: ``section`` is totals, series or a breakdown."""
    names = [f.name for f in fields(Row)]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["section", *names])
    writer.writerow(["totals", *map(_cell, asdict(report.totals).values())])
    for row in report.series:
        writer.writerow(["series", *map(_cell, asdict(row).values())])
    for dim, rows in report.breakdowns.items():
        for row in rows:
            writer.writerow([dim, *map(_cell, asdict(row).values())])
    return out.getvalue()


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    """A value as a spreadsheet must read it: text that a spreadsheet would run as a
    formula (a user or key name such as ``=HYPERLINK(…)``: anyone names their own keys)
    gets a leading apostrophe, as OWASP advises for CSV exports; numbers stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _csv_response(report: UsageReport) -> Response[str]:
    period = report.period
    name = f"usage-{period.first.isoformat()}-{period.last.isoformat()}-{period.bucket}.csv"
    return Response(  # Litestar adds "; charset=utf-8" to a text/ type itself
        usage_csv(report),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def _page_context(report: UsageReport) -> dict[str, Any]:
    bars = {
        dim: [(row, bar(row, max((r.questions for r in rows), default=1))) for row in rows]
        for dim, rows in report.breakdowns.items()
    }
    return {
        "report": report,
        "period": report.period,
        "columns": columns(report.series),
        "lines": lines(report.series),
        "bars": bars,
        "titles": TITLES,
        "presets": list(PRESETS),
        "buckets": BUCKETS,
        "dims": BREAKDOWNS,
    }


class UsagePages(Controller):
    path = "/admin/usage"
    opt = ADMIN
    dependencies = SERVICES

    @get("/", dependencies={"chosen": Provide(provide_form_period, sync_to_thread=False)})
    async def usage(self, services: Services, chosen: Period, top: Top = 10) -> Template:
        """Usage and quality over a period; the content gaps load after the page."""
        report = await asyncio.to_thread(_report, services, chosen, top)
        return Template("usage.html", context=_page_context(report))

    @get("/gaps", dependencies=PERIOD)
    async def gaps(
        self, state: State, services: Services, chosen: Period, limit: GapLimit = 30
    ) -> Template:
        """The content-gaps partial (question texts: the view is audited)."""
        found = await asyncio.to_thread(_gaps, state, services, chosen, limit, "gaps page")
        return Template("_usage_gaps.html", context={"found": found, "period": chosen})


class UsageApi(Controller):
    path = "/api/usage"
    opt = ADMIN
    dependencies = SERVICES

    @get("/", dependencies=PERIOD)
    async def usage(
        self, services: Services, chosen: Period, top: Top = 20, format: Short = None
    ) -> Response[Any]:
        """Totals, a series per bucket and breakdowns (``?format=csv``: as CSV)."""
        if format not in (None, "", "json", "csv"):
            raise UnprocessableInput("format must be json or csv")
        report = await asyncio.to_thread(_report, services, chosen, top)
        if format == "csv":
            return _csv_response(report)
        out = UsageOut(
            _period_out(chosen), report.totals, report.series, report.breakdowns, report.counted
        )
        return Response(out)

    @get("/gaps", dependencies=PERIOD)
    async def gaps(
        self, state: State, services: Services, chosen: Period, limit: GapLimit = 50
    ) -> GapsOut:
        """The questions the documents did not answer, grouped (audited)."""
        found = await asyncio.to_thread(_gaps, state, services, chosen, limit, "gaps api")
        return GapsOut(
            _period_out(chosen), found.gaps, found.questions, found.distinct, found.truncated
        )


class UsageCsv(Controller):
    path = "/api/usage.csv"
    opt = ADMIN
    dependencies = SERVICES

    @get("/", media_type="text/csv", dependencies=PERIOD)
    async def export(self, services: Services, chosen: Period, top: Top = 100) -> Response[str]:
        """The report as CSV (as ``/api/usage?format=csv``)."""
        return _csv_response(await asyncio.to_thread(_report, services, chosen, top))
