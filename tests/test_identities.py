"""First sign-ins by single sign-on (app/auth/identities.py) that race each other: two
requests (or processes) for the same identity sign in as one user, and one that finds its
user name taken meanwhile gets the next free one; neither ends in an error."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.auth import identities as identities_module
from app.auth.groups import Groups
from app.auth.identities import ClaimRules, Identities
from app.auth.passwords import Passwords
from app.auth.users import Users
from app.migrations import open_database
from tests.conftest import fake_settings

ISSUER = "https://idp.example"
RULES = ClaimRules()


@pytest.fixture
def identities(tmp_path: Path) -> Iterator[Identities]:
    db = open_database(fake_settings(tmp_path))
    users = Users(db, Passwords(time_cost=1, memory_kib=1024, parallelism=1))
    yield Identities(db, users, Groups(db))
    db.close()


def names(identities: Identities) -> list[str]:
    return [user.name for user in identities.users.list()]


def test_a_first_sign_in_that_lost_the_race_signs_in_as_the_winners_user(
    identities: Identities, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = {"preferred_username": "alice", "groups": ["eng"]}
    winner = identities.sign_in(ISSUER, "alice-1", claims, RULES)
    # The loser looked for the link before the winner's insert was committed.
    monkeypatch.setattr(identities, "user_of", lambda issuer, subject: None)
    loser = identities.sign_in(ISSUER, "alice-1", claims, RULES)
    assert loser == winner
    assert names(identities) == ["alice"]


def test_a_user_name_taken_meanwhile_by_another_process_gets_the_next_free_one(
    identities: Identities, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = identities.sign_in(ISSUER, "carol-1", {"preferred_username": "carol"}, RULES)
    free_name = identities_module._free_name
    # Another process chose "carol" while this one did: its insert committed first.
    stale = iter(["carol"])

    def racing(db: Any, base: str) -> str:
        return next(stale, None) or free_name(db, base)

    monkeypatch.setattr(identities_module, "_free_name", racing)
    second = identities.sign_in(ISSUER, "carol-2", {"preferred_username": "carol"}, RULES)
    assert (first.name, second.name) == ("carol", "carol-2")
    assert identities.user_of(ISSUER, "carol-2") == second


def test_concurrent_first_sign_ins_of_one_identity_make_one_user(identities: Identities) -> None:
    threads_n = 6
    start = threading.Barrier(threads_n)
    outcomes: list[object] = []

    def sign_in() -> None:
        start.wait()
        try:
            user = identities.sign_in(ISSUER, "bob-1", {"preferred_username": "bob"}, RULES)
            outcomes.append(user.id)
        except Exception as exc:  # the race's loser, before the fix: IntegrityError
            outcomes.append(exc)

    threads = [threading.Thread(target=sign_in) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == threads_n and len(set(outcomes)) == 1, outcomes
    assert names(identities) == ["bob"]


def test_a_disabled_account_found_by_the_race_is_still_refused(
    identities: Identities, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = identities.sign_in(ISSUER, "dan-1", {"preferred_username": "dan"}, RULES)
    identities.users.set_disabled(user.id, True)
    monkeypatch.setattr(identities, "user_of", lambda issuer, subject: None)
    with pytest.raises(identities_module.SignInRefused):
        identities.sign_in(ISSUER, "dan-1", {"preferred_username": "dan"}, RULES)
