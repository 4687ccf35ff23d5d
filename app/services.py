"""Heavy resources, built in the Litestar lifespan and kept on ``app.state.services``.

SQLite opens at once, so uploads are accepted from the first second; models and the
vector index load in a background thread, and ``ready`` flips when they are in place.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from litestar import Litestar

from app.chat import ChatConfig, ChatService
from app.conversations import Conversations
from app.errors import NotReady
from app.settings import Settings
from llm.generator import FakeGenerator, Generator, LlamaConfig, LlamaGenerator
from llm.models import bundled_generator_model
from retrieval.db import Database
from retrieval.embedder import (
    Embedder,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    bundled_embedder_dir,
)
from retrieval.ingest import IngestConfig, IngestWorker
from retrieval.library import Library
from retrieval.parsers.isolated import IsolatedParser
from retrieval.search import Retriever
from retrieval.store import DocumentStore
from retrieval.uploads import UploadFiles
from retrieval.vector_sync import open_index

log = logging.getLogger(__name__)


@dataclass
class Models:
    embedder: Embedder
    generator: Generator
    retriever: Retriever
    chat: ChatService
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
    models: Models | None = None
    load_error: str | None = None
    _loaded: threading.Event = field(default_factory=threading.Event)

    @property
    def ready(self) -> bool:
        return self.models is not None and self.problem is None

    @property
    def problem(self) -> str | None:
        """Why the service is not ready, when something went wrong (not just starting)."""
        if self.load_error:
            return f"the models failed to load: {self.load_error}"
        if self.models is not None and not self.models.worker.alive:
            return "the ingestion worker has stopped; see the server log"
        return self.parser.problem

    def require_models(self) -> Models:
        if self.models is None:
            raise NotReady(self.problem) if self.problem else NotReady()
        return self.models

    def wait_until_loaded(self, timeout: float | None = None) -> bool:
        """Block until model loading has finished, successfully or not."""
        return self._loaded.wait(timeout)

    def mark_loaded(self) -> None:
        self._loaded.set()


def open_services(settings: Settings) -> Services:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.db_path)
    store = DocumentStore(db)
    return Services(
        settings=settings,
        db=db,
        store=store,
        library=Library(store, UploadFiles(settings.uploads_dir)),
        conversations=Conversations(db),
        collection_id=store.ensure_collection(),
        parser=IsolatedParser(
            timeout_s=settings.parse_timeout_s, memory_bytes=settings.parse_memory_mb << 20
        ),
    )


def load_models(services: Services) -> None:
    """Load the embedder, vector index and generator, then start ingestion."""
    settings = services.settings
    try:
        embedder = _embedder(settings)
        index, report = open_index(
            settings.index_dir,
            services.store,
            model_id=embedder.model_id,
            dimension=embedder.dimension,
        )
        log.info("vector index: %d vectors (%s)", index.count, report)
        generator = _generator(settings)
        worker = IngestWorker(
            services.store,
            services.library.files,
            embedder,
            index,
            settings.index_dir,
            IngestConfig(
                chunk_tokens=settings.chunk_tokens,
                chunk_overlap_tokens=settings.chunk_overlap_tokens,
                checkpoint_seconds=settings.index_checkpoint_seconds,
            ),
            parse=services.parser.parse,
        )
        retriever = Retriever(embedder, index, services.store)
        chat = ChatService(
            services.conversations,
            retriever,
            generator,
            ChatConfig(
                top_k=settings.top_k,
                min_score=settings.min_score,
                max_answer_tokens=settings.max_answer_tokens,
                temperature=settings.temperature,
            ),
        )
        requeued = services.store.requeue_without_vectors(embedder.model_id)
        if requeued:
            log.info("re-embedding %d documents with %s", requeued, embedder.model_id)
        services.library.attach_worker(worker)
        services.models = Models(embedder, generator, retriever, chat, worker)
        # Only the very first start gets the samples: deleting them is respected. Submitting
        # twice (a crash before the flag) is harmless: identical content is deduplicated.
        if settings.load_samples and not services.store.has_flag("samples_loaded"):
            _submit_samples(services, settings.samples_dir)
            services.store.set_flag("samples_loaded")
    except Exception as exc:
        log.exception("loading models failed")
        services.load_error = f"{type(exc).__name__}: {exc}"
    finally:
        services.mark_loaded()


def _embedder(settings: Settings) -> Embedder:
    if settings.embedder_backend == "fake":
        return HashingEmbedder()
    model_dir = settings.embedder_model or bundled_embedder_dir()
    return SentenceTransformerEmbedder(model_dir, batch_size=settings.embed_batch_size)


def _generator(settings: Settings) -> Generator:
    if settings.generator_backend == "fake":
        return FakeGenerator(
            context_tokens=settings.n_ctx, token_delay_s=settings.fake_token_delay_s
        )
    model_path = settings.generator_model or bundled_generator_model(settings.models_dir)
    return LlamaGenerator(
        LlamaConfig(
            model_path=model_path,
            n_ctx=settings.n_ctx,
            n_gpu_layers=settings.n_gpu_layers,
            n_threads=settings.n_threads,
        )
    )


def _submit_samples(services: Services, samples_dir: Path) -> None:
    for path in sorted(samples_dir.glob("*")):
        if path.is_file():
            services.library.submit(
                data=path.read_bytes(), filename=path.name, collection_id=services.collection_id
            )
            log.info("queued sample document %s", path.name)


@asynccontextmanager
async def services_lifespan(app: Litestar) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    services = await asyncio.to_thread(open_services, settings)
    app.state.services = services
    loader = threading.Thread(target=load_models, args=(services,), name="ragdesk-load")
    loader.start()
    try:
        yield
    finally:
        await asyncio.to_thread(_shutdown, services, loader)


def _shutdown(services: Services, loader: threading.Thread) -> None:
    loader.join()
    stopped = services.models.worker.stop() if services.models is not None else True
    if stopped:  # never pull the database from under a worker that is still writing
        services.db.close()
    services.parser.close()
