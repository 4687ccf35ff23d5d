"""Single sign-on, end to end: a real Ragdesk server process (tests/server.py, fake
models) and a real OpenID provider process (oidc-provider-mock, tests/oidc_provider.py),
both on loopback ports, driven by httpx following the redirects as a browser would.

The provider signs in whoever is named in its form (``sub``) with the claims set for that
subject; its test hooks re-sign the ID token wrong (forged, unknown key, another audience,
expired) and rotate its signing key."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from litestar.testing import TestClient
from pydantic import ValidationError

from app.auth.oidc import LOGIN_TTL_S, Pending, PendingLogins
from app.auth.sessions import COOKIE_NAME
from app.config.settings import Settings
from app.factory import create_app
from app.migrations import open_database
from tests.conftest import fake_settings
from tests.oidc_provider import OidcProvider
from tests.server import ServerProcess, free_port
from tests.test_auth import PUBLIC, PUBLIC_PREFIXES, guarded_routes

CANARY = "quetzalbanjo"
GROUP_ROLES = {"ragdesk-admins": "admin"}
GROUP_COLLECTIONS = {"eng": {"engineering": "read"}}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    root = tmp_path_factory.mktemp("oidc-provider")
    started = OidcProvider(free_port(), root / "provider.log").start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def server(
    provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("oidc-ragdesk")
    started = ServerProcess(
        root / "data",
        root / "server.log",
        embedder_backend="fake",
        generator_backend="fake",
        oidc_issuer=provider.issuer,
        oidc_client_id="ragdesk",
        oidc_client_secret="s3cret-for-tests",
        oidc_provider_name="Mock IdP",
        oidc_group_roles=json.dumps(GROUP_ROLES),
        oidc_group_collections=json.dumps(GROUP_COLLECTIONS),
    ).start(ready_timeout=90)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(autouse=True)
def untampered(provider: OidcProvider) -> Iterator[None]:
    provider.tamper(None)
    yield
    provider.tamper(None)


def browser() -> httpx.Client:
    return httpx.Client(timeout=30)


def to_provider(client: httpx.Client, server: ServerProcess, next: str = "/") -> httpx.Response:
    """Click 'Sign in with …': Ragdesk sends the browser to the provider's form."""
    page = client.get(f"{server.url}/sso/login", params={"next": next}, follow_redirects=True)
    assert page.status_code == 200 and "/oauth2/authorize" in str(page.url), page.text[:300]
    return page


def sign_in(
    client: httpx.Client, server: ServerProcess, subject: str, next: str = "/"
) -> httpx.Response:
    """The whole round: Ragdesk → provider (choose ``subject``) → Ragdesk's callback → next."""
    form = to_provider(client, server, next)
    return client.post(str(form.url), data={"sub": subject}, follow_redirects=True)


def callback_url(client: httpx.Client, server: ServerProcess, subject: str) -> str:
    """Sign in at the provider, but stop at the redirect back to Ragdesk."""
    form = to_provider(client, server)
    back = client.post(str(form.url), data={"sub": subject}, follow_redirects=False)
    assert back.status_code == 302, back.text[:300]
    location = back.headers["location"]
    assert location.startswith(f"{server.url}/sso/callback?")
    return str(location)


def admin_get(server: ServerProcess, path: str) -> Any:
    response = httpx.get(f"{server.url}{path}", headers=server.headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def user_named(server: ServerProcess, name: str) -> dict[str, Any] | None:
    users = admin_get(server, "/api/users")["users"]
    return next((u for u in users if u["name"] == name), None)


def group_named(server: ServerProcess, name: str) -> dict[str, Any]:
    groups = admin_get(server, "/api/groups")["groups"]
    return next(g for g in groups if g["name"] == name)


def test_first_sign_in_creates_the_user_and_the_next_finds_it(
    provider: OidcProvider, server: ServerProcess
) -> None:
    provider.set_user("alice-0001", preferred_username="alice", email="a@x.org", groups=["eng"])
    with browser() as client:
        form = to_provider(client, server, next="/account")
        query = parse_qs(urlsplit(str(form.url)).query)
        assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
        assert query["state"][0] and query["nonce"][0] and query["client_id"] == ["ragdesk"]
        landed = client.post(str(form.url), data={"sub": "alice-0001"}, follow_redirects=True)
        assert landed.status_code == 200 and urlsplit(str(landed.url)).path == "/account"
        assert COOKIE_NAME in client.cookies
        assert client.get(f"{server.url}/api/documents").status_code == 200
    alice = user_named(server, "alice")
    assert alice is not None and alice["role"] == "staff"
    eng = group_named(server, "eng")
    assert eng["members"] == [{"user_id": alice["id"], "user_name": "alice", "source": "oidc"}]
    assert [(c["collection"], c["write"], c["source"]) for c in eng["collections"]] == [
        ("engineering", False, "settings")
    ]
    with browser() as client:  # again: the same account, not a second one
        assert sign_in(client, server, "alice-0001").status_code == 200
    assert user_named(server, "alice-2") is None


def test_accounts_are_linked_by_subject_not_by_name_or_email(
    provider: OidcProvider, server: ServerProcess
) -> None:
    created = httpx.post(
        f"{server.url}/api/users", json={"name": "carol"}, headers=server.headers, timeout=30
    )
    assert created.status_code == 201
    provider.set_user("carol-at-idp", preferred_username="carol", email="carol")
    with browser() as client:
        assert sign_in(client, server, "carol-at-idp").status_code == 200
        me = client.get(f"{server.url}/account")
        assert "carol-2" in me.text  # a new account, not the local carol's
    assert user_named(server, "carol-2") is not None


@pytest.mark.parametrize("mode", ["forged", "stranger", "audience", "expired"])
def test_a_bad_id_token_signs_nobody_in(
    provider: OidcProvider, server: ServerProcess, mode: str
) -> None:
    subject = f"mallory-{mode}"
    provider.set_user(subject, preferred_username=subject, groups=["ragdesk-admins"])
    provider.tamper(mode)
    with browser() as client:
        refused = sign_in(client, server, subject)
        assert refused.status_code == 401, (mode, refused.text[:300])
        assert "could not be verified" in refused.text
        assert COOKIE_NAME not in client.cookies
        assert client.get(f"{server.url}/api/documents").status_code == 401
    assert user_named(server, subject) is None


def test_a_replayed_or_transplanted_callback_is_refused(
    provider: OidcProvider, server: ServerProcess
) -> None:
    provider.set_user("erin-1", preferred_username="erin")
    with browser() as client:
        url = callback_url(client, server, "erin-1")
        first = client.get(url, follow_redirects=True)
        assert first.status_code == 200 and COOKIE_NAME in client.cookies
    with browser() as client:
        replayed = client.get(url)  # the same state again (another browser, or the same)
        assert replayed.status_code == 401 and "already used" in replayed.text
        assert COOKIE_NAME not in client.cookies
    with browser() as victim, browser() as attacker:
        planted = callback_url(attacker, server, "erin-1")  # the attacker's own sign-in ...
        into_victim = victim.get(planted)  # ... completed in the victim's browser
        assert into_victim.status_code == 401 and COOKIE_NAME not in victim.cookies
        assert attacker.get(planted).status_code == 401  # and the state is spent


def test_a_group_change_takes_effect_at_the_next_sign_in(
    provider: OidcProvider, server: ServerProcess
) -> None:
    upload = httpx.post(
        f"{server.url}/api/documents?collection=engineering",
        files=[("file", ("eng.md", f"# Build\n\nThe build password is {CANARY}.".encode()))],
        headers=server.headers,
        timeout=30,
    )
    assert upload.status_code == 201, upload.text
    document_id = upload.json()["documents"][0]["id"]
    deadline = time.monotonic() + 60
    while admin_get(server, f"/api/documents/{document_id}")["status"] != "indexed":
        assert time.monotonic() < deadline
        time.sleep(0.2)

    def finds_canary(client: httpx.Client) -> bool:
        response = client.post(
            f"{server.url}/api/search",
            json={"query": f"build password {CANARY}", "k": 5},
            headers={"X-CSRF-Token": csrf_token(client, server)},
        )
        assert response.status_code == 200, response.text
        return CANARY in response.text

    provider.set_user("dave-7", preferred_username="dave", groups=["eng", "ragdesk-admins"])
    with browser() as client:
        sign_in(client, server, "dave-7")
        assert user_named(server, "dave")["role"] == "admin"  # type: ignore[index]
        assert finds_canary(client)
        provider.set_user("dave-7", preferred_username="dave", groups=[])
        assert finds_canary(client)  # the session signed in with the old groups goes on
    assert user_named(server, "dave")["role"] == "admin"  # type: ignore[index]
    with browser() as client:
        sign_in(client, server, "dave-7")
        assert user_named(server, "dave")["role"] == "staff"  # type: ignore[index]
        assert not finds_canary(client)
        assert "dave" not in [m["user_name"] for m in group_named(server, "eng")["members"]]
        provider.set_user("dave-7", preferred_username="dave", groups=["eng"])
    with browser() as client:
        sign_in(client, server, "dave-7")
        assert finds_canary(client)


def test_the_provider_rotating_its_key_does_not_lock_anyone_out(
    provider: OidcProvider, server: ServerProcess
) -> None:
    provider.set_user("frank-1", preferred_username="frank")
    with browser() as client:
        assert sign_in(client, server, "frank-1").status_code == 200  # the old key, cached
    provider.rotate_key()
    with browser() as client:
        signed = sign_in(client, server, "frank-1")  # a key id Ragdesk has not seen
        assert signed.status_code == 200 and COOKIE_NAME in client.cookies
    provider.rotate_key()
    provider.tamper("kidless")  # a token that names no key, signed with a key not held yet
    with browser() as client:
        signed = sign_in(client, server, "frank-1")
        assert signed.status_code == 200 and COOKIE_NAME in client.cookies


def csrf_token(client: httpx.Client, server: ServerProcess) -> str:
    page = client.get(f"{server.url}/account")
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found.group(1)


def test_sign_out_ends_the_session_here_and_at_the_provider(
    provider: OidcProvider, server: ServerProcess
) -> None:
    provider.set_user("gina-1", preferred_username="gina")
    with browser() as client:
        sign_in(client, server, "gina-1")
        cookie = client.cookies[COOKIE_NAME]
        out = client.post(f"{server.url}/logout", data={"csrf_token": csrf_token(client, server)})
        assert out.status_code == 200, out.text[:300]
        target = re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', out.text)
        assert target, out.text
        url = target.group(1).replace("&amp;", "&")
        assert url.startswith(f"{provider.issuer}/oauth2/end_session?")
        query = parse_qs(urlsplit(url).query)
        assert query["post_logout_redirect_uri"] == [f"{server.url}/login"]
        assert query["id_token_hint"][0].count(".") == 2
        assert client.get(url).status_code == 200  # the provider's sign-out page
    gone = httpx.get(f"{server.url}/api/documents", cookies={COOKIE_NAME: cookie})
    assert gone.status_code == 401


def test_the_login_page_offers_single_sign_on(server: ServerProcess) -> None:
    with browser() as client:
        page = client.get(f"{server.url}/login", params={"next": "/account"})
        assert page.status_code == 200
        assert 'action="/login"' in page.text  # local accounts still work alongside
        assert 'href="/sso/login?next=%2Faccount">Sign in with Mock IdP</a>' in page.text


def oidc_settings(tmp_path: Path, **extra: Any) -> Settings:
    return fake_settings(
        tmp_path / "data",
        oidc_issuer="http://127.0.0.1:9",
        oidc_client_id="ragdesk",
        **extra,
    )


def test_local_sign_in_can_be_turned_off(tmp_path: Path) -> None:
    with TestClient(create_app(oidc_settings(tmp_path, local_login=False))) as client:
        page = client.get("/login?next=/account", follow_redirects=False)
        assert page.status_code == 303
        assert page.headers["location"] == "/sso/login?next=%2Faccount"
        refused = client.post("/login", data={"name": "admin", "password": "x" * 20})
        assert refused.status_code == 403


def test_with_single_sign_on_the_allowlist_grows_by_its_two_routes(tmp_path: Path) -> None:
    with TestClient(create_app(oidc_settings(tmp_path))) as client:
        routes = guarded_routes(client.app)
    public = {(m, p) for m, p, is_public in routes if is_public}
    sso = {("GET", "/sso/login"), ("GET", "/sso/callback")}
    assert {(m, p) for m, p in public if not p.startswith(PUBLIC_PREFIXES)} == PUBLIC | sso


def test_starting_sign_ins_is_throttled_per_client_address(tmp_path: Path) -> None:
    """Each start stores a sign-in under way: an anonymous client may not start them at
    request speed (429 with Retry-After, not a row each)."""
    with TestClient(create_app(oidc_settings(tmp_path, oidc_logins_per_minute=2))) as client:
        for _ in range(2):  # heard: the provider (port 9) is down
            assert client.get("/sso/login", follow_redirects=False).status_code == 503
        refused = client.get("/sso/login", follow_redirects=False)
        assert refused.status_code == 429, refused.text[:300]
        assert int(refused.headers["retry-after"]) >= 1
        assert "too many sign-ins" in refused.text


def test_sign_ins_under_way_are_pruned_and_capped(tmp_path: Path) -> None:
    db = open_database(fake_settings(tmp_path))
    logins = PendingLogins(db, max_pending=3)
    pending = Pending("nonce", "verifier", "http://127.0.0.1/sso/callback", "/")
    with db.write() as write:  # one started long ago and never finished
        write.execute(
            "INSERT INTO sso_logins VALUES ('stale', 'b', 'n', 'v', 'r', '/', ?)",
            [time.time() - LOGIN_TTL_S - 1],
        )
    browsers = {state: logins.add(state, pending) for state in ("s0", "s1", "s2", "s3", "s4")}
    rows = db.read().execute("SELECT COUNT(*) FROM sso_logins").fetchone()[0]
    assert rows == 3  # at most max_pending, whatever comes in
    assert logins.take("s0", browsers["s0"]) is None  # the oldest made room
    assert logins.take("s4", browsers["s4"]) == pending  # the newest are kept
    assert logins.take("s2", browsers["s2"]) == pending
    db.close()


@pytest.mark.parametrize(
    "values",
    [
        {"local_login": False},  # nobody could sign in
        {"oidc_issuer": "https://idp.example"},  # no client id
        {"oidc_issuer": "http://idp.example", "oidc_client_id": "x"},  # plain http, not loopback
        {"oidc_issuer": "https://idp.example", "oidc_client_id": "x", "oidc_scopes": "email"},
        {"oidc_group_roles": {"g": "root"}},
    ],
)
def test_settings_refuse_what_cannot_work(values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Settings(**values)
