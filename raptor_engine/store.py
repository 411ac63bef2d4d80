"""Chroma storage of channels: sources, caches and versioned trees.

Each channel owns its own collections, named from a digest of its
:class:`ChannelKey`, so a query of one channel cannot reach another's nodes:

- ``rc-<digest>-src``          the sources' text, in segments (rebuilds need nothing else)
- ``rc-<digest>-leaf-<prof>``  chunks of each source with their embeddings, per
                               embedding model and chunk size (the leaf cache)
- ``rc-<digest>-sum-<prof>``   summaries by content hash of their cluster (the summary cache)
- ``rc-<digest>-tree``         the trees: a pool of records in ``TREE_SLOTS`` slots, reused
                               build after build (``rc-<digest>-t<version>``, one collection
                               per version, is how older stores kept them: still read)
- ``rc-<digest>-meta``         one record naming the tree that is served

A rebuild writes a whole new tree, under a tag of its own, into a slot beside the
served one and then switches by rewriting the single ``meta`` record: one write,
so a crash leaves either the old tree or the new one served, never a mixture. The
switch serves only a complete tree newer than the served one. The previous tree
stays until the next build writes over it, so a reader that has just looked up
the old version can still finish its query. Storage stays bounded: single-node Chroma
never reclaims a deleted collection or record (chroma-core/chroma issue 5259),
but it updates a record written over in place. A state naming a tree that is
gone (as older versions could leave it) heals when read: the newest complete
tree is served, and a warning says so.

A source's first text segment carries its :class:`SourceState`. Only a stored
source is listed, built from or searched: ingest writes the text as
``storing``, then its leaves, then flips it to ``stored``, so a crash in
between leaves nothing findable (and a new upload of the same text repairs
it). Forget flips it to ``forgetting`` first, then deletes everything built
from it, the text last; anything that writes derived data (a build's leaves,
summaries or tree, a kept answer) looks afterwards whether one of its sources
is forgotten meanwhile (:meth:`ChannelStore.forgotten_among`) and then removes
what it wrote. Write first, look second: whichever of the two finishes last
cleans up, so no forgotten text survives either order.

A channel left with no source at all (none stored, storing or forgetting) is
dropped whole (:meth:`ChannelStore.drop`): every ``rc-<digest>-*`` collection
and its entry in the ``rc-channels`` registry; its next upload starts it anew.
On the embedded store :meth:`ChromaStore.reclaim` then takes back the disk space
Chroma keeps after deleting collections (``reclaim.py``); a Chroma server keeps
those files (issue 5259), and only its operator can reclaim them.

Texts are kept in each record's metadata (``TEXT_KEY``), not as Chroma documents:
Chroma indexes every document for full-text search, which nothing here uses
(lexical search is ours, ``lexical.py``), at several times the text's size and
churning with every tree written over (see ``TEXT_KEY``).

Embeddings are always passed explicitly: Chroma's default embedding function
downloads a model, which fails offline. Chroma's errors are translated into
:class:`~raptor_engine.errors.StoreError` here, where they enter.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from raptor_engine.errors import RaptorError, StoreError, StoreUnavailable
from raptor_engine.reclaim import Reclaimed, reclaim, tidy as tidy_database
from raptor_engine.types import AnswerRecord, ChannelKey, Chunk, Hit, Node, Source, SourceKind

log = logging.getLogger(__name__)

REGISTRY_COLLECTION = "rc-channels"
SEGMENT_CHARS = 100_000  # source text is stored in segments of this many characters
_PLACEHOLDER = [1.0]  # records that are looked up by id only still need a vector
# The served tree and one being built. The one served before stays readable (for queries in
# flight) until the next build writes over it: a third slot kept a third copy of every tree,
# the largest part of a channel's storage, for readers that finish in milliseconds.
TREE_SLOTS = 2
_LEGACY = -1  # the slot of a tree kept in a collection of its own, as older stores did
# Chroma writes every record to its log (SQLite), with its vector and text, before answering,
# and replays the log into the vector index on open; the index itself is saved, and the log
# purged up to it, every sync_threshold records (1,000 by default), per collection. A channel
# has half a dozen collections, so at the default the log alone held thousands of records per
# channel (16 MB for six collections of 40 records written over 20 times, against 6 MB at
# 100). A lower threshold keeps the replay, and the log kept for it, short. 50, not 100: the log
# was then the largest part of what the data directory swung by between compactions in the
# 15-minute soak, and writing 15,000 records took 34.6 s against 33.6 s at 100.
_SHORT_LOG = {"sync_threshold": 50, "batch_size": 50}
_PLAIN_CONFIG = {"hnsw": dict(_SHORT_LOG)}
_COSINE_CONFIG = {"hnsw": {"space": "cosine", **_SHORT_LOG}}
# Where a record's text is kept: its metadata, not Chroma's document. Chroma's SQLite store
# indexes every document in a trigram full-text index, about three times the text, and keeps
# each document written over as a deletion marker until the index's segments merge; a rebuild
# writes a whole tree over an older one. Nothing here searches that index (lexical search is
# ours). Measured (20 rewrites of a 1,000-record pool of 90-word texts): 15.7 MiB on disk with
# documents, 5.7 MiB with the text in metadata, and writing took 12.3 s instead of 18.8 s.
# Records of older stores have documents and no such key: their documents are read instead
# (and stay, unread, when a record is written over: Chroma's upsert keeps a document not given).
TEXT_KEY = "text"
_NODE_KEYS = (TEXT_KEY, "node", "layer", "tokens", "title", "link", "ordinal", "start", "end", "children", "parents", "sources")
# A freed record keeps only its slot and index (Chroma's update merges keys; None removes one).
_FREE_METADATA: dict[str, Any] = {"tree": "free", "version": None, "count": None, **{k: None for k in _NODE_KEYS}}
_TREE_NAME = re.compile(r"^rc-(?P<digest>[0-9a-f]{24})-t(?P<version>\d+)$")
# The served state is read, changed and written back by forget and by a build switching over, from
# different threads: one lock per channel keeps either from undoing the other (within one process).
_STATE_LOCKS: dict[str, threading.Lock] = {}
_STATE_LOCKS_GUARD = threading.Lock()
# A build writes its tree over the previous tree's records; a forget frees the previous tree's
# records of the forgotten source (read, then written: Chroma has no conditional update). Run at
# once, the forget could free records the build had just written, breaking the new tree (a soak
# saw it). One lock per channel makes them take turns within a process; the write is seconds
# long, and a forget's record work takes well under a second. (Two processes on one Chroma
# server can still meet so: the build is then refused as incomplete, or the served tree heals.)
_WRITE_LOCKS: dict[str, threading.Lock] = {}


class SourceState(str, Enum):
    """Where a source is in its life; only ``STORED`` and ``LEGACY`` sources are listed."""

    STORING = "storing"  # text written, leaves not all: invisible; a new upload of it repairs it
    STORED = "stored"  # text and every leaf written
    FORGETTING = "forgetting"  # being removed: invisible; the next rebuild finishes an interrupted forget
    LEGACY = "legacy"  # written before states existed (never written as such): complete if it has leaves


@contextmanager
def _translated(action: str) -> Iterator[None]:
    """Turns any failure of Chroma underneath into a ``StoreError`` naming the action."""
    try:
        yield
    except RaptorError:
        raise
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


@dataclass(frozen=True, slots=True)
class TreeState:
    """What is served for a channel: which tree version, built how and from what."""

    version: int
    built_at: str
    embedder_id: str
    source_ids: tuple[str, ...]  # forgotten sources are taken out: no trace of them is kept
    nodes_per_layer: dict[int, int]
    revision: int = 0  # bumped when nodes are removed from the served tree (forget)
    forgotten: int = 0  # sources of this build forgotten since: their summaries wait for a rebuild
    slot: int = -1  # where in the channel's tree pool it is; -1: a collection of its own (older stores)
    tag: str = ""  # the build's unique name of the tree (its records carry it); "" for older stores


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a tree is: its pool slot and tag, or (slot -1) the collection ``-t<version>``."""

    version: int
    slot: int
    tag: str


class ChromaStore:
    """The Chroma database holding every channel; hands out one :class:`ChannelStore` each."""

    def __init__(self, client: Any, path: Path | None = None) -> None:
        """``path``: the data directory of an embedded client, None for a Chroma server."""
        self._client = client
        self._path = path
        self._reclaiming = threading.Lock()  # one reclaim at a time: two would rewrite the file twice

    @classmethod
    def embedded(cls, path: Path) -> ChromaStore:
        """Chroma embedded in this process, persisted under ``path``.

        What a crash between dropping a channel and reclaiming its space left behind is
        reclaimed here, cheaply (:meth:`reclaim` with ``only_if_worth``); a failure of that is
        logged, not raised: the store works without it.
        """
        import chromadb
        from chromadb.config import Settings

        with _translated(f"opening {path}"):
            path.mkdir(parents=True, exist_ok=True)
            client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
        store = cls(client, path)
        try:
            store.reclaim(only_if_worth=True)
        except StoreError as exc:
            log.warning("could not reclaim the space Chroma left in %s (the next forget tries again): %s", path, exc)
        return store

    @classmethod
    def remote(cls, host: str, port: int, ssl: bool = False, *, token: str = "",
               token_header: str = "Authorization", username: str = "", password: str = "",
               tenant: str = "default_tenant", database: str = "default_database") -> ChromaStore:
        """A Chroma server (``chroma run``, a secured server, or hosted Chroma) reached over HTTP.

        Credentials go through Chroma's own client auth providers: ``token`` is sent as
        ``Authorization: Bearer <token>`` (or in ``X-Chroma-Token`` when ``token_header``
        names it), ``username`` and ``password`` as HTTP basic. ``tenant`` and
        ``database`` must exist on the server. Raises ``StoreUnavailable`` when the
        server cannot be reached, ``StoreError`` when it refuses the credentials or has
        no such tenant or database. No credential appears in an error message.
        """
        import chromadb
        from chromadb.config import Settings
        from chromadb.errors import ChromaError, NotFoundError

        where = f"the Chroma server at {host}:{port}"
        settings = Settings(anonymized_telemetry=False, **cls._auth_settings(token, token_header, username, password))
        try:
            client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=settings,
                                         tenant=tenant, database=database)
            client.heartbeat()
        except ChromaError as exc:
            # Chroma answers a refused sign-in with 401 (AuthorizationError) or 403 (AuthError).
            if exc.code() in (401, 403):
                raise StoreError(f"{where} refused access: the credentials are missing or wrong ({exc.name()})") from None
            if isinstance(exc, NotFoundError):
                raise StoreError(f"{where} has no tenant {tenant!r} with a database {database!r}") from None
            raise StoreUnavailable(f"{where} failed to open: {exc}") from exc
        except Exception as exc:
            raise StoreUnavailable(f"cannot reach {where}: {exc}") from exc
        return cls(client)

    @staticmethod
    def _auth_settings(token: str, token_header: str, username: str, password: str) -> dict[str, Any]:
        """Chroma client settings for a token or HTTP basic credentials ({} for none).
        Chroma itself refuses a token of other than ASCII letters, digits and punctuation
        with a message that reads like a connection failure: checked here instead."""
        if token:
            if not all(33 <= ord(char) < 127 for char in token):
                raise StoreError("the Chroma token may hold only ASCII letters, digits and punctuation")
            return {
                "chroma_client_auth_provider": "chromadb.auth.token_authn.TokenAuthClientProvider",
                "chroma_client_auth_credentials": token,
                "chroma_auth_token_transport_header": token_header,
            }
        if username or password:
            return {
                "chroma_client_auth_provider": "chromadb.auth.basic_authn.BasicAuthClientProvider",
                "chroma_client_auth_credentials": f"{username}:{password}",
            }
        return {}

    def channel(self, key: ChannelKey) -> ChannelStore:
        """The store of one channel; registers the channel on first use."""
        digest = channel_digest(key)
        _register(self._client, key, digest)
        return ChannelStore(self._client, key, digest)

    def reclaim(self, only_if_worth: bool = False) -> Reclaimed | None:
        """Gives back the disk space embedded Chroma keeps after collections are deleted (a
        dropped channel's): removes their segment directories and compacts its SQLite file
        (see ``reclaim.py``). ``only_if_worth``: the cheap check at open, which compacts
        only a file that is largely free pages. Safe while this store is in
        use (from any thread).

        On a Chroma server this does nothing and returns None: dropping collections is all a
        client can do there. The server keeps their segment directories (chroma issue 5259)
        and the free pages in its SQLite file; ``chroma vacuum`` on the server's directory,
        run by its operator, reclaims those pages. Raises ``StoreError`` if a step fails.
        """
        if self._path is None:
            return None
        with self._reclaiming:
            reclaimed = reclaim(self._path, always_compact=not only_if_worth)
        if reclaimed.freed > 0:
            log.info("reclaimed %.2f MB in %s (%d orphan segment directories; SQLite file %.2f -> %.2f MB)",
                     reclaimed.freed / 1e6, self._path, reclaimed.orphans,
                     reclaimed.database_before / 1e6, reclaimed.database_after / 1e6)
        return reclaimed

    def tidy(self) -> None:
        """Keeps what rebuilds leave behind from piling up: on the embedded store, merges
        Chroma's full-text index once deleted entries are a quarter of it (only older stores
        put texts there, see ``TEXT_KEY``) and gives the file's free pages back (see ``reclaim.tidy``). Nothing on a Chroma server, whose
        files are its own. Safe while the store is in use. Raises ``StoreError``."""
        if self._path is None:
            return
        with self._reclaiming:
            tidy_database(self._path)

    def channels(self) -> list[ChannelKey]:
        """Every channel that has ever been used, in a stable order."""
        with _translated("listing channels"):
            registry = _opened(self._client, REGISTRY_COLLECTION, _PLAIN_CONFIG)
            metadatas = registry.get(include=["metadatas"])["metadatas"] or []
        keys = [ChannelKey(str(m["platform"]), str(m["workspace"]), str(m["channel"])) for m in metadatas]
        return sorted(keys, key=str)


class ChannelStore:
    """All storage of one channel. Methods raise ``StoreError`` on Chroma failures."""

    def __init__(self, client: Any, key: ChannelKey, digest: str) -> None:
        self._client = client
        self.key = key
        self._prefix = f"rc-{digest}"
        self._digest = digest
        self._pool_collection: Any = None
        self._known: dict[int, _Place] = {}  # trees served now or before, by version (never change)
        self._written: dict[int, _Place] = {}  # trees this store wrote, by version
        self._present: set[str] = set()  # served trees seen to exist (checked once)
        self._rids: dict[str, dict[str, str]] = {}  # per tree tag: node id -> record id
        self._tree_counts: dict[str, int] = {}  # per served tree tag: trees in the pool then

    # -- collections -------------------------------------------------------

    def _collection(self, suffix: str, cosine: bool = False) -> Any:
        return _opened(self._client, f"{self._prefix}-{suffix}", _COSINE_CONFIG if cosine else _PLAIN_CONFIG)

    def _pool(self) -> Any:
        """The channel's tree pool. Its handle is kept (opening costs about half a query), and
        opens the collection again if another process or engine dropped the channel meanwhile."""
        if self._pool_collection is None:
            self._pool_collection = _Reopening(lambda: _opened(self._client, f"{self._prefix}-tree", _COSINE_CONFIG))
        return self._pool_collection

    def _tree(self, version: int) -> Any:
        return self._client.get_collection(f"{self._prefix}-t{version}", embedding_function=None)

    def _tree_versions(self) -> list[int]:
        names = [getattr(c, "name", c) for c in self._client.list_collections()]
        versions = []
        for name in names:
            match = _TREE_NAME.match(str(name))
            if match and match["digest"] == self._digest:
                versions.append(int(match["version"]))
        return sorted(versions)

    # -- the whole channel ---------------------------------------------------

    def holds_no_source(self) -> bool:
        """Whether the channel holds no source at all, in any state (storing, stored,
        forgetting, or written before states): nothing is left to build from or to finish."""
        with _translated("looking for sources"):
            return not self._collection("src").get(limit=1, include=[])["ids"]

    def drop(self) -> int:
        """Deletes every collection of the channel (``rc-<digest>-*``: sources, leaf and summary
        caches, trees of every layout, state and notes, answers) and then its registry entry;
        returns how many records they held (0: nothing worth reclaiming). Idempotent.

        The caller makes sure the channel holds no source and that no writer of it runs in
        this process (the engine does both). A writer in another process re-creates what it
        writes to afterwards, and removes the forgotten text from it as after any forget (see
        the module docstring). On a Chroma server this is all a client can do: the server
        keeps the deleted collections' files (chroma issue 5259).
        """
        from chromadb.errors import NotFoundError

        records = 0
        with _translated("dropping the channel"):
            names = sorted(str(getattr(c, "name", c)) for c in self._client.list_collections())
            for name in [n for n in names if n.startswith(f"{self._prefix}-")]:
                try:
                    records += self._client.get_collection(name, embedding_function=None).count()
                    self._client.delete_collection(name)
                except NotFoundError:
                    continue  # dropped meanwhile by another process
            # Last: a drop cut short leaves the channel listed, never collections of an unlisted one.
            _opened(self._client, REGISTRY_COLLECTION, _PLAIN_CONFIG).delete(ids=[self._digest])
        self._forget_handles()
        return records

    def _forget_handles(self) -> None:
        """Forgets every handle and fact cached about collections that a drop deleted."""
        self._pool_collection = None
        self._known.clear()
        self._written.clear()
        self._present.clear()
        self._rids.clear()
        self._tree_counts.clear()

    # -- sources -----------------------------------------------------------

    def put_source(self, source: Source, text: str, state: SourceState = SourceState.STORED) -> None:
        """Stores a source's text and description in one write, in ``state`` (not ``LEGACY``)."""
        if state is SourceState.LEGACY:
            raise ValueError("LEGACY is how sources written before states read; it is never written")
        segments = [text[i : i + SEGMENT_CHARS] for i in range(0, len(text), SEGMENT_CHARS)] or [""]
        metadatas: list[dict[str, Any]] = [{"source_id": source.id, "segment": i, TEXT_KEY: segment}
                                           for i, segment in enumerate(segments)]
        metadatas[0].update(_source_metadata(source), segments=len(segments), state=state.value)
        _register(self._client, self.key, self._digest)  # again after a drop (see drop)
        with _translated("storing a source"):
            self._collection("src").upsert(
                ids=[f"{source.id}#{i}" for i in range(len(segments))],
                metadatas=metadatas,
                embeddings=[_PLACEHOLDER] * len(segments),
            )

    def get_source(self, source_id: str) -> Source | None:
        """The listed source with this id (stored, or legacy), or None."""
        record = self.source_record(source_id)
        return record[0] if record and record[1] in _LISTED else None

    def source_record(self, source_id: str) -> tuple[Source, SourceState] | None:
        """The source with this id and its state, whatever the state; None if there is no record."""
        with _translated("reading a source"):
            got = self._collection("src").get(ids=[f"{source_id}#0"], include=["metadatas"])
        metadatas = got["metadatas"] or []
        return (_source_from_metadata(metadatas[0]), _state_of(metadatas[0])) if metadatas else None

    def set_source_state(self, source_id: str, state: SourceState) -> None:
        """Changes a source's state in one write; does nothing if the source has no record."""
        if state is SourceState.LEGACY:
            raise ValueError("LEGACY is how sources written before states read; it is never written")
        with _translated("changing a source's state"):
            # Chroma merges updated metadata keys and ignores unknown ids: a forgotten source stays gone.
            self._collection("src").update(ids=[f"{source_id}#0"], metadatas=[{"state": state.value}])

    def list_sources(self) -> list[Source]:
        """Every listed (stored, or legacy) source of the channel, oldest first."""
        with _translated("listing sources"):
            got = self._collection("src").get(where={"segment": 0}, include=["metadatas"])
        # Filtered here, not by a where clause: legacy records have no state key to match.
        sources = [_source_from_metadata(m) for m in got["metadatas"] or [] if _state_of(m) in _LISTED]
        return sorted(sources, key=lambda s: (s.added_at, s.id))

    def sources_in_state(self, state: SourceState) -> list[str]:
        """The ids of the sources in ``state`` (not ``LEGACY``), e.g. forgets that were interrupted."""
        with _translated("listing sources by state"):
            got = self._collection("src").get(where={"state": state.value}, include=["metadatas"])
        return sorted({str(m["source_id"]) for m in got["metadatas"] or []})

    def forgotten_among(self, source_ids: Iterable[str]) -> set[str]:
        """Those of ``source_ids`` that are being or have been forgotten (no record, or ``FORGETTING``).

        Called after writing data derived from sources: see the module docstring.
        """
        wanted = sorted(set(source_ids))
        if not wanted:
            return set()
        with _translated("checking for forgotten sources"):
            got = self._collection("src").get(ids=[f"{i}#0" for i in wanted], include=["metadatas"])
        alive = {str(m["source_id"]) for m in got["metadatas"] or [] if _state_of(m) is not SourceState.FORGETTING}
        return set(wanted) - alive

    def source_text(self, source_id: str) -> str:
        """The full text of a stored source."""
        with _translated("reading a source's text"):
            got = self._collection("src").get(where={"source_id": source_id}, include=["documents", "metadatas"])
        parts = sorted(zip(got["metadatas"] or [], got["documents"] or []), key=lambda p: int(p[0]["segment"]))
        return "".join(_text_of(document, metadata) for metadata, document in parts)

    def delete_source(self, source_id: str) -> None:
        """Removes a source's cached leaves (every profile), the cached summaries covering it,
        the answers citing it, and last its text: if this stops half-way, the record is still
        there to find. Trees are not touched (see :meth:`remove_source_from_trees`)."""
        self.delete_leaves(source_id)
        with _translated("deleting a source"):
            for collection in self._cache_collections("sum"):
                collection.delete(where={"sources": {"$contains": source_id}})
            # Answers quote their sources: they go with them.
            self._collection("answers").delete(where={"sources": {"$contains": source_id}})
            self._collection("src").delete(where={"source_id": source_id})

    def delete_leaves(self, source_id: str, profile: str | None = None) -> None:
        """Removes a source's cached leaves of one profile, or of every profile if None."""
        with _translated("deleting cached leaves"):
            if profile is None:
                collections = self._cache_collections("leaf")
            else:
                collections = [self._collection(f"leaf-{profile}", cosine=True)]
            for collection in collections:
                collection.delete(where={"source_id": source_id})

    # -- answers and votes ----------------------------------------------------

    def put_answer(self, record: AnswerRecord) -> None:
        """Keeps an answer with its question (replacing one with the same id)."""
        metadata: dict[str, Any] = {
            "question": record.question,
            "asked_by": record.asked_by,
            "answered_at": record.answered_at,
            "votes": json.dumps(record.votes, sort_keys=True),
            # Orders answers kept within one second (answered_at has seconds) for pruning.
            "kept_ns": time.time_ns(),
            TEXT_KEY: record.text,
        }
        if record.source_ids:
            metadata["sources"] = list(record.source_ids)
        with _translated("keeping an answer"):
            self._collection("answers").upsert(
                ids=[record.answer_id], metadatas=[metadata], embeddings=[_PLACEHOLDER]
            )

    def prune_answers(self, keep: int) -> int:
        """Deletes the oldest kept answers beyond the newest ``keep``; returns how many went.
        Counted on every call (cheap), but pruned only once the excess is a tenth of ``keep``
        (at least 10), so that answering does not read every answer each time."""
        with _translated("pruning kept answers"):
            answers = self._collection("answers")
            if answers.count() <= keep + max(10, keep // 10):
                return 0
            got = answers.get(include=["metadatas"])
            ages = sorted(((m or {}).get("answered_at", ""), (m or {}).get("kept_ns", 0), answer_id)
                          for m, answer_id in zip(got["metadatas"], got["ids"]))
            doomed = [answer_id for _, _, answer_id in ages[: len(ages) - keep]]
            for start, end in _batches(len(doomed), self._client.get_max_batch_size()):
                answers.delete(ids=doomed[start:end])
        return len(doomed)

    def get_answer(self, answer_id: str) -> AnswerRecord | None:
        with _translated("reading an answer"):
            got = self._collection("answers").get(ids=[answer_id], include=["documents", "metadatas"])
        if not got["ids"]:
            return None
        return _answer_from(got["ids"][0], got["documents"][0], got["metadatas"][0])

    def list_answers(self) -> list[AnswerRecord]:
        """Every kept answer, oldest first."""
        with _translated("listing answers"):
            got = self._collection("answers").get(include=["documents", "metadatas"])
        records = [_answer_from(i, d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])]
        return sorted(records, key=lambda r: (r.answered_at, r.answer_id))

    def _cache_collections(self, kind: str) -> list[Any]:
        names = [str(getattr(c, "name", c)) for c in self._client.list_collections()]
        wanted = [n for n in names if n.startswith(f"{self._prefix}-{kind}-")]
        return [_with_short_log(self._client.get_collection(n, embedding_function=None)) for n in wanted]

    # -- leaf cache --------------------------------------------------------

    def put_leaves(self, profile: str, chunks: Sequence[Chunk], embeddings: np.ndarray) -> None:
        """Caches a source's chunks with their embeddings under a profile."""
        if not chunks:
            return
        collection = self._collection(f"leaf-{profile}", cosine=True)
        with _translated("caching leaves"):
            for start, end in _batches(len(chunks), self._client.get_max_batch_size()):
                part = chunks[start:end]
                collection.upsert(
                    ids=[f"{c.source_id}:{c.ordinal}" for c in part],
                    metadatas=[_chunk_metadata(c) for c in part],
                    embeddings=embeddings[start:end],
                )

    def has_leaves(self, profile: str, source_id: str) -> bool:
        """Whether any leaf of the source is cached under ``profile``."""
        with _translated("reading cached leaves"):
            got = self._collection(f"leaf-{profile}", cosine=True).get(
                where={"source_id": source_id}, limit=1, include=[]
            )
        return bool(got["ids"])

    def cached_leaves(self, profile: str, source_ids: Sequence[str]) -> dict[str, tuple[list[Chunk], np.ndarray]]:
        """The cached chunks and embeddings of those sources that have them, by source id."""
        if not source_ids:
            return {}
        collection = self._collection(f"leaf-{profile}", cosine=True)
        with _translated("reading cached leaves"):
            got = collection.get(
                where={"source_id": {"$in": list(source_ids)}},
                include=["documents", "metadatas", "embeddings"],
            )
        grouped: dict[str, list[tuple[Chunk, np.ndarray]]] = {}
        for document, metadata, vector in zip(got["documents"], got["metadatas"], got["embeddings"]):
            chunk = _chunk_from(document, metadata)
            grouped.setdefault(chunk.source_id, []).append((chunk, np.asarray(vector, dtype=np.float32)))
        result = {}
        for source_id, pairs in grouped.items():
            pairs.sort(key=lambda p: p[0].ordinal)
            result[source_id] = ([c for c, _ in pairs], np.vstack([v for _, v in pairs]))
        return result

    def query_leaves(self, profile: str, vector: np.ndarray, source_ids: Sequence[str], n: int) -> list[Hit]:
        """The cached leaves of the given sources nearest to ``vector`` (for sources not yet built)."""
        if not source_ids or n <= 0:
            return []
        collection = self._collection(f"leaf-{profile}", cosine=True)
        with _translated("searching new sources"):
            got = collection.query(
                query_embeddings=[vector],
                n_results=n,
                where={"source_id": {"$in": list(source_ids)}},
                include=["documents", "metadatas", "distances"],
            )
        hits = []
        for document, metadata, distance in zip(got["documents"][0], got["metadatas"][0], got["distances"][0]):
            hits.append(Hit(node=leaf_node(_chunk_from(document, metadata)), score=1.0 - float(distance)))
        return hits

    # -- summary cache -----------------------------------------------------

    def _summary_cache(self, profile: str) -> Any:
        # Looked up by id only, never by similarity: the default (L2) space stores
        # vectors exactly as given, where cosine space renormalises their last bits.
        return self._collection(f"sum-{profile}")

    def cached_summaries(self, profile: str, keys: Sequence[str]) -> dict[str, tuple[str, np.ndarray]]:
        """Cached summary texts and embeddings by cache key, for the keys that have one."""
        if not keys:
            return {}
        collection = self._summary_cache(profile)
        with _translated("reading cached summaries"):
            got = collection.get(ids=list(keys), include=["documents", "metadatas", "embeddings"])
        return {
            key: (_text_of(document, metadata), np.asarray(vector, dtype=np.float32))
            for key, document, metadata, vector in zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"])
        }

    def put_summaries(
        self, profile: str, entries: Sequence[tuple[str, str, Sequence[str]]], embeddings: np.ndarray
    ) -> None:
        """Caches summaries as (key, text, source ids) with their embeddings."""
        if not entries:
            return
        collection = self._summary_cache(profile)
        with _translated("caching summaries"):
            for start, end in _batches(len(entries), self._client.get_max_batch_size()):
                part = entries[start:end]
                collection.upsert(
                    ids=[key for key, _, _ in part],
                    metadatas=[{"sources": list(sources), TEXT_KEY: text} for _, text, sources in part],
                    embeddings=embeddings[start:end],
                )

    def prune_summaries(self, profile: str, keep: set[str]) -> None:
        """Drops cached summaries not in ``keep`` (those no served tree uses)."""
        collection = self._summary_cache(profile)
        with _translated("pruning cached summaries"):
            stale = [key for key in collection.get(include=[])["ids"] if key not in keep]
            for start, end in _batches(len(stale), self._client.get_max_batch_size()):
                collection.delete(ids=stale[start:end])

    # -- trees -------------------------------------------------------------
    #
    # Trees live in one collection per channel, ``rc-<digest>-tree``: a pool of records
    # in TREE_SLOTS slots, ids ``<slot>:<k>``. A build writes its tree into the slot that is
    # not served (the previous tree's), over the records a former tree left there
    # (an upsert of an existing id updates Chroma's vector index in place; a delete only
    # marks it, and single-node Chroma never reclaims a deleted record or collection:
    # chroma-core/chroma issue 5259). Each record names its tree by a tag, unique to the
    # build (``<version>.<random>``): queries are filtered to the served tag, so two
    # builders that picked one version number never mix. Trees of older stores
    # (``rc-<digest>-t<version>`` collections) are still read, and dropped once a newer
    # tree has been served after them.

    def live_state(self) -> TreeState | None:
        """The served tree's state, or None if no tree was ever built. A state naming a tree
        that is missing is healed first: the newest complete tree is served (and a warning logged)."""
        state = self._read_state()
        if state is not None and self._is_missing(state):
            return self._heal(state)
        return state

    def _read_state(self) -> TreeState | None:
        meta = self._read_meta()
        if meta is None:
            return None
        state = TreeState(
            version=int(meta["version"]),
            built_at=str(meta["built_at"]),
            embedder_id=str(meta["embedder"]),
            source_ids=tuple(meta.get("sources") or ()),
            nodes_per_layer={int(k): int(v) for k, v in json.loads(str(meta["layers"])).items()},
            revision=int(meta.get("revision", 0)),
            forgotten=int(meta.get("forgotten", 0)),
            slot=int(meta.get("slot", _LEGACY)),
            tag=str(meta.get("tag", "")),
        )
        self._known[state.version] = _Place(state.version, state.slot, state.tag)
        previous = _place_from_json(meta.get("previous"))
        if previous is not None:
            self._known[previous.version] = previous
        return state

    def _read_meta(self) -> dict[str, Any] | None:
        with _translated("reading the tree state"):
            got = self._collection("meta").get(ids=["state"], include=["metadatas"])
        return dict(got["metadatas"][0]) if got["metadatas"] else None

    def next_version(self) -> int:
        """A version number above every tree of this channel this process can see
        (another process may pick the same one: trees are told apart by their tag)."""
        state = self._read_state()
        with _translated("listing tree versions"):
            firsts = self._pool().get(where={"k": 0}, include=["metadatas"])["metadatas"] or []
            versions = [int(m["version"]) for m in firsts if m.get("version") is not None]
            versions += self._tree_versions() + list(self._written)
        return max([state.version if state else 0, *versions]) + 1

    def write_tree(self, version: int, nodes: Sequence[Node], embeddings: np.ndarray) -> None:
        """Writes a complete tree as ``version``, beside the served one (not yet served).

        Raises ``StoreError`` if the slot it writes to is served meanwhile (another
        process switched to a tree there): it never writes on over a served tree. Looking
        and writing are two steps, so a batch may still land on a tree served between
        them; then the served tree is checked at once, and the channel heals to the newest
        complete tree if it was broken (see :meth:`live_state`).
        """
        with self._write_lock(), _translated("writing the new tree"):
            pool = self._pool()
            place = _Place(version, self._free_slot(), f"{version}.{uuid.uuid4().hex[:8]}")
            self._written[version] = place
            try:
                for start, end in _batches(len(nodes), self._client.get_max_batch_size()):
                    self._claim(place.slot)
                    pool.upsert(
                        ids=[f"{place.slot}:{k}" for k in range(start, end)],
                        metadatas=[_pool_metadata(n, place, k, len(nodes)) for k, n in enumerate(nodes[start:end], start)],
                        embeddings=embeddings[start:end],
                    )
                # What a larger former tree left in this slot is freed, and reused next time.
                rest = pool.get(where={"$and": [{"slot": place.slot}, {"k": {"$gte": len(nodes)}}]}, include=[])["ids"]
                self._free(pool, rest)
            finally:
                self._recheck_if_served(place.slot)

    def _recheck_if_served(self, slot: int) -> None:
        """After writing to ``slot``: if a tree there got served meanwhile, this build may have
        written over it; the served state is checked afresh (and healed if broken)."""
        served = self._read_state()
        if served is None or served.slot != slot:
            return
        log.info("channel %s: another build's tree v%d was served from the slot this build wrote to; "
                    "checking it", self.key, served.version)
        self._present.discard(f"{served.version}.{served.tag}")
        self.live_state()

    def _free_slot(self) -> int:
        """The first slot not holding the served tree, preferring one the previous tree is not in."""
        places = self._served_places()
        open_slots = [slot for slot in range(TREE_SLOTS) if slot != _served_slot(places)]
        untouched = [slot for slot in open_slots if slot not in {p.slot for p in places.values()}]
        return min(untouched or open_slots)

    def _claim(self, slot: int) -> None:
        if _served_slot(self._served_places()) == slot:
            raise StoreError("another rebuild of this channel finished meanwhile and its tree is served")

    def _served_places(self) -> dict[int, _Place]:
        """Where the served tree and the previous one are, by version (read now)."""
        meta = self._read_meta()
        if meta is None:
            return {}
        served = _Place(int(meta["version"]), int(meta.get("slot", _LEGACY)), str(meta.get("tag", "")))
        previous = _place_from_json(meta.get("previous"))
        return {p.version: p for p in (previous, served) if p is not None}

    def switch_to(self, state: TreeState) -> bool:
        """Serves ``state.version`` from now on (one write) if it is complete and newer than the
        served tree; False, with nothing changed, if a newer (or the same) version is served.
        Trees of other builds are left alone (one may be about to be served); the previous
        tree stays for readers in flight. Raises ``StoreError`` if the tree is incomplete."""
        place = self._place_of(state)
        with self._state_lock():
            served = self._read_state()
            if served is not None and state.version <= served.version:
                log.warning("channel %s: tree v%d was built while v%d got served; v%d stays served",
                            self.key, state.version, served.version, served.version)
                return False
            layers = self._check_complete(place, state.nodes_per_layer)
            previous = _Place(served.version, served.slot, served.tag) if served else None
            self._write_state(replace(state, slot=place.slot, tag=place.tag, nodes_per_layer=layers), previous)
        self._drop_legacy_except({place.version} | ({previous.version} if previous else set()))
        self._free_dead_trees(place, previous)
        return True

    def _free_dead_trees(self, served: _Place, previous: _Place | None) -> None:
        """Frees the trees older than the one just served, but the previous one: none of them can
        be served again (a switch serves only a newer tree), and each is one more tree a query
        of the pool would search through."""
        keep = {served.tag, previous.tag if previous else ""}
        with _translated("freeing old trees"):
            pool = self._pool()
            firsts = pool.get(where={"k": 0}, include=["metadatas"])["metadatas"] or []
            dead = {str(m["tree"]) for m in firsts
                    if m.get("version") is not None and int(m["version"]) < served.version and m["tree"] not in keep}
            for tag in sorted(dead):
                self._free(pool, pool.get(where={"tree": tag}, include=[])["ids"])
            # Stores written before TREE_SLOTS was 2 have a third slot: its records go once its tree is out of use.
            beyond = pool.get(where={"slot": {"$gte": TREE_SLOTS}}, include=["metadatas"])
            unused = [rid for rid, m in zip(beyond["ids"], beyond["metadatas"] or []) if m.get("tree") not in keep]
            for start, end in _batches(len(unused), self._client.get_max_batch_size()):
                pool.delete(ids=unused[start:end])

    def _place_of(self, state: TreeState) -> _Place:
        if state.tag:
            return _Place(state.version, state.slot, state.tag)
        if state.version in self._written:
            return self._written[state.version]
        return _Place(state.version, _LEGACY, "")

    def _check_complete(self, place: _Place, layers: dict[int, int]) -> dict[int, int]:
        """The tree's nodes per layer, once it is seen complete: none of its records was written
        over by another build. A forget may have freed some meanwhile (they are left out of the
        counts). Raises ``StoreError`` if it is incomplete."""
        expected = sum(layers.values())
        with _translated("checking the new tree"):
            if place.slot == _LEGACY:
                found = self._tree(place.version).count()
                mine, others = found, 0
            else:
                got = self._pool().get(where={"slot": place.slot}, include=["metadatas"])["metadatas"] or []
                trees = {int(m["k"]): m.get("tree") for m in got}
                mine_metas = [m for m in got if m.get("tree") == place.tag]
                # Every record it wrote is there, or was freed by a forget (which marks it so).
                others = sum(1 for k in range(expected) if trees.get(k) not in (place.tag, f"free:{place.tag}"))
                mine = len(mine_metas)
        if others or (place.slot == _LEGACY and mine != expected):
            raise StoreError(f"tree v{place.version} is incomplete ({mine} of {expected} nodes); it is not served")
        if place.slot == _LEGACY or mine == expected:
            return layers
        return dict(Counter(int(m["layer"]) for m in mine_metas))

    def _state_lock(self) -> threading.Lock:
        with _STATE_LOCKS_GUARD:
            return _STATE_LOCKS.setdefault(self._prefix, threading.Lock())

    def _write_lock(self) -> threading.Lock:
        """Taken by whatever writes over a tree's records (see ``_WRITE_LOCKS``); before the state lock."""
        with _STATE_LOCKS_GUARD:
            return _WRITE_LOCKS.setdefault(self._prefix, threading.Lock())

    def _write_state(self, state: TreeState, previous: _Place | None) -> None:
        meta: dict[str, Any] = {
            "version": state.version,
            "built_at": state.built_at,
            "embedder": state.embedder_id,
            "layers": json.dumps({str(k): v for k, v in sorted(state.nodes_per_layer.items())}),
            "revision": state.revision,
            "forgotten": state.forgotten,
            "slot": state.slot,
            "tag": state.tag,
            # One JSON field, never left out: Chroma's upsert merges metadata keys.
            "previous": _place_json(previous),
            "sources": list(state.source_ids) if state.source_ids else None,
        }
        with _translated("switching to the new tree"):
            self._collection("meta").upsert(ids=["state"], metadatas=[meta], embeddings=[_PLACEHOLDER])
        self._known[state.version] = _Place(state.version, state.slot, state.tag)

    def _is_missing(self, state: TreeState) -> bool:
        """Whether the served tree is gone or broken: fewer of its records are there (its own,
        or freed by a forget) than it had. Another builder that chose the same slot can write
        over it (two processes on one Chroma server; nothing there makes the choice and the
        write one step). Checked once per tree and process: one read."""
        key = f"{state.version}.{state.tag}"
        if key in self._present or not sum(state.nodes_per_layer.values()):
            return False
        with _translated("checking the served tree"):
            if state.slot == _LEGACY:
                found = state.version in self._tree_versions()
            else:
                found = self._whole(state.tag, sum(state.nodes_per_layer.values()))
        if found:
            self._present.add(key)
        return not found

    def _whole(self, tag: str, at_least: int) -> bool:
        """Whether the pool holds at least ``at_least`` records of the tree ``tag``, counting
        those a forget freed (marked ``free:<tag>``; the served state's counts drop only
        after they are freed, so a reader in between must not see a broken tree)."""
        got = self._pool().get(where={"tree": {"$in": [tag, f"free:{tag}"]}}, include=[])["ids"]
        return len(got) >= at_least > 0

    def _heal(self, missing: TreeState) -> TreeState:
        """Serves the newest complete tree instead of the missing one, and says so."""
        with self._state_lock():
            state = self._read_state()
            if state is None or not self._is_missing(state):
                return state  # type: ignore[return-value]  # healed meanwhile
            found = self._newest_complete()
            if found is None:
                log.warning("channel %s: the served tree v%d is missing and no other complete tree is "
                            "stored; a rebuild makes a new one", self.key, missing.version)
                return state
            place, layers, source_ids = found
            healed = replace(state, version=place.version, slot=place.slot, tag=place.tag,
                             nodes_per_layer=layers, source_ids=source_ids, revision=state.revision + 1)
            self._write_state(healed, None)
        log.warning("channel %s: the served tree v%d is missing; serving v%d, the newest complete tree, "
                    "instead (a rebuild brings it up to date)", self.key, missing.version, place.version)
        return healed

    def _newest_complete(self) -> tuple[_Place, dict[int, int], tuple[str, ...]] | None:
        """The newest stored tree whose every node is there, with its layer sizes and sources."""
        with _translated("looking for a complete tree"):
            pool = self._pool()
            firsts = pool.get(where={"k": 0}, include=["metadatas"])["metadatas"] or []
            candidates = [_Place(int(m["version"]), int(m["slot"]), str(m["tree"]))
                          for m in firsts if m.get("version") is not None]
            for place in sorted(candidates, key=lambda p: -p.version):
                metas = pool.get(where={"tree": place.tag}, include=["metadatas"])["metadatas"] or []
                if metas and self._whole(place.tag, int(metas[0]["count"])):
                    return place, dict(Counter(int(m["layer"]) for m in metas)), _sources_of(metas)
            for version in sorted(self._tree_versions(), reverse=True):
                metas = self._tree(version).get(include=["metadatas"])["metadatas"] or []
                if metas:
                    return _Place(version, _LEGACY, ""), dict(Counter(int(m["layer"]) for m in metas)), _sources_of(metas)
        return None

    def notes(self) -> dict[str, str]:
        """The channel's notes: small named strings kept with its tree (e.g. a pending rebuild request)."""
        with _translated("reading the channel's notes"):
            got = self._collection("meta").get(ids=["notes"], include=["metadatas"])
        stored = (got["metadatas"][0] or {}) if got["metadatas"] else {}
        notes = json.loads(str(stored.get("notes", "{}")))
        return {str(k): str(v) for k, v in notes.items()}

    def set_note(self, name: str, value: str | None) -> None:
        """Sets the note ``name`` to ``value``; None removes it. Read, change, write: callers
        changing the same channel's notes from several processes must coordinate."""
        notes = self.notes()
        if value is None and name not in notes:
            return  # nothing to write: a dropped channel's notes stay dropped
        if value is None:
            notes.pop(name, None)
        else:
            notes[name] = value
        # One JSON field: Chroma's upsert merges metadata keys, so a removed key would linger.
        metadata = {"notes": json.dumps(notes, sort_keys=True)}
        with _translated("writing the channel's notes"):
            self._collection("meta").upsert(ids=["notes"], metadatas=[metadata], embeddings=[_PLACEHOLDER])

    def discard_tree(self, version: int) -> None:
        """Frees the records of a tree this store wrote as ``version`` and never served
        (a failed build); nothing if it is served or the previous one."""
        place = self._written.pop(version, None)
        if place is None or place.tag in {p.tag for p in self._served_places().values()}:
            return
        with _translated("dropping an unfinished tree"):
            pool = self._pool()
            self._free(pool, pool.get(where={"tree": place.tag}, include=[])["ids"])

    def drop_stale_trees(self) -> None:
        """Frees trees this store wrote that never got served (crashed or failed builds), and
        drops trees of older stores newer than the served one. Trees other processes are
        writing are left alone; a crashed process's leftovers are written over by the next build."""
        for version in list(self._written):
            self.discard_tree(version)
        state = self._read_state()
        live = state.version if state else 0
        with _translated("dropping unfinished trees"):
            stale = {v for v in self._tree_versions() if v > live}
        self._drop_legacy_except(set(self._tree_versions()) - stale)

    def _drop_legacy_except(self, keep: set[int]) -> None:
        with _translated("dropping old trees"):
            for version in self._tree_versions():
                if version not in keep:
                    self._client.delete_collection(f"{self._prefix}-t{version}")

    def _place(self, version: int) -> _Place:
        """Where tree ``version`` is: the served or previous tree (or one written here)."""
        if version not in self._known:
            self._known.update(self._served_places())
        if version in self._known:
            return self._known[version]
        return self._written.get(version, _Place(version, _LEGACY, ""))

    def _records(self, version: int, where: dict[str, Any] | None, include: list[str]) -> tuple[list[str], dict[str, Any]]:
        """``get`` of one tree's records: node ids, and Chroma's answer."""
        place = self._place(version)
        if place.slot == _LEGACY:
            got = self._tree(version).get(where=where, include=include)
            return list(got["ids"]), got
        got = self._pool().get(where=_all_of({"tree": place.tag}, where), include=[*include, "metadatas"])
        return [str(m["node"]) for m in got["metadatas"]], got

    def _records_by_ids(self, version: int, ids: Sequence[str], include: list[str]) -> tuple[list[str], dict[str, Any]]:
        """``get`` of some nodes of one pooled tree by record id; records of another tree dropped."""
        place = self._place(version)
        record_ids = self._record_ids(place, ids)
        got = self._pool().get(ids=record_ids, include=include) if record_ids else {name: [] for name in include}
        keep = [i for i, m in enumerate(got["metadatas"]) if m.get("tree") == place.tag]
        picked = {name: [got[name][i] for i in keep] for name in include}
        return [str(got["metadatas"][i]["node"]) for i in keep], picked

    def query_tree(
        self,
        version: int,
        vector: np.ndarray,
        n: int,
        where: dict[str, Any] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Nodes of a tree version nearest to ``vector``, best first, through Chroma's index."""
        if n <= 0 or (ids is not None and not ids):
            return []
        with _translated("searching the tree"):
            place = self._place(version)
            if place.slot == _LEGACY:
                return self._query_legacy(version, vector, n, where, ids)
            if ids is not None:
                hits = self._query_by_ids(place, vector, n, ids)
            elif where is None:
                hits = self._query_unfiltered(place, vector, n)
            else:
                hits = self._query_pool(vector, n, _all_of({"tree": place.tag}, where))[0]
        return [hit for hit in hits if where is None or _matches(hit.node, where)][:n]

    def _query_pool(self, vector: np.ndarray, n: int, where: dict[str, Any] | None,
                    record_ids: list[str] | None = None, tag: str = "") -> tuple[list[Hit], int]:
        """Chroma's nearest records, as hits of the tree ``tag`` (others dropped) if given, and
        how many records Chroma returned."""
        got = self._pool().query(query_embeddings=[vector], n_results=n, where=where, ids=record_ids,
                                 include=["documents", "metadatas", "distances"])
        hits = [
            Hit(node=node_from(str(m["node"]), d, m), score=1.0 - float(dist))
            for d, m, dist in zip(got["documents"][0], got["metadatas"][0], got["distances"][0])
            if not tag or m.get("tree") == tag
        ]
        return hits, len(got["ids"][0])

    def _query_unfiltered(self, place: _Place, vector: np.ndarray, n: int) -> list[Hit]:
        """The ``n`` nearest nodes of one tree. Chroma filters metadata before it searches, which
        made a query several times slower (measured: p50 22 ms against 1.6 ms on 3 x 1,200
        records): the pool is searched unfiltered, as deep as the trees it holds need (the
        served one and the previous one, usually; freed records lie far from any question),
        and only if that finds too few of this tree is the filtered query asked. A pool that
        returned fewer records than it holds was not searched whole: Chroma's graph index can
        lose track of a record written over in place (a server test saw 25 of 26 now and then)."""
        depth = n * self._trees_in_pool(place)
        hits, returned = self._query_pool(vector, depth, None, tag=place.tag)
        if len(hits) >= n:
            return hits[:n]
        if returned < depth and returned >= self._pool().count():  # the whole pool was searched
            return hits
        return self._query_pool(vector, n, {"tree": place.tag})[0]

    def _trees_in_pool(self, place: _Place) -> int:
        """How many trees the pool holds, counted once per served tree (a build running
        elsewhere adds one meanwhile: the query then falls back to the filtered one)."""
        if place.tag not in self._tree_counts:
            if len(self._tree_counts) > TREE_SLOTS:
                self._tree_counts.clear()  # counts of trees no longer served
            firsts = self._pool().get(where={"k": 0}, include=["metadatas"])["metadatas"] or []
            self._tree_counts[place.tag] = max(1, sum(1 for m in firsts if m.get("version") is not None))
        return self._tree_counts[place.tag]

    def _query_by_ids(self, place: _Place, vector: np.ndarray, n: int, ids: Sequence[str]) -> list[Hit]:
        """Nodes with these ids nearest to ``vector``, looked up by their record ids (as fast as
        Chroma gets) rather than by a metadata filter."""
        record_ids = self._record_ids(place, ids)
        if not record_ids:
            return []
        return self._query_pool(vector, min(n, len(record_ids)), None, record_ids, place.tag)[0]

    def _record_ids(self, place: _Place, ids: Sequence[str]) -> list[str]:
        """The pool record ids of these nodes of a tree (unknown nodes left out). A tree's records
        keep their ids until a later build writes over them, and then carry another tag."""
        if place.tag not in self._rids:
            got = self._pool().get(where={"tree": place.tag}, include=["metadatas"])
            self._rids[place.tag] = {str(m["node"]): rid for rid, m in zip(got["ids"], got["metadatas"])}
            while len(self._rids) > TREE_SLOTS:
                del self._rids[next(iter(self._rids))]
        known = self._rids[place.tag]
        return [known[i] for i in dict.fromkeys(ids) if i in known]

    def _query_legacy(
        self, version: int, vector: np.ndarray, n: int, where: dict[str, Any] | None, ids: Sequence[str] | None
    ) -> list[Hit]:
        collection = self._tree(version)
        if ids is not None:
            # Chroma fails the whole query on an unknown id; another process may have
            # removed some (forget) since the caller looked.
            ids = collection.get(ids=list(ids), include=[])["ids"]
            if not ids:
                return []
        got = collection.query(
            query_embeddings=[vector],
            n_results=min(n, len(ids)) if ids is not None else n,
            where=where,
            ids=list(ids) if ids is not None else None,
            include=["documents", "metadatas", "distances"],
        )
        return [
            Hit(node=node_from(i, d, m), score=1.0 - float(dist))
            for i, d, m, dist in zip(got["ids"][0], got["documents"][0], got["metadatas"][0], got["distances"][0])
        ]

    def get_nodes(self, version: int, ids: Sequence[str]) -> list[Node]:
        """The nodes with these ids in a tree version (missing ids are skipped), in the order asked."""
        if not ids:
            return []
        with _translated("reading nodes"):
            if self._place(version).slot == _LEGACY:
                got = self._tree(version).get(ids=list(ids), include=["documents", "metadatas"])
                node_ids = list(got["ids"])
            else:
                node_ids, got = self._records_by_ids(version, ids, ["documents", "metadatas"])
        found = {i: node_from(i, d, m) for i, d, m in zip(node_ids, got["documents"], got["metadatas"])}
        return [found[i] for i in ids if i in found]

    def node_texts(self, version: int) -> tuple[list[str], list[str]]:
        """The ids and texts of every node of a tree version (to index them lexically)."""
        with _translated("reading node texts"):
            node_ids, got = self._records(version, None, ["documents", "metadatas"])
        return node_ids, [_text_of(d, m) for d, m in zip(got["documents"], got["metadatas"])]

    def list_layer(self, version: int, layer: int, limit: int) -> list[Node]:
        """Up to ``limit`` nodes of one layer of a tree version, widest (most children) first."""
        with _translated("reading a layer"):
            node_ids, got = self._records(version, {"layer": layer}, ["documents", "metadatas"])
        nodes = [node_from(i, d, m) for i, d, m in zip(node_ids, got["documents"], got["metadatas"])]
        return sorted(nodes, key=lambda n: (-len(n.children), n.id))[:limit]

    def get_tree_embeddings(self, version: int, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored embeddings of some nodes of a tree version, by id."""
        if not ids:
            return {}
        with _translated("reading node embeddings"):
            if self._place(version).slot == _LEGACY:
                got = self._tree(version).get(ids=list(ids), include=["embeddings"])
                node_ids = list(got["ids"])
            else:
                node_ids, got = self._records_by_ids(version, ids, ["embeddings", "metadatas"])
        return {i: np.asarray(v, dtype=np.float32) for i, v in zip(node_ids, got["embeddings"])}

    def remove_source_from_trees(self, source_id: str) -> int:
        """Deletes, from every stored tree (served, previous or unfinished), the nodes that
        cover ``source_id``, and takes its id out of the served state.

        References to the deleted nodes are removed from the remaining nodes'
        children and parents, so the tree stays consistent until the next
        rebuild restores the summaries of the other sources. Returns the number
        of nodes deleted from the served tree.
        """
        removed: dict[str, Counter[int]] = {}
        with self._write_lock(), _translated("removing a source from the tree"):
            for version in self._tree_versions():
                removed[f"legacy:{version}"] = self._remove_from_version(version, source_id)
            removed.update(self._remove_from_pool(source_id))
        with self._state_lock():
            # Read now, not before: a build may have switched over while the nodes went.
            state = self._read_state()
            if state is None:
                return 0
            removed_live = removed.get(state.tag or f"legacy:{state.version}", Counter())
            if removed_live or source_id in state.source_ids:
                previous = self._served_places()
                previous.pop(state.version, None)
                self._write_state(_without_source(state, source_id, removed_live), next(iter(previous.values()), None))
        return sum(removed_live.values())

    def _remove_from_pool(self, source_id: str) -> dict[str, Counter[int]]:
        """Frees the pool's records covering ``source_id`` (whatever tree they belong to) and
        unlinks them from their trees' other nodes; how many went per tree tag and layer."""
        pool = self._pool()
        doomed = pool.get(where={"sources": {"$contains": source_id}}, include=["metadatas"])
        by_tree: dict[str, list[dict[str, Any]]] = {}
        for metadata in doomed["metadatas"] or []:
            by_tree.setdefault(str(metadata["tree"]), []).append(metadata)
        self._free(pool, list(doomed["ids"]), [str(m["tree"]) for m in doomed["metadatas"] or []])
        removed: dict[str, Counter[int]] = {}
        for tag, metadatas in by_tree.items():
            removed[tag] = Counter(int(m.get("layer", 0)) for m in metadatas)
            gone = {str(m["node"]) for m in metadatas}
            neighbours = {i for m in metadatas for name in ("children", "parents") for i in m.get(name) or []}
            survivors = sorted(neighbours - gone)
            if not survivors:
                continue
            affected = pool.get(where=_all_of({"tree": tag}, {"node": {"$in": survivors}}), include=["metadatas"])
            if affected["ids"]:
                pool.update(ids=affected["ids"], metadatas=[_without_links(m, gone) for m in affected["metadatas"]])
        return removed

    def _free(self, pool: Any, record_ids: list[str], trees: list[str] | None = None) -> None:
        """Empties records for reuse: no text, no trace of a source, a random vector.
        Updated, not deleted: Chroma's index reuses an updated record's place, never a deleted one's.
        Records a forget frees (``trees``: their tree tags) are marked ``free:<tag>``, so a
        build checking its tree before the switch tells them from records never written."""
        if not record_ids:
            return
        dimension = len(pool.get(ids=record_ids[:1], include=["embeddings"])["embeddings"][0])
        # Random, not one placeholder: many equal vectors leave Chroma's HNSW graph unable to
        # reach the other records (a filtered query then found nothing).
        noise = np.random.default_rng().normal(size=(len(record_ids), dimension)).astype(np.float32)
        for start, end in _batches(len(record_ids), self._client.get_max_batch_size()):
            part = record_ids[start:end]
            marks = [f"free:{tree}" for tree in trees[start:end]] if trees else ["free"] * len(part)
            pool.update(ids=part, metadatas=[{**_FREE_METADATA, "tree": mark} for mark in marks],
                        embeddings=noise[start:end])

    def _remove_from_version(self, version: int, source_id: str) -> Counter[int]:
        """``_remove_from_tree`` on one version; nothing if a switch dropped that version meanwhile."""
        try:
            return self._remove_from_tree(self._tree(version), source_id)
        except Exception:
            if version in self._tree_versions():
                raise
            return Counter()

    def _remove_from_tree(self, collection: Any, source_id: str) -> Counter[int]:
        """Deletes the nodes covering ``source_id`` from one tree of an older store; how many per layer."""
        doomed = collection.get(where={"sources": {"$contains": source_id}}, include=["metadatas"])
        doomed_ids = set(doomed["ids"])
        if not doomed_ids:
            return Counter()
        layers = Counter(int(m.get("layer", 0)) for m in doomed["metadatas"])
        neighbours: set[str] = set()
        for metadata in doomed["metadatas"]:
            neighbours.update(metadata.get("children") or [])
            neighbours.update(metadata.get("parents") or [])
        collection.delete(ids=list(doomed_ids))
        survivors = list(neighbours - doomed_ids)
        if not survivors:  # Chroma refuses a get by an empty id list
            return layers
        affected = collection.get(ids=survivors, include=["metadatas"])
        if affected["ids"]:
            updated = [_without_links(m, doomed_ids) for m in affected["metadatas"]]
            collection.update(ids=affected["ids"], metadatas=updated)
        return layers


# -- conversions -------------------------------------------------------------


def _served_slot(places: dict[int, _Place]) -> int | None:
    """The slot of the served tree (the newest of the served and previous places), if any."""
    return places[max(places)].slot if places else None


def _opened(client: Any, name: str, configuration: dict[str, Any]) -> Any:
    """The collection ``name``, created with ``configuration`` if it is new. One created by an
    older version, with Chroma's default log threshold, is changed to the short log once
    (the space of an existing collection cannot change, and need not)."""
    return _with_short_log(client.get_or_create_collection(name, embedding_function=None, configuration=configuration))


def _with_short_log(collection: Any) -> Any:
    """``collection``, its log threshold made short if it is not (see :func:`_opened`)."""
    # configuration_json: the parsed `configuration` warns about our embedding_function=None.
    hnsw = (getattr(collection, "configuration_json", None) or {}).get("hnsw") or {}
    if hnsw and hnsw.get("sync_threshold") != _SHORT_LOG["sync_threshold"]:
        collection.modify(configuration={"hnsw": dict(_SHORT_LOG)})
    return collection


class _Reopening:
    """A kept collection handle that opens its collection once more when Chroma says it does not
    exist: the channel was dropped (by another process, or another engine) and is used again.

    Chroma names a collection by an id fixed at creation, so a handle to a dropped collection
    fails for ever, even once one of the same name exists again. Every call made through it
    (get, query, upsert, update, delete) does nothing before failing so, and is safe to repeat.
    """

    def __init__(self, open_collection: Callable[[], Any]) -> None:
        self._open = open_collection
        self._collection = open_collection()

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


def _register(client: Any, key: ChannelKey, digest: str) -> None:
    """Lists the channel in the registry (``ChromaStore.channels``) if it is not."""
    with _translated("registering the channel"):
        registry = _opened(client, REGISTRY_COLLECTION, _PLAIN_CONFIG)
        if not registry.get(ids=[digest], include=[])["ids"]:
            registry.upsert(
                ids=[digest],
                embeddings=[_PLACEHOLDER],
                metadatas=[{"platform": key.platform, "workspace": key.workspace, "channel": key.channel}],
            )


def leaf_id(source_id: str, ordinal: int) -> str:
    """The id of a leaf: the source's short id and the chunk's ordinal."""
    return f"{source_id[:12]}.{ordinal}"


def leaf_node(chunk: Chunk, title: str = "", link: str = "") -> Node:
    """The leaf node of a chunk, titled and linked as its source."""
    return Node(
        id=leaf_id(chunk.source_id, chunk.ordinal),
        layer=0,
        text=chunk.text,
        tokens=chunk.tokens,
        source_ids=(chunk.source_id,),
        title=title,
        link=link,
        ordinal=chunk.ordinal,
        start=chunk.start,
        end=chunk.end,
    )


def node_metadata(node: Node) -> dict[str, Any]:
    """Chroma metadata of a node (empty lists are left out: Chroma refuses them)."""
    metadata: dict[str, Any] = {
        "layer": node.layer,
        "tokens": node.tokens,
        "title": node.title,
        "link": node.link,
        "ordinal": node.ordinal,
        "start": node.start,
        "end": node.end,
    }
    for name, values in (("children", node.children), ("parents", node.parents), ("sources", node.source_ids)):
        if values:
            metadata[name] = list(values)
    return metadata


def node_from(node_id: str, document: str | None, metadata: dict[str, Any]) -> Node:
    """A node rebuilt from its Chroma record."""
    return Node(
        id=node_id,
        layer=int(metadata["layer"]),
        text=_text_of(document, metadata),
        tokens=int(metadata["tokens"]),
        children=tuple(metadata.get("children") or ()),
        parents=tuple(metadata.get("parents") or ()),
        source_ids=tuple(metadata.get("sources") or ()),
        title=str(metadata.get("title", "")),
        link=str(metadata.get("link", "")),
        ordinal=int(metadata.get("ordinal", -1)),
        start=int(metadata.get("start", -1)),
        end=int(metadata.get("end", -1)),
    )


def _pool_metadata(node: Node, place: _Place, k: int, count: int) -> dict[str, Any]:
    """A pool record's metadata: the node's, with every key it lacks set to None (a record
    written over keeps no key of the tree before), its tree, and its place in the pool."""
    metadata: dict[str, Any] = {name: None for name in _NODE_KEYS}
    metadata.update(node_metadata(node), node=node.id, tree=place.tag, version=place.version,
                    slot=place.slot, k=k, count=count)
    metadata[TEXT_KEY] = node.text
    return metadata


def _place_json(place: _Place | None) -> str:
    return json.dumps({"version": place.version, "slot": place.slot, "tag": place.tag} if place else None)


def _place_from_json(raw: Any) -> _Place | None:
    data = json.loads(str(raw)) if raw else None
    return _Place(int(data["version"]), int(data["slot"]), str(data["tag"])) if data else None


def _matches(node: Node, where: dict[str, Any]) -> bool:
    """Whether a node passes the simple where clauses callers give (``{"layer": n}``)."""
    return all(getattr(node, key, None) == value for key, value in where.items() if not key.startswith("$"))


def _all_of(*clauses: dict[str, Any] | None) -> dict[str, Any]:
    """One Chroma where clause requiring every given clause."""
    present = [clause for clause in clauses if clause]
    return present[0] if len(present) == 1 else {"$and": present}


def _sources_of(metadatas: list[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(sorted({str(s) for m in metadatas if int(m.get("layer", 0)) == 0 for s in m.get("sources") or []}))


def _without_source(state: TreeState, source_id: str, removed: Counter[int]) -> TreeState:
    """The served state after ``source_id`` was forgotten and ``removed`` nodes (per layer) went."""
    left = {layer: count - removed[layer] for layer, count in state.nodes_per_layer.items()}
    forgotten = source_id in state.source_ids
    return replace(
        state,
        source_ids=tuple(i for i in state.source_ids if i != source_id),
        # Readers key what they derive from the tree (the BM25 index) on the revision;
        # the counts per layer follow what is left, so status tells the truth.
        revision=state.revision + (1 if removed else 0),
        nodes_per_layer={k: v for k, v in left.items() if v > 0},
        # The id goes, but the count stays: the summaries above it still want a rebuild.
        forgotten=state.forgotten + (1 if forgotten else 0),
    )


def _state_of(metadata: dict[str, Any]) -> SourceState:
    """The state of a source's first segment record; records written before states are ``LEGACY``."""
    value = metadata.get("state")
    return SourceState(str(value)) if value else SourceState.LEGACY


_LISTED = frozenset({SourceState.STORED, SourceState.LEGACY})


def _without_links(metadata: dict[str, Any], removed: set[str]) -> dict[str, Any]:
    updated = dict(metadata)
    for name in ("children", "parents"):
        kept = [i for i in metadata.get(name) or [] if i not in removed]
        # Chroma refuses empty lists; an update with None removes the key.
        updated[name] = kept or None
    return updated


def _answer_from(answer_id: str, document: str | None, metadata: dict[str, Any] | None) -> AnswerRecord:
    meta = metadata or {}
    votes = {str(k): int(v) for k, v in json.loads(str(meta.get("votes", "{}"))).items()}
    return AnswerRecord(answer_id, str(meta.get("question", "")), _text_of(document, meta), str(meta.get("asked_by", "")),
                        str(meta.get("answered_at", "")), tuple(meta.get("sources") or ()), votes)


def _source_metadata(source: Source) -> dict[str, Any]:
    return {
        "title": source.title,
        "kind": source.kind.value,
        "link": source.link,
        "added_by": source.added_by,
        "added_at": source.added_at,
        "chars": source.chars,
        "external_id": source.external_id,
    }


def _source_from_metadata(metadata: dict[str, Any]) -> Source:
    return Source(
        id=str(metadata["source_id"]),
        title=str(metadata["title"]),
        kind=SourceKind(str(metadata["kind"])),
        link=str(metadata["link"]),
        added_by=str(metadata["added_by"]),
        added_at=str(metadata["added_at"]),
        chars=int(metadata["chars"]),
        external_id=str(metadata.get("external_id", "")),
    )


def _chunk_metadata(chunk: Chunk) -> dict[str, Any]:
    return {
        TEXT_KEY: chunk.text,
        "source_id": chunk.source_id,
        "ordinal": chunk.ordinal,
        "start": chunk.start,
        "end": chunk.end,
        "tokens": chunk.tokens,
    }


def _chunk_from(document: str | None, metadata: dict[str, Any]) -> Chunk:
    return Chunk(
        source_id=str(metadata["source_id"]),
        ordinal=int(metadata["ordinal"]),
        text=_text_of(document, metadata),
        start=int(metadata["start"]),
        end=int(metadata["end"]),
        tokens=int(metadata["tokens"]),
    )


def _text_of(document: str | None, metadata: dict[str, Any] | None) -> str:
    """A record's text: its metadata's ``TEXT_KEY``, or, for a record of an older store, its document."""
    text = (metadata or {}).get(TEXT_KEY)
    return str(text) if text is not None else (document or "")


def _batches(total: int, size: int) -> Iterator[tuple[int, int]]:
    size = max(1, size)
    for start in range(0, total, size):
        yield start, min(total, start + size)
