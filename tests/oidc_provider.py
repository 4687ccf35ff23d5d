"""A real OpenID Connect provider for the tests: oidc-provider-mock (Authlib's server
under Flask), in its own process on a loopback port, with three test-only routes:

- ``PUT /users/<sub>`` (the mock's own): a user's claims, groups included;
- ``POST /_test/tamper`` ``{"mode": ...}``: from now on, the ID token in each token
  response is re-signed wrong: ``forged`` (another key, the provider's key id), ``stranger``
  (another key and key id), ``audience`` (the provider's key, for another client),
  ``expired`` (the provider's key, expired an hour ago); or right but without a key id
  (``kidless``, as the mock signs); ``null``: right, with the key id (as providers do);
- ``POST /_test/rotate``: a new signing key (and key id), the old one gone from the JWKS.

Run as ``python -m tests.oidc_provider PORT``; ``OidcProvider`` starts and stops it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent


def _serve(port: int) -> None:
    import flask
    import oidc_provider_mock
    import werkzeug.serving
    from authlib import jose
    from joserfc import jwt
    from joserfc.jwk import RSAKey

    app = oidc_provider_mock.app(require_nonce=True)
    tamper: dict[str, Any] = {"mode": None}

    def storage() -> Any:
        return flask.g.oidc_provider_mock_storage

    @app.post("/_test/tamper")
    def set_tamper() -> tuple[str, int]:
        tamper["mode"] = (flask.request.get_json() or {}).get("mode")
        return "", 204

    @app.post("/_test/rotate")
    def rotate() -> tuple[str, int]:
        storage().jwk = jose.RSAKey.generate_key(is_private=True)
        return "", 204

    @app.after_request
    def resign(response: flask.Response) -> flask.Response:
        mode = tamper["mode"]
        if flask.request.path != "/oauth2/token" or response.status_code != 200:
            return response
        body = response.get_json()
        own = RSAKey.import_key(storage().jwk.as_dict(is_private=True))
        token = jwt.decode(body["id_token"], own)
        # The mock signs without a key id; real providers name theirs (untampered: the same
        # token, with its key id), and "kidless" keeps the mock's way.
        claims, kid = dict(token.claims), own.thumbprint()
        key = own
        if mode == "kidless":
            body["id_token"] = jwt.encode({"alg": "RS256"}, claims, key)
            response.set_data(flask.json.dumps(body))
            return response
        if mode in ("forged", "stranger"):
            key = RSAKey.generate_key(2048)
            kid = kid if mode == "forged" else key.thumbprint()
        elif mode == "audience":
            claims["aud"] = "someone-else"
        elif mode == "expired":
            claims["iat"], claims["exp"] = int(time.time()) - 7200, int(time.time()) - 3600
        body["id_token"] = jwt.encode({"alg": "RS256", "kid": kid}, claims, key)
        response.set_data(flask.json.dumps(body))
        return response

    werkzeug.serving.run_simple("127.0.0.1", port, app, threaded=True)


class OidcProvider:
    """The provider process; its issuer is ``http://127.0.0.1:PORT``."""

    def __init__(self, port: int, log_path: Path):
        self.port = port
        self.issuer = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> OidcProvider:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.oidc_provider", str(self.port)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the provider exited; see {self.log_path}")
            try:
                httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2)
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise TimeoutError(f"the provider did not start; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def set_user(self, subject: str, **claims: Any) -> None:
        httpx.put(f"{self.issuer}/users/{subject}", json=claims).raise_for_status()

    def tamper(self, mode: str | None) -> None:
        httpx.post(f"{self.issuer}/_test/tamper", json={"mode": mode}).raise_for_status()

    def rotate_key(self) -> None:
        httpx.post(f"{self.issuer}/_test/rotate").raise_for_status()


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
