"""Errors raised while detecting and parsing documents."""


class ParseError(Exception):
    """The document cannot be read; the message is the reason shown to the user."""

    @property
    def reason(self) -> str:
        return str(self)


class UnsupportedDocumentType(Exception):
    """The upload is not one of the supported formats."""
