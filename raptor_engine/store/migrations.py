"""Records written by earlier versions of the store, brought to the current format once per channel.

Contract: a channel is opened through :func:`open_channel` (``ChromaStore.channel``; and
:func:`migrate_listed` opens every listed channel when a store opens). If the channel's registry
entry does not record the current ``STORE_FORMAT``, :func:`migrate_channel` first rewrites, in
place, whatever earlier versions wrote in its collections; then the entry records the format, so
the work is done once per channel. Every other module of the store reads the current format only.
What an earlier version may have left, and what it becomes:

- a collection with Chroma's default write log: the short one (``SHORT_LOG``);
- a text kept as the record's Chroma document: copied into its metadata (``TEXT_KEY``); the
  document stays, unread. Freed tree records, which hold no text, are left so;
- a source written before source states (or file names): ``stored``, as it was listed, with no
  file name;
- an answer kept before ``found``, ``reasons``, ``changed``, ``thread`` or ``kept_ns``: found,
  without reasons, unchanged, in no thread, kept before any other;
- a served state without ``revision``, ``forgotten``, ``replaced`` or ``previous``: none of them;
- a tree kept in a collection of its own (``rc-<digest>-t<version>``): moved into the tree pool,
  and every such collection dropped; a served tree in a third pool slot (stores of the time
  when there were three): moved into one of the two, and the third slot's records deleted. A
  previous tree in either goes (it is kept for readers in flight, and none is in flight yet).

What it changed is logged at INFO, with counts. Each step changes only what is still in an older
shape, and writes what any other run would write: two processes opening one old channel at once
do no harm, and a migration cut short runs again at the next opening. Raises ``StoreError``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from raptor_engine.errors import StoreError
from raptor_engine.store.common import (
    FORMAT_KEY,
    PLACEHOLDER_VECTOR,
    REGISTRY_COLLECTION,
    SHORT_LOG,
    STORE_FORMAT,
    TEXT_KEY,
    ChannelCollections,
    log,
    open_registry,
    record_format,
    translated,
)
from raptor_engine.store.sources import SourceState
from raptor_engine.store.tree_format import TreePlace, node_from, place_from_json, state_from, state_metadata
from raptor_engine.store.tree_pool import TREE_SLOTS, TreePool
from raptor_engine.types import ChannelKey, Node

# A tree kept in a collection of its own, as stores did before the tree pool.
_TREE_NAME = re.compile(r"^rc-(?P<digest>[0-9a-f]{24})-t(?P<version>\d+)$")
# Records read and rewritten at once: a source's segment alone may hold 100,000 characters.
_PAGE = 256
# One migration at a time in a process: two threads opening one old channel would do it twice.
_MIGRATING = threading.Lock()
# The collections a channel written by any version holds once it holds anything: its sources,
# its served state (and notes), its tree pool, its answers. Caches and trees of their own
# (``leaf-``/``sum-<profile>``, ``t<version>``) come only with sources or a state.
_FIRST_WRITTEN = ("src", "meta", "tree", "answers")
# Fields added to records since their kind was first written, with what a record written before
# meant. A source written before states was listed, built from and searched: it is stored.
_SOURCE_DEFAULTS: dict[str, Any] = {"state": SourceState.STORED.value, "file_name": ""}
_ANSWER_DEFAULTS: dict[str, Any] = {"found": True, "reasons": "{}", "changed": False, "thread": "", "kept_ns": 0}
_STATE_DEFAULTS: dict[str, Any] = {"revision": 0, "forgotten": 0, "replaced": "{}", "previous": "null"}


def _count(says: str) -> Any:
    """A count of :class:`Migrated`, and what it counts (for the log)."""
    return field(default=0, metadata={"says": says})


@dataclass(slots=True)
class Migrated:
    """What the migration of one channel changed, counted."""

    short_logs: int = _count("collections given the short write log")
    texts: int = _count("texts copied from documents into metadata")
    sources: int = _count("sources given a state or file name")
    answers: int = _count("answers given the fields added since")
    states: int = _count("served states completed")
    trees_moved: int = _count("trees moved into the pool's two slots")
    collections_dropped: int = _count("tree collections of their own dropped")
    records_dropped: int = _count("records of a third pool slot deleted")

    def summary(self) -> str:
        """The counts that are not zero, in words ("nothing was older" if none is)."""
        counts = [f"{f.metadata['says']}: {getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name)]
        return ", ".join(counts) or "nothing was older"


def open_channel(client: Any, key: ChannelKey, digest: str, listed: list[str] | None = None) -> None:
    """Lists the channel in the registry, its records brought first to the current format if the
    registry does not say they are in it (see the module docstring). ``listed``: every
    collection's name, when the caller listed them already. Raises ``StoreError``.

    A channel the registry does not list is new, and only looked up by name: every version
    listed a channel before writing to it, and a drop unlists it last. What an older version's
    writer in another process may have written into it after a drop holds sources, a state or
    a tree (or answers): if any of those exists, the channel is migrated as a listed one."""
    if _registered_format(client, digest) == STORE_FORMAT:
        return
    with _MIGRATING:
        registered = _registered_format(client, digest)  # again: another thread may have done it
        if registered == STORE_FORMAT:
            return
        collections = ChannelCollections(client, key, digest)
        with translated("bringing the channel's records to the current format"):
            if registered is not None or any(collections.exists(suffix) for suffix in _FIRST_WRITTEN):
                migrate_channel(collections, listed)
            record_format(open_registry(client), key, digest)


def migrate_listed(client: Any) -> None:
    """Brings every channel the registry lists, but does not record in the current format, to it,
    and gives the registry itself the short write log: what opening a store does first. The
    collections are listed once for all those channels. A channel that fails is logged and
    left; opening it later tries again (and raises then)."""
    with translated("reading the registry of channels"):
        listed = [str(getattr(c, "name", c)) for c in client.list_collections()]
        if REGISTRY_COLLECTION not in listed:
            return  # a new store: nothing written before
        registry = open_registry(client)
        _shorten_log(registry)
        got = registry.get(include=["metadatas"])
    for digest, metadata in zip(got["ids"], got["metadatas"] or []):
        if metadata.get(FORMAT_KEY) == STORE_FORMAT:
            continue
        key = ChannelKey(str(metadata["platform"]), str(metadata["workspace"]), str(metadata["channel"]))
        try:
            open_channel(client, key, digest, listed)
        except StoreError as exc:
            log.warning("channel %s: its records could not be brought to the current format (opening "
                        "it tries again): %s", key, exc)


def migrate_channel(collections: ChannelCollections, listed: list[str] | None = None) -> Migrated:
    """Rewrites whatever earlier versions wrote in the channel's collections to the current
    format (see the module docstring); what it changed. Changes nothing already current.
    ``listed``: every collection's name, if listed already (else they are listed here)."""
    done = Migrated()
    names = collections.own_names(listed)
    if not names:
        return done  # a new channel
    client, prefix = collections.client, collections.prefix
    own_trees = {name: int(match["version"]) for name in names
                 if (match := _TREE_NAME.match(name)) and match["digest"] == collections.digest}
    for name in names:
        if name not in own_trees:
            done.short_logs += _shorten_log(client.get_collection(name, embedding_function=None))
    for name in names:
        kind = name.removeprefix(f"{prefix}-")
        if kind in ("src", "answers", "tree") or kind.startswith(("leaf-", "sum-")):
            done.texts += _copy_texts(client.get_collection(name, embedding_function=None))
    if f"{prefix}-src" in names:
        done.sources = _complete(collections.open("src"), _SOURCE_DEFAULTS, {"segment": 0})
    if f"{prefix}-answers" in names:
        done.answers = _complete(collections.open("answers"), _ANSWER_DEFAULTS)
    _migrate_trees(collections, names, own_trees, done)
    log.info("channel %s: records brought to store format %d: %s", collections.key, STORE_FORMAT, done.summary())
    return done


def _registered_format(client: Any, digest: str) -> int | None:
    """The format the channel's registry entry records; 1 for an entry written before formats
    were recorded, None for a channel not listed."""
    with translated("registering the channel"):
        got = open_registry(client).get(ids=[digest], include=["metadatas"])
    if not got["ids"]:
        return None
    return int((got["metadatas"][0] or {}).get(FORMAT_KEY, 1))


def _shorten_log(collection: Any) -> int:
    """Gives ``collection`` the short write log if it has another; 1 if it did, else 0."""
    # configuration_json: the parsed `configuration` warns about our embedding_function=None.
    hnsw = (getattr(collection, "configuration_json", None) or {}).get("hnsw") or {}
    if not hnsw or hnsw.get("sync_threshold") == SHORT_LOG["sync_threshold"]:
        return 0
    collection.modify(configuration={"hnsw": dict(SHORT_LOG)})
    return 1


def _pages(collection: Any, include: list[str], where: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """The records (matching ``where``), ``_PAGE`` at a time. Paged by id, not by offset, so
    that rewriting a page never moves the next."""
    ids = collection.get(where=where, include=[])["ids"]
    for start in range(0, len(ids), _PAGE):
        yield collection.get(ids=ids[start : start + _PAGE], include=include)


def _copy_texts(collection: Any) -> int:
    """Copies each record's document into its metadata where the text is not there yet; how many."""
    copied = 0
    for got in _pages(collection, ["documents", "metadatas"]):
        ids, updates = [], []
        for record_id, document, metadata in zip(got["ids"], got["documents"], got["metadatas"]):
            metadata = metadata or {}
            freed = str(metadata.get("tree", "")).startswith("free")  # a freed tree record: no text is its text
            if document is not None and TEXT_KEY not in metadata and not freed:
                ids.append(record_id)
                updates.append({TEXT_KEY: document})
        if ids:
            collection.update(ids=ids, metadatas=updates)
            copied += len(ids)
    return copied


def _complete(collection: Any, defaults: dict[str, Any], where: dict[str, Any] | None = None) -> int:
    """Gives each record (matching ``where``) the fields of ``defaults`` it lacks; how many lacked any."""
    completed = 0
    for got in _pages(collection, ["metadatas"], where):
        ids, updates = [], []
        for record_id, metadata in zip(got["ids"], got["metadatas"]):
            missing = {name: value for name, value in defaults.items() if name not in (metadata or {})}
            if missing:
                ids.append(record_id)
                updates.append(missing)
        if ids:
            collection.update(ids=ids, metadatas=updates)
            completed += len(ids)
    return completed


def _migrate_trees(collections: ChannelCollections, names: list[str], own_trees: dict[str, int],
                   done: Migrated) -> None:
    """Completes the served state and moves the served tree into the pool's two slots; drops
    the trees' collections of their own and the third slot's records."""
    pool = TreePool(collections)
    with pool.write_lock(), pool.state_lock():
        if f"{collections.prefix}-meta" in names:
            _migrate_state(collections, pool, sorted(own_trees.values()), done)
        for name in own_trees:
            collections.client.delete_collection(name)
            done.collections_dropped += 1
        if f"{collections.prefix}-tree" in names:
            pooled = pool.collection()
            beyond = pooled.get(where={"slot": {"$gte": TREE_SLOTS}}, include=[])["ids"]
            for start, end in collections.batches(len(beyond)):
                pooled.delete(ids=beyond[start:end])
            done.records_dropped = len(beyond)


def _migrate_state(collections: ChannelCollections, pool: TreePool, own_versions: list[int], done: Migrated) -> None:
    """Completes the ``state`` record, and moves the tree it serves where the current format keeps it."""
    meta_collection = collections.open("meta")
    got = meta_collection.get(ids=["state"], include=["metadatas"])
    if not got["ids"]:
        return  # no tree was ever served
    meta = dict(got["metadatas"][0] or {})
    complete = {**_STATE_DEFAULTS, **meta}
    version = int(meta["version"])
    if "slot" not in meta:
        # Served from a collection of its own (no previous tree then). If that collection is gone,
        # the newest one left is moved in beside it, and reading the state heals to it.
        complete.update(slot=0, tag=f"{version}.legacy")
        moving = version if version in own_versions else max(own_versions, default=None)
        if moving is not None:
            nodes, embeddings = _own_collection_tree(collections, moving)
            _move_in(collections, pool, TreePlace(moving, 0, f"{moving}.legacy"), nodes, embeddings)
            done.trees_moved += 1
    else:
        previous = place_from_json(complete["previous"])
        if previous is not None and not 0 <= previous.slot < TREE_SLOTS:
            complete["previous"], previous = "null", None  # kept in a third slot or a collection of its own
        if int(complete["slot"]) >= TREE_SLOTS:
            slot = min(s for s in range(TREE_SLOTS) if previous is None or s != previous.slot)
            tag = str(complete["tag"])
            nodes, embeddings = _pooled_tree(pool, tag)
            _move_in(collections, pool, TreePlace(version, slot, tag), nodes, embeddings)
            complete["slot"] = slot
            done.trees_moved += 1
    if complete != meta:
        state = state_from(complete)
        meta_collection.upsert(ids=["state"], metadatas=[state_metadata(state, place_from_json(complete["previous"]))],
                               embeddings=[PLACEHOLDER_VECTOR])
        done.states = 1


def _own_collection_tree(collections: ChannelCollections, version: int) -> tuple[list[Node], np.ndarray]:
    """The nodes and embeddings of a tree kept in a collection of its own (texts as documents),
    in one order whichever process reads them: by layer, then id."""
    collection = collections.client.get_collection(f"{collections.prefix}-t{version}", embedding_function=None)
    got = collection.get(include=["documents", "metadatas", "embeddings"])
    records = sorted(zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"]),
                     key=lambda r: (int(r[2]["layer"]), r[0]))
    nodes = [node_from(i, {TEXT_KEY: d or "", **m}) for i, d, m, _ in records]
    return nodes, np.asarray([v for *_, v in records], dtype=np.float32)


def _pooled_tree(pool: TreePool, tag: str) -> tuple[list[Node], np.ndarray]:
    """The nodes and embeddings of the pool's tree ``tag``, in its records' order."""
    got = pool.collection().get(where={"tree": tag}, include=["metadatas", "embeddings"])
    records = sorted(zip(got["metadatas"], got["embeddings"]), key=lambda r: int(r[0]["k"]))
    nodes = [node_from(str(m["node"]), m) for m, _ in records]
    return nodes, np.asarray([v for _, v in records], dtype=np.float32)


def _move_in(collections: ChannelCollections, pool: TreePool, place: TreePlace, nodes: list[Node],
             embeddings: np.ndarray) -> None:
    """Writes a tree into the pool at ``place``, over what the slot held."""
    for start, end in collections.batches(len(nodes)):
        pool.put(place, nodes, embeddings, start, end)
    pool.free_beyond(place.slot, len(nodes))
