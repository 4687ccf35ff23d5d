"""The KV disk cache's write policy: geometric rewrites and the turnover cap."""

from __future__ import annotations

import pytest

from llm.engine.kv_policy import WritePolicy, WriteRate, worth_rewriting


def test_a_state_with_nothing_saved_is_written() -> None:
    assert worth_rewriting(None, [1, 2, 3], growth=2)
    assert worth_rewriting(None, [], growth=2)


def test_an_unchanged_state_is_not_rewritten() -> None:
    tokens = list(range(1000))
    assert not worth_rewriting(tokens, tokens, growth=2)
    assert not worth_rewriting([], [], growth=2)


def test_a_state_a_few_tokens_longer_is_not_rewritten() -> None:
    saved = list(range(1000))
    assert not worth_rewriting(saved, [*saved, 7, 8, 9], growth=2)
    assert not worth_rewriting(saved, list(range(1999)), growth=2)


def test_a_state_grown_to_growth_times_the_saved_one_is_rewritten() -> None:
    saved = list(range(1000))
    assert worth_rewriting(saved, list(range(2000)), growth=2)
    assert worth_rewriting(saved, list(range(1500)), growth=1.5)


def test_what_counts_is_the_prefix_the_saved_state_covers() -> None:
    saved = list(range(1000))
    # The oldest turns dropped to fit: the new state shares only its first 10 tokens.
    diverged = [*range(10), *range(5000, 5400)]
    assert worth_rewriting(saved, diverged, growth=2)
    # A shorter state that the saved one covers entirely brings nothing.
    assert not worth_rewriting(saved, saved[:400], growth=2)


def test_a_conversation_writes_at_most_growth_over_growth_minus_one_its_final_size() -> None:
    saved: list[int] | None = None
    written = 0
    tokens: list[int] = []
    for turn in range(60):  # 60 turns of 150 tokens: each one offered
        tokens = tokens + list(range(turn * 150, (turn + 1) * 150))
        if worth_rewriting(saved, tokens, growth=2):
            saved, written = list(tokens), written + len(tokens)
    assert written <= 2 * len(tokens)  # every turn written would be ~30x
    assert saved is not None and len(saved) * 2 >= len(tokens)  # half at least is kept


def test_the_rate_allows_a_burst_then_the_average() -> None:
    budget = 1000
    rate = WriteRate(budget, WritePolicy(turnover_s=100, burst_share=0.25), now=0.0)
    assert rate.allows(0.0)
    rate.charge(250)  # the whole burst
    assert not rate.allows(0.0)
    assert not rate.allows(0.0)
    assert rate.allows(0.5)  # refilled at 10 bytes a second
    rate.charge(400)  # larger than what is there: charged in full (a debt)
    assert not rate.allows(30.0)
    assert rate.allows(41.0)
    # Never more than the burst saved up, however long the quiet spell.
    assert rate.allows(10_000.0)
    assert rate.allowance == 250


def test_over_a_long_run_the_rate_holds_the_budget_per_turnover() -> None:
    budget, turnover = 10_000, 60.0
    rate = WriteRate(budget, WritePolicy(turnover_s=turnover), now=0.0)
    written = 0
    for step in range(6000):  # a write of 100 bytes offered every 0.1 s for 10 minutes
        now = step * 0.1
        if rate.allows(now):
            rate.charge(100)
            written += 100
    minutes = 6000 * 0.1 / turnover
    assert written <= budget * minutes + budget * 0.25 + 100


def test_turnover_zero_means_no_cap() -> None:
    rate = WriteRate(100, WritePolicy(turnover_s=0), now=0.0)
    for _ in range(100):
        assert rate.allows(0.0)
        rate.charge(1_000_000)


@pytest.mark.parametrize(
    "fields",
    [{"growth": 0.5}, {"turnover_s": -1}, {"burst_share": 0}, {"burst_share": 1.5}],
)
def test_nonsense_policies_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        WritePolicy(**fields)
