"""Model answers as HTML: markdown rendered on the server, then sanitised with an allow-list.

Model output is untrusted. Two layers keep it inert: markdown-it runs with raw HTML off
(``<script>`` stays text), no images (``![x](http://…)`` stays text, nothing remote
loads) and no reference definitions (so ``[1]: http://evil`` cannot hijack a citation);
then nh3 (ammonia) keeps only the tags and attributes listed here, and only http, https
and mailto links besides our own relative ones. Citation markers ``[n]`` become links to
the cited passage only when the answer really cites source ``n``.
"""

from __future__ import annotations

from collections.abc import Mapping
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
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}
CLASSES = {"a": {"cite"}, "span": {"stopped-mark"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable(["image", "reference", "html_block", "html_inline"])
    md.add_render_rule("fence", _fence)  # without the model-chosen language class
    return md


def _fence(self: object, tokens: list[Token], idx: int, *_: object) -> str:
    return f"<pre><code>{escape(tokens[idx].content, quote=False)}</code></pre>\n"


_MD = _parser()


def render_markdown(
    text: str,
    cite: Mapping[int, tuple[str, str]] | None = None,
    stopped_marker: str | None = None,
) -> Markup:
    """``text`` as sanitised HTML. ``cite`` maps a source number to (href, title) for the
    markers to link; ``stopped_marker`` is a trailing note shown as a badge, not as text."""
    suffix = ""
    if stopped_marker and text.endswith(stopped_marker):
        text = text[: -len(stopped_marker)].rstrip()
        suffix = f'<p><span class="stopped-mark">{escape(stopped_marker)}</span></p>'
    tokens = _MD.parse(text)
    _link_citations(tokens, cite or {})
    html = _MD.renderer.render(tokens, _MD.options, {}) + suffix
    return Markup(sanitise(html))  # noqa: S704 - sanitised by an allow-list just above


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
        target = cite.get(int(match.group(1)))
        if target is None:
            continue  # not a source of this answer: the marker stays text
        pieces.append(_text(text[position : match.start()]))
        href, title = target
        # html_inline tokens are written out verbatim: every piece here is escaped.
        link = Token("html_inline", "", 0)
        link.content = (
            f'<a class="cite" href="{escape(href)}" title="{escape(title)}">'
            f"[{int(match.group(1))}]</a>"
        )
        pieces.append(link)
        position = match.end()
    pieces.append(_text(text[position:]))
    return [piece for piece in pieces if piece.type != "text" or piece.content]


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token
