"""Document titles from metadata, unless the metadata names no document.

Producers fill the title field with placeholders ("Document1", "Untitled", "Microsoft
Word - report.doc", a path): shown everywhere a document is named, they say nothing. Such
a title counts as none, and the parser falls back (a heading, the uploaded file's name).
"""

from __future__ import annotations

import re

_PRODUCER_PREFIX = re.compile(
    r"^(?:microsoft\s+(?:word|excel|powerpoint)|libreoffice)\s*-\s*", re.I
)
_GENERIC_TITLE = re.compile(
    r"^(?:untitled(?:\s+document)?|no\s+title|title|none|null|unknown|"
    r"(?:document|doc|book|presentation|slide|page|sheet)\s*\d*)$",
    re.I,
)
_OTHER_FILE_NAME = re.compile(
    r"^\S.*\.(?:html?|xhtml|docx?|dotx?|rtf|odt|ods|odp|txt|md|markdown|tex|xlsx?|pptx?|csv|"
    r"xml|indd|pages|key|numbers|ps|eps|ai|psd|png|jpe?g|gif|tiff?|bmp|svg|wpd|pub|eml|msg)$",
    re.I,
)


def named_title(raw: str) -> str | None:
    """``raw`` tidied, or None when it is empty, a placeholder or another file's name."""
    cleaned = _PRODUCER_PREFIX.sub("", " ".join(raw.split()))
    name = re.split(r"[\\/]", cleaned)[-1]  # "C:\\Users\\me\\policy.doc": its last part
    if not cleaned or _GENERIC_TITLE.match(cleaned) or _OTHER_FILE_NAME.match(name):
        return None
    return cleaned
