"""Where a redirect after sign-in may go: a leaf module, so the error handler and the
login routes can both use it without importing each other."""

from __future__ import annotations

MAX_TARGET_CHARS = 2000


def safe_next(target: str) -> str:
    """Only a path on this site: never ``//evil.example`` or ``https://…``."""
    if (
        not target.startswith("/")
        or target.startswith(("//", "/\\"))
        or len(target) > MAX_TARGET_CHARS
    ):
        return "/"
    return target
