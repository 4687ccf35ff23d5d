"""Start-up and shutdown, in the Litestar lifespan.

SQLite opens at once, so uploads are accepted from the first second. A background thread
then loads, in two independent steps, the retrieval side (embedder, vector index,
ingestion) and the chat side (generator): a broken generator setting never stops
documents from being ingested and searched. ``Services.ready`` flips when both are in
place.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from litestar import Litestar

from app.auth.scoped_search import ScopedRetriever
from app.auth.service import ensure_first_admin, open_auth
from app.chat.conversations import Conversations
from app.chat.service import ChatConfig, ChatService
from app.chat.stop_relay import StopRelay
from app.config.originals import open_originals
from app.config.retrieval import (
    build_embedder,
    build_parser,
    data_dir_leases,
    open_vector_index,
)
from app.config.search_stages import batched, reranker
from app.config.settings import Settings
from app.documents.page_images import PageImages
from app.metrics import Metrics
from app.migrations import open_database
from app.state import Retrieval, Services
from app.usage.events import UsageRecorder
from llm.engine.kv_disk import give_back_space, sweep_kv_leftovers
from llm.models import sweep_partial_models
from llm.params import ModelUnavailable
from llm.registry import Registry
from retrieval.blobs import BlobsUnavailable
from retrieval.disk import DiskWatch
from retrieval.ingest import IngestWorker
from retrieval.leftovers import sweep_data_leftovers
from retrieval.library import Library
from retrieval.search import Retriever
from retrieval.store import DocumentStore

log = logging.getLogger(__name__)


def open_services(settings: Settings) -> Services:
    settings.server.data_dir.mkdir(parents=True, exist_ok=True)
    db = open_database(settings)
    store = DocumentStore(db)
    files = open_originals(settings)
    disk = DiskWatch(settings.server.data_dir)
    kv_floor = settings.generation.kv_disk_min_free_bytes
    disk.reclaimers.append(lambda: give_back_space(settings.kv_dir, kv_floor))
    services: Services = Services(
        settings=settings,
        db=db,
        store=store,
        library=Library(store, files),
        conversations=Conversations(db),
        collection_id=store.ensure_collection(),
        parser=build_parser(settings),
        page_images=PageImages(files, memory_bytes=settings.ingest.parse_memory_bytes),
        metrics=Metrics(
            lambda: services.loaded_models(),
            lambda: services.retrieval.worker if services.retrieval is not None else None,
            disk,
        ),
        auth=open_auth(settings, db),
        disk=disk,
    )
    ensure_first_admin(services.auth)
    _sweep_crash_leftovers(services)
    return services


def _sweep_crash_leftovers(services: Services) -> None:
    """What a kill can leave (temp files of index saves, uploads and KV states, originals
    whose row was deleted): before any request or the load thread can be writing."""
    settings = services.settings
    try:
        sweep_data_leftovers(settings.index_dir, services.library)
    except BlobsUnavailable as exc:  # the server starts anyway; readiness says why
        log.warning("uploaded originals not swept: %s", exc)
    sweep_kv_leftovers(settings.kv_dir)
    sweep_partial_models(settings.models_dir)


def load_models(services: Services) -> None:
    """Load the retrieval side and start ingestion, then the models; each may fail alone."""
    try:
        services.retrieval = _load_retrieval(services)
    except Exception as exc:
        log.exception("loading the embedder or the vector index failed")
        services.load_errors.append(f"the embedder failed to load: {type(exc).__name__}: {exc}")
    if services.settings.server.role == "worker":  # ingestion only: no chat model
        services.mark_loaded()
        return
    try:
        from app.config.models import build_registry  # imports llm.local: llama.cpp, on use

        services.models = build_registry(services.settings, services.metrics)
        services.models.get(services.settings.generation.chat_model)  # load the chat model now
        if services.retrieval is not None:
            services.chat = _load_chat(services, services.retrieval.retriever, services.models)
    except Exception as exc:
        log.exception("loading the generator failed")
        cause = exc.__cause__ if isinstance(exc, ModelUnavailable) and exc.__cause__ else exc
        services.load_errors.append(
            f"the generator failed to load: {type(cause).__name__}: {cause}"
        )
    services.mark_loaded()


def _load_retrieval(services: Services) -> Retrieval:
    settings = services.settings
    embedder = batched(settings, build_embedder(settings), busy=services.generating)
    index, report = open_vector_index(settings, services.store, embedder)
    log.info("vector index: %d vectors (%s)", index.count, report)
    worker = IngestWorker(
        services.store,
        services.library.files,
        embedder,
        index,
        settings.index_dir,
        settings.ingest.config(),
        parse=services.parser.parse,
        locate=services.parser.passage_boxes,
        parse_with_ocr=services.parser.parse_with_ocr,
        leases=data_dir_leases(services.db, settings),
    )
    requeued = services.store.requeue_without_vectors(embedder.model_id)
    if requeued:
        log.info("re-embedding %d documents with %s", requeued, embedder.model_id)
    services.disk.reclaimers.append(worker.give_back_space)
    # A web front ingests nothing: a worker's poll takes the uploads from the database.
    services.library.attach_worker(worker, start=settings.server.role != "web")
    # Only the very first start gets the samples: deleting them is respected. Submitting
    # twice (a crash before the flag) is harmless: identical content is deduplicated.
    if settings.server.load_samples and not services.store.has_flag("samples_loaded"):
        try:
            _submit_samples(services, settings.samples_dir)
            services.store.set_flag("samples_loaded")
        except BlobsUnavailable as exc:  # not a reason to go without search: next start
            log.warning("the sample documents were not loaded: %s", exc)
    search = settings.search.config()
    # Scoped: every search served for a request sees only collections its principal may read.
    retriever = ScopedRetriever(embedder, index, services.store, search, reranker(settings))
    return Retrieval(embedder, retriever, worker)


def _load_chat(services: Services, retriever: Retriever, models: Registry) -> ChatService:
    chat = ChatService(
        services.conversations, retriever, models, ChatConfig.from_settings(services.settings)
    )
    chat.prefetcher.count = services.metrics.prefetched
    # one usage event per answer; unanswered questions embedded for the content gaps
    chat.on_finished = UsageRecorder(services.db, retriever.embedder).listener
    return chat


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
    services.stop_relay = _stop_relay(services, asyncio.get_running_loop())
    loader = threading.Thread(target=load_models, args=(services,), name="ragdesk-load")
    loader.start()
    try:
        yield
    finally:
        app.state.work_left_running = not await asyncio.to_thread(_shutdown, services, loader)


def _stop_relay(services: Services, loop: asyncio.AbstractEventLoop) -> StopRelay | None:
    """On PostgreSQL (several fronts), Stop requests travel between fronts."""
    from retrieval.pg import PostgresDatabase

    if not isinstance(services.db, PostgresDatabase):
        return None

    def stop_here(question_id: int) -> bool:
        return services.chat.stop(question_id) if services.chat is not None else False

    return StopRelay(services.db, stop_here, loop)


def _shutdown(services: Services, loader: threading.Thread) -> bool:
    """Stop everything; False when the ingestion worker outlived its bound (the process
    must then end without finalising the interpreter: see ``app.cli``)."""
    if services.stop_relay is not None:
        services.stop_relay.close()
    loader.join()
    if services.models is not None:
        services.models.close()
    stopped = services.retrieval.worker.stop() if services.retrieval is not None else True
    if stopped:  # never pull the database from under a worker that is still writing
        services.db.close()
    services.parser.close()
    services.page_images.close()
    return stopped
