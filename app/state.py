"""What a running app holds (``app.state.services``): the database, the libraries' objects and
the models once loaded, and whether it is ready. app/lifespan.py builds and tears it down.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from app.auth.service import Auth
from app.chat.conversations import Conversations
from app.chat.service import ChatService
from app.chat.stop_relay import StopRelay
from app.config.settings import Settings
from app.documents.page_images import PageImages
from app.errors import NotReady
from app.metrics import Metrics
from app.ops.database_watch import DatabaseWatch
from llm.backend import Backend
from llm.registry import Registry
from retrieval.db import Database
from retrieval.disk import DiskWatch
from retrieval.embedder import Embedder
from retrieval.ingest import IngestWorker
from retrieval.library import Library
from retrieval.parsers.isolated import IsolatedParser
from retrieval.search import Retriever
from retrieval.store import DocumentStore

# Load errors read "the <component> failed to load: …".
LOADED_COMPONENTS = ("embedder", "generator")


@dataclass
class Retrieval:
    embedder: Embedder
    retriever: Retriever
    worker: IngestWorker


@dataclass
class Services:
    settings: Settings
    db: Database
    store: DocumentStore
    library: Library
    conversations: Conversations
    collection_id: int
    parser: IsolatedParser
    page_images: PageImages
    auth: Auth
    metrics: Metrics
    disk: DiskWatch
    models: Registry | None = None
    retrieval: Retrieval | None = None
    chat: ChatService | None = None
    stop_relay: StopRelay | None = None  # several fronts on PostgreSQL: Stop reaches them all
    load_errors: list[str] = field(default_factory=list)
    _loaded: threading.Event = field(default_factory=threading.Event)
    # PostgreSQL out of reach, too slow or read-only: readiness says so (a cached check)
    database: DatabaseWatch = field(init=False)

    def __post_init__(self) -> None:
        self.database = DatabaseWatch.of(self.db)
        if self.database.watched:
            self.metrics.watch_database(self.database)

    @property
    def ready(self) -> bool:
        if self.settings.server.role == "worker":  # ingestion only: no chat model to load
            return self.retrieval is not None and self.problem is None
        return self.retrieval is not None and self.chat is not None and self.problem is None

    @property
    def problem(self) -> str | None:
        """Why the service is not ready, when something went wrong (not just starting)."""
        if database := self.database.problem():  # nothing works without it
            return database
        if self.load_errors:
            return "; ".join(self.load_errors)
        if self.retrieval is not None and not self.retrieval.worker.alive:
            return "the ingestion worker has stopped; see the server log"
        # A bucket or shared volume out of reach: a cached check, never a wait here.
        return self.library.files.problem() or self.parser.problem

    @property
    def problem_kind(self) -> str:
        """What went wrong, in words that never come from the error itself: the error's
        text names model files and exception messages, which only admins may see."""
        kinds = ["the database cannot be reached"] if self.database.problem() else []
        kinds += [
            f"the {component} failed to load"
            for component in LOADED_COMPONENTS
            if any(error.startswith(f"the {component} ") for error in self.load_errors)
        ]
        if self.load_errors and not kinds:
            kinds.append("a component failed to load")
        if self.retrieval is not None and not self.retrieval.worker.alive:
            kinds.append("the ingestion worker has stopped")
        if self.library.files.problem():
            kinds.append("the storage of uploaded files cannot be reached")
        if self.parser.problem:
            kinds.append("the document parser does not start")
        return "; ".join(kinds) or "not ready"

    def generating(self) -> bool:
        """A model on this machine's CPU is prefilling or decoding, or has requests waiting:
        ingestion defers to it (a GPU or remote model does not compete for the cores)."""
        return any(b.device == "CPU" and not b.idle for b in self.loaded_models())

    def problem_told(self, *, monitor: bool) -> str | None:
        """The problem as a caller may hear it: its text for an admin (``monitor``:
        ``Principal.may_monitor``), its kind in fixed words for anyone else."""
        problem = self.problem
        if not problem:
            return None
        return problem if monitor else self.problem_kind

    def _not_ready(self) -> NotReady:
        return NotReady(self.problem_kind) if self.problem else NotReady()

    def require_retrieval(self) -> Retrieval:
        if self.retrieval is None:
            raise self._not_ready()
        return self.retrieval

    def require_models(self) -> Registry:
        if self.models is None:
            raise self._not_ready()
        return self.models

    def loaded_models(self) -> list[Backend]:
        return self.models.loaded() if self.models is not None else []

    def require_chat(self) -> ChatService:
        if self.chat is None:
            raise self._not_ready()
        return self.chat

    def wait_until_loaded(self, timeout: float | None = None) -> bool:
        """Block until model loading has finished, successfully or not."""
        return self._loaded.wait(timeout)

    def mark_loaded(self) -> None:
        self._loaded.set()
