"""One sync of one source: add new files, re-ingest changed ones, remove deleted ones.

Documents a sync brought in are claimed first (``sync_claims``); only claimed documents
are ever deleted by a sync, so a hand upload into the same collection stays whatever
happens in the source, even when a synced file has the very same bytes. Removals happen
only after the whole listing succeeded: a source that cannot be listed (an unmounted
directory, an unreachable bucket) fails its run and removes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.sources.readers import Entry, Reader, SourceUnavailable, TooLarge, supported
from app.sources.records import Source, SourceFile, SyncRun, Tally
from app.sources.store import SourceStore
from retrieval.library import Library
from retrieval.parsers import UnsupportedDocumentType
from retrieval.store import DocumentGone
from retrieval.uploads import content_hash

log = logging.getLogger(__name__)

OpenReader = Callable[[Source], Reader]


class Interrupted(Exception):
    """The server is stopping: the run ends here, removing nothing."""


@dataclass
class Syncer:
    store: SourceStore
    library: Library
    open_reader: OpenReader
    max_bytes: int
    stopping: threading.Event = field(default_factory=threading.Event)
    # Documents the last runs created, for a caller that ingests them itself (the CLI).
    created: list[int] = field(default_factory=list)

    def run(self, source: Source, trigger: str, run_id: int | None = None) -> SyncRun:
        """Sync ``source`` and store the run (``run_id``: one already started)."""
        run_id = run_id or self.store.start_run(source.id, trigger)
        tally = Tally()
        try:
            self.store.drop_stale_claims()
            self._sync(source, self.open_reader(source), tally)
        except SourceUnavailable as exc:
            self.store.finish_run(run_id, "failed", tally, str(exc))
        except Interrupted:
            self.store.finish_run(run_id, "interrupted", tally, "the server stopped")
        except Exception as exc:
            log.exception("sync of source %d failed", source.id)
            self.store.finish_run(run_id, "failed", tally, f"{type(exc).__name__}: {exc}")
        else:
            self.store.finish_run(run_id, "done", tally)
        run = self.store.run(run_id)
        assert run is not None
        return run

    def _sync(self, source: Source, reader: Reader, tally: Tally) -> None:
        known = self.store.files(source.id)
        present: set[str] = set()
        unchanged: list[tuple[str, int, str]] = []
        listed = 0
        for entry in reader.entries():
            if self.stopping.is_set():
                raise Interrupted
            listed += 1
            if entry.refused is not None:
                tally.skip(entry.path, entry.refused)
                continue
            if not supported(entry.path):
                tally.skip(entry.path, "unsupported type (by its extension)")
                continue
            present.add(entry.path)
            old = known.get(entry.path)
            if entry.error is not None:
                tally.fail(entry.path, entry.error)  # kept as it was: maybe back next time
            elif old is not None and (old.size, old.version) == (entry.size, entry.version):
                tally.unchanged += 1
                unchanged.append((entry.path, entry.size, entry.version))
            elif not self._take(source, reader, entry, old, tally, unchanged):
                present.discard(entry.path)  # now of a type the parsers refuse: gone
        if known and not listed:  # an unmounted share is an empty directory, not a deletion
            raise SourceUnavailable(
                f"the source lists no files but {len(known)} are on record (unmounted or "
                "emptied?); nothing was removed: delete the source to remove its documents"
            )
        self.store.touch(source.id, unchanged, time.time())
        for path in sorted(known.keys() - present):
            self.store.unlink(source.id, path)
            self.release(known[path].document_id)
            tally.removed += 1

    def _take(
        self,
        source: Source,
        reader: Reader,
        entry: Entry,
        old: SourceFile | None,
        tally: Tally,
        unchanged: list[tuple[str, int, str]],
    ) -> bool:
        """Read a new or possibly changed file and submit it; False when it is refused."""
        try:
            data = reader.read(entry, self.max_bytes)
        except (TooLarge, OSError) as exc:
            tally.fail(entry.path, str(exc) if isinstance(exc, TooLarge) else _oserror(exc))
            return True
        digest = content_hash(data)
        if old is not None and old.content_hash == digest:  # touched, not changed
            tally.unchanged += 1
            unchanged.append((entry.path, entry.size, entry.version))
            return True
        self.store.claim(source.collection_id, digest, source.id)
        try:
            document, created = self.library.submit(
                data=data, filename=entry.path, collection_id=source.collection_id
            )
        except UnsupportedDocumentType as exc:
            tally.skip(entry.path, str(exc))
            return False
        if created:
            self.created.append(document.id)
        self.store.link(
            source.id,
            entry.path,
            document_id=document.id,
            content_hash=digest,
            size=entry.size,
            version=entry.version,
            now=time.time(),
        )
        if old is None:
            tally.added += 1
        else:
            tally.changed += 1
            if old.document_id != document.id:
                self.release(old.document_id)
        return True

    def release(self, document_id: int) -> None:
        """Delete a document no source file holds any more, if a sync brought it in."""
        document = self.library.store.get_document(document_id)
        if document is None or self.store.linked(document_id):
            return
        if not self.store.claimed(document.collection_id, document.content_hash):
            return  # uploaded by hand (or before any sync): never a sync's to delete
        with contextlib.suppress(DocumentGone):
            self.library.delete(document_id)
        self.store.drop_claim(document.collection_id, document.content_hash)


def _oserror(exc: OSError) -> str:
    return f"cannot read: {exc.strerror or exc}"
