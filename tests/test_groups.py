"""Groups: the admin API, and the permission filter with groups. The canary of
tests/test_permissions.py, in team B's collection, reaches carol (in no collection) only
while she is in a group given team B, and never again once she is out of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient
from pydantic import ValidationError

from app.auth.groups import Groups
from app.auth.identities import ClaimRules
from app.auth.passwords import Passwords
from app.auth.sessions import COOKIE_NAME
from app.auth.users import AccountError, Users
from app.config.settings.auth import AuthSettings
from app.migrations import open_database
from retrieval.store import DocumentStore
from tests.conftest import add_key, add_user, fake_model, fake_settings, login
from tests.test_permissions import CANARY, ask_api, sign_in_as, two_teams  # noqa: F401


def as_admin(client: TestClient[Any]) -> None:
    sign_in_as(client, "tester")


def canary_reached(client: TestClient[Any], b_doc: int) -> dict[str, bool]:
    """Where the canary reaches the signed-in user: search, a chat prompt and answer, the
    document page, the document list, /v1 with the user's key."""
    model = fake_model(client)
    hits = client.post("/api/search", json={"query": f"soup {CANARY}", "k": 10}).json()["hits"]
    before = len(model.history)
    done = ask_api(client, "What is the secret soup?")
    prompts = " ".join(r.prompt for r in model.history[before:])
    page = client.get(f"/documents/{b_doc}/pages/1")
    listed = [d["id"] for d in client.get("/api/documents").json()["documents"]]
    cookies = dict(client.cookies)
    client.cookies.clear()
    name = client.app.state.services.auth.sessions.get(cookies[COOKIE_NAME]).user.name
    before_v1 = len(model.history)
    v1 = client.post(  # a grounded /v1 answer: retrieval over what the key may read
        "/v1/chat/completions",
        json={"model": "rag", "messages": [{"role": "user", "content": "secret soup?"}]},
        headers={"Authorization": f"Bearer {add_key(client, name)}"},
    )
    for key, value in cookies.items():
        client.cookies.set(key, value)
    return {
        "search": CANARY in json.dumps(hits),
        "prompt": CANARY in prompts,
        "citations": b_doc in {c["document_id"] for c in done["citations"]},
        "page": page.status_code == 200,
        "list": b_doc in listed,
        "v1": v1.is_success and CANARY in " ".join(r.prompt for r in model.history[before_v1:]),
    }


def test_a_group_gives_access_and_taking_it_away_hides_the_canary_again(
    client: TestClient[Any],
    two_teams: dict[str, Any],  # noqa: F811
) -> None:
    add_user(client, "carol")
    as_admin(client)
    group = client.post("/api/groups", json={"name": "team-b-readers"}).json()
    granted = client.post(
        f"/api/groups/{group['id']}/collections", json={"collection": "team-b"}
    ).json()
    assert granted["collections"] == [
        {"collection_id": two_teams["b"], "collection": "team-b", "write": False, "source": "local"}
    ]
    b_doc = two_teams["b_doc"]

    sign_in_as(client, "carol")
    assert not any(canary_reached(client, b_doc).values())  # in no collection, no group

    as_admin(client)
    joined = client.post(f"/api/groups/{group['id']}/members", json={"user": "carol"}).json()
    carol = client.app.state.services.auth.users.by_name("carol")
    assert joined["members"] == [{"user_id": carol.id, "user_name": "carol", "source": "local"}]
    sign_in_as(client, "carol")
    assert all(canary_reached(client, b_doc).values())  # through the group
    files = [("file", ("c.md", b"# More\n\nmore text"))]
    assert client.post("/api/documents?collection=team-b", files=files).status_code == 403

    as_admin(client)
    removed = client.delete(f"/api/groups/{group['id']}/members/{carol.id}")
    assert removed.status_code == 204
    sign_in_as(client, "carol")
    assert not any(canary_reached(client, b_doc).values())  # out of the group: gone again


def test_write_through_a_group_and_deleting_the_group(
    client: TestClient[Any],
    two_teams: dict[str, Any],  # noqa: F811
) -> None:
    add_user(client, "carol")
    as_admin(client)
    group = client.post("/api/groups", json={"name": "writers"}).json()
    client.post(f"/api/groups/{group['id']}/members", json={"user": "carol"})
    client.post(
        f"/api/groups/{group['id']}/collections", json={"collection": "team-b", "write": True}
    )
    sign_in_as(client, "carol")
    files = [("file", ("c.md", b"# More\n\nmore text"))]
    assert client.post("/api/documents?collection=team-b", files=files).status_code == 201
    as_admin(client)
    assert client.delete(f"/api/groups/{group['id']}").status_code == 204
    assert client.get("/api/groups").json() == {"groups": []}
    sign_in_as(client, "carol")
    assert client.get(f"/api/documents/{two_teams['b_doc']}").status_code == 404


def test_the_group_api_is_for_admins_and_checks_its_input(
    client: TestClient[Any],
    two_teams: dict[str, Any],  # noqa: F811
) -> None:
    as_admin(client)
    assert client.post("/api/groups", json={"name": "bad name!"}).status_code == 422
    group = client.post("/api/groups", json={"name": "eng"}).json()
    assert client.post("/api/groups", json={"name": "ENG"}).status_code == 422  # taken
    url = f"/api/groups/{group['id']}"
    assert client.post(f"{url}/members", json={"user": "nobody"}).status_code == 422
    assert client.post(f"{url}/collections", json={"collection": "nope"}).status_code == 422
    assert client.post("/api/groups/999/members", json={"user": "ann"}).status_code == 404
    assert client.delete("/api/groups/999").status_code == 404
    assert client.delete(f"{url}/collections/{two_teams['a']}").status_code == 404
    sign_in_as(client, "ann")
    assert client.get("/api/groups").status_code == 403
    assert client.post("/api/groups", json={"name": "mine"}).status_code == 403


def test_a_collection_limited_key_stays_limited_with_groups(
    client: TestClient[Any],
    two_teams: dict[str, Any],  # noqa: F811
) -> None:
    auth = client.app.state.services.auth
    ann = auth.users.by_name("ann")
    group = auth.groups.create("b-readers")
    auth.groups.add_member(group.id, ann.id)
    auth.groups.grant(group.id, two_teams["b"])
    client.cookies.clear()
    only_a = add_key(client, "ann", collections={two_teams["a"]})
    hits = client.post(
        "/api/search",
        json={"query": CANARY, "k": 10},
        headers={"Authorization": f"Bearer {only_a}"},
    )
    assert hits.status_code == 200 and CANARY not in hits.text
    login(client, "ann")
    assert CANARY in client.post("/api/search", json={"query": CANARY, "k": 10}).text


def test_settings_never_change_an_admins_own_grant(tmp_path: Path) -> None:
    """A collection an admin gave a group stays as the admin gave it, whatever the OIDC
    settings say, so taking a mapping out of the settings cannot leave a write behind."""
    db = open_database(fake_settings(tmp_path))
    groups = Groups(db)
    collection = DocumentStore(db).ensure_collection("engineering")
    group = groups.create("eng")
    groups.grant(group.id, collection, can_write=False)
    user = Users(db, Passwords(time_cost=1, memory_kib=1024, parallelism=1)).create(
        "ann", "a-long-password"
    )
    groups.sync_claimed(user.id, ["eng"], {"eng": {collection: True}})
    assert [(g.can_write, g.source) for g in groups.grants(group.id)] == [(False, "local")]
    groups.sync_claimed(user.id, ["eng"], {})
    assert [(g.can_write, g.source) for g in groups.grants(group.id)] == [(False, "local")]
    db.close()


@pytest.mark.parametrize("name", ["/eng", "Ragdesk Admins", ""])
def test_group_names_a_claim_could_never_join_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="group names"):
        AuthSettings(oidc_group_collections={name: {"x": "read"}})
    with pytest.raises(ValidationError, match="group names"):
        AuthSettings(oidc_group_roles={name: "admin"})


def test_roles_follow_group_claims_whatever_their_case() -> None:
    rules = ClaimRules(roles={"Ragdesk-Admins": "admin"})
    assert rules.role_of(["ragdesk-admins"]) == "admin"
    assert rules.role_of(["others"]) == "staff"


def test_n_a_provider_group_named_like_a_local_one_joins_it_only_when_mapped(
    tmp_path: Path,
) -> None:
    """#30: the OIDC groups claim joined any local group of the same name: an identity
    provider group an employee can create ("finance") granted the admin's "finance"."""
    db = open_database(fake_settings(tmp_path))
    groups = Groups(db)
    finance = groups.create("finance")
    groups.grant(finance.id, DocumentStore(db).ensure_collection("ledgers"), can_write=True)
    user = Users(db, Passwords(time_cost=1, memory_kib=1024, parallelism=1)).create(
        "ann", "a-long-password"
    )
    groups.sync_claimed(user.id, ["finance", "Finance"], {})
    assert groups.of_user(user.id) == []  # nothing by name
    groups.sync_claimed(user.id, ["IdP-Finance"], {}, {"idp-finance": "finance"})
    assert [g.name for g in groups.of_user(user.id)] == ["finance"]  # mapped: joined
    groups.sync_claimed(user.id, ["finance"], {}, {"idp-finance": "finance"})
    assert groups.of_user(user.id) == []  # the mapped provider group left: so does the user
    db.close()


def test_mapped_group_names_must_be_names_a_group_can_have() -> None:
    with pytest.raises(ValidationError, match="group names"):
        AuthSettings(oidc_group_map={"idp": "Ragdesk Admins"})


def test_user_and_group_names_ignore_case_on_every_store(tmp_path: Path) -> None:
    """Names are unique, found and sorted whatever their case, on SQLite (whose columns
    are NOCASE) and on PostgreSQL (unique on lower(name), compared by lower())."""
    db = open_database(fake_settings(tmp_path))
    users = Users(db, Passwords(time_cost=1, memory_kib=1024, parallelism=1))
    groups = Groups(db)
    carol, alice = (users.create(n, "a-long-password") for n in ("carol", "alice"))
    bob = users.create("Bob", "a-long-password")
    with pytest.raises(AccountError, match="already exists"):
        users.create("ALICE", "a-long-password")
    assert users.by_name("ALICE") == alice and users.by_name("bob") == bob
    assert users.authenticate("Alice", "a-long-password") == alice
    assert [u.name for u in users.list()] == ["alice", "Bob", "carol"]
    eng, ops = groups.create("eng"), groups.create("Ops")
    groups.create("admins")
    with pytest.raises(AccountError, match="already exists"):
        groups.create("ENG")
    assert groups.by_name("Eng") == eng and groups.by_name("ops") == ops
    assert [g.name for g in groups.list()] == ["admins", "eng", "Ops"]
    for user in (carol, bob, alice):
        groups.add_member(eng.id, user.id)
    assert [m.user_name for m in groups.members(eng.id)] == ["alice", "Bob", "carol"]
    groups.add_member(ops.id, alice.id)
    assert [g.name for g in groups.of_user(alice.id)] == ["eng", "Ops"]
    # A configured group spelled in another case is the existing group, not a new one.
    collection = DocumentStore(db).ensure_collection("engineering")
    groups.sync_claimed(bob.id, ["ENG"], {"Eng": {collection: False}})
    assert [g.name for g in groups.list()] == ["admins", "eng", "Ops"]
    assert [(g.collection_id, g.source) for g in groups.grants(eng.id)] == [
        (collection, "settings")
    ]
    db.close()
