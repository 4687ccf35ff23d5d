"""Model answers as HTML: markdown rendered on the server, then sanitised with an allow-list.

Model output is untrusted. Two layers keep it inert: markdown-it runs with raw HTML off
(``<script>`` stays text), no images (``![x](http://…)`` stays text, nothing remote
loads) and no reference definitions (so ``[1]: http://evil`` cannot hijack a citation);
then nh3 (ammonia) keeps only the tags and attributes listed here, and only http, https
and mailto links besides our own relative ones. Citation markers ``[n]`` become links to
the cited passage only when the answer really cites source ``n``.

Sentences no cited passage supports (``flagged``, as character offsets into the answer)
are wrapped in ``<span class="unsupported">`` with a small "no source" badge after them.
The offsets refer to the raw text, so private-use sentinels are put around each sentence
before parsing (after removing any the model wrote, so it cannot forge a marker) and turned
into spans in the token stream, never splitting an element: the markup stays well formed
and every piece of text around it is escaped as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup

from llm.citations import MARKER

TAGS = frozenset(
    {
        *("p", "br", "hr", "strong", "em", "del", "code", "pre", "blockquote"),
        *("ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "a", "span"),
        *("table", "thead", "tbody", "tr", "th", "td"),
    }
)
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "span": {"title"}}
CLASSES = {"a": {"cite"}, "span": {"stopped-mark", "unsupported", "no-source"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
# A stopped answer never had its second look: it is marked unverified as a whole.
STOPPED_TITLE = "Stopped before its end: not verified against your documents"


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable(["image", "reference", "html_block", "html_inline"])
    md.add_render_rule("fence", _fence)  # without the model-chosen language class
    return md


def _fence(self: object, tokens: list[Token], idx: int, *_: object) -> str:
    return f"<pre><code>{escape(tokens[idx].content, quote=False)}</code></pre>\n"


_MD = _parser()


# Private-use sentinels around a flagged sentence: one opener per reason, one closer.
OPENERS = {"\ue000": "no source", "\ue002": "not in the cited source"}
CLOSER = "\ue001"
_SENTINEL = re.compile("([\ue000-\ue002])")
UNSUPPORTED_TITLE = "No cited passage supports this sentence — check it"
BADGES = {"no source": "no source", "not in the cited source": "not in source"}
REASONS = {
    "no source": "it cites no source",
    "not in the cited source": "the passage it cites does not say this",
}


def render_markdown(
    text: str,
    cite: Mapping[int, tuple[str, str]] | None = None,
    stopped_marker: str | None = None,
    flagged: Sequence[tuple[int, int, str]] = (),
) -> Markup:
    """``text`` as sanitised HTML. ``cite`` maps a source number to (href, title) for the
    markers to link; ``stopped_marker`` is a trailing note shown as a badge, not as text;
    ``flagged`` are (start, end, reason) of the sentences no cited passage supports."""
    suffix = ""
    if stopped_marker and text.endswith(stopped_marker):
        text = text[: -len(stopped_marker)].rstrip()
        suffix = (
            f'<p><span class="stopped-mark" title="{STOPPED_TITLE}">{escape(stopped_marker)}'
            " · not verified</span></p>"
        )
    tokens = _MD.parse(_with_sentinels(text, flagged))
    _mark_unsupported(tokens)
    _link_citations(tokens, cite or {})
    html = _MD.renderer.render(tokens, _MD.options, {}) + suffix
    # Sanitised by an allow-list just above; no sentinel is left to reach the page.
    return Markup(_SENTINEL.sub("", sanitise(html)))  # noqa: S704


def sanitise(html: str) -> str:
    return nh3.clean(
        html,
        tags=set(TAGS),
        clean_content_tags={"script", "style"},
        attributes={tag: set(names) for tag, names in ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        allowed_classes={tag: set(names) for tag, names in CLASSES.items()},
        set_tag_attribute_values={"a": {"target": "_blank"}},
        link_rel="noopener noreferrer nofollow",
    )


def _link_citations(tokens: list[Token], cite: Mapping[int, tuple[str, str]]) -> None:
    """Replace ``[n]`` in plain text (not code, not inside another link) by a link."""
    for block in tokens:
        if block.type != "inline" or not block.children:
            continue
        children: list[Token] = []
        in_link = 0
        for token in block.children:
            in_link += {"link_open": 1, "link_close": -1}.get(token.type, 0)
            if token.type == "text" and not in_link and MARKER.search(token.content):
                children.extend(_split_markers(token.content, cite))
            else:
                children.append(token)
        block.children = children


def _split_markers(text: str, cite: Mapping[int, tuple[str, str]]) -> list[Token]:
    pieces: list[Token] = []
    position = 0
    for match in MARKER.finditer(text):
        number = int(match.group(1))
        target = cite.get(number)
        if target is None:
            continue  # not a source of this answer: the marker stays text
        pieces.append(_text(text[position : match.start()]))
        href, title = target
        # html_inline tokens are written out verbatim: every piece here is escaped.
        link = Token("html_inline", "", 0)
        link.content = (
            f'<a class="cite" href="{escape(href)}" title="{escape(title)}">[{number}]</a>'
        )
        pieces.append(link)
        position = match.end()
    pieces.append(_text(text[position:]))
    return [piece for piece in pieces if piece.type != "text" or piece.content]


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token


# --- unsupported sentences ----------------------------------------------------------------
# Block syntax at the start of a line that a sentinel must not precede (it would turn a
# list item, quote, heading or table row into a plain paragraph): list markers, quote
# markers, ATX heading marks, a table row's leading pipe.
_BLOCK_PREFIX = re.compile(
    r"(?:[ \t]*(?:>|[-*+](?=[ \t])|\d{1,9}[.)](?=[ \t])|#{1,6}(?=[ \t]|$)|\|))*"
)
_FENCE = re.compile(r"[ \t]*(?:`{3,}|~{3,})")
_CLOSING_HASHES = re.compile(r"[ \t]+#+$")
_LEADING = "*_~`| \t"
_TRAILING = "*_~` \t"


def _with_sentinels(text: str, flagged: Sequence[tuple[int, int, str]]) -> str:
    """``text`` without any sentinel of its own, with ours around each flagged span (spans
    out of range, overlapping an earlier one, or on a code fence line are left out)."""
    clean = _SENTINEL.sub  # the model's own sentinels go from every piece of its text
    pieces: list[str] = []
    position = 0
    for start, end, reason in sorted(flagged):
        opener = next((o for o, r in OPENERS.items() if r == reason), None)
        if opener is None or not position <= start < end <= len(text):
            continue
        bounds = _inline_bounds(text, start, end)
        if bounds is None:
            continue
        start, end = bounds
        pieces += [clean("", text[position:start]), opener, clean("", text[start:end]), CLOSER]
        position = end
    pieces.append(clean("", text[position:]))
    return "".join(pieces)


def _inline_bounds(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The span narrowed to the inline text of its line, so a sentinel changes no markdown
    structure: after the list, quote, heading or table markers that start the line, before
    a table row's last pipe or a heading's closing hashes, inside the emphasis delimiters,
    backticks, pipes and spaces at either end (next to a delimiter run a sentinel counts as
    a letter, which would stop "**" from opening or closing: "**Yes.**"; in a code span or
    a table cell it would keep spaces that are trimmed). None on a code fence line, or when
    nothing is left."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end == -1 else line_end
    prefix = _BLOCK_PREFIX.match(text, line_start)
    markers = prefix.group(0) if prefix else ""
    if _FENCE.match(text, line_start + len(markers)):
        return None
    start = max(start, line_start + len(markers))
    if not text[end:line_end].strip():  # the sentence ends the line
        body = text[start:end]
        if "#" in markers:
            body = _CLOSING_HASHES.sub("", body)
        end = start + len(body.rstrip(" \t|"))
    while start < end and text[start] in _LEADING:
        start += 1
    while end > start and text[end - 1] in _TRAILING and text[end - 2 : end - 1] != "\\":
        end -= 1
    return (start, end) if start < end else None


class _Marking:
    """Walks the token stream in document order, turning sentinels into spans. A span never
    crosses an element boundary: it closes before a tag and opens again after it."""

    def __init__(self) -> None:
        self.reason: str | None = None  # inside a flagged sentence, and why
        self.span_open = False

    def block(self, token: Token) -> None:
        if token.type == "inline" and token.children is not None:
            token.children = self.inline(token.children)
        elif token.nesting == -1 and token.type not in ("td_close", "th_close"):
            self.reason = None  # a sentence never spans blocks: a dropped closer ends here
        else:  # code blocks and the like: the sentinels go, the sentence is shown as code
            token.content = self.consume(token.content)

    def inline(self, children: list[Token]) -> list[Token]:
        out: list[Token] = []
        for token in children:
            if token.type == "text":
                for piece in _SENTINEL.split(token.content):
                    if piece in OPENERS:
                        self.close(out)
                        self.reason = OPENERS[piece]
                    elif piece == CLOSER:
                        self.finish(out)
                    elif piece:
                        self.open(out)
                        out.append(_text(piece))
            elif token.nesting:  # a tag: the span closes before it, opens again after
                self.close(out)
                for name, value in list(token.attrs.items()):
                    if isinstance(value, str):
                        token.attrs[name] = self.consume(value)
                out.append(token)
            else:  # code, a line break: marked whole when the sentence is around or in it
                self.leaf(token, out)
        self.close(out)
        return out

    def leaf(self, token: Token, out: list[Token]) -> None:
        sentinels = _SENTINEL.findall(token.content)
        token.content = _SENTINEL.sub("", token.content)
        opened = [OPENERS[s] for s in sentinels if s in OPENERS]
        reason = self.reason or (opened[0] if opened else None)
        if reason:
            self.reason = reason
            self.open(out)
        out.append(token)
        for sentinel in sentinels:
            if sentinel == CLOSER:
                self.finish(out)
            else:
                self.reason = OPENERS[sentinel]

    def open(self, out: list[Token]) -> None:
        if self.reason and not self.span_open:
            title = escape(_title(self.reason))
            out.append(_html(f'<span class="unsupported" title="{title}">'))
            self.span_open = True

    def close(self, out: list[Token]) -> None:
        if self.span_open:
            out.append(_html("</span>"))
            self.span_open = False

    def finish(self, out: list[Token]) -> None:
        """The end of a flagged sentence: its span closes and its badge follows."""
        self.close(out)
        if self.reason:
            title, badge = escape(_title(self.reason)), escape(BADGES[self.reason])
            out.append(_html(f'<span class="no-source" title="{title}">{badge}</span>'))
        self.reason = None

    def consume(self, content: str) -> str:
        """``content`` without sentinels, following the ones it had (in code or an attribute
        the sentence shows no marker, but the text after it is marked right)."""
        for sentinel in _SENTINEL.findall(content):
            self.reason = OPENERS.get(sentinel)
        return _SENTINEL.sub("", content)


def _mark_unsupported(tokens: list[Token]) -> None:
    marking = _Marking()
    for token in tokens:
        marking.block(token)


def _title(reason: str) -> str:
    return f"{UNSUPPORTED_TITLE} ({REASONS.get(reason, reason)})."


def _html(content: str) -> Token:
    token = Token("html_inline", "", 0)
    token.content = content
    return token
