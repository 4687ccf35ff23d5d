"""Accounts: sign-in, sessions, CSRF, the login throttle, and that every route is guarded."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from litestar.testing import TestClient

from app.auth.guards import BACKGROUND_POLLS
from app.auth.passwords import token_hash
from app.auth.sessions import COOKIE_NAME
from app.cli import main as cli
from tests.conftest import TEST_PASSWORD, TEST_USER, add_user, fake_settings, login, signed_in

PUBLIC = {("GET", "/health/live"), ("GET", "/health/ready"), ("GET", "/login"), ("POST", "/login")}
PUBLIC_PREFIXES = ("/static",)


def guarded_routes(app: Any) -> list[tuple[str, str, bool]]:
    """(method, path with every parameter filled in, public) of every route handler."""
    found = []
    for route in app.routes:
        path = re.sub(r"\{(\w+):(\w+)\}", lambda m: "x" if m.group(2) in ("str", "path") else "1",
                      route.path)  # fmt: skip
        for handler in getattr(route, "route_handlers", []):
            for method in sorted(handler.http_methods):
                if method in ("HEAD", "OPTIONS"):
                    continue
                found.append((method, path, bool(handler.opt.get("public"))))
    return found


def test_the_allowlist_is_exactly_health_login_and_static(
    anonymous_client: TestClient[Any],
) -> None:
    routes = guarded_routes(anonymous_client.app)
    public = {(m, p) for m, p, is_public in routes if is_public}
    assert {(m, p) for m, p in public if not p.startswith(PUBLIC_PREFIXES)} == PUBLIC
    assert len(routes) > 30  # the walk really sees the app


def test_every_other_route_refuses_an_anonymous_request(anonymous_client: TestClient[Any]) -> None:
    for method, path, public in guarded_routes(anonymous_client.app):
        if public:
            continue
        response = anonymous_client.request(method, path, follow_redirects=False)
        where = f"{method} {path}"
        if path.startswith("/v1/"):
            assert response.status_code == 401, where
            assert response.json()["error"]["type"] == "authentication_error", where
        elif path.startswith(("/api/", "/metrics")):
            assert response.status_code == 401, where
            assert response.json()["error"]["status"] == 401, where
        else:
            assert response.status_code == 303, where
            assert response.headers["location"].startswith("/login"), where
        htmx = anonymous_client.request(method, path, headers={"HX-Request": "true"})
        if not path.startswith(("/v1/", "/api/", "/metrics")):
            assert htmx.status_code == 401 and htmx.headers["hx-redirect"].startswith("/login")


def test_unknown_v1_paths_and_bad_keys_get_openai_errors(anonymous_client: TestClient[Any]) -> None:
    bad = anonymous_client.get("/v1/models", headers={"Authorization": "Bearer rdk_nope"})
    assert bad.status_code == 401 and bad.json()["error"]["type"] == "authentication_error"
    assert anonymous_client.get("/health/live").status_code == 200
    assert anonymous_client.get("/static/app.css").status_code == 200


def test_sign_in_sets_a_hardened_cookie_and_stores_only_its_hash(
    anonymous_client: TestClient[Any],
) -> None:
    add_user(anonymous_client, "ann")
    page = anonymous_client.get("/", follow_redirects=True)
    assert 'action="/login"' in page.text
    wrong = anonymous_client.post("/login", data={"name": "ann", "password": "nope"})
    assert wrong.status_code == 401 and "Wrong user name or password" in wrong.text
    response = anonymous_client.post(
        "/login",
        data={"name": "ann", "password": TEST_PASSWORD, "next": "/c/1"},
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == "/c/1"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie.replace("Lax", "lax")
    assert "Secure" not in cookie  # plain http here; https gets Secure (cookie_secure=auto)
    token = anonymous_client.cookies[COOKIE_NAME]
    db = anonymous_client.app.state.services.db.read()
    stored = [row[0] for row in db.execute("SELECT token_hash FROM sessions")]
    assert stored == [token_hash(token)] and token not in stored


def test_next_never_leaves_the_site(anonymous_client: TestClient[Any]) -> None:
    add_user(anonymous_client, "ann")
    for target in ("//evil.example/x", "https://evil.example", "/\\evil.example"):
        response = anonymous_client.post(
            "/login",
            data={"name": "ann", "password": TEST_PASSWORD, "next": target},
            follow_redirects=False,
        )
        assert response.headers["location"] == "/"


def test_state_changes_need_the_csrf_token_and_our_origin(client: TestClient[Any]) -> None:
    token = client.headers.pop("X-CSRF-Token")
    assert client.post("/ui/ask", data={"message": "hello"}).status_code == 403
    wrong = client.post("/ui/ask", data={"message": "hi"}, headers={"X-CSRF-Token": "x" * 43})
    assert wrong.status_code == 403
    foreign = client.post(
        "/ui/ask",
        data={"message": "hi"},
        headers={"X-CSRF-Token": token, "Origin": "https://evil.example"},
    )
    assert foreign.status_code == 403
    ok = client.post(
        "/ui/ask",
        data={"message": "hello"},
        headers={"X-CSRF-Token": token, "Origin": str(client.base_url).rstrip("/")},
    )
    assert ok.status_code == 200
    page = client.get("/").text  # htmx sends the token from the body's hx-headers
    assert f'"X-CSRF-Token": "{token}"' in page and 'id="logout-form"' in page


def test_login_from_a_foreign_origin_is_refused(anonymous_client: TestClient[Any]) -> None:
    add_user(anonymous_client, "ann")
    response = anonymous_client.post(
        "/login",
        data={"name": "ann", "password": TEST_PASSWORD},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403


def test_sign_out_ends_the_session(client: TestClient[Any]) -> None:
    token = client.headers["X-CSRF-Token"]
    cookie = client.cookies[COOKIE_NAME]
    response = client.post("/logout", data={"csrf_token": token}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/login"
    client.cookies.set(COOKIE_NAME, cookie)  # an old cookie replayed is no one
    assert client.get("/api/documents").status_code == 401


def test_repeated_failed_logins_are_slowed_then_refused(anonymous_client: TestClient[Any]) -> None:
    add_user(anonymous_client, "ann")
    throttle = anonymous_client.app.state.services.auth.logins
    for attempt in range(5):
        response = anonymous_client.post("/login", data={"name": "ann", "password": "guess"})
        assert response.status_code == 401
        assert throttle.delay("ann", "testclient") == min(4.0, 0.25 * 2**attempt)
    locked = anonymous_client.post("/login", data={"name": "ann", "password": TEST_PASSWORD})
    assert locked.status_code == 429 and int(locked.headers["retry-after"]) > 0
    assert COOKIE_NAME not in anonymous_client.cookies  # the right password does not help now
    other = anonymous_client.post("/login", data={"name": TEST_USER, "password": "x"})
    assert other.status_code == 401  # another user from the same address is still heard


def test_first_start_creates_an_admin_and_prints_the_password_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = fake_settings(tmp_path)
    with TestClient(create_app_of(settings)) as first:
        first.app.state.services.wait_until_loaded(30)
    printed = capsys.readouterr().out
    password = re.search(r"password: (\S+)", printed).group(1)  # type: ignore[union-attr]
    with TestClient(create_app_of(settings)) as again:
        again.app.state.services.wait_until_loaded(30)
        assert "password:" not in capsys.readouterr().out
        login(again, "admin", password)
        assert again.get("/api/documents").status_code == 200


def create_app_of(settings: Any) -> Any:
    from app.factory import create_app

    return create_app(settings)


def test_cli_creates_users_whose_password_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path)
    with pytest.raises(SystemExit) as done:
        cli(["users", "create", "carol", "--admin", "--data-dir", data])
    assert done.value.code == 0
    password = capsys.readouterr().out.strip()
    assert len(password) >= 16 and "\n" not in password
    with pytest.raises(SystemExit) as again:
        cli(["users", "create", "carol", "--data-dir", data])
    assert again.value.code == 2 and "already exists" in capsys.readouterr().err
    with signed_in(fake_settings(tmp_path)) as app_client:  # no first admin: users exist
        assert "password:" not in capsys.readouterr().out
        login(app_client, "carol", password)
        assert app_client.get("/").status_code == 200


def test_sec_fetch_site_decides_before_origin(client: TestClient[Any]) -> None:
    """Browsers send Origin "null" on form posts in some cases; Sec-Fetch-Site is trusted
    first, and only same-origin (or the user's own navigation) gets through."""
    same = {"Sec-Fetch-Site": "same-origin", "Origin": "null"}
    assert client.post("/ui/ask", data={"message": "hi"}, headers=same).status_code == 200
    for site in ("cross-site", "same-site"):
        refused = client.post("/ui/ask", data={"message": "hi"}, headers={"Sec-Fetch-Site": site})
        assert refused.status_code == 403, site
    null = client.post("/ui/ask", data={"message": "hi"}, headers={"Origin": "null"})
    assert null.status_code == 403


def test_cli_key_is_the_only_stdout_and_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path)
    for argv in (
        ["users", "create", "dan", "--collection", "ops", "--data-dir", data],
        [
            "keys",
            "create",
            "--user",
            "dan",
            "--collection",
            "ops",
            "--read-only",
            "--data-dir",
            data,
        ],
    ):
        with pytest.raises(SystemExit) as done:
            cli(argv)
        assert done.value.code == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"rdk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", key)
    with pytest.raises(SystemExit):
        cli(["keys", "create", "--user", "dan", "--collection", "nope", "--data-dir", data])
    assert "no collection named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["keys", "list", "--data-dir", data])
    listing = capsys.readouterr().out
    assert "ops" in listing and "read-only" in listing and key not in listing
    with signed_in(fake_settings(tmp_path)) as app_client:
        app_client.cookies.clear()
        headers = {"Authorization": f"Bearer {key}"}
        assert app_client.get("/api/documents", headers=headers).status_code == 200
        with pytest.raises(SystemExit):
            cli(["keys", "revoke", "1", "--data-dir", data])
        assert app_client.get("/api/documents", headers=headers).status_code == 401


# --- the session id changes at sign-in; sessions end when idle -------------------------------


def stored_session(client: TestClient[Any], cookie: str) -> Any:
    """The ``sessions`` row of a cookie (None once it has been deleted)."""
    db = client.app.state.services.db.read()
    query = "SELECT * FROM sessions WHERE token_hash = ?"
    return db.execute(query, [token_hash(cookie)]).fetchone()


def use_cookie(client: TestClient[Any], value: str) -> None:
    """The browser sends ``value`` as its session cookie from now on."""
    client.cookies.clear()
    client.cookies.set(COOKIE_NAME, value, domain=client.base_url.host)


def set_last_seen(client: TestClient[Any], seconds_ago: float) -> None:
    """Every session was last used ``seconds_ago`` (as if the clock had moved on)."""
    with client.app.state.services.db.write() as db:
        db.execute("UPDATE sessions SET last_seen_at = ?", [time.time() - seconds_ago])


def test_signing_in_again_gives_a_new_session_and_csrf_token_and_ends_the_old_one(
    anonymous_client: TestClient[Any],
) -> None:
    add_user(anonymous_client, "ann")
    use_cookie(anonymous_client, "planted-by-someone-else")  # a fixation attempt
    first_csrf = login(anonymous_client, "ann")
    first = anonymous_client.cookies[COOKIE_NAME]
    assert first != "planted-by-someone-else"
    second_csrf = login(anonymous_client, "ann")  # signing in again, with the first cookie
    second = anonymous_client.cookies[COOKIE_NAME]
    assert second != first and second_csrf != first_csrf
    assert stored_session(anonymous_client, first) is None
    assert anonymous_client.get("/api/documents").status_code == 200
    use_cookie(anonymous_client, first)  # the session from before is no one
    assert anonymous_client.get("/api/documents").status_code == 401
    use_cookie(anonymous_client, second)
    old_token = {"X-CSRF-Token": first_csrf}
    refused = anonymous_client.post("/ui/ask", data={"message": "hi"}, headers=old_token)
    assert refused.status_code == 403  # nor is the old CSRF token any good


def test_a_session_unused_past_the_idle_timeout_is_refused_and_deleted(tmp_path: Path) -> None:
    with signed_in(fake_settings(tmp_path, session_idle_s=600)) as client:
        cookie = client.cookies[COOKIE_NAME]
        set_last_seen(client, 590)
        assert client.get("/api/documents").status_code == 200  # still inside the timeout
        set_last_seen(client, 601)
        assert client.get("/api/documents").status_code == 401
        assert stored_session(client, cookie) is None  # deleted, not just refused
        use_cookie(client, cookie)
        page = client.get("/c/1", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        htmx = client.get("/ui/status", headers={"HX-Request": "true"})
        assert htmx.status_code == 401 and htmx.headers["hx-redirect"].startswith("/login")


def test_an_htmx_request_of_an_ended_session_signs_in_back_to_the_page_it_came_from(
    tmp_path: Path,
) -> None:
    """A background poll (``/ui/status``) is not a page: after signing in, the browser goes
    back to the page that polled (htmx's ``HX-Current-URL``), and only if it is ours."""
    with signed_in(fake_settings(tmp_path, session_idle_s=600)) as client:
        set_last_seen(client, 601)
        page = f"{client.base_url}/c/1?q=a+b"

        def sign_in_from(current: str | None) -> str:
            headers = {"HX-Request": "true"}
            if current is not None:
                headers["HX-Current-URL"] = current
            poll = client.get("/ui/status", headers=headers)
            assert poll.status_code == 401
            target = urlsplit(poll.headers["hx-redirect"])
            assert target.path == "/login"
            return parse_qs(target.query).get("next", ["/"])[0]

        assert sign_in_from(page) == "/c/1?q=a+b"
        assert sign_in_from("/c/2") == "/c/2"  # relative: ours
        for foreign in (
            "https://evil.example/c/1",
            "//evil.example/c/1",
            f"https://{client.base_url.host}/c/1",  # another scheme is another origin
            f"{client.base_url}//evil.example/x",
            f"{client.base_url}/\\evil.example",
            "/c/1\\x",
            "javascript:alert(1)",
            "",
            None,  # no header: not the fragment's own path either
        ):
            assert sign_in_from(foreign) == "/", foreign
        # The login form carries it through, and the handler still checks it.
        next_page = sign_in_from(page)
        back = client.post(
            "/login",
            data={"name": TEST_USER, "password": TEST_PASSWORD, "next": next_page},
            follow_redirects=False,
        )
        assert back.status_code == 303 and back.headers["location"] == "/c/1?q=a+b"


def test_use_keeps_a_session_alive_with_at_most_one_write_a_minute(tmp_path: Path) -> None:
    with signed_in(fake_settings(tmp_path, session_idle_s=600)) as client:
        cookie = client.cookies[COOKIE_NAME]
        set_last_seen(client, 30)
        seen = stored_session(client, cookie)["last_seen_at"]
        for _ in range(3):
            assert client.get("/api/documents").status_code == 200
        assert stored_session(client, cookie)["last_seen_at"] == seen  # recent enough: no write
        set_last_seen(client, 500)
        assert client.get("/").status_code == 200
        assert time.time() - stored_session(client, cookie)["last_seen_at"] < 5  # written
        set_last_seen(client, 590)
        for _ in range(2):  # each request renews it: used every 590 s, it never times out
            assert client.get("/api/documents").status_code == 200
            with client.app.state.services.db.write() as db:
                db.execute("UPDATE sessions SET last_seen_at = last_seen_at - 590")
        assert client.get("/api/documents").status_code == 200


def test_the_uis_background_polls_do_not_keep_a_session_alive(tmp_path: Path) -> None:
    with signed_in(fake_settings(tmp_path, session_idle_s=600)) as client:
        cookie = client.cookies[COOKIE_NAME]
        set_last_seen(client, 300)
        seen = stored_session(client, cookie)["last_seen_at"]
        for path in ("/ui/status", "/ui/library"):
            assert client.get(path, headers={"HX-Request": "true"}).status_code == 200
        assert stored_session(client, cookie)["last_seen_at"] == seen
        set_last_seen(client, 601)  # the open tab kept polling, nobody used it
        assert client.get("/ui/status", headers={"HX-Request": "true"}).status_code == 401


def test_every_timed_poll_in_the_templates_is_a_background_poll() -> None:
    """``BACKGROUND_POLLS`` names what the UI requests on a timer: a new poll must be added
    there, or an open tab would keep its session alive for ever."""
    templates = Path(__file__).resolve().parent.parent / "templates"
    polls = []
    for template in templates.glob("*.html"):
        for element in re.findall(r"<[^>]*hx-trigger=\"[^\"]*every [^>]*>", template.read_text()):
            url = re.search(r'hx-get="([^"]+)"', element)
            assert url is not None, f"{template.name}: a timed trigger without hx-get"
            polls.append(re.sub(r"\{\{[^}]*\}\}", "7", url.group(1)))
    assert len(polls) >= 4
    for path in polls:
        assert BACKGROUND_POLLS.fullmatch(path), path
    for path in ("/", "/c/1", "/ui/ask", "/ui/answers/1/stream", "/api/documents"):
        assert not BACKGROUND_POLLS.fullmatch(path), path


def test_an_idle_timeout_of_zero_leaves_only_the_lifetime(tmp_path: Path) -> None:
    with signed_in(fake_settings(tmp_path, session_idle_s=0)) as client:
        set_last_seen(client, 30 * 86400)
        assert client.get("/api/documents").status_code == 200
        with client.app.state.services.db.write() as db:
            db.execute("UPDATE sessions SET expires_at = ?", [time.time() - 1])
        assert client.get("/api/documents").status_code == 401
        assert (
            client.app.state.services.db.read()
            .execute("SELECT COUNT(*) FROM sessions")
            .fetchone()[0]
            == 0
        )
