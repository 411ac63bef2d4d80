"""Knowing, without asking Chroma, that nothing was written to an embedded store since a read.

Every question reads two records that change only when material is added or a tree is served:
the served tree's state and the channel's sources. Each is a Chroma call of 2 to 3 ms, as
long as embedding the question with the ONNX model (``bench.query``'s profile). An embedded
store is written by one process only (Chroma's embedded mode supports no other writer, and the
bot holds a lock on its data directory, ``bot/data_lock.py``), so this process sees every write
to it: a :class:`WriteClock` counts them, and a read made when the clock showed the same count
is still true.

The count goes up before and after every write (``add``, ``upsert``, ``update``, ``delete`` of a
collection; ``delete_collection`` and ``reset`` of the client) made through a
:class:`CountingClient`, the client an embedded :class:`~raptor_engine.store.chroma.ChromaStore`
uses. A read remembered under the count it started at is thus never served after a write that
ended later, even a write running alongside it. One clock serves every store of one data
directory in this process (:func:`clock_for`), so a write through one of them is seen by all.

A Chroma server is written by other processes too: its reads are made every time (no clock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_WRITES = frozenset({"add", "upsert", "update", "delete", "modify"})  # a collection's writing calls
_CLIENT_WRITES = frozenset({"delete_collection", "reset"})
_COLLECTION_OPENERS = frozenset({"get_collection", "get_or_create_collection", "create_collection"})


class WriteClock:
    """How many writes this process has begun and ended on one store. Thread-safe."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def tick(self) -> None:
        with self._lock:
            self._count += 1

    @property
    def now(self) -> int:
        """The count now: a read made while it stays the same is still true."""
        return self._count

    def around(self, call: Callable[[], T]) -> T:
        """``call()``, a write, with the count raised before it and after it (even if it fails:
        a failed write may have written part)."""
        self.tick()
        try:
            return call()
        finally:
            self.tick()


_clocks: dict[Path, WriteClock] = {}
_clocks_guard = threading.Lock()


def clock_for(path: Path) -> WriteClock:
    """The one clock of the embedded store in directory ``path`` in this process."""
    resolved = path.resolve()
    with _clocks_guard:
        return _clocks.setdefault(resolved, WriteClock())


class CountingCollection:
    """A Chroma collection whose writes raise ``clock``; everything else is the collection's."""

    def __init__(self, collection: Any, clock: WriteClock) -> None:
        self._collection = collection
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._collection, name)
        if name not in _WRITES:
            return found
        return lambda *args, **kwargs: self._clock.around(lambda: found(*args, **kwargs))


class CountingClient:
    """A Chroma client whose collections count their writes on ``clock``, as do its own
    ``delete_collection`` and ``reset``; everything else is the client's."""

    def __init__(self, client: Any, clock: WriteClock) -> None:
        self._client = client
        self.clock = clock

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._client, name)
        if name in _COLLECTION_OPENERS:
            return lambda *args, **kwargs: CountingCollection(found(*args, **kwargs), self.clock)
        if name in _CLIENT_WRITES:
            return lambda *args, **kwargs: self.clock.around(lambda: found(*args, **kwargs))
        return found


class Remembered:
    """Reads remembered while ``clock`` shows no write since (none kept without a clock)."""

    def __init__(self, clock: WriteClock | None) -> None:
        self._clock = clock
        self._kept: dict[str, tuple[int, Any]] = {}

    def get(self, name: str, read: Callable[[], T]) -> T:
        """What ``read()`` returns: remembered under ``name`` if no write was made since it was
        read, else read now (and remembered under the count before the read began). The caller
        must not change what is returned: it may be returned again."""
        if self._clock is None:
            return read()
        at = self._clock.now
        kept = self._kept.get(name)
        if kept is not None and kept[0] == at:
            return kept[1]
        value = read()
        self._kept[name] = (at, value)
        return value

    def clear(self) -> None:
        self._kept.clear()
