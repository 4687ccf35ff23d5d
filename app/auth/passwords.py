"""Password hashing (argon2id) and generated secrets."""

from __future__ import annotations

import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

# A hash to verify against when the user does not exist, so timing does not tell.
_DUMMY_PASSWORD = "not-a-real-password"  # noqa: S105


class Passwords:
    """argon2id with the configured cost; the parameters live in each hash, so changing
    the cost never locks anyone out (old hashes are upgraded on the next login)."""

    def __init__(self, time_cost: int = 3, memory_kib: int = 65536, parallelism: int = 4):
        self._hasher = PasswordHasher(
            time_cost=time_cost, memory_cost=memory_kib, parallelism=parallelism
        )
        self._dummy: str | None = None

    def hash(self, password: str) -> str:
        return self._hasher.hash(password)

    def verify(self, stored_hash: str | None, password: str) -> bool:
        if stored_hash is None:  # unknown user: spend the same time, then refuse
            self._dummy = self._dummy or self._hasher.hash(_DUMMY_PASSWORD)
            stored_hash, password = self._dummy, password + "\0"
        try:
            return self._hasher.verify(stored_hash, password)
        except (VerificationError, InvalidHashError):
            return False

    def needs_rehash(self, stored_hash: str) -> bool:
        return self._hasher.check_needs_rehash(stored_hash)


def generate_password() -> str:
    """About 120 bits, in characters that survive copying from a terminal."""
    return secrets.token_urlsafe(15)


def new_token(nbytes: int = 32) -> str:
    return secrets.token_urlsafe(nbytes)


def token_hash(token: str) -> str:
    """SHA-256 of a high-entropy token: what is stored instead of the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()
