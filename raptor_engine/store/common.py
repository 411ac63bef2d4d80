"""What every part of the store shares: the Chroma collections of one channel and how they are
named and opened, the registry of channels, error translation, batching, and how a record's
text is kept.

Contract: nothing here knows a record kind. :class:`ChannelCollections` names a channel's
collections ``rc-<digest>-<suffix>`` and opens them with a short write log; collections are
opened on each use (Chroma hands out a cheap handle), except those kept in a
:class:`ReopeningCollection` wrapper. Every Chroma call made here runs inside :func:`translated`, so
only :class:`~raptor_engine.errors.StoreError` (or ``StoreUnavailable``, ``StoreTimeout``) leaves.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from raptor_engine.errors import RaptorError, StoreError, StoreTimeout, StoreUnavailable
from raptor_engine.store.write_clock import Remembered, WriteClock
from raptor_engine.types import ChannelKey

# One logger for the whole package, under the name the store always logged as: operators'
# filters and the tests' log captures name it.
log = logging.getLogger("raptor_engine.store")

REGISTRY_COLLECTION = "rc-channels"
# The vector of records that are looked up by id only (sources, answers, notes): Chroma wants one.
PLACEHOLDER_VECTOR = [1.0]
# Chroma writes every record to its log (SQLite), with its vector and text, before answering,
# and replays the log into the vector index on open; the index itself is saved, and the log
# purged up to it, every sync_threshold records (1,000 by default), per collection. A channel
# has half a dozen collections, so at the default the log alone held thousands of records per
# channel (16 MB for six collections of 40 records written over 20 times, against 6 MB at
# 100). A lower threshold keeps the replay, and the log kept for it, short. 50, not 100: the log
# was then the largest part of what the data directory swung by between compactions in the
# 15-minute soak, and writing 15,000 records took 34.6 s against 33.6 s at 100.
SHORT_LOG = {"sync_threshold": 50, "batch_size": 50}
# How collections are created: looked up by id only (default space), or searched by cosine similarity.
PLAIN_CONFIG = {"hnsw": dict(SHORT_LOG)}
COSINE_CONFIG = {"hnsw": {"space": "cosine", **SHORT_LOG}}
# Where a record's text is kept: its metadata, not Chroma's document. Chroma's SQLite store
# indexes every document in a trigram full-text index, about three times the text, and keeps
# each document written over as a deletion marker until the index's segments merge; a rebuild
# writes a whole tree over an older one. Nothing here searches that index (lexical search is
# ours). Measured (20 rewrites of a 1,000-record pool of 90-word texts): 15.7 MiB on disk with
# documents, 5.7 MiB with the text in metadata, and writing took 12.3 s instead of 18.8 s.
# Older stores kept texts as documents: the migration (``migrations.py``) copied them here, and
# the documents stay, unread (Chroma's upsert keeps a document not given).
TEXT_KEY = "text"
# The layout of a channel's records that this version reads and writes. A channel's registry
# entry records it under FORMAT_KEY; an entry without it was written before there was any
# migration, and ``migrations.py`` brings such a channel's records to this format once.
STORE_FORMAT = 2
FORMAT_KEY = "format"


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Turns any failure of Chroma underneath into a ``StoreError`` naming the action (a
    ``StoreUnavailable`` when Chroma cannot be reached, a ``StoreTimeout`` when a server did not
    answer within its deadline); the engine's own errors pass as they are.
    Every Chroma call of the store runs inside it."""
    try:
        yield
    except RaptorError:
        raise
    except httpx.TimeoutException as exc:  # a server's deadline (deadline.py) ran out
        raise StoreTimeout(f"the Chroma store did not answer in time ({action})") from exc
    except (ConnectionError, TimeoutError) as exc:
        raise StoreUnavailable(f"the Chroma store cannot be reached ({action}): {exc}") from exc
    except Exception as exc:  # Chroma raises many types (ChromaError, httpx, ValueError)
        if type(exc).__module__.startswith("httpx"):
            raise StoreUnavailable(f"the Chroma store cannot be reached ({action}): {exc}") from exc
        raise StoreError(f"the Chroma store failed ({action}): {exc}") from exc


def channel_digest(key: ChannelKey) -> str:
    """A stable 24-hex-digit digest of a channel key, valid in collection names."""
    raw = "\x1f".join((key.platform, key.workspace, key.channel)).encode()
    return hashlib.sha256(raw).hexdigest()[:24]


def profile_digest(*parts: str) -> str:
    """An 8-hex-digit digest naming a cache profile (embedding model, chunk size)."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:8]


def open_collection(client: Any, name: str, configuration: dict[str, Any]) -> Any:
    """The collection ``name`` of ``client``, created with ``configuration`` if it is new (an
    existing one keeps its own: the migration gave those of older versions the short log)."""
    return client.get_or_create_collection(name, embedding_function=None, configuration=configuration)


def open_registry(client: Any) -> Any:
    """The registry of channels, ``rc-channels``: one record per channel ever used, id its
    digest, its key (and the store format of its records) in the metadata."""
    return open_collection(client, REGISTRY_COLLECTION, PLAIN_CONFIG)


class ReopeningCollection:
    """A kept collection handle that opens its collection once more when Chroma says it does not
    exist: the channel was dropped (by another process, or another engine) and is used again.

    Chroma names a collection by an id fixed at creation, so a handle to a dropped collection
    fails for ever, even once one of the same name exists again. Every call made through it
    (get, query, upsert, update, delete) does nothing before failing so, and is safe to repeat.
    """

    def __init__(self, opener: Callable[[], Any]) -> None:
        self._open = opener
        self._collection = opener()

    def __getattr__(self, name: str) -> Any:
        if not callable(getattr(self._collection, name)):
            return getattr(self._collection, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            from chromadb.errors import NotFoundError

            try:
                return getattr(self._collection, name)(*args, **kwargs)
            except NotFoundError:
                self._collection = self._open()
                return getattr(self._collection, name)(*args, **kwargs)

        return call


def register_channel(client: Any, key: ChannelKey, digest: str) -> None:
    """Lists the channel in the registry (``ChromaStore.channels``), its records in the current
    ``STORE_FORMAT``, if it is not listed. Only for a channel whose records are all of this
    version's writing (a new one, or one dropped and started anew); see ``migrations.py``."""
    with translated("registering the channel"):
        registry = open_registry(client)
        if not registry.get(ids=[digest], include=[])["ids"]:
            record_format(registry, key, digest)


def record_format(registry: Any, key: ChannelKey, digest: str) -> None:
    """Writes the channel's registry entry, saying its records are in the current ``STORE_FORMAT``."""
    registry.upsert(
        ids=[digest],
        embeddings=[PLACEHOLDER_VECTOR],
        metadatas=[{"platform": key.platform, "workspace": key.workspace, "channel": key.channel,
                    FORMAT_KEY: STORE_FORMAT}],
    )


def _batches(total: int, size: int) -> Iterator[tuple[int, int]]:
    size = max(1, size)
    for start in range(0, total, size):
        yield start, min(total, start + size)


class ChannelCollections:
    """The Chroma collections of one channel, ``rc-<digest>-*``, shared by every part of its store.

    ``client`` is read on every call, never copied: a part always uses the client the channel
    has now (a test swaps in one that writes in small batches). ``remembered`` keeps the reads
    every question makes while no write was made since (an embedded store's clock, see
    ``write_clock.py``; a server's reads are made every time).
    """

    def __init__(self, client: Any, key: ChannelKey, digest: str, clock: WriteClock | None = None) -> None:
        self.client = client
        self.key = key
        self.digest = digest
        self.prefix = f"rc-{digest}"
        self._kept: dict[str, tuple[Any, ReopeningCollection]] = {}  # suffix -> (its client, handle)
        self.remembered = Remembered(clock)

    def open(self, suffix: str, cosine: bool = False) -> Any:
        """The collection ``rc-<digest>-<suffix>``, created if new (cosine space if ``cosine``)."""
        return open_collection(self.client, f"{self.prefix}-{suffix}", COSINE_CONFIG if cosine else PLAIN_CONFIG)

    def kept(self, suffix: str) -> Any:
        """The plain collection ``rc-<digest>-<suffix>`` through a kept handle: for the reads every
        question makes (the served state, the sources), where opening cost more than the read
        (measured: 6 ms against 4 on a busy machine). The handle opens it again after a drop
        (:class:`ReopeningCollection`), and a new one is made when the channel's client changes."""
        client = self.client
        kept = self._kept.get(suffix)
        if kept is None or kept[0] is not client:
            kept = (client, ReopeningCollection(lambda: open_collection(client, f"{self.prefix}-{suffix}", PLAIN_CONFIG)))
            self._kept[suffix] = kept
        return kept[1]

    def names(self) -> list[str]:
        """The names of every collection in the database (not just this channel's)."""
        return [str(getattr(c, "name", c)) for c in self.client.list_collections()]

    def own_names(self, among: list[str] | None = None) -> list[str]:
        """The names of this channel's collections (``rc-<digest>-*``), sorted; picked from
        ``among`` (every collection's name, listed once for many channels) or from a new listing."""
        return sorted(n for n in (self.names() if among is None else among) if n.startswith(f"{self.prefix}-"))

    def exists(self, suffix: str) -> bool:
        """Whether the collection ``rc-<digest>-<suffix>`` exists: one lookup by name, whatever
        the number of collections in the database (listing them all grows with the channels)."""
        from chromadb.errors import NotFoundError

        try:
            self.client.get_collection(f"{self.prefix}-{suffix}", embedding_function=None)
        except NotFoundError:
            return False
        return True

    def cache_collections(self, kind: str, among: list[str] | None = None) -> list[Any]:
        """Every existing ``rc-<digest>-<kind>-<profile>`` collection (one per cache profile),
        found in ``among`` (every collection's name, listed once for several kinds) or in a new
        listing."""
        wanted = [n for n in (self.names() if among is None else among) if n.startswith(f"{self.prefix}-{kind}-")]
        return [self.client.get_collection(n, embedding_function=None) for n in wanted]

    def batches(self, total: int) -> Iterator[tuple[int, int]]:
        """(start, end) of each batch of ``total`` records, as large as Chroma takes at once."""
        return _batches(total, self.client.get_max_batch_size())

    def register(self) -> None:
        """Lists the channel in the registry (again after a drop, see :meth:`drop`): what it
        writes next is of this version, so the entry records the current ``STORE_FORMAT``."""
        register_channel(self.client, self.key, self.digest)

    def drop(self) -> int:
        """Deletes every collection of the channel and then its registry entry; how many records
        they held. Idempotent. (See :meth:`ChannelStore.drop` for what the caller ensures.)"""
        from chromadb.errors import NotFoundError

        records = 0
        with translated("dropping the channel"):
            for name in self.own_names():
                try:
                    records += self.client.get_collection(name, embedding_function=None).count()
                    self.client.delete_collection(name)
                except NotFoundError:
                    continue  # dropped meanwhile by another process
            # Last: a drop cut short leaves the channel listed, never collections of an unlisted one.
            open_registry(self.client).delete(ids=[self.digest])
        self._kept.clear()
        self.remembered.clear()
        return records
