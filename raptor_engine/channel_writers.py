"""Who writes each channel, and the cleanup every writer of a channel owes.

Contract of :class:`ChannelWriters`, shared by the engine's ingest, forget and rebuild:

* :meth:`~ChannelWriters.channel` gives the ``ChannelStore`` handle of a channel, kept while
  the channel is among the ``kept`` most recently used (or a writer of it is counted in), then
  let go and opened again on the next use (one registry lookup). A handle, with what it
  caches of the trees, took about 75 KiB after a question: kept for every channel, a process
  asked in 1,000 channels would hold 74 MiB of them, and 370 MiB for 5,000.
* :meth:`~ChannelWriters.writing` counts a writer of a channel in for a ``with`` block; the
  last one out drops the channel if no source is left in it, so no collection is dropped
  under a writer of this engine.
* :meth:`~ChannelWriters.purge` deletes everything of one source, its record last.
* :meth:`~ChannelWriters.purge_forgotten` is called by every writer of derived data after
  writing: write first, look second (see ``store.py``), so a source forgotten meanwhile
  leaves nothing in what was written.
* :meth:`~ChannelWriters.drop_if_empty` never raises: a store failure is logged and the next
  writer to finish tries again.

Every method makes blocking Chroma calls; the writer counts are safe across threads.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone

from raptor_engine.errors import StoreError
from raptor_engine.store import ChannelStore, ChromaStore
from raptor_engine.types import ChannelKey

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Writing:
    """One writer of a channel; ``dropped`` is set when it finished last and dropped the channel."""

    dropped: bool = False


@dataclass(slots=True)
class _Writers:
    """How many writers of one channel run in the engine, and the lock a drop holds throughout."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    count: int = 0


class ChannelWriters:
    """The channels' store handles and writer counts. See the module docstring."""

    def __init__(self, store: ChromaStore, forget_indexes: Callable[[ChannelKey], None], kept: int) -> None:
        """``forget_indexes`` drops what is kept in memory of a channel's material (its
        BM25 index holds the text too), called whenever a source or the channel goes.
        ``kept`` (at least 1): how many channels' handles are kept, least recently used let go."""
        self._store = store
        self._forget_indexes = forget_indexes
        self._kept = kept
        self._channels: OrderedDict[ChannelKey, ChannelStore] = OrderedDict()  # least recently used first
        self._channels_guard = threading.Lock()
        # The writers of each channel running now: the last one out drops an emptied channel.
        self._writers: dict[ChannelKey, _Writers] = {}
        self._writers_guard = threading.Lock()

    def channel(self, key: ChannelKey) -> ChannelStore:
        """The channel's store handle, opened on first use (or again once it was let go)."""
        with self._channels_guard:
            if key in self._channels:
                self._channels.move_to_end(key)
                return self._channels[key]
        opened = self._store.channel(key)  # a store call: not under the guard
        with self._channels_guard:
            handle = self._channels.setdefault(key, opened)  # another thread's, if it opened it first
            self._channels.move_to_end(key)
            self._let_go()
        return handle

    def _let_go(self) -> None:
        """Lets go of the least recently used handles beyond ``kept``, but not of a channel a
        writer of this engine is counted in for. (A writer still holding a handle let go keeps
        using it, as a writer in another process uses its own: the store is made for that.)"""
        excess = len(self._channels) - self._kept
        for key in list(self._channels):
            if excess <= 0:
                return
            writers = self._writers.get(key)
            if writers is None or writers.count == 0:  # read without its lock: a hint is enough here
                del self._channels[key]
                excess -= 1

    @contextmanager
    def writing(self, key: ChannelKey) -> Iterator[Writing]:
        """Counts a writer of the channel (an ingest, forget or rebuild) in for the ``with``
        block; the last one out drops the channel if no source is left in it.

        Whichever of a forget and a rebuild or ingest of the same channel finishes last
        drops it, so no collection is dropped under a writer of this engine, and a writer
        starting while a drop runs waits for it (then writes to new collections). The
        yielded record says whether this writer dropped it. Writers in other processes (on
        a Chroma server) are not seen: what they write after a drop lands in collections
        made anew, from which they remove the forgotten text as after any forget (see
        ``store.py``), and the last of them drops it again.
        """
        writers = self._writers_of(key)
        with writers.lock:
            writers.count += 1
        writing = Writing()
        try:
            yield writing
        finally:
            with writers.lock:
                writers.count -= 1
                last = writers.count == 0
            if last:
                writing.dropped = self.drop_if_empty(key)

    def purge(self, key: ChannelKey, channel: ChannelStore, source_id: str, successor: str = "",
              keep: Callable[[str], bool] | None = None) -> int:
        """Deletes everything of a source, its record last; the number of served nodes removed.
        ``successor``: the id of the source's new version, when it was replaced by one; ``keep``:
        which summaries over it may stay then (see ``ChannelStore.remove_source_from_trees``)."""
        removed = channel.remove_source_from_trees(source_id, successor, keep)
        channel.delete_source(source_id)
        self._forget_indexes(key)  # the BM25 index in memory holds its text too
        return removed

    def purge_forgotten(self, key: ChannelKey, channel: ChannelStore, source_ids: Iterable[str]) -> set[str]:
        """Purges those of ``source_ids`` forgotten meanwhile and returns them. Called by every
        writer of derived data after writing (write first, look second: see ``store.py``)."""
        gone = channel.forgotten_among(source_ids)
        for source_id in sorted(gone):
            log.info("channel %s: removing what was just written of forgotten source %s", key, source_id[:12])
            self.purge(key, channel, source_id)
        if gone:
            # A writer left running by a cancelled rebuild (its store step goes on in a thread)
            # may finish after every writer counted in: it drops an emptied channel itself.
            self.drop_if_empty(key)
        return gone

    def purge_forgotten_quietly(self, key: ChannelKey, channel: ChannelStore, source_ids: list[str]) -> None:
        """:meth:`purge_forgotten` that logs a store failure instead of hiding the caller's own outcome."""
        try:
            self.purge_forgotten(key, channel, source_ids)
        except StoreError as exc:
            log.warning("channel %s: could not clean up after forgotten sources (the next forget "
                        "or rebuild will): %s", key, exc)

    def drop_if_empty(self, key: ChannelKey) -> bool:
        """Drops the channel's collections (every layer, cache, tree, note and answer, and its
        registry entry) if it holds no source at all and no writer of it runs in this engine,
        then gives back their disk space (embedded store); True if it dropped them.

        Never raises: the forget or build that calls it has done its own work. A failure is
        logged, and the next writer of the channel to finish tries again.
        """
        channel = self.channel(key)
        writers = self._writers_of(key)
        try:
            with writers.lock:  # held while dropping: a writer starting now waits for the drop
                if writers.count or not channel.holds_no_source():
                    return False
                records = channel.drop()
        except StoreError as exc:
            log.warning("channel %s: no source is left, but its collections could not be dropped "
                        "(the next forget or rebuild tries again): %s", key, exc)
            return False
        self._forget_indexes(key)
        # A channel that never held anything (a question in a fresh one) is dropped quietly.
        log.log(logging.INFO if records else logging.DEBUG, "channel %s: no source left: dropped its "
                "collections (%d records)", key, records)
        if records:  # a channel that never held anything leaves nothing to reclaim
            self._reclaim(key)
        return True

    def _reclaim(self, key: ChannelKey) -> None:
        """Gives a dropped channel's disk space back; a failure waits for the next drop or start."""
        try:
            self._store.reclaim()
        except StoreError as exc:
            log.warning("channel %s: dropped, but the disk space was not reclaimed (the next "
                        "drop or start does): %s", key, exc)

    def _writers_of(self, key: ChannelKey) -> _Writers:
        # One small entry per channel written in this process: kept, never dropped, because
        # its lock must stay the same object while anyone waits for it.
        with self._writers_guard:
            return self._writers.setdefault(key, _Writers())


def utc_now() -> str:
    """The time stamp records written to a channel carry: ISO 8601, UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
