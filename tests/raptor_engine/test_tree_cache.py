"""The summaries a build makes reach the summary cache once each, even when one is asked for twice.

A summariser that reads the leaves beneath a cluster gives a cluster of one
summary the same key as that summary (both cover the same leaves); a soak run
found such a build failing with Chroma's "Expected IDs to be unique" when both
were written in one batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from raptor_engine.tree import BuiltTree, _Run, _StageClock


class RecordingCache:
    """A summary cache in memory that records every write, as the store's would fail on a repeat."""

    def __init__(self) -> None:
        self.stored: dict[str, tuple[str, np.ndarray]] = {}
        self.writes: list[list[str]] = []

    def get(self, keys: Sequence[str]) -> dict[str, tuple[str, np.ndarray]]:
        return {key: self.stored[key] for key in keys if key in self.stored}

    def put(self, entries: Sequence[tuple[str, str, tuple[str, ...]]], vectors: np.ndarray) -> None:
        keys = [key for key, _, _ in entries]
        assert len(set(keys)) == len(keys), f"a repeated key in one write: {keys}"
        self.writes.append(keys)
        self.stored.update({key: (text, vector) for (key, text, _), vector in zip(entries, vectors)})


def _run(cache: RecordingCache) -> _Run:
    return _Run(BuiltTree([], np.zeros((0, 0))), cache, {}, asyncio.Semaphore(1), asyncio.Lock(), _StageClock())


def test_a_summary_made_twice_in_one_build_is_written_once_and_found_the_second_time() -> None:
    cache = RecordingCache()

    async def build() -> dict[str, tuple[str, np.ndarray]]:
        run = _run(cache)
        await run.keep([("k1", "layer one", ("s",))], np.ones((1, 3), dtype=np.float32))
        found = await run.cached(["k1", "k2"])  # the cluster of one summary asks for k1 again
        await run.keep([("k1", "layer two", ("s",)), ("k2", "other", ("s",))], np.ones((2, 3), dtype=np.float32))
        await run.flush()
        return found

    found = asyncio.run(build())
    assert list(found) == ["k1"] and found["k1"][0] == "layer one"  # from this build, before any write
    assert cache.writes == [["k1", "k2"]] and cache.stored["k1"][0] == "layer one"


def test_what_the_cache_already_holds_is_read_from_it() -> None:
    cache = RecordingCache()
    cache.stored["old"] = ("an older build's summary", np.zeros(3, dtype=np.float32))
    found = asyncio.run(_run(cache).cached(["old", "new"]))
    assert list(found) == ["old"]
