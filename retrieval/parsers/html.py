"""HTML to headings and paragraphs with selectolax; scripts, styles and chrome are dropped."""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser as HTMLParser
from selectolax.lexbor import LexborNode as Node

from retrieval.parsers.text import paragraphs, single_page
from retrieval.types import Block, ParsedDocument

_DROPPED = "script, style, noscript, template, svg, iframe, object, nav, header > nav, form"
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = _HEADINGS | {
    "p",
    "li",
    "pre",
    "blockquote",
    "tr",
    "dt",
    "dd",
    "figcaption",
    "caption",
    "address",
}


def parse_html(text: str, fallback_title: str) -> ParsedDocument:
    tree = HTMLParser(text)
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node else ""
    for node in tree.css(_DROPPED):
        node.decompose()
    root = tree.body or tree.root
    blocks = _structural_blocks(root) if root is not None else []
    if not blocks and root is not None:
        blocks = paragraphs(root.text(separator="\n"))
    if not title:
        title = next((b.text for b in blocks if b.is_heading), fallback_title)
    return single_page(title, blocks)


def _structural_blocks(root: Node) -> list[Block]:
    blocks = []
    for node in root.css(", ".join(sorted(_BLOCKS))):
        if _inside_block(node):
            continue  # the enclosing block already carries this text
        if node.tag == "tr":
            cells = [" ".join(cell.text().split()) for cell in node.css("td, th")]
            text = " | ".join(cell for cell in cells if cell)
        elif node.tag == "pre":
            text = node.text().strip("\n")
        else:
            text = " ".join(node.text(separator=" ").split())
        if text:
            blocks.append(Block(text, is_heading=node.tag in _HEADINGS))
    return blocks


def _inside_block(node: Node) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.tag in _BLOCKS:
            return True
        parent = parent.parent
    return False
