"""``/metrics`` is for admins: their session, or an admin's key (Prometheus scrapes with one)."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from tests.conftest import add_key, add_user, login, upload, wait_for, wait_indexed

SAMPLE = "ragdesk_requests_running"


def scrape(client: TestClient[Any], key: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.get("/metrics", headers=headers)


def test_admins_and_their_keys_may_scrape(client: TestClient[Any]) -> None:
    assert SAMPLE in scrape(client).text  # the signed-in admin
    full, read_only = add_key(client), add_key(client, read_only=True)
    client.cookies.clear()
    for key in (full, read_only):  # a read-only admin key is all Prometheus needs
        response = scrape(client, key)
        assert response.status_code == 200 and SAMPLE in response.text
        assert response.headers["content-type"].startswith("text/plain")


def test_staff_and_collection_limited_keys_may_not(client: TestClient[Any]) -> None:
    collection = client.app.state.services.collection_id
    limited = add_key(client, collections=[collection])
    add_user(client, "ann")
    staff_key = add_key(client, "ann")
    client.cookies.clear()
    for key in (limited, staff_key):
        refused = scrape(client, key)
        assert refused.status_code == 403 and SAMPLE not in refused.text
        assert refused.json()["error"]["status"] == 403
    login(client, "ann")
    assert scrape(client).status_code == 403
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token")
    assert scrape(client).status_code == 401
    assert scrape(client, "rdk_nope").status_code == 401


def test_retrieval_gauges_follow_the_index_queue_and_embedding_cache(
    client: TestClient[Any],
) -> None:
    def gauges() -> dict[str, float]:
        lines = scrape(client).text.splitlines()
        return {
            name: float(value)
            for name, _, value in (line.rpartition(" ") for line in lines)
            if name.startswith(("ragdesk_index", "ragdesk_ingestion", "ragdesk_embedding"))
        }

    worker = client.app.state.services.retrieval.worker
    wait_for(lambda: worker.cache_usage is not None)  # the first prune, once idle
    before = gauges()
    assert before["ragdesk_index_mapped"] == 0 and before["ragdesk_ingestion_queue"] == 0
    assert before['ragdesk_embedding_cache_bytes{kind="total"}'] >= 0
    document = upload(client, ("note.md", b"# Note\n\nThe canteen opens at noon.")).json()
    wait_indexed(client, document["documents"][0]["id"])
    wait_for(lambda: gauges()["ragdesk_index_vectors"] == before["ragdesk_index_vectors"] + 1)
    total = 'ragdesk_embedding_cache_bytes{kind="total"}'
    wait_for(lambda: gauges()[total] > before[total])


def test_the_kv_disk_cache_counters_are_exported(client: TestClient[Any]) -> None:
    text = scrape(client).text
    for name in ("hits", "misses", "written_bytes"):
        assert f"ragdesk_kv_disk_{name}_total{{model=" in text


def test_the_sliding_window_counters_are_exported(client: TestClient[Any]) -> None:
    text = scrape(client).text
    for name in ("resumes", "prefills"):
        assert f"ragdesk_kv_window_{name}_total{{model=" in text


def test_prefetch_chunks_stopped_mid_decode_are_counted(client: TestClient[Any]) -> None:
    assert 'ragdesk_prefetch_interrupts_total{model="' in scrape(client).text
