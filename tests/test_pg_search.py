"""Search on PostgreSQL: pgvector's HNSW for the dense side (retrieval/pg_vectors.py), BM25
over the terms tables for the lexical side (retrieval/pg_lexical.py), against brute force,
a reference BM25, and the SQLite/FAISS retriever. On a real PostgreSQL with pgvector
(pgserver: PostgreSQL in a wheel), one server for the module, a fresh database a test."""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrieval.db import Database, SqliteDatabase
from retrieval.embedder import HashingEmbedder
from retrieval.lexical import LexicalIndex
from retrieval.pg_lexical import IDF_FLOOR, K1, B, PgLexicalIndex, query_words
from retrieval.pg_schema import PG_MIGRATIONS
from retrieval.pg_vectors import PgVectorIndex, hnsw_index_name, open_pg_vector_index
from retrieval.search import Retriever, SearchConfig
from retrieval.store import DocumentStore
from retrieval.types import (
    Block,
    ChunkSpan,
    DocumentKind,
    DocumentStatus,
    ParsedDocument,
    ParsedPage,
)
from retrieval.vector_sync import open_index

pgserver = pytest.importorskip("pgserver", reason="pgserver (PostgreSQL in a wheel) not installed")
psycopg = pytest.importorskip("psycopg", reason="psycopg not installed")

from retrieval.pg import PostgresDatabase  # noqa: E402 - needs psycopg

DIM = 32
MODEL = "test-model's 100% \\ own"  # quotes, a percent sign and a backslash in the literal


@pytest.fixture(scope="module")
def server(pg_server: Any) -> Any:
    """The session's PostgreSQL (tests/pg_kit.py; skipped with the reason when none starts)."""
    return pg_server.server


@pytest.fixture(scope="module")
def template(server: Any) -> Iterator[str]:
    """A database with retrieval's PostgreSQL migrations applied, copied for each test."""
    name = f"tpl_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.get_uri(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    db = PostgresDatabase(server.get_uri(name))
    db.migrate(PG_MIGRATIONS)
    db.close()
    yield name
    with psycopg.connect(server.get_uri(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def db(server: Any, template: str) -> Iterator[PostgresDatabase]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.get_uri(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    database = PostgresDatabase(server.get_uri(name))
    database.migrate(PG_MIGRATIONS)  # all applied: it only learns the schema (identities)
    try:
        yield database
    finally:
        database.close()
        with psycopg.connect(server.get_uri(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def unit(rows: Any) -> Any:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def add_document(
    store: DocumentStore,
    collection_id: int,
    title: str,
    passages: Sequence[str | tuple[str | None, str]],
    vectors: Any = None,
    *,
    model_id: str = MODEL,
) -> list[int]:
    """A document with these passages (text, or (heading, text)), through the store's
    own methods; indexed when ``vectors`` are given (save_embeddings marks it so)."""
    document, _ = store.add_document(
        collection_id=collection_id,
        content_hash=uuid.uuid4().hex,
        filename=f"{title.lower().replace(' ', '-')}.md",
        stored_name=uuid.uuid4().hex,
        kind=DocumentKind.MARKDOWN,
        size=1,
    )
    spans = [(None, p) if isinstance(p, str) else p for p in passages]
    page = ParsedPage(1, tuple(Block(text) for _, text in spans))
    chunks, start = [], 0
    for heading, text in spans:
        chunks.append(ChunkSpan(1, start, start + len(text), text, heading))
        start += len(text) + 2
    stored = store.replace_content(document.id, ParsedDocument(title, (page,)), chunks)
    if vectors is not None:
        store.save_embeddings(document.id, stored.ids, model_id, np.asarray(vectors))
    return stored.ids


def brute_force(vectors: dict[int, Any], query: Any, k: int) -> list[int]:
    ids = sorted(vectors)
    scores = np.stack([vectors[i] for i in ids]) @ query
    order = sorted(range(len(ids)), key=lambda n: (-float(scores[n]), ids[n]))
    return [ids[n] for n in order[:k]]


# --- dense ------------------------------------------------------------------------------


def test_dense_top_k_is_the_brute_force_top_k(db: PostgresDatabase) -> None:
    store, rng = DocumentStore(db), np.random.default_rng(1)
    collection = store.ensure_collection("library")
    vectors: dict[int, Any] = {}
    for n in range(4):
        batch = unit(rng.normal(size=(80, DIM)))
        ids = add_document(
            store, collection, f"doc {n}", [f"passage {i}" for i in range(80)], batch
        )
        vectors.update(zip(ids, batch, strict=True))
    index = open_pg_vector_index(store, MODEL, DIM)
    assert (index.count, index.kind, index.mapped, index.damaged) == (
        320,
        "pgvector-hnsw",
        False,
        False,
    )
    assert sorted(index.ids().tolist()) == sorted(vectors)
    for query in unit(rng.normal(size=(5, DIM))):
        hits = index.search(query, 10)
        assert [i for i, _ in hits] == brute_force(vectors, query, 10)
        for chunk_id, score in hits:
            assert score == pytest.approx(float(vectors[chunk_id] @ query), abs=1e-5)
        allowed = np.asarray(sorted(vectors)[:30], dtype=np.int64)
        subset = {i: vectors[i] for i in allowed.tolist()}
        assert [i for i, _ in index.search(query, 5, allowed=allowed)] == brute_force(
            subset, query, 5
        )


def test_the_hnsw_index_is_made_once_per_model_and_the_queries_can_use_it(
    db: PostgresDatabase,
) -> None:
    store = DocumentStore(db)
    collection = store.ensure_collection("library")
    add_document(store, collection, "one", ["a", "b"], unit(np.eye(DIM)[:2]))
    index = open_pg_vector_index(store, MODEL, DIM)
    assert index.ensure_index()  # there already: nothing to do
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE 'embeddings_hnsw%%'"
        ).fetchall()
        assert [row[0] for row in rows] == [hnsw_index_name(MODEL, DIM)]
        assert "hnsw" in rows[0][1] and f"vector({DIM})" in rows[0][1]

    # An interrupted build leaves an invalid index, which no plan uses: it is made again.
    def valid() -> Any:
        return (
            db.read()
            .execute(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relname = ?",
                [hnsw_index_name(MODEL, DIM)],
            )
            .fetchall()
        )

    with db.connection() as conn:
        conn.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass",
            [hnsw_index_name(MODEL, DIM)],
        )
    assert valid() == [(False,)]
    assert index.ensure_index()
    assert valid() == [(True,)]
    # With sequential scans and sorts priced out, the planner takes the partial index: its
    # expression and its predicate (the model as a literal) match the query's.
    with db.read_transaction() as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_sort = off")
        plan = conn.execute(
            "EXPLAIN " + index.statement("", approximate=True),
            [db.vector_param(np.eye(DIM)[0]), DocumentStatus.INDEXED.value, 2],
        ).fetchall()
        assert hnsw_index_name(MODEL, DIM) in " ".join(str(row[0]) for row in plan)


def test_a_scoped_search_gets_the_true_top_k_of_a_small_collection(db: PostgresDatabase) -> None:
    """Every nearest vector is in a collection the user may not read: HNSW's candidates
    all fall to the filter, and the exact scan still gives the small collection's top k."""
    store, rng = DocumentStore(db), np.random.default_rng(2)
    big, small = store.ensure_collection("big"), store.ensure_collection("small")
    query = unit(rng.normal(size=DIM))
    near = unit(query + 0.05 * rng.normal(size=(1200, DIM)))
    big_ids = add_document(store, big, "near", [f"near {i}" for i in range(1200)], near)
    far = unit(rng.normal(size=(25, DIM)))
    small_ids = add_document(store, small, "far", [f"far {i}" for i in range(25)], far)
    index = open_pg_vector_index(store, MODEL, DIM)
    small_vectors = dict(zip(small_ids, far, strict=True))

    hits = index.search_scoped(query, 10, [small])
    assert [i for i, _ in hits] == brute_force(small_vectors, query, 10)
    assert not set(big_ids) & {i for i, _ in hits}  # nothing leaks from the other collection
    assert len(index.search_scoped(query, 50, [small])) == 25  # all there are, no more
    everything = {**dict(zip(big_ids, near, strict=True)), **small_vectors}
    assert [i for i, _ in index.search_scoped(query, 10, [big, small])] == brute_force(
        everything, query, 10
    )
    assert index.search_scoped(query, 10, []) == []
    assert index.search_scoped(query, 10, [small + big + 10]) == []


def test_passages_of_documents_not_indexed_are_never_found(db: PostgresDatabase) -> None:
    store = DocumentStore(db)
    collection = store.ensure_collection("library")
    vectors = unit(np.eye(DIM)[:3])
    kept = add_document(store, collection, "Indexed", ["zebra crossing rules"], vectors[:1])
    again = add_document(store, collection, "Again", ["zebra stripes pattern"], vectors[1:2])
    queued = add_document(store, collection, "Queued", ["zebra habitat savanna"])
    document_id = int(
        db.read().execute("SELECT document_id FROM chunks WHERE id = ?", again).fetchone()[0]
    )
    store.set_status(document_id, DocumentStatus.EMBEDDING)  # re-ingested: its vectors remain
    index = open_pg_vector_index(store, MODEL, DIM)
    query = unit(vectors[0] + vectors[1] + vectors[2])
    assert [i for i, _ in index.search(query, 10)] == kept
    assert [i for i, _ in index.search_scoped(query, 10, [collection])] == kept
    assert [i for i, _ in PgLexicalIndex(db).search("zebra", 10)] == kept
    assert queued[0] not in index.ids()


# --- lexical ----------------------------------------------------------------------------

CORPUS = [
    (
        "Travel policy",
        "Meals",
        "Employees may claim a daily meal allowance when travelling abroad.",
    ),
    (
        "Travel policy",
        "Hotels",
        "Hotels abroad are booked through the travel desk, never privately.",
    ),
    ("Security", None, "The emergency exit code is changed every month by the security team."),
    ("Security", "Badges", "Badges must be worn at all times; a lost badge is reported at once."),
    ("Onboarding", None, "New employees meet their mentor on the first day and every week after."),
    ("Onboarding", "Laptops", "Laptops are encrypted; employees never store travel plans on USB."),
    ("Expenses", None, "Meal receipts, hotel invoices and taxi receipts go to the expense tool."),
]


def reference_bm25(db: PostgresDatabase, query: str) -> list[tuple[int, float]]:
    """FTS5's bm25() in Python over every passage, from the SQL tokenizer's terms of each
    one (``ragdesk_tokens``, ``ragdesk_term``) and of each of the question's words."""
    terms: dict[int, dict[str, int]] = {}
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT c.id, ragdesk_term(t), COUNT(*) FROM chunks c"
            " JOIN documents d ON d.id = c.document_id, ragdesk_tokens(concat_ws(' ',"
            " COALESCE(d.title, d.filename), c.heading, c.text)) AS t GROUP BY 1, 2"
        ).fetchall()
        words = conn.execute(
            "SELECT ragdesk_term(ragdesk_fold(w)) FROM unnest(%s::text[]) AS w",
            [query_words(query)],
        ).fetchall()
        chunk_ids = [row[0] for row in conn.execute("SELECT id FROM chunks").fetchall()]
        status = dict(
            conn.execute(
                "SELECT c.id, d.status FROM chunks c JOIN documents d ON d.id = c.document_id"
            ).fetchall()
        )
    for chunk_id in chunk_ids:
        terms[chunk_id] = {}
    for chunk_id, term, tf in rows:
        terms[chunk_id][term] = tf
    n = len(terms)
    lengths = {c: sum(t.values()) for c, t in terms.items()}
    average = sum(lengths.values()) / n
    scores: dict[int, float] = {}
    for (term,) in words:  # one phrase of FTS5's query each, two words of one stem included
        hits = [c for c in terms if term in terms[c]]
        idf = math.log((n - len(hits) + 0.5) / (len(hits) + 0.5))
        idf = idf if idf > 0 else IDF_FLOOR
        for c in hits:
            tf = terms[c][term]
            norm = K1 * (1 - B + B * lengths[c] / average)
            scores[c] = scores.get(c, 0.0) + idf * tf * (K1 + 1) / (tf + norm)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [(c, s) for c, s in ranked if status[c] == DocumentStatus.INDEXED.value]


def add_corpus(store: DocumentStore, collection_id: int, embedder: Any = None) -> list[int]:
    ids: list[int] = []
    for title, heading, text in CORPUS:
        vectors = (
            embedder.embed_batch([f"{title}\n{heading or ''}\n{text}"])
            if embedder is not None
            else unit(np.ones((1, DIM)))
        )
        ids += add_document(
            store,
            collection_id,
            title,
            [(heading, text)],
            vectors,
            model_id=embedder.model_id if embedder is not None else MODEL,
        )
    return ids


@pytest.mark.parametrize(
    "query",
    [
        "meal allowance abroad",
        "travel",
        "employees",
        "badge reported",
        "Hotels, receipts & taxis!",
        "travelling travel travels",  # three phrases of FTS5's query, one stem
        "What is the exit code of the security team?",  # stopwords are left out
    ],
)
def test_bm25_is_the_reference_bm25(db: PostgresDatabase, query: str) -> None:
    store = DocumentStore(db)
    collection = store.ensure_collection("library")
    add_corpus(store, collection)
    add_document(store, collection, "Draft", ["travel travel employees meal hotel"])  # not indexed
    expected = reference_bm25(db, query)
    found = PgLexicalIndex(db).search(query, 20)
    assert [c for c, _ in found] == [c for c, _ in expected]
    assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-9)
    assert PgLexicalIndex(db).search(query, 2) == found[:2]


def test_bm25_filters_collections_before_the_top_k_and_reads_no_syntax(
    db: PostgresDatabase,
) -> None:
    store = DocumentStore(db)
    big, small = store.ensure_collection("big"), store.ensure_collection("small")
    for n in range(30):
        add_document(
            store, big, f"Travel {n}", ["travel travel travel abroad"], unit(np.ones((1, DIM)))
        )
    (mine,) = add_document(
        store, small, "Mine", ["a short note on travel"], unit(np.ones((1, DIM)))
    )
    lexical = PgLexicalIndex(db)
    assert [c for c, _ in lexical.search("travel", 3, collection_ids=[small])] == [mine]
    assert lexical.search("travel", 3, collection_ids=[]) == []
    assert len(lexical.search("travel", 3)) == 3
    for hostile in [
        "",
        "   ",
        "the of and",
        "\"' OR zz=zz; --",
        "%s %(k)s {collections}",
        "a & !b",
    ]:
        assert lexical.search(hostile, 3) == []


def test_editing_a_passage_or_renaming_its_document_updates_the_terms(
    db: PostgresDatabase,
) -> None:
    store = DocumentStore(db)
    collection = store.ensure_collection("library")
    (chunk,) = add_document(
        store, collection, "Handbook", ["the parking garage"], unit(np.ones((1, DIM)))
    )
    lexical = PgLexicalIndex(db)
    assert [c for c, _ in lexical.search("garage", 5)] == [chunk]
    with db.write() as session:
        session.execute("UPDATE chunks SET text = ? WHERE id = ?", ["the bicycle shed", chunk])
    assert lexical.search("garage", 5) == []
    assert [c for c, _ in lexical.search("bicycles", 5)] == [chunk]
    assert [c for c, _ in lexical.search("handbook", 5)] == [chunk]
    with db.write() as session:
        session.execute("UPDATE documents SET title = ?", ["Facilities guide"])
    assert lexical.search("handbook", 5) == []
    assert [c for c, _ in lexical.search("facility", 5)] == [chunk]
    with db.write() as session:
        session.execute("UPDATE documents SET title = NULL, filename = ?", ["Rota.txt"])
    assert [c for c, _ in lexical.search("rota", 5)] == [chunk]
    length = db.read().execute("SELECT length FROM chunk_lengths WHERE chunk_id = ?", [chunk])
    assert length.fetchone()[0] == 5  # rota, txt, the, bicycl, shed: FTS5 counts stopwords
    document_id = db.read().execute("SELECT document_id FROM chunks").fetchone()[0]
    store.delete_document(int(document_id))
    for table in ("chunk_terms", "chunk_lengths"):
        assert db.read().execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0
    stats = db.read().execute("SELECT SUM(passages), SUM(total) FROM chunk_terms_stats")
    assert tuple(stats.fetchone()) == (0, 0)


def test_the_corpus_statistics_stay_level_with_the_passages(db: PostgresDatabase) -> None:
    """BM25's N and total length come from rows triggers keep (m003): after adds, edits,
    renames and deletes they sum to what counting every passage says."""
    store = DocumentStore(db)
    collection = store.ensure_collection("library")
    texts = ["the parking garage", "bicycles are parked in the shed", "a rota"]
    first = add_document(store, collection, "Handbook", texts, unit(np.ones((3, DIM))))
    add_document(store, collection, "Guide", ["one more passage"], unit(np.ones((1, DIM))))

    def level() -> None:
        counted = (
            db.read()
            .execute("SELECT COUNT(*), COALESCE(SUM(length), 0) FROM chunk_lengths")
            .fetchone()
        )
        kept = db.read().execute("SELECT SUM(passages), SUM(total) FROM chunk_terms_stats")
        assert tuple(kept.fetchone()) == tuple(counted)

    level()
    with db.write() as session:
        session.execute("UPDATE chunks SET text = ? WHERE id = ?", ["much longer " * 9, first[0]])
        session.execute("UPDATE documents SET title = ? WHERE title = ?", ["A", "Handbook"])
    level()
    document_id = db.read().execute("SELECT document_id FROM chunks WHERE id = ?", [first[0]])
    store.delete_document(int(document_id.fetchone()[0]))
    level()
    assert db.read().execute("SELECT SUM(passages) FROM chunk_terms_stats").fetchone()[0] == 1


# Passages where FTS5's tokenizer (porter unicode61 remove_diacritics 2) has something to
# do: stopwords, punctuation, accents, short words, digits, superscripts, and the stems
# where Snowball's Porter and FTS5's differ (-logy, -bly, a doubled k before -ed).
FTS5_PASSAGES = [
    ("Geology handbook", None, "The geology of Zürich: naïve résumés, CRÈME brûlée and São Tomé."),
    ("Geology handbook", "Volcanology", "Volcanologists trekked; the technology is possibly new."),
    (
        "Assembly",
        None,
        "Assemblies assemble in 1990s halls of 50 m³ (½ full); it's e-mail.pdf time.",
    ),
    (
        "Assembly",
        "Notes",
        "An analogy: the assembly met visibly, as is usual, at 3.5% of capacity.",
    ),
    (
        "Ethics",
        None,
        "Reproducibly, the etymology of \u201cethics\u201d is Greek;"
        " \u00e9tudes d\u2019\u00e9t\u00e9.",
    ),
    ("Ethics", "Misc", "Specced units and revving engines: running runs ran in Ångström steps."),
]


def fts5_terms(db: Database) -> dict[int, dict[str, int]]:
    """What SQLite's FTS5 index holds for each passage: its terms and their counts."""
    found: dict[int, dict[str, int]] = {}
    rows = db.read().execute("SELECT doc, term, COUNT(*) FROM chunks_fts_vocab GROUP BY doc, term")
    for chunk_id, term, count in rows:
        found.setdefault(int(chunk_id), {})[str(term)] = int(count)
    return found


def test_the_terms_are_those_of_fts5(db: PostgresDatabase, tmp_path: Path) -> None:
    lite_db = SqliteDatabase(tmp_path / "ragdesk.db")
    try:
        with lite_db.write() as session:
            session.execute(
                "CREATE VIRTUAL TABLE chunks_fts_vocab USING fts5vocab(chunks_fts, 'instance')"
            )
        lite = DocumentStore(lite_db)
        collection = lite.ensure_collection("library")
        lite_ids = [add_document(lite, collection, t, [(h, x)]) for t, h, x in FTS5_PASSAGES]
        store = DocumentStore(db)
        collection = store.ensure_collection("library")
        ids = [add_document(store, collection, t, [(h, x)]) for t, h, x in FTS5_PASSAGES]
        expected = fts5_terms(lite_db)
    finally:
        lite_db.close()
    with db.connection() as conn:
        for (mine,), (theirs,) in zip(ids, lite_ids, strict=True):
            terms = dict(
                conn.execute(
                    "SELECT term, tf FROM chunk_terms WHERE chunk_id = %s", [mine]
                ).fetchall()
            )
            assert terms == expected[theirs]
            [(length,)] = conn.execute(
                "SELECT length FROM chunk_lengths WHERE chunk_id = %s", [mine]
            ).fetchall()
            assert length == sum(expected[theirs].values())


@pytest.mark.parametrize(
    "query",
    [
        "geology of Zurich",
        "What did the volcanologists do, technologically?",
        "assembled assemblies visible",
        "etymological analogies: ETUDES, ete, cr\u00e8me",
        "running runs ran",  # three phrases, one stem: FTS5 counts each
        "trekking in 1990s with \u00bd m\u00b3",
        "possible reproducible specs",
    ],
)
def test_bm25_is_fts5s_bm25(db: PostgresDatabase, tmp_path: Path, query: str) -> None:
    """The same passages in both stores: the same passages found, with FTS5's scores."""
    lite_db = SqliteDatabase(tmp_path / "ragdesk.db")
    try:
        lite = DocumentStore(lite_db)
        collection = lite.ensure_collection("library")
        lite_ids: list[int] = []
        for title, heading, text in FTS5_PASSAGES:
            lite_ids += add_document(
                lite, collection, title, [(heading, text)], unit(np.ones((1, DIM)))
            )
        expected = LexicalIndex(lite_db).search(query, 10)
    finally:
        lite_db.close()
    store = DocumentStore(db)
    collection = store.ensure_collection("library")
    ids: list[int] = []
    for title, heading, text in FTS5_PASSAGES:
        ids += add_document(store, collection, title, [(heading, text)], unit(np.ones((1, DIM))))
    found = PgLexicalIndex(db).search(query, 10)
    assert expected  # the query finds something
    assert [ids.index(c) for c, _ in found] == [lite_ids.index(c) for c, _ in expected]
    assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-9)


# --- the retriever ----------------------------------------------------------------------


class NoisyEmbedder(HashingEmbedder):
    """The fake embedder with a little noise of each text's own: passages that share no
    word with the question get distinct cosines, not a tie at 0 that FAISS and PostgreSQL
    may break in different orders."""

    def embed_batch(self, texts: Sequence[str]) -> Any:
        vectors = super().embed_batch(texts)
        for row, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            vectors[row] += 0.05 * np.random.default_rng(seed).normal(size=self.dimension)
        return unit(vectors)


def sqlite_retriever(
    root: Path, embedder: HashingEmbedder
) -> tuple[Retriever, Database, list[int]]:
    database = SqliteDatabase(root / "ragdesk.db")
    store = DocumentStore(database)
    ids = add_corpus(store, store.ensure_collection("library"), embedder)
    index, _ = open_index(
        root / "index", store, model_id=embedder.model_id, dimension=embedder.dimension
    )
    return Retriever(embedder, index, store, SearchConfig(mode="hybrid")), database, ids


@pytest.mark.parametrize(
    "query",
    ["meal allowance abroad", "hotel travel desk", "lost badge", "employees laptops", "exit code"],
)
def test_the_hybrid_retriever_ranks_as_on_sqlite(
    db: PostgresDatabase, tmp_path: Path, query: str
) -> None:
    embedder = NoisyEmbedder(DIM)
    lite, lite_db, lite_ids = sqlite_retriever(tmp_path, embedder)
    store = DocumentStore(db)
    collection = store.ensure_collection("library")
    ids = add_corpus(store, collection, embedder)
    index = open_pg_vector_index(store, embedder.model_id, embedder.dimension)
    pg = Retriever(embedder, index, store, SearchConfig(mode="hybrid"))
    assert isinstance(pg.lexical, PgLexicalIndex)
    try:
        on_sqlite = [lite_ids.index(h.chunk_id) for h in lite.search(query, 5).hits]
        on_pg = [ids.index(h.chunk_id) for h in pg.search(query, 5).hits]
        scoped = [
            ids.index(h.chunk_id) for h in pg.search(query, 5, collection_ids=[collection]).hits
        ]
    finally:
        lite_db.close()
    assert on_pg == on_sqlite
    assert scoped == on_sqlite
    assert pg.search(query, 5, collection_ids=[collection + 1]).hits == []


def test_open_pg_vector_index_wants_postgresql(tmp_path: Path) -> None:
    database = SqliteDatabase(tmp_path / "x.db")
    try:
        with pytest.raises(ValueError):
            open_pg_vector_index(DocumentStore(database), MODEL, DIM)
        with pytest.raises(ValueError):
            PgLexicalIndex(database)
    finally:
        database.close()


def test_the_index_asks_nothing_of_the_ingest_worker(db: PostgresDatabase, tmp_path: Path) -> None:
    index = PgVectorIndex(db, MODEL, DIM)
    ids = np.asarray([1, 2], dtype=np.int64)
    index.add(ids, unit(np.ones((2, DIM))))
    assert index.remove(ids) == 0
    index.save(tmp_path / "index")
    assert not (tmp_path / "index").exists() and index.count == 0
