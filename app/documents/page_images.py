"""PDF pages as they look, for the viewer: rendered in a parser child of their own (a
hostile PDF costs that process its time budget), the last few kept in memory."""

from __future__ import annotations

import threading
from collections import OrderedDict

from retrieval.blobs import Originals
from retrieval.parsers.isolated import IsolatedParser

WIDTH_PX = 1000  # drawn at up to 2x on a high-density screen in the viewer's column
KEPT = 32  # rendered pages kept (about 100-300 KB each)
RENDER_TIMEOUT_S = 30.0
AT_ONCE = 2  # one page rendering, one waiting for the child; more are told to come back


class RendererBusy(Exception):
    """The renderer has a page to draw and one waiting: come back in a moment."""


class PageImages:
    def __init__(self, files: Originals, *, memory_bytes: int):
        self.files = files
        # Its own child: a render never waits behind an upload's two-minute parse.
        self.renderer = IsolatedParser(
            timeout_s=RENDER_TIMEOUT_S, memory_bytes=memory_bytes, processes=1
        )
        self._kept: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._lock = threading.Lock()
        # Never a queue of requests (each holding a thread and a PDF in memory) behind one
        # slow page: past AT_ONCE, RendererBusy.
        self._admitted = threading.BoundedSemaphore(AT_ONCE)

    def png(self, stored_name: str, page: int) -> bytes:
        """Page ``page`` of the stored PDF as a PNG. Raises FileNotFoundError, ParseError
        (no such page, unreadable), ParserUnavailable, RendererBusy or BlobsUnavailable."""
        key = (stored_name, page)
        with self._lock:
            if (kept := self._kept.get(key)) is not None:
                self._kept.move_to_end(key)
                return kept
        if not self._admitted.acquire(blocking=False):
            raise RendererBusy
        try:
            png = self.renderer.render_page(self.files.read(stored_name), page, WIDTH_PX)
        finally:
            self._admitted.release()
        with self._lock:
            self._kept[key] = png
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return png

    def close(self) -> None:
        self.renderer.close()
