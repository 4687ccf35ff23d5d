"""The embedding stage's schedule: slices of texts shared fairly among documents.

One thread embeds every upload, a slice of texts per call. A slice is shared among the
documents in progress so that a large document never holds up the rest: collections
(the owners) share each slice equally, max-min fair (an owner that needs less than an
equal share takes what it needs and leaves the rest to the others), and an owner's own
documents are served fewest-texts-left first. A one-page upload is therefore embedded in
the next slice, whatever else is under way, and a large document still moves on in
every slice it shares.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from retrieval.embedder import Vectors


def share_slice(wanted: Sequence[tuple[Hashable, int]], size: int) -> list[int]:
    """How many texts each of ``wanted`` (owner, texts left) gets in a slice of ``size``.

    The counts sum to ``min(size, total left)``; every owner with texts left gets at least
    one while the slice has room for everybody.
    """
    needs: dict[Hashable, int] = {}
    for owner, left in wanted:
        needs[owner] = needs.get(owner, 0) + max(0, left)
    shares: dict[Hashable, int] = {}
    room = size
    owners = sorted(needs, key=lambda owner: needs[owner])  # the smallest needs first
    for position, owner in enumerate(owners):
        equal = max(1, room // (len(owners) - position)) if room > 0 else 0
        shares[owner] = min(needs[owner], equal)
        room -= shares[owner]
    counts = [0] * len(wanted)
    fewest_first = sorted(range(len(wanted)), key=lambda i: max(0, wanted[i][1]))
    for i in fewest_first:
        owner, left = wanted[i]
        counts[i] = min(max(0, left), shares[owner])
        shares[owner] -= counts[i]
    return counts


@dataclass
class Embedding:
    """One document's texts on their way through the slices, shortest first (the
    embedder's batches stay even), with the vectors put back in the texts' order."""

    texts: list[str]
    dimension: int
    _order: list[int] = field(init=False)
    _parts: list[Vectors] = field(init=False, default_factory=list)
    _done: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._order = sorted(range(len(self.texts)), key=lambda i: len(self.texts[i]))

    @property
    def left(self) -> int:
        return len(self._order) - self._done

    def next_texts(self, count: int) -> list[str]:
        """The next ``count`` texts to embed (not yet marked done: see :meth:`add`)."""
        return [self.texts[i] for i in self._order[self._done : self._done + count]]

    def add(self, vectors: Vectors) -> None:
        """The vectors of the texts :meth:`next_texts` returned last, in that order."""
        self._parts.append(vectors)
        self._done += len(vectors)

    def vectors(self) -> Vectors:
        """All vectors in the order of ``texts``, once :attr:`left` is 0."""
        if self.left:
            raise ValueError(f"{self.left} texts are not embedded yet")
        if not self._parts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        stacked = np.concatenate(self._parts)
        inverse = np.empty(len(self._order), dtype=np.int64)
        inverse[self._order] = np.arange(len(self._order))
        result: Vectors = stacked[inverse]
        return result
