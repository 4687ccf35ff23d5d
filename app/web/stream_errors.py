"""What an answer stream says when it fails after it began (``/api/chat``'s JSON events,
the chat page's HTML ones): the response's 200 has gone, so the error goes in-band, and
the text already sent stays the client's.

An application error keeps its status and Retry-After. The database failing (it stopped
answering, say, while the answer was being stored) is what any request meets then: 503
with a Retry-After the client may honour, readiness told at once, one warning line in
the log (the cause is the database, not this code: no traceback). Anything else is a
bug: logged with its traceback, reported as 500.
"""

from __future__ import annotations

import logging

from app.errors import AppError, DatabaseUnavailable, is_store_unavailable
from app.state import Services

log = logging.getLogger(__name__)


class AnswerFailed(AppError):
    status = 500
    title = "Server error"

    def __init__(self) -> None:
        super().__init__("the answer failed; see the server log")


def stream_error(exc: Exception, services: Services | None) -> AppError:
    """``exc``, met by an answer stream, as the error to report in it."""
    if isinstance(exc, AppError):
        return exc
    if is_store_unavailable(exc):
        log.warning("an answer stream ended early, its answer not stored: %s", exc)
        if services is not None:
            services.database.failed(str(exc))  # readiness says so now
        return DatabaseUnavailable()
    log.error("answer stream failed", exc_info=exc)
    return AnswerFailed()


def retry_after_s(error: AppError) -> int | None:
    """The seconds after which the request may be made again, when the error says."""
    value = error.headers.get("Retry-After")
    return int(value) if value is not None and value.isdigit() else None
