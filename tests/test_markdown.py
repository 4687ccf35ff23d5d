"""Answers render as markdown; hostile model output never becomes markup or a remote load."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from app.chat.markdown import TAGS, render_markdown

CITE = {1: ("/documents/3/pages/2?chunk=7#passage", 'Guide "<b>", page 2')}


class _Tags(HTMLParser):
    """Every start tag with its attributes, as a browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def test_lists_tables_and_code_blocks_render() -> None:
    html = str(
        render_markdown(
            "Steps:\n\n1. **Open** the menu\n2. Choose *Upload*\n\n"
            "| Format | Pages |\n| --- | ---: |\n| PDF | yes |\n\n"
            "```python\nprint('<b>hi</b>')\n```\n\nUse `ragdesk serve`."
        )
    )
    assert "<ol>" in html and "<li><strong>Open</strong> the menu</li>" in html
    assert "<em>Upload</em>" in html
    assert "<table>" in html and "<th>Format</th>" in html and "<td>PDF</td>" in html
    assert "<pre><code>print('&lt;b&gt;hi&lt;/b&gt;')\n</code></pre>" in html
    assert "<code>ragdesk serve</code>" in html
    assert "style=" not in html  # the CSP forbids inline style: table alignment is dropped


def test_cited_markers_link_to_the_passage_and_others_stay_text() -> None:
    html = str(render_markdown("Noon [1], not [2]. Code: `[1]`.", CITE))
    links = [attrs for tag, attrs in tags(html) if tag == "a"]
    assert links == [
        {
            "class": "cite",
            "href": "/documents/3/pages/2?chunk=7#passage",
            "title": 'Guide "<b>", page 2',
            "target": "_blank",
            "rel": "noopener noreferrer nofollow",
        }
    ]
    assert "[2]" in html and "<code>[1]</code>" in html


def test_a_reference_definition_cannot_hijack_a_citation() -> None:
    html = str(render_markdown("See [1].\n\n[1]: http://evil.example/", CITE))
    hrefs = [attrs.get("href") for tag, attrs in tags(html) if tag == "a"]
    assert hrefs and all(href == CITE[1][0] for href in hrefs)


HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "![logo](http://evil.example/x.png)",
    '![x](data:image/svg+xml,<svg onload="alert(1)">)',
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](  javascript&#58;alert(1))",
    "[click](vbscript:msgbox(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "<a href=javascript:alert(1)>x</a>",
    '<iframe src="http://evil.example"></iframe>',
    '<div style="background:url(http://evil.example)">x</div>',
    "<style>body{background:url(http://evil.example)}</style>",
    "<svg><script>alert(1)</script></svg>",
    '<form action="http://evil.example"><input name=x></form>',
    "<p onclick=alert(1)>x</p>",
    '<a href="http://evil.example" onmouseover="alert(1)">x</a>',
    "```\n</code></pre><script>alert(1)</script>\n```",
    '```js" onmouseover="alert(1)\ncode\n```',
    "`<img src=x onerror=alert(1)>`",
    "| a |\n|---|\n| <img src=x onerror=alert(1)> |",
    "<!-- --><script>alert(1)</script><!-- -->",
    '[x](http://ok.example "t" onmouseover=alert(1))',
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_output_never_becomes_markup(text: str) -> None:
    html = str(render_markdown(f"Answer: {text} [1]", CITE, stopped_marker="(stopped)"))
    for tag, attrs in tags(html):
        assert tag in TAGS, (tag, html)
        assert tag not in ("img", "script", "iframe", "style", "svg", "form"), html
        assert not any(name.startswith("on") or name == "style" for name in attrs), html
        href = (attrs.get("href") or "").strip().lower()
        assert not href.startswith(("javascript:", "vbscript:", "data:")), html
        assert "src" not in attrs, html


def test_the_stopped_marker_becomes_a_badge() -> None:
    html = str(render_markdown("Partial *answer* …(stopped)", stopped_marker="(stopped)"))
    assert html.endswith(
        '<p><span class="stopped-mark" title="Stopped before its end: not verified against'
        ' your documents">(stopped) · not verified</span></p>'
    )
    assert "<em>answer</em>" in html
    # A span class the model writes itself is not kept (raw HTML is text).
    hostile = str(render_markdown('<span class="stopped-mark">x</span>'))
    assert "<span" not in hostile


def test_a_table_answer_renders_as_a_table_once_attributed_and_checked() -> None:
    """The finished answer went through attribution and the support check; its table must
    still be a table, each row's marker linked in its last cell, the header unflagged."""
    from llm.citations import attribute
    from llm.prompt import Source
    from llm.support import unsupported_sentences

    source = Source(
        1, "Plans", 1, "| Plan | Yearly deductible |\n| --- | --- |\n| Silver | £1,250 |"
    )
    raw = "Plans:\n\n| Plan | Yearly deductible |\n|---|---|\n| Silver | £1,250 |"
    answer = attribute(raw, [source])
    flagged = [(u.start, u.end, u.reason) for u in unsupported_sentences(answer, {1: source})]
    html = str(render_markdown(answer, {1: ("/p", "Plans")}, flagged=flagged))
    assert flagged == []
    assert "<th>Plan</th>" in html and "<th>Yearly deductible</th>" in html
    assert '£1,250 <a class="cite" href="/p"' in html
    assert "|" not in html
