"""Where speculative drafts come from: the sequence's own tokens, or a smaller model.

A drafter proposes up to ``k`` tokens that may follow a sequence; the target model then
checks them all in one ``llama_decode`` (``llm/engine/speculative.py``). Both drafters are
deterministic (a draft is a function of the tokens so far), which is what makes the
acceptance rule there exact.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from llm.engine.slots import common_prefix

if TYPE_CHECKING:
    from llm.engine.native import NativeModel

log = logging.getLogger(__name__)

# Longest and shortest n-grams prompt lookup matches. One token matches almost anywhere
# and its drafts are mostly wrong (each wrong draft costs a row of the batch); three
# tokens are a phrase.
MAX_NGRAM = 3
MIN_NGRAM = 2
# A draft model behind by more than this many tokens (a new prompt) catches up one chunk
# per engine step instead of drafting, so no single step stalls the streams for long.
CATCH_UP_CHUNK = 128


@dataclass(frozen=True)
class DraftRequest:
    seq_id: int
    tokens: Sequence[int]  # everything in the sequence: prompt, then what it generated
    k: int  # the most tokens wanted


class Drafter(Protocol):
    method: str

    def propose(self, requests: list[DraftRequest]) -> list[list[int]]: ...

    def close(self) -> None: ...


def prompt_lookup(
    tokens: Sequence[int], k: int, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM
) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the last
    ``n`` tokens, trying the longest ``n`` first; [] when nothing matches."""
    if k < 1 or len(tokens) < min_ngram + 1:
        return []
    array = np.asarray(tokens, dtype=np.int64)
    size = len(array)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        tail = array[size - n :]
        # starts of every earlier window equal to the tail (the tail itself excluded)
        starts = np.flatnonzero(array[: size - n] == tail[0])
        for i in range(1, n):
            starts = starts[array[starts + i] == tail[i]]
        if len(starts):
            start = int(starts[-1]) + n
            return [int(t) for t in array[start : start + k]]
    return []


class PromptLookup:
    """Drafts by copying from the sequence itself: grounded answers quote their sources."""

    method = "prompt-lookup"

    def propose(self, requests: list[DraftRequest]) -> list[list[int]]:
        return [prompt_lookup(r.tokens, r.k) for r in requests]

    def close(self) -> None:
        pass


class VocabularyMismatch(RuntimeError):
    pass


def check_same_vocabulary(target: NativeModel, draft: NativeModel) -> None:
    """Refuse a draft model whose tokens are not the target's, id for id."""
    if target.n_vocab != draft.n_vocab:
        raise VocabularyMismatch(
            f"the draft model has {draft.n_vocab} tokens and the model it drafts for "
            f"{target.n_vocab}: a draft model needs the same vocabulary"
        )
    for token in range(target.n_vocab):
        if target.token_text(token) != draft.token_text(token):
            raise VocabularyMismatch(
                f"token {token} is {draft.token_text(token)!r} in the draft model and "
                f"{target.token_text(token)!r} in the model it drafts for: a draft model "
                "needs the same vocabulary"
            )
    if (target.bos, target.eos) != (draft.bos, draft.eos):
        raise VocabularyMismatch("the draft model's BOS/EOS tokens differ from the target's")


class DraftModel:
    """Greedy drafts from a smaller model with the same vocabulary.

    Its context mirrors the target's sequence ids: ``held[seq_id]`` is what that sequence
    holds in the draft KV cache, brought up to date (common prefix kept, rest decoded) before
    each draft. Drafting is greedy, so a draft is a function of the sequence.
    """

    method = "draft-model"

    def __init__(self, native: NativeModel):
        self.native = native
        self.held: dict[int, list[int]] = {}
        self._greedy = native.greedy_sampler()

    def propose(self, requests: list[DraftRequest]) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in requests]
        rows: dict[int, int] = {}  # request index -> batch row of its logits
        for i, request in enumerate(requests):
            row = self._catch_up(request, {r.seq_id for r in requests})
            if row is not None:
                drafts[i].append(self.native.sample_with(self._greedy, row))
                rows[i] = row
        for _ in range(1, max((r.k for r in requests), default=0)):
            growing = [i for i in rows if len(drafts[i]) < requests[i].k]
            if not growing:
                break
            n = self.native
            n.clear_batch()
            for i in growing:
                seq_id, last = requests[i].seq_id, drafts[i][-1]
                rows[i] = n.add(last, len(self.held[seq_id]), seq_id, True)
            if n.decode() != 0:
                for i in growing:  # the cells may or may not be there: start that one over
                    self._forget(requests[i].seq_id)
                break
            for i in growing:
                self.held[requests[i].seq_id].append(drafts[i][-1])
                drafts[i].append(n.sample_with(self._greedy, rows[i]))
        return drafts

    def _catch_up(self, request: DraftRequest, active: set[int]) -> int | None:
        """Decode what the draft context lacks of the sequence, ending on its last token;
        the batch row of that token's logits, or None when not (yet) up to date."""
        n, seq_id, tokens = self.native, request.seq_id, request.tokens
        held = self.held.setdefault(seq_id, [])
        keep = common_prefix(held, tokens, len(tokens) - 1)  # the last one is always decoded
        n.seq_remove(seq_id, keep)
        del held[keep:]
        end = len(tokens) if len(tokens) - keep <= CATCH_UP_CHUNK else keep + CATCH_UP_CHUNK
        n.clear_batch()
        for pos in range(keep, end):
            n.add(tokens[pos], pos, seq_id, pos == len(tokens) - 1)
        while (rc := n.decode()) == 1 and self._evict(active):
            pass
        if rc != 0:
            self._forget(seq_id)
            return None
        held.extend(tokens[keep:end])
        return n.batch_size - 1 if end == len(tokens) else None

    def _evict(self, active: set[int]) -> bool:
        """Free the draft cells of sequences not drafting now; False when there are none."""
        idle = [s for s, tokens in self.held.items() if tokens and s not in active]
        for seq_id in idle:
            self._forget(seq_id)
        return bool(idle)

    def _forget(self, seq_id: int) -> None:
        self.native.seq_remove(seq_id)
        self.held[seq_id] = []

    def close(self) -> None:
        self.native.free_sampler(self._greedy)
        self.native.close()
