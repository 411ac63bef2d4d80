"""Faults injected where a rebuild reads its leaves back (the leaf cache), as a broken cache or
store would lose them: for the regression gate's tests, which must see a bad build held back."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from raptor_engine.store.channel import ChannelStore
from raptor_engine.types import Chunk

CachedLeaves = dict[str, tuple[list[Chunk], np.ndarray]]
Kept = Callable[[str, int, int], int]
"""How many of a source's leaves the faulty cache gives back: from its id, its place among the
sources read (sorted by id) and how many it has."""


def leaf_cache_keeps(monkeypatch: pytest.MonkeyPatch, kept: Kept) -> None:
    """From now on (for the test), every read of the leaf cache gives back only the first
    ``kept(...)`` leaves of each source."""
    read = ChannelStore.cached_leaves

    def faulty(self: ChannelStore, profile: str, source_ids: Sequence[str]) -> CachedLeaves:
        found = sorted(read(self, profile, source_ids).items())
        return {sid: (chunks[: (n := kept(sid, place, len(chunks)))], vectors[:n])
                for place, (sid, (chunks, vectors)) in enumerate(found)}

    monkeypatch.setattr(ChannelStore, "cached_leaves", faulty)


def half_the_leaves_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half of every source's leaves lost."""
    leaf_cache_keeps(monkeypatch, lambda _sid, _place, count: count // 2)


def first_sources_leaves_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every leaf of the first source read (by id) lost."""
    leaf_cache_keeps(monkeypatch, lambda _sid, place, count: 0 if place == 0 else count)
