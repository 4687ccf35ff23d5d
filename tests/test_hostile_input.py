"""Property-based hostile input: whatever arrives, the answer is a clear 4xx or a per-document
failure, never a 500 and never a document stuck in a non-final state."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from tests.conftest import upload, wait_indexed

MAGIC_PREFIXES = [
    b"",
    b"%PDF-1.7\n",
    b"PK\x03\x04",
    b"<!DOCTYPE html>",
    b"\xff\xfe",
    b"\xef\xbb\xbf",
]
NAMES = st.text(min_size=0, max_size=300) | st.sampled_from(
    ["../../x.pdf", "a.docx", "b.csv", "c.md", "d.html", ".txt", "CON", "x" * 1000 + ".pdf"]
)
HYPOTHESIS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@HYPOTHESIS
@given(prefix=st.sampled_from(MAGIC_PREFIXES), body=st.binary(max_size=2048), name=NAMES)
def test_any_upload_is_accepted_or_refused_cleanly(
    client: TestClient[Any], prefix: bytes, body: bytes, name: str
) -> None:
    response = upload(client, (name, prefix + body))
    assert response.status_code in (201, 415, 422), response.text
    if response.status_code == 201:
        document = wait_indexed(client, response.json()["documents"][0]["id"])
        assert document["status"] in ("indexed", "failed")
        assert document["status"] == "indexed" or document["error"]


@HYPOTHESIS
@given(
    payload=st.dictionaries(
        st.sampled_from(["message", "conversation_id", "k", "query", "extra"]),
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=50),
    )
)
def test_any_json_body_gets_a_clear_answer(
    client: TestClient[Any], payload: dict[str, Any]
) -> None:
    for path in ("/api/chat", "/api/search"):
        response = client.post(path, json=payload)
        assert response.status_code in (200, 404, 422), (path, payload, response.text)


HUGE = "9" * 30  # beyond SQLite's 64-bit integers


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", f"/documents/{HUGE}/pages/1"),
        ("GET", f"/documents/1/pages/{HUGE}"),
        ("GET", f"/documents/1/pages/1?chunk={HUGE}"),
        ("GET", "/documents/-1/pages/0"),
        ("GET", "/documents/1/pages/1?chunk=abc"),
        ("GET", f"/c/{HUGE}"),
        ("GET", f"/api/documents/{HUGE}"),
        ("DELETE", f"/api/documents/{HUGE}"),
        ("GET", f"/ui/messages/{HUGE}/sources"),
        ("GET", f"/ui/answers/{HUGE}/stream"),
        ("GET", f"/ui/documents/{HUGE}/row"),
        ("DELETE", f"/ui/documents/{HUGE}"),
    ],
)
def test_out_of_range_ids_are_client_errors(client: TestClient[Any], method: str, url: str) -> None:
    assert client.request(method, url).status_code in (404, 422)


def test_out_of_range_conversation_ids_in_bodies(client: TestClient[Any]) -> None:
    too_big = {"message": "hi", "conversation_id": int(HUGE)}
    assert client.post("/api/chat", json=too_big).status_code == 422
    assert (
        client.post("/ui/ask", data={"message": "hi", "conversation_id": HUGE}).status_code == 404
    )
    assert client.post("/ui/ask", data={"message": "hi", "conversation_id": "x"}).status_code == 404


def test_unicode_digits_in_form_ids_are_not_ids(client: TestClient[Any]) -> None:
    response = client.post("/ui/ask", data={"message": "hi", "conversation_id": "²"})
    assert response.status_code == 404
