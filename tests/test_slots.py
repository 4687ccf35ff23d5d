"""Slot placement: which KV sequence a prompt goes to and how much cache it reuses."""

from __future__ import annotations

from collections.abc import Sequence

from llm.engine.slots import Placement, Slot, cells_used, common_prefix, place

BUSY = "a running request"


def slot(
    seq_id: int, tokens: Sequence[int] = (), *, busy: bool = False, last_used: float = 0.0
) -> Slot[str]:
    return Slot(seq_id, list(tokens), BUSY if busy else None, last_used)


# --- common_prefix ----------------------------------------------------------------------------


def test_common_prefix_counts_equal_leading_tokens() -> None:
    assert common_prefix([1, 2, 3, 4], [1, 2, 9, 4], 10) == 2


def test_common_prefix_of_identical_sequences_is_their_length() -> None:
    assert common_prefix([5, 6, 7], [5, 6, 7], 10) == 3


def test_common_prefix_stops_at_the_shorter_sequence() -> None:
    assert common_prefix([1, 2], [1, 2, 3, 4], 10) == 2
    assert common_prefix([1, 2, 3, 4], [1, 2], 10) == 2


def test_common_prefix_is_capped_by_limit() -> None:
    assert common_prefix([1, 2, 3, 4], [1, 2, 3, 4], 3) == 3
    assert common_prefix([1, 2, 3], [1, 2, 3], 0) == 0


def test_common_prefix_with_negative_limit_or_empty_input_is_zero() -> None:
    assert common_prefix([1], [1], -1) == 0
    assert common_prefix([], [1, 2], 5) == 0
    assert common_prefix([1, 2], [], 5) == 0


def test_common_prefix_of_different_first_tokens_is_zero() -> None:
    assert common_prefix([1, 2, 3], [2, 2, 3], 3) == 0


# --- place ----------------------------------------------------------------------------------


def test_place_returns_none_when_every_slot_is_busy() -> None:
    slots = [slot(0, [1, 2], busy=True), slot(1, busy=True)]
    assert place(slots, [1, 2, 3]) is None


def test_place_in_an_empty_context_takes_the_first_slot_from_scratch() -> None:
    slots = [slot(0), slot(1)]
    assert place(slots, [1, 2, 3]) == Placement(0, None, 0)


def test_place_reuses_a_free_slot_in_place_when_the_prompt_extends_it() -> None:
    slots = [slot(0), slot(1, [1, 2, 3]), slot(2)]
    assert place(slots, [1, 2, 3, 4, 5]) == Placement(1, None, 3)


def test_place_always_recomputes_the_last_prompt_token() -> None:
    # The slot holds the whole prompt, but the last token's logits are needed again.
    slots = [slot(0, [1, 2, 3])]
    placement = place(slots, [1, 2, 3])
    assert placement is not None
    assert placement.reuse == 2
    assert placement.reuse < 3


def test_place_reuse_is_never_the_whole_prompt_even_if_a_slot_holds_more() -> None:
    slots = [slot(0, [1, 2, 3, 4, 5], busy=True), slot(1)]
    assert place(slots, [1, 2, 3]) == Placement(1, 0, 2)


def test_place_single_token_prompt_reuses_nothing() -> None:
    slots = [slot(0, [7, 8])]
    assert place(slots, [7]) == Placement(0, None, 0)


def test_place_empty_prompt_reuses_nothing() -> None:
    slots = [slot(0, [1, 2]), slot(1)]
    assert place(slots, []) == Placement(1, None, 0)


def test_place_prefers_an_empty_slot_over_cutting_a_free_slot_short() -> None:
    # Slot 0's conversation diverges from the prompt: copy its prefix, keep it intact.
    slots = [slot(0, [1, 2, 3, 9, 9]), slot(1)]
    assert place(slots, [1, 2, 3, 4]) == Placement(1, 0, 3)


def test_place_copies_the_prefix_from_the_best_of_several_slots() -> None:
    slots = [slot(0, [1, 9]), slot(1, [1, 2, 3, 8]), slot(2, [1, 2, 7]), slot(3)]
    assert place(slots, [1, 2, 3, 4]) == Placement(3, 1, 3)


def test_place_empty_slot_chosen_is_the_first_empty_one() -> None:
    slots = [slot(0, [5, 5]), slot(1), slot(2)]
    assert place(slots, [1, 2]) == Placement(1, None, 0)


def test_place_cuts_the_best_free_slot_when_no_empty_slot_is_left() -> None:
    slots = [slot(0, [1, 2, 3, 9], last_used=5.0), slot(1, [4, 4], last_used=1.0)]
    assert place(slots, [1, 2, 3, 4]) == Placement(0, None, 3)


def test_place_falls_back_to_least_recently_used_free_slot_without_a_prefix() -> None:
    slots = [
        slot(0, [4, 4], last_used=3.0),
        slot(1, [5, 5], last_used=1.0),
        slot(2, [6, 6], last_used=2.0),
    ]
    assert place(slots, [1, 2, 3]) == Placement(1, None, 0)


def test_place_least_recently_used_ignores_busy_slots() -> None:
    slots = [
        slot(0, [4, 4], busy=True, last_used=0.0),
        slot(1, [5, 5], last_used=9.0),
        slot(2, [6, 6], last_used=4.0),
    ]
    assert place(slots, [1, 2, 3]) == Placement(2, None, 0)


def test_place_copies_from_a_busy_slot_into_an_empty_slot() -> None:
    slots = [slot(0, [1, 2, 3], busy=True), slot(1)]
    assert place(slots, [1, 2, 3, 4]) == Placement(1, 0, 3)


def test_place_copies_from_a_busy_slot_into_the_least_recently_used_free_slot() -> None:
    slots = [
        slot(0, [1, 2, 3, 4], busy=True),
        slot(1, [7], last_used=8.0),
        slot(2, [8], last_used=2.0),
    ]
    assert place(slots, [1, 2, 3, 4, 5]) == Placement(2, 0, 4)


def test_place_never_targets_a_busy_slot() -> None:
    slots = [slot(0, [1, 2, 3], busy=True), slot(1, [1, 2], busy=True), slot(2, [9])]
    placement = place(slots, [1, 2, 3, 4])
    assert placement is not None
    assert placement.target == 2
    assert placement == Placement(2, 0, 3)


def test_place_uses_seq_ids_not_list_positions() -> None:
    slots = [slot(10, [1, 2], busy=True), slot(20)]
    assert place(slots, [1, 2, 3]) == Placement(20, 10, 2)


def test_place_source_is_none_when_target_is_the_best_slot() -> None:
    slots = [slot(0, [1, 2, 3, 9]), slot(1, [5], last_used=0.0)]
    placement = place(slots, [1, 2, 3, 4])
    assert placement is not None
    assert placement.target == 0
    assert placement.source is None


def test_place_reuses_a_free_slot_in_place_even_when_a_busy_slot_ties_on_prefix() -> None:
    slots = [slot(0, [1, 2, 3, 7], busy=True), slot(1, [1, 2, 3]), slot(2)]
    assert place(slots, [1, 2, 3, 4]) == Placement(1, None, 3)


# --- cells_used -----------------------------------------------------------------------------


def test_cells_used_of_empty_slots_is_zero() -> None:
    assert cells_used([]) == 0
    assert cells_used([slot(0), slot(1)]) == 0


def test_cells_used_sums_unrelated_slots() -> None:
    assert cells_used([slot(0, [1, 2, 3]), slot(1, [4, 5]), slot(2)]) == 5


def test_cells_used_counts_a_shared_prefix_once() -> None:
    slots = [slot(0, [1, 2, 3, 4]), slot(1, [1, 2, 3, 9, 9])]
    assert cells_used(slots) == 3 + 1 + 2


def test_cells_used_counts_identical_slots_once() -> None:
    assert cells_used([slot(0, [1, 2, 3]), slot(1, [1, 2, 3])]) == 3


def test_cells_used_counts_a_slot_that_is_a_prefix_of_another_once() -> None:
    assert cells_used([slot(0, [1, 2, 3, 4]), slot(1, [1, 2])]) == 4


def test_cells_used_shares_across_many_slots_whatever_their_order() -> None:
    # A trie: [1,2] shared by three, [1,2,3] by two, then the tails.
    tokens = [[1, 2, 3, 4], [5, 6], [1, 2, 3, 5], [1, 2, 7]]
    expected = 2 + 1 + 1 + 1 + 1 + 2
    assert cells_used([slot(i, t) for i, t in enumerate(tokens)]) == expected
    assert cells_used([slot(i, t) for i, t in enumerate(reversed(tokens))]) == expected


def test_cells_used_counts_busy_slots_too() -> None:
    assert cells_used([slot(0, [1, 2], busy=True), slot(1, [1, 3])]) == 3
