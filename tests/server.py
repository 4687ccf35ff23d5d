"""A real Ragdesk server process on a loopback port, for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx

REPO = Path(__file__).resolve().parent.parent


_RUNNING: dict[str, ServerProcess] = {}  # url -> server, for ``http`` below


def auth_headers(url: str) -> dict[str, str]:
    """The API key header of the ServerProcess serving ``url`` (none for other URLs)."""
    for base, server in _RUNNING.items():
        if url == base or url.startswith(base + "/"):
            return server.headers
    return {}


class AuthenticatedHttp:
    """``httpx.get/post/delete/stream`` that send the API key of the ServerProcess whose
    URL the request goes to (tests call ``http.get(url)`` as they would ``httpx.get``)."""

    def _with_key(self, url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "headers": {**auth_headers(url), **kwargs.get("headers", {})}}

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(url, **self._with_key(url, kwargs))

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(url, **self._with_key(url, kwargs))

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return httpx.delete(url, **self._with_key(url, kwargs))

    def stream(self, method: str, url: str, **kwargs: Any) -> Any:
        return httpx.stream(method, url, **self._with_key(url, kwargs))


http = AuthenticatedHttp()


def sign_in(page: Any, username: str, password: str) -> None:
    """Sign a Playwright page in through the login form; it lands on the chat page."""
    page.goto("/login")
    page.fill("#login-name", username)
    page.fill("#login-password", password)
    page.click("#login-submit")
    page.wait_for_selector("#ask-form")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_healthy(
    url: str, process: subprocess.Popen[bytes], timeout: float, log_path: Path
) -> None:
    """Poll ``url`` until it answers 200; fail early when ``process`` exits meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}; see {log_path}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{url} not ready after {timeout}s; see {log_path}")


class ServerProcess:
    def __init__(self, data_dir: Path, log_path: Path, **settings: Any):
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "RAGDESK_LOAD_SAMPLES": "false",
            "RAGDESK_TEMPERATURE": "0",
            "RAGDESK_INDEX_CHECKPOINT_SECONDS": "1",
            "RAGDESK_RATE_LIMIT_PER_MINUTE": "0",  # load tests and benchmarks share one key
            **{f"RAGDESK_{k.upper()}": str(v) for k, v in settings.items()},
        }
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.username = "e2e"
        self.password = ""
        self.api_key = ""

    @property
    def headers(self) -> dict[str, str]:
        """Credentials for plain HTTP clients: ``httpx.get(url, headers=server.headers)``."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def provision(self) -> None:
        """An admin account (``username``/``password``, for browsers) and an API key
        (``api_key``), written with the app's own functions before the server starts."""
        from app.auth.passwords import generate_password
        from app.auth.service import open_auth
        from app.config.settings import Settings
        from app.migrations import open_database

        database_url = self.env.get("RAGDESK_DATABASE_URL")  # the server's own store
        settings = Settings(data_dir=self.data_dir, database_url=database_url or None)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        db = open_database(settings)
        try:
            auth = open_auth(settings, db)
            self.password = generate_password()
            user = auth.users.by_name(self.username)
            if user is None:
                user = auth.users.create(self.username, self.password, role="admin")
            else:
                auth.users.set_password(user.id, self.password)
            self.api_key, _ = auth.keys.create(user, name="tests")
        finally:
            db.close()

    def start(self, ready_timeout: float = 180.0) -> ServerProcess:
        self.provision()
        _RUNNING[self.url] = self
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
            ],
            cwd=REPO,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        wait_until_healthy(f"{self.url}/health/ready", self.process, timeout, self.log_path)

    def exit_code(self, timeout: float) -> int:
        """How the process ended (waiting up to ``timeout`` for a signal sent to it to take
        effect); it is stopped then, whatever happened, and its log closed."""
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        finally:
            self.stop()  # closes the log (and kills a server that did not exit)

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no checkpoints, exactly like a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._log is not None:
            self._log.close()


def start_on_core(server: ServerProcess, core: int, ready_timeout: float = 300) -> ServerProcess:
    """Start ``server`` pinned to one CPU core with one OpenMP thread (benchmarks that
    compare one process per core): the child inherits the starting thread's affinity."""
    server.env["OMP_NUM_THREADS"] = "1"
    everything = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        return server.start(ready_timeout=ready_timeout)
    finally:
        os.sched_setaffinity(0, everything)


def slow_fake_server(root: Path, token_delay_s: float, **settings: Any) -> ServerProcess:
    """A started server with the fake embedder and a fake model that waits
    ``token_delay_s`` before each token (to catch a request mid-answer)."""
    return ServerProcess(
        root / "data",
        root / "server.log",
        embedder_backend="fake",
        generator_backend="fake",
        fake_token_delay_s=token_delay_s,
        **settings,
    ).start(ready_timeout=60)
