"""Chroma storage of channels: sources, caches and versioned trees.

Each channel owns its own collections, named from a digest of its
:class:`ChannelKey`, so a query of one channel cannot reach another's nodes:

- ``rc-<digest>-src``          the sources' text, in segments (rebuilds need nothing else)
- ``rc-<digest>-leaf-<prof>``  chunks of each source with their embeddings, per
                               embedding model and chunk size (the leaf cache)
- ``rc-<digest>-sum-<prof>``   summaries by content hash of their cluster (the summary cache)
- ``rc-<digest>-t<version>``   one complete tree per build version
- ``rc-<digest>-meta``         one record naming the version that is served

A rebuild writes a whole new ``t<version>`` beside the served one and then
switches by rewriting the single ``meta`` record: one write, so a crash leaves
either the old tree or the new one served, never a mixture. The previous
version is kept until the next switch so a reader that has just looked up the
old version can still finish its query.

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
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from raptor_engine.errors import RaptorError, StoreError, StoreUnavailable
from raptor_engine.types import AnswerRecord, ChannelKey, Chunk, Hit, Node, Source, SourceKind

log = logging.getLogger(__name__)

REGISTRY_COLLECTION = "rc-channels"
SEGMENT_CHARS = 100_000  # source text is stored in segments of this many characters
_PLACEHOLDER = [1.0]  # records that are looked up by id only still need a vector
_COSINE = {"hnsw": {"space": "cosine"}}
_TREE_NAME = re.compile(r"^rc-(?P<digest>[0-9a-f]{24})-t(?P<version>\d+)$")
# The served state is read, changed and written back by forget and by a build switching over, from
# different threads: one lock per channel keeps either from undoing the other (within one process).
_STATE_LOCKS: dict[str, threading.Lock] = {}
_STATE_LOCKS_GUARD = threading.Lock()


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


class ChromaStore:
    """The Chroma database holding every channel; hands out one :class:`ChannelStore` each."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @classmethod
    def embedded(cls, path: Path) -> ChromaStore:
        """Chroma embedded in this process, persisted under ``path``."""
        import chromadb
        from chromadb.config import Settings

        with _translated(f"opening {path}"):
            path.mkdir(parents=True, exist_ok=True)
            client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
        return cls(client)

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
    def _auth_settings(token: str, token_header: str, username: str, password: str) -> dict[str, str]:
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
        with _translated("registering the channel"):
            registry = self._client.get_or_create_collection(REGISTRY_COLLECTION, embedding_function=None)
            if not registry.get(ids=[digest], include=[])["ids"]:
                registry.upsert(
                    ids=[digest],
                    embeddings=[_PLACEHOLDER],
                    metadatas=[{"platform": key.platform, "workspace": key.workspace, "channel": key.channel}],
                )
        return ChannelStore(self._client, key, digest)

    def channels(self) -> list[ChannelKey]:
        """Every channel that has ever been used, in a stable order."""
        with _translated("listing channels"):
            registry = self._client.get_or_create_collection(REGISTRY_COLLECTION, embedding_function=None)
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

    # -- collections -------------------------------------------------------

    def _collection(self, suffix: str, cosine: bool = False) -> Any:
        return self._client.get_or_create_collection(
            f"{self._prefix}-{suffix}", embedding_function=None, configuration=_COSINE if cosine else None
        )

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

    # -- sources -----------------------------------------------------------

    def put_source(self, source: Source, text: str, state: SourceState = SourceState.STORED) -> None:
        """Stores a source's text and description in one write, in ``state`` (not ``LEGACY``)."""
        if state is SourceState.LEGACY:
            raise ValueError("LEGACY is how sources written before states read; it is never written")
        segments = [text[i : i + SEGMENT_CHARS] for i in range(0, len(text), SEGMENT_CHARS)] or [""]
        metadatas: list[dict[str, Any]] = [{"source_id": source.id, "segment": i} for i in range(len(segments))]
        metadatas[0].update(_source_metadata(source), segments=len(segments), state=state.value)
        with _translated("storing a source"):
            self._collection("src").upsert(
                ids=[f"{source.id}#{i}" for i in range(len(segments))],
                documents=segments,
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
        return "".join(document for _, document in parts)

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
        }
        if record.source_ids:
            metadata["sources"] = list(record.source_ids)
        with _translated("keeping an answer"):
            self._collection("answers").upsert(
                ids=[record.answer_id], documents=[record.text], metadatas=[metadata], embeddings=[_PLACEHOLDER]
            )

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
        return [self._client.get_collection(n, embedding_function=None) for n in wanted]

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
                    documents=[c.text for c in part],
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
            got = collection.get(ids=list(keys), include=["documents", "embeddings"])
        return {
            key: (document, np.asarray(vector, dtype=np.float32))
            for key, document, vector in zip(got["ids"], got["documents"], got["embeddings"])
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
                    documents=[text for _, text, _ in part],
                    metadatas=[{"sources": list(sources)} for _, _, sources in part],
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

    def live_state(self) -> TreeState | None:
        """The served tree's state, or None if no tree was ever built."""
        with _translated("reading the tree state"):
            got = self._collection("meta").get(ids=["state"], include=["metadatas"])
        if not got["metadatas"]:
            return None
        meta = got["metadatas"][0]
        return TreeState(
            version=int(meta["version"]),
            built_at=str(meta["built_at"]),
            embedder_id=str(meta["embedder"]),
            source_ids=tuple(meta.get("sources") or ()),
            nodes_per_layer={int(k): int(v) for k, v in json.loads(str(meta["layers"])).items()},
            revision=int(meta.get("revision", 0)),
            forgotten=int(meta.get("forgotten", 0)),
        )

    def next_version(self) -> int:
        """A version number no tree of this channel has used."""
        state = self.live_state()
        with _translated("listing tree versions"):
            versions = self._tree_versions()
        return max([state.version if state else 0, *versions]) + 1

    def write_tree(self, version: int, nodes: Sequence[Node], embeddings: np.ndarray) -> None:
        """Writes a complete tree as ``version``, beside the served one (not yet served)."""
        name = f"{self._prefix}-t{version}"
        with _translated("writing the new tree"):
            if version in self._tree_versions():
                self._client.delete_collection(name)  # a leftover of a crashed build
            collection = self._client.create_collection(name, embedding_function=None, configuration=_COSINE)
            for start, end in _batches(len(nodes), self._client.get_max_batch_size()):
                part = nodes[start:end]
                collection.add(
                    ids=[n.id for n in part],
                    documents=[n.text for n in part],
                    metadatas=[node_metadata(n) for n in part],
                    embeddings=embeddings[start:end],
                )

    def switch_to(self, state: TreeState) -> None:
        """Serves ``state.version`` from now on (one write), then drops every other
        tree but the one served until now (readers in flight may still use it)."""
        with self._state_lock():
            previous = self.live_state()
            self._write_state(state)
        self._drop_trees_except({state.version} | ({previous.version} if previous else set()))

    def _state_lock(self) -> threading.Lock:
        with _STATE_LOCKS_GUARD:
            return _STATE_LOCKS.setdefault(self._prefix, threading.Lock())

    def _write_state(self, state: TreeState) -> None:
        meta: dict[str, Any] = {
            "version": state.version,
            "built_at": state.built_at,
            "embedder": state.embedder_id,
            "layers": json.dumps({str(k): v for k, v in sorted(state.nodes_per_layer.items())}),
            "revision": state.revision,
            "forgotten": state.forgotten,
        }
        if state.source_ids:
            meta["sources"] = list(state.source_ids)
        with _translated("switching to the new tree"):
            self._collection("meta").upsert(ids=["state"], metadatas=[meta], embeddings=[_PLACEHOLDER])

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
        if value is None:
            notes.pop(name, None)
        else:
            notes[name] = value
        # One JSON field: Chroma's upsert merges metadata keys, so a removed key would linger.
        metadata = {"notes": json.dumps(notes, sort_keys=True)}
        with _translated("writing the channel's notes"):
            self._collection("meta").upsert(ids=["notes"], metadatas=[metadata], embeddings=[_PLACEHOLDER])

    def drop_stale_trees(self) -> None:
        """Deletes trees left by builds that never switched over (crashed or failed):
        every version newer than the served one."""
        state = self.live_state()
        live = state.version if state else 0
        with _translated("dropping unfinished trees"):
            stale = {v for v in self._tree_versions() if v > live}
        self._drop_trees_except(set(self._tree_versions()) - stale)

    def _drop_trees_except(self, keep: set[int]) -> None:
        with _translated("dropping old trees"):
            for version in self._tree_versions():
                if version not in keep:
                    self._client.delete_collection(f"{self._prefix}-t{version}")

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
            collection = self._tree(version)
            if ids is not None:
                # Chroma fails the whole query on an unknown id; another process may have
                # removed some (forget) since the caller looked.
                ids = collection.get(ids=list(ids), include=[])["ids"]
                if not ids:
                    return []
            # Chroma returns what it has when asked for more: no count() round trip to clamp n.
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
            got = self._tree(version).get(ids=list(ids), include=["documents", "metadatas"])
        found = {i: node_from(i, d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])}
        return [found[i] for i in ids if i in found]

    def node_texts(self, version: int) -> tuple[list[str], list[str]]:
        """The ids and texts of every node of a tree version (to index them lexically)."""
        with _translated("reading node texts"):
            got = self._tree(version).get(include=["documents"])
        return list(got["ids"]), list(got["documents"])

    def list_layer(self, version: int, layer: int, limit: int) -> list[Node]:
        """Up to ``limit`` nodes of one layer of a tree version, widest (most children) first."""
        with _translated("reading a layer"):
            got = self._tree(version).get(where={"layer": layer}, include=["documents", "metadatas"])
        nodes = [node_from(i, d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])]
        return sorted(nodes, key=lambda n: (-len(n.children), n.id))[:limit]

    def get_tree_embeddings(self, version: int, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored embeddings of some nodes of a tree version, by id."""
        if not ids:
            return {}
        with _translated("reading node embeddings"):
            got = self._tree(version).get(ids=list(ids), include=["embeddings"])
        return {i: np.asarray(v, dtype=np.float32) for i, v in zip(got["ids"], got["embeddings"])}

    def remove_source_from_trees(self, source_id: str) -> int:
        """Deletes, from every stored tree (served, previous or unfinished), the nodes that
        cover ``source_id``, and takes its id out of the served state.

        References to the deleted nodes are removed from the remaining nodes'
        children and parents, so the tree stays consistent until the next
        rebuild restores the summaries of the other sources. Returns the number
        of nodes deleted from the served tree.
        """
        removed: dict[int, Counter[int]] = {}
        with _translated("removing a source from the tree"):
            for version in self._tree_versions():
                removed[version] = self._remove_from_version(version, source_id)
        with self._state_lock():
            # Read now, not before: a build may have switched over while the nodes went.
            state = self.live_state()
            if state is None:
                return 0
            removed_live = removed.get(state.version, Counter())
            if removed_live or source_id in state.source_ids:
                self._write_state(_without_source(state, source_id, removed_live))
        return sum(removed_live.values())

    def _remove_from_version(self, version: int, source_id: str) -> Counter[int]:
        """``_remove_from_tree`` on one version; nothing if a switch dropped that version meanwhile."""
        try:
            return self._remove_from_tree(self._tree(version), source_id)
        except Exception:
            if version in self._tree_versions():
                raise
            return Counter()

    def _remove_from_tree(self, collection: Any, source_id: str) -> Counter[int]:
        """Deletes the nodes covering ``source_id`` from one tree; how many per layer."""
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


def node_from(node_id: str, text: str, metadata: dict[str, Any]) -> Node:
    """A node rebuilt from its Chroma record."""
    return Node(
        id=node_id,
        layer=int(metadata["layer"]),
        text=text,
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


def _answer_from(answer_id: str, text: str | None, metadata: dict[str, Any] | None) -> AnswerRecord:
    meta = metadata or {}
    votes = {str(k): int(v) for k, v in json.loads(str(meta.get("votes", "{}"))).items()}
    return AnswerRecord(answer_id, str(meta.get("question", "")), text or "", str(meta.get("asked_by", "")),
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
        "source_id": chunk.source_id,
        "ordinal": chunk.ordinal,
        "start": chunk.start,
        "end": chunk.end,
        "tokens": chunk.tokens,
    }


def _chunk_from(text: str, metadata: dict[str, Any]) -> Chunk:
    return Chunk(
        source_id=str(metadata["source_id"]),
        ordinal=int(metadata["ordinal"]),
        text=text,
        start=int(metadata["start"]),
        end=int(metadata["end"]),
        tokens=int(metadata["tokens"]),
    )


def _batches(total: int, size: int) -> Iterator[tuple[int, int]]:
    size = max(1, size)
    for start in range(0, total, size):
        yield start, min(total, start + size)
