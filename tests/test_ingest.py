"""Ingestion against a real SQLite file and FAISS index: statuses, resumption, deletes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from retrieval.index import FaissIndex
from retrieval.ingest import IngestWorker
from retrieval.parsers import parse_document
from retrieval.types import DocumentKind, DocumentStatus, ParsedDocument
from tests.conftest import wait_for
from tests.documents import encrypt_pdf, make_pdf
from tests.retrieval_kit import Kit, make_kit

TEXT = (
    b"# Leave\n\nStaff receive 28 days of paid leave.\n\n# Travel\n\nMeals abroad: 45 euros a day."
)


def test_document_goes_through_each_status_to_indexed(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    document, created = kit.library.submit(
        data=TEXT, filename="p.md", collection_id=kit.collection_id
    )
    assert created and document.status is DocumentStatus.QUEUED
    worker.ingest(document.id)
    stored = kit.store.get_document(document.id)
    assert stored is not None and stored.status is DocumentStatus.INDEXED
    assert stored.chunk_count == index.count == 2
    assert kit.store.page_text(document.id, 1) is not None
    ids = kit.store.embedded_chunk_ids(kit.embedder.model_id)
    assert sorted(index.ids().tolist()) == sorted(ids.tolist())


def test_pdf_chunks_keep_their_pages(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    data = make_pdf(["Cover page text", "The parking fee is 4 euros per day."])
    document, _ = kit.library.submit(data=data, filename="f.pdf", collection_id=kit.collection_id)
    kit.worker(index).ingest(document.id)
    vector = kit.embedder.embed_batch(["parking fee per day"])[0]
    [(chunk_id, _)] = index.search(vector, 1)
    hit = kit.store.chunk(chunk_id)
    assert hit is not None and hit.page == 2
    page = kit.store.page_text(document.id, 2)
    assert page is not None and page[hit.start : hit.end] == hit.text


def test_worker_resumes_unfinished_documents_on_start(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    first, _ = kit.library.submit(data=TEXT, filename="a.md", collection_id=kit.collection_id)
    second, _ = kit.library.submit(
        data=b"other text", filename="b.txt", collection_id=kit.collection_id
    )
    kit.store.set_status(second.id, DocumentStatus.EMBEDDING)  # as if a crash hit mid-way
    index, _ = kit.open_index()
    worker = kit.worker(index)
    worker.start()
    try:
        for document_id in (first.id, second.id):
            wait_for(lambda d=document_id: kit.store.get_document(d).status.is_terminal)  # type: ignore[union-attr]
    finally:
        worker.stop()
    statuses = {kit.store.get_document(d).status for d in (first.id, second.id)}  # type: ignore[union-attr]
    assert statuses == {DocumentStatus.INDEXED}


def test_failure_reason_is_recorded_and_worker_keeps_going(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    bad, _ = kit.library.submit(
        data=b"%PDF-1.7 junk", filename="x.pdf", collection_id=kit.collection_id
    )
    good, _ = kit.library.submit(data=TEXT, filename="ok.md", collection_id=kit.collection_id)
    worker.ingest(bad.id)
    worker.ingest(good.id)
    failed = kit.store.get_document(bad.id)
    assert failed is not None and failed.status is DocumentStatus.FAILED and failed.error
    assert kit.store.get_document(good.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]


def test_delete_removes_rows_vectors_and_unshared_file(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    kit.library.attach_worker(kit.worker(index))
    try:
        document, _ = kit.library.submit(
            data=TEXT, filename="a.md", collection_id=kit.collection_id
        )
        # The row says indexed once SQLite has the vectors; FAISS gets them a moment later.
        wait_for(lambda: kit.store.get_document(document.id).status.is_terminal)  # type: ignore[union-attr]
        wait_for(lambda: index.count > 0)
        path = kit.library.files.path(document.stored_name)
        assert path.exists()
        kit.library.delete(document.id)
        assert index.count == 0
        assert not path.exists()
        assert kit.store.get_document(document.id) is None
        assert len(kit.store.embedded_chunk_ids(kit.embedder.model_id)) == 0
    finally:
        assert kit.library.worker is not None
        kit.library.worker.stop()


def test_deleted_while_queued_is_skipped(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    document, _ = kit.library.submit(data=TEXT, filename="a.md", collection_id=kit.collection_id)
    kit.library.delete(document.id)
    kit.worker(index).ingest(document.id)  # nothing to do, nothing raised
    assert index.count == 0


def test_vectors_round_trip_through_sqlite(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    document, _ = kit.library.submit(data=TEXT, filename="a.md", collection_id=kit.collection_id)
    kit.worker(index).ingest(document.id)
    ids = kit.store.embedded_chunk_ids(kit.embedder.model_id)
    vectors = kit.store.vectors(ids, kit.embedder.dimension)
    assert vectors.shape == (len(ids), kit.embedder.dimension)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_deleting_one_document_mid_batch_leaves_the_others_indexed(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    keep, _ = kit.library.submit(data=TEXT, filename="keep.md", collection_id=kit.collection_id)
    drop, _ = kit.library.submit(
        data=b"short lived", filename="drop.txt", collection_id=kit.collection_id
    )
    embed = kit.embedder.embed_batch

    def embed_while_a_user_deletes(texts):  # type: ignore[no-untyped-def]
        kit.library.delete(drop.id)
        return embed(texts)

    kit.embedder.embed_batch = embed_while_a_user_deletes  # type: ignore[method-assign]
    worker.ingest_many([keep.id, drop.id])
    kept = kit.store.get_document(keep.id)
    assert kept is not None and kept.status is DocumentStatus.INDEXED
    assert kit.store.get_document(drop.id) is None
    assert sorted(index.ids().tolist()) == sorted(
        kit.store.embedded_chunk_ids(kit.embedder.model_id).tolist()
    )


def test_a_failed_checkpoint_is_retried_and_the_worker_survives(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index, checkpoint_seconds=0.05)
    save = index.save
    attempts: list[int] = []

    def flaky_save(directory):  # type: ignore[no-untyped-def]
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("FAISS could not serialise")
        return save(directory)

    index.save = flaky_save  # type: ignore[method-assign]
    kit.library.attach_worker(worker)
    try:
        kit.library.submit(data=TEXT, filename="a.md", collection_id=kit.collection_id)
        wait_for(lambda: len(attempts) >= 2)
        assert worker.alive
        second, _ = kit.library.submit(
            data=b"later text", filename="b.txt", collection_id=kit.collection_id
        )
        wait_for(lambda: kit.store.get_document(second.id).status.is_terminal)  # type: ignore[union-attr]
    finally:
        assert worker.stop()
    reopened, report = kit.open_index()
    assert report.loaded_from_disk and reopened.count == index.count


def test_stop_does_not_wait_for_the_backlog(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    parsing, release = threading.Event(), threading.Event()

    def held_parse(data: bytes, kind: DocumentKind, filename: str) -> ParsedDocument:
        parsing.set()
        release.wait(30)  # the first parses are under way when stop() is called
        return parse_document(data, kind, filename)

    worker.parse = held_parse
    ids = [
        kit.library.submit(data=f"doc {i} text".encode(), filename=f"{i}.txt", collection_id=1)[
            0
        ].id
        for i in range(300)
    ]
    kit.library.attach_worker(worker)
    assert parsing.wait(30)
    stopping = threading.Thread(target=lambda: stopped.append(worker.stop(timeout=10)))
    stopped: list[bool] = []
    stopping.start()
    wait_for(worker._stopping.is_set)
    release.set()
    stopping.join(30)
    assert stopped == [True]
    statuses = {kit.store.get_document(i).status for i in ids}  # type: ignore[union-attr]
    assert DocumentStatus.QUEUED in statuses  # the rest waits in SQLite for the next start
    assert not worker.alive


def test_one_bad_batch_embedding_falls_back_to_one_by_one(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    good, _ = kit.library.submit(data=TEXT, filename="a.md", collection_id=1)
    poison, _ = kit.library.submit(data=b"poison words here", filename="p.txt", collection_id=1)
    embed = kit.embedder.embed_batch

    def embed_unless_poisoned(texts):  # type: ignore[no-untyped-def]
        if any("poison" in text for text in texts):
            raise RuntimeError("CUDA out of memory")
        return embed(texts)

    kit.embedder.embed_batch = embed_unless_poisoned  # type: ignore[method-assign]
    worker.ingest_many([good.id, poison.id])
    assert kit.store.get_document(good.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]
    assert kit.store.get_document(poison.id).status is DocumentStatus.FAILED  # type: ignore[union-attr]


def test_one_users_slow_file_does_not_hold_up_another_users_upload(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    release = threading.Event()

    def parse(data: bytes, kind: DocumentKind, filename: str) -> ParsedDocument:
        if filename.startswith("slow"):
            release.wait(60)  # a pathological file, parsing for the whole time budget
        return parse_document(data, kind, filename)

    worker.parse = parse
    theirs = kit.store.ensure_collection("another team")
    kit.library.attach_worker(worker)
    try:
        slow, _ = kit.library.submit(data=TEXT, filename="slow.md", collection_id=1)
        wait_for(lambda: kit.store.get_document(slow.id).status is DocumentStatus.PARSING)  # type: ignore[union-attr]
        later, _ = kit.library.submit(data=b"my next file", filename="next.txt", collection_id=1)
        small, _ = kit.library.submit(
            data=b"Parking costs 4 euros.", filename="small.txt", collection_id=theirs
        )
        started = time.monotonic()
        wait_for(lambda: kit.store.get_document(small.id).status.is_terminal, timeout=10)  # type: ignore[union-attr]
        assert time.monotonic() - started < 10
        assert kit.store.get_document(small.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]
        assert kit.store.get_document(slow.id).status is DocumentStatus.PARSING  # type: ignore[union-attr]
        # The slow file's owner holds its share of the slots: its next file waits its turn.
        assert kit.store.get_document(later.id).status is DocumentStatus.QUEUED  # type: ignore[union-attr]
        release.set()
        for document in (slow, later):
            wait_for(lambda d=document.id: kit.store.get_document(d).status.is_terminal)  # type: ignore[union-attr]
            assert kit.store.get_document(document.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]
    finally:
        release.set()
        assert worker.stop()


@pytest.mark.parametrize("algorithm", ["AES-128", "AES-256"])
def test_aes_encrypted_pdf_with_an_empty_user_password_is_indexed(
    tmp_path: Path, algorithm: str
) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    data = encrypt_pdf(make_pdf(["Cover", "The parking fee is 4 euros per day."]), "", algorithm)
    document, _ = kit.library.submit(data=data, filename="aes.pdf", collection_id=1)
    kit.worker(index).ingest(document.id)
    stored = kit.store.get_document(document.id)
    assert stored is not None and stored.status is DocumentStatus.INDEXED, stored
    page = kit.store.page_text(document.id, 2)
    assert page is not None and "parking fee is 4 euros" in page


def test_aes_encrypted_pdf_with_a_user_password_fails_as_encrypted(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    data = encrypt_pdf(make_pdf(["Classified"]), "hunter2", "AES-256")
    document, _ = kit.library.submit(data=data, filename="locked.pdf", collection_id=1)
    kit.worker(index).ingest(document.id)
    stored = kit.store.get_document(document.id)
    assert stored is not None and stored.status is DocumentStatus.FAILED
    assert stored.error is not None and "encrypted" in stored.error
    assert "DependencyError" not in stored.error


def test_n3_stop_while_a_large_document_embeds_returns_between_slices_and_resumes(
    tmp_path: Path,
) -> None:
    from retrieval.ingest import EMBED_SLICE

    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    paragraphs = "\n\n".join(f"Paragraph {i} says something about topic {i}." for i in range(3000))
    big, _ = kit.library.submit(data=paragraphs.encode(), filename="big.txt", collection_id=1)
    embed = kit.embedder.embed_batch
    in_slice, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def held_embed(texts):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        in_slice.set()
        release.wait(30)  # the first slice runs until the test lets it finish
        return embed(texts)

    kit.embedder.embed_batch = held_embed  # type: ignore[method-assign]
    kit.library.attach_worker(worker)
    assert in_slice.wait(30)
    stopping = threading.Thread(target=lambda: calls.append(-int(worker.stop(timeout=30))))
    stopping.start()
    wait_for(worker._stopping.is_set)
    release.set()  # the slice under way ends; no further slice starts
    stopping.join(30)
    assert calls == [EMBED_SLICE, -1]  # one slice, then stop() returned True
    assert not worker.alive
    assert kit.store.get_document(big.id).status is DocumentStatus.EMBEDDING  # type: ignore[union-attr]

    kit.embedder.embed_batch = embed  # type: ignore[method-assign]
    again = kit.worker(index)
    again.start()  # resumes it; the first slice's vectors come from the embedding cache
    try:
        wait_for(lambda: kit.store.get_document(big.id).status.is_terminal, timeout=120)  # type: ignore[union-attr]
    finally:
        again.stop()
    assert kit.store.get_document(big.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]


class HeldSlices:
    """An embedder whose calls each wait for the test to let one through."""

    def __init__(self, embed):  # type: ignore[no-untyped-def]
        self.embed = embed
        self.allowed = threading.Semaphore(0)
        self.calls: list[list[str]] = []
        self.waiting = threading.Event()

    def __call__(self, texts):  # type: ignore[no-untyped-def]
        self.calls.append(list(texts))
        self.waiting.set()
        assert self.allowed.acquire(timeout=30), "the test never let this slice through"
        return self.embed(texts)

    def let_one_through(self) -> None:
        self.waiting.clear()
        self.allowed.release()


def big_text(paragraphs: int) -> bytes:
    return "\n\n".join(
        f"Paragraph {i} says something about topic {i}." for i in range(paragraphs)
    ).encode()


def big_document_held(tmp_path: Path) -> tuple[Kit, FaissIndex, IngestWorker, HeldSlices, int]:
    """A worker (not started) whose embedding calls the test lets through one by one, and
    a large document waiting for it."""
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index)
    held = HeldSlices(kit.embedder.embed_batch)
    kit.embedder.embed_batch = held  # type: ignore[method-assign]
    big, _ = kit.library.submit(data=big_text(8000), filename="big.txt", collection_id=1)
    return kit, index, worker, held, big.id


def test_n2_a_large_document_does_not_hold_up_another_collections_upload(tmp_path: Path) -> None:
    from retrieval.ingest import EMBED_SLICE

    kit, _, worker, held, big = big_document_held(tmp_path)
    theirs = kit.store.ensure_collection("another team")
    kit.library.attach_worker(worker)
    try:
        wait_for(held.waiting.is_set)  # the big document's first slice is under way
        small, _ = kit.library.submit(
            data=b"Parking costs 4 euros.", filename="small.txt", collection_id=theirs
        )
        wait_for(lambda: worker._slots.results.qsize() == 1)  # parsed, waiting for a slice
        held.let_one_through()  # the big document's first slice ends
        wait_for(held.waiting.is_set)
        assert [t.split("\n")[1] for t in held.calls[1]] == ["Parking costs 4 euros."]
        held.let_one_through()  # the small upload completes first, in a call of its own
        wait_for(lambda: kit.store.get_document(small.id).status.is_terminal)  # type: ignore[union-attr]
        assert kit.store.get_document(small.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]
        assert kit.store.get_document(big).status is DocumentStatus.EMBEDDING  # type: ignore[union-attr]
        wait_for(lambda: len(held.calls) == 3)
        assert len(held.calls[2]) == EMBED_SLICE - 1  # the big document had the rest of it
    finally:
        held.allowed.release(1000)
        assert worker.stop()


def test_n2_deleting_a_document_stops_its_embedding_within_a_slice(tmp_path: Path) -> None:
    kit, index, worker, held, big = big_document_held(tmp_path)
    kit.library.attach_worker(worker)
    try:
        wait_for(held.waiting.is_set)
        kit.library.delete(big)
        held.let_one_through()  # the slice under way ends; the next round drops the document
        wait_for(lambda: big not in worker._taken)  # finished: dropped, not embedded
        later, _ = kit.library.submit(data=b"A later note.", filename="later.txt", collection_id=1)
        wait_for(held.waiting.is_set)
        held.let_one_through()
        wait_for(lambda: kit.store.get_document(later.id).status.is_terminal)  # type: ignore[union-attr]
    finally:
        held.allowed.release(1000)
        assert worker.stop()
    assert len(held.calls) == 2  # the big document's one slice, then the later note
    assert held.calls[1] == [text for text in held.calls[1] if "later note" in text.lower()]
    assert kit.store.get_document(big) is None
    assert sorted(index.ids().tolist()) == sorted(
        kit.store.embedded_chunk_ids(kit.embedder.model_id).tolist()
    )


def test_n2_a_document_over_the_passage_cap_fails_with_the_reason(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    calls: list[int] = []
    embed = kit.embedder.embed_batch
    kit.embedder.embed_batch = lambda texts: calls.append(len(texts)) or embed(texts)  # type: ignore[method-assign]
    huge, _ = kit.library.submit(data=big_text(500), filename="huge.txt", collection_id=1)
    fits, _ = kit.library.submit(data=big_text(5), filename="fits.txt", collection_id=1)
    kit.worker(index, max_document_passages=50).ingest_many([huge.id, fits.id])
    failed = kit.store.get_document(huge.id)
    assert failed is not None and failed.status is DocumentStatus.FAILED
    assert failed.error is not None and "more than 50 passages" in failed.error
    assert kit.store.get_document(fits.id).status is DocumentStatus.INDEXED  # type: ignore[union-attr]
    assert sum(calls) < 50  # nothing of the huge document was embedded


def test_n2_a_collection_sending_many_large_files_does_not_hold_up_another(
    tmp_path: Path,
) -> None:
    """Past a batch of documents in progress, only a collection with none joins the
    slices: another collection's upload does not wait behind one collection's backlog."""
    kit = make_kit(tmp_path)
    index, _ = kit.open_index()
    worker = kit.worker(index, max_batch_documents=2)
    held = HeldSlices(kit.embedder.embed_batch)
    kit.embedder.embed_batch = held  # type: ignore[method-assign]
    bigs = [
        kit.library.submit(
            data=big_text(3000) + b" %d" % n, filename=f"big{n}.txt", collection_id=1
        )[0].id
        for n in range(5)
    ]
    theirs = kit.store.ensure_collection("another team")
    kit.library.attach_worker(worker)

    def status(document_id: int) -> DocumentStatus:
        return kit.store.get_document(document_id).status  # type: ignore[union-attr]

    try:
        wait_for(held.waiting.is_set)  # the first large file embeds; four more wait
        small, _ = kit.library.submit(
            data=b"Parking costs 4 euros.", filename="small.txt", collection_id=theirs
        )
        wait_for(lambda: worker._slots.results.qsize() >= 1)  # parsed and handed over
        for _ in range(3):  # a few slices, not the backlog's many
            held.let_one_through()
            wait_for(lambda: held.waiting.is_set() or status(small.id).is_terminal)
            if status(small.id).is_terminal:
                break
        wait_for(lambda: status(small.id).is_terminal)
        assert status(small.id) is DocumentStatus.INDEXED
        assert sum(not status(b).is_terminal for b in bigs) >= 4  # the backlog still waits
    finally:
        held.allowed.release(10_000)
        assert worker.stop()
