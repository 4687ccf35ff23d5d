"""Model output and document text reach HTML escaped; only our citation links are markup."""

from __future__ import annotations

from app.chat.records import Citation, Message
from app.chat.rendering import highlight_passage, render_answer

CITATION = Citation(1, 7, 3, "Doc <b>", 2, 0, 5, "snippet")


def message(content: str) -> Message:
    return Message(1, 1, "assistant", content, (CITATION,), 0.0)


def test_markup_in_answers_is_escaped_and_citations_link() -> None:
    html = str(render_answer(message('<img src="http://evil/x.png"> says [1] and [9]')))
    assert "<img" not in html and "&lt;img" in html
    assert '<a class="cite" href="/documents/3/pages/2?chunk=7&amp;answer=1#passage"' in html
    assert "[9]" in html and html.count("<a ") == 1  # no link for an uncited number
    assert "Doc &lt;b&gt;" in html


def test_passage_is_highlighted_and_everything_escaped() -> None:
    html = str(highlight_passage("<p>before</p>TARGET<script>x</script>", 13, 19))
    assert (
        html
        == '&lt;p&gt;before&lt;/p&gt;<mark id="passage">TARGET</mark>&lt;script&gt;x&lt;/script&gt;'
    )


def test_out_of_range_offsets_show_the_page_without_highlight() -> None:
    assert "<mark" not in str(highlight_passage("short", 3, 99))


def test_a_docx_table_on_the_page_is_a_table_and_the_passage_is_marked_in_its_cells() -> None:
    page = "Where to go\nLaptop | IT desk, room 212\nBadge | <Reception>\nThanks | a | b"
    start = page.index("IT desk")
    end = page.index("Reception") + len("Reception")
    html = str(highlight_passage(page, start, end))
    assert html.startswith("Where to go\n<table")
    assert "<tr><td>Laptop</td><td>" in html and "&lt;" in html and "<Reception>" not in html
    assert html.count("<mark") == 3 and html.count('id="passage"') == 1  # three cells
    assert "Thanks | a | b" in html  # three cells, not two: not part of the table
    # One line with a pipe is prose, not a table.
    assert "<table" not in str(highlight_passage("Use a | b for pipes.\nDone.", None, None))


def test_a_table_of_markdown_rows_is_shown_as_a_table_with_the_cited_rows_marked() -> None:
    """Parsers write a table as Markdown rows, one block each (blank lines between): the
    page shows it as a table, the header too, and marks the cells of the cited rows."""
    page = (
        "Plans\n\n| Plan | Deductible |\n\n| Silver | £1,250 |\n\n| Gold \\| Plus | £500 |"
        "\n\nPrices change in April."
    )
    start = page.index("| Silver")
    end = page.index("£500 |") + len("£500 |")
    html = str(highlight_passage(page, start, end))
    assert html.count("<table") == 1 and html.count("<tr>") == 3
    assert "<td> Plan </td>" in html
    assert '<td><mark id="passage"> Silver </mark></td>' in html
    assert "<td><mark> Gold \\| Plus </mark></td>" in html
    assert html.startswith("Plans") and html.endswith("Prices change in April.")
