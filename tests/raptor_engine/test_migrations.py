"""Stores written by earlier versions: each older shape of record, written here with Chroma as
that version wrote it, reads correctly once the channel (or the store) is opened; the migration
says what it did, once, and never runs twice. Against embedded Chroma and a `chroma run` server."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pytest

from raptor_engine.store import REGISTRY_COLLECTION, TEXT_KEY, ChromaStore, SourceState, TreeState, channel_digest
from raptor_engine.store.migrations import migrate_listed
from raptor_engine.store.tree_format import TreePlace, node_metadata, pool_metadata
from raptor_engine.types import AnswerRecord, ChannelKey, Node, SourceKind

DIM = 8
STORE_LOG = "raptor_engine.store"


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _tree(source_id: str, leaves: int = 3, seed: int = 0) -> tuple[list[Node], np.ndarray]:
    nodes = [Node(f"{source_id[:12]}.{i}", 0, f"leaf {i} of {seed}", 3, parents=("s1.root",), source_ids=(source_id,),
                  ordinal=i) for i in range(leaves)]
    nodes.append(Node("s1.root", 1, f"summary {seed}", 2, children=tuple(n.id for n in nodes), source_ids=(source_id,)))
    return nodes, _vectors(len(nodes), seed)


class OldVersion:
    """Writes a channel's records as earlier versions did: straight into Chroma, with Chroma's
    default write log, texts as documents, and a registry entry that records no format."""

    def __init__(self, store: ChromaStore, key: ChannelKey, listed: bool = True) -> None:
        """``listed``: the channel in the registry, as every version listed it before writing
        (not: an older writer in another process wrote into it after it was dropped)."""
        self.client = store._client  # the database itself: an older version of this code wrote it
        self.key = key
        self.prefix = f"rc-{channel_digest(key)}"
        if not listed:
            return
        registry = self.client.get_or_create_collection(REGISTRY_COLLECTION, embedding_function=None)
        registry.upsert(ids=[channel_digest(key)], embeddings=[[1.0]],
                        metadatas=[{"platform": key.platform, "workspace": key.workspace, "channel": key.channel}])

    def collection(self, suffix: str, cosine: bool = False) -> Any:
        """The channel's collection ``suffix``, as an older version created it if it is new."""
        if f"{self.prefix}-{suffix}" in self.names():
            return self.client.get_collection(f"{self.prefix}-{suffix}", embedding_function=None)
        configuration = {"hnsw": {"space": "cosine"}} if cosine else None
        return self.client.get_or_create_collection(f"{self.prefix}-{suffix}", embedding_function=None,
                                                    configuration=configuration)

    def source(self, source_id: str, text: str, title: str = "old notes") -> None:
        """A source before states and file names (its text as the document)."""
        self.collection("src").upsert(ids=[f"{source_id}#0"], documents=[text], embeddings=[[1.0]], metadatas=[{
            "source_id": source_id, "segment": 0, "segments": 1, "title": title, "kind": "file", "link": "",
            "added_by": "alice", "added_at": "2025-01-01T00:00:00+00:00", "chars": len(text), "external_id": "x1"}])

    def leaf(self, profile: str, source_id: str, text: str, vector: np.ndarray) -> None:
        self.collection(f"leaf-{profile}", cosine=True).upsert(
            ids=[f"{source_id}:0"], documents=[text], embeddings=[vector],
            metadatas=[{"source_id": source_id, "ordinal": 0, "start": 0, "end": len(text), "tokens": 3}])

    def summary(self, profile: str, key: str, text: str, source_id: str, vector: np.ndarray) -> None:
        self.collection(f"sum-{profile}").upsert(ids=[key], documents=[text], embeddings=[vector],
                                                 metadatas=[{"sources": [source_id]}])

    def answer(self, answer_id: str, text: str, source_id: str) -> None:
        """An answer as first kept: no found, reasons, changed, thread or kept_ns."""
        self.collection("answers").upsert(ids=[answer_id], documents=[text], embeddings=[[1.0]], metadatas=[{
            "question": "q?", "asked_by": "alice", "answered_at": "2025-01-01T00:00:00+00:00",
            "votes": json.dumps({"bob": 1}), "sources": [source_id]}])

    def tree_of_its_own(self, version: int, nodes: list[Node], vectors: np.ndarray) -> None:
        """A tree in a collection of its own, as before the tree pool."""
        self.collection(f"t{version}", cosine=True).add(
            ids=[n.id for n in nodes], documents=[n.text for n in nodes],
            metadatas=[node_metadata(n) for n in nodes], embeddings=vectors)

    def pooled_tree(self, version: int, slot: int, nodes: list[Node], vectors: np.ndarray) -> str:
        """A tree in the pool, as before texts moved into metadata; its tag."""
        place = TreePlace(version, slot, f"{version}.old")
        metadatas = [pool_metadata(n, place, k, len(nodes)) for k, n in enumerate(nodes)]
        self.collection("tree", cosine=True).upsert(
            ids=[f"{slot}:{k}" for k in range(len(nodes))], documents=[n.text for n in nodes],
            metadatas=[{k: v for k, v in m.items() if k != TEXT_KEY and v is not None} for m in metadatas],
            embeddings=vectors)
        return place.tag

    def state(self, version: int, nodes: list[Node], source_id: str, **fields: Any) -> None:
        """The served state as first written (version, build, layers, sources), with ``fields``."""
        layers = {str(layer): sum(1 for n in nodes if n.layer == layer) for layer in {n.layer for n in nodes}}
        self.collection("meta").upsert(ids=["state"], embeddings=[[1.0]], metadatas=[{
            "version": version, "built_at": "then", "embedder": "m", "layers": json.dumps(layers),
            "sources": [source_id], **fields}])

    def names(self) -> list[str]:
        return sorted(c.name for c in self.client.list_collections() if c.name.startswith(self.prefix))


def _reopened(store: ChromaStore, request: pytest.FixtureRequest) -> ChromaStore:
    """The same database opened again, as a process starting does."""
    if store._path is not None:
        return ChromaStore.embedded(store._path)
    host, port = request.getfixturevalue("chroma_server")
    return ChromaStore.remote(host, port)


def _migration_logs(caplog: pytest.LogCaptureFixture, key: ChannelKey) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == STORE_LOG and "store format" in r.getMessage() and str(key) in r.getMessage()]


def test_texts_kept_as_documents_are_read_after_opening(any_store: ChromaStore, channel: ChannelKey) -> None:
    """Older stores kept every text as a Chroma document; texts are now kept in metadata
    (``TEXT_KEY``). Opening the channel copies them there, in every collection holding texts."""
    old = OldVersion(any_store, channel)
    sid = "d" * 64
    vectors = _vectors(2)
    old.source(sid, "an older source")
    old.leaf("p", sid, "an older leaf", vectors[0])
    old.summary("p", "k", "an older summary", sid, vectors[1])
    old.answer("a1", "an older answer", sid)
    nodes, tree_vectors = _tree(sid)
    old.pooled_tree(1, 0, nodes, tree_vectors)
    old.state(1, nodes, sid, revision=0, forgotten=0, slot=0, tag="1.old", previous=json.dumps(None))

    store = any_store.channel(channel)

    assert store.source_text(sid) == "an older source"
    assert [c.text for c in store.cached_leaves("p", [sid])[sid][0]] == ["an older leaf"]
    assert store.cached_summaries("p", ["k"])["k"][0] == "an older summary"
    assert store.get_answer("a1").text == "an older answer"  # type: ignore[union-attr]
    assert [n.text for n in store.get_nodes(1, ["s1.root"])] == ["summary 0"]
    assert sorted(store.node_texts(1)[1]) == ["leaf 0 of 0", "leaf 1 of 0", "leaf 2 of 0", "summary 0"]
    assert store.query_tree(1, tree_vectors[0], 1)[0].node.text == "leaf 0 of 0"
    for suffix in ("src", "leaf-p", "sum-p", "answers", "tree"):
        assert all(TEXT_KEY in m for m in old.collection(suffix).get(include=["metadatas"])["metadatas"]), suffix


def test_sources_answers_and_states_written_before_their_fields_read_as_they_meant(
    any_store: ChromaStore, channel: ChannelKey
) -> None:
    old = OldVersion(any_store, channel)
    sid = "e" * 64
    old.source(sid, "notes from before source states", title="kept title")
    old.answer("a1", "an answer", sid)
    nodes, vectors = _tree(sid)
    old.pooled_tree(4, 1, nodes, vectors)
    old.state(4, nodes, sid, slot=1, tag="4.old", previous=json.dumps(None))  # no revision, forgotten, replaced

    store = any_store.channel(channel)

    source, state = store.source_record(sid)  # type: ignore[misc]
    assert state is SourceState.STORED and source.title == "kept title" and source.file_name == ""
    assert source.kind is SourceKind.FILE and source.external_id == "x1"
    assert [s.id for s in store.list_sources()] == [sid] and [s.id for s in store.list_sources("x1")] == [sid]
    assert store.get_answer("a1") == AnswerRecord("a1", "q?", "an answer", "alice", "2025-01-01T00:00:00+00:00",
                                                  (sid,), {"bob": 1}, found=True, reasons={}, changed=False, thread="")
    store.put_answer(AnswerRecord("a2", "q?", "newer", "bob", "2025-01-01T00:00:00+00:00"))
    assert store.prune_answers(0) == 0  # counted, not yet worth pruning; the old one orders first
    assert [a.answer_id for a in store.list_answers()] == ["a1", "a2"]
    assert store.live_state() == TreeState(4, "then", "m", (sid,), {0: 3, 1: 1}, revision=0, forgotten=0,
                                           slot=1, tag="4.old", replaced={})
    assert store.remove_source_from_trees(sid) == 4
    assert store.live_state().revision == 1 and store.live_state().forgotten == 1  # type: ignore[union-attr]


def test_a_tree_in_a_collection_of_its_own_moves_into_the_pool(any_store: ChromaStore, channel: ChannelKey) -> None:
    """Before the tree pool, each tree had a collection of its own and the state no slot or tag:
    the served tree moves into the pool, and every such collection goes (an unfinished newer
    build's, the previous one's)."""
    old = OldVersion(any_store, channel)
    sid = "i" * 64
    nodes, vectors = _tree(sid, 4, 1)
    old.tree_of_its_own(1, nodes, vectors)
    old.tree_of_its_own(2, *_tree(sid, 2, 2))  # a build that died before its switch
    old.state(1, nodes, sid)

    reader = any_store.channel(channel)

    assert {f"{old.prefix}-t1", f"{old.prefix}-t2"}.isdisjoint(old.names())
    state = reader.live_state()
    assert state is not None and state.version == 1 and state.slot == 0 and state.nodes_per_layer == {0: 4, 1: 1}
    assert reader.query_tree(1, vectors[0], 1)[0].node.text == nodes[0].text
    assert [n.id for n in reader.get_nodes(1, ["s1.root"])] == ["s1.root"]
    assert reader.get_tree_embeddings(1, ["s1.root"])["s1.root"] == pytest.approx(vectors[-1])
    assert reader.next_version() == 2
    new_nodes, new_vectors = _tree(sid, 5, 3)
    reader.write_tree(2, new_nodes, new_vectors)
    assert reader.switch_to(TreeState(2, "now", "m", (sid,), {0: 5, 1: 1}))
    assert reader.get_nodes(1, ["s1.root"])  # kept as the previous tree for readers in flight
    assert reader.query_tree(2, new_vectors[0], 1)[0].node.text == new_nodes[0].text


def test_a_served_tree_whose_collection_is_gone_heals_to_the_newest_left(
    any_store: ChromaStore, channel: ChannelKey, caplog: pytest.LogCaptureFixture
) -> None:
    """What issue 13 saw in stores before the pool: the state names a tree whose collection is
    gone; the newest tree left is moved into the pool, and reading the state serves it."""
    old = OldVersion(any_store, channel)
    sid = "h" * 64
    nodes, vectors = _tree(sid, 6, 2)
    old.tree_of_its_own(2, nodes, vectors)
    old.state(3, _tree(sid, 8, 3)[0], sid)
    caplog.set_level(logging.WARNING, logger=STORE_LOG)

    store = any_store.channel(channel)

    state = store.live_state()
    assert state is not None and state.version == 2 and state.nodes_per_layer == {0: 6, 1: 1}
    assert "v3 is missing; serving v2" in caplog.text
    assert store.query_tree(2, vectors[0], 1)[0].node.text == nodes[0].text


def test_a_served_tree_in_a_third_slot_moves_into_the_two(
    any_store: ChromaStore, channel: ChannelKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores written when a channel kept three trees (served, previous, one being built): the
    served tree moves into a slot of the two beside the previous one, and the third slot's
    records go."""
    old = OldVersion(any_store, channel)
    sid = "a" * 64
    previous_nodes, previous_vectors = _tree(sid, 20, 1)
    old.pooled_tree(1, 1, previous_nodes, previous_vectors)
    nodes, vectors = _tree(sid, 12, 2)
    tag = old.pooled_tree(2, 2, nodes, vectors)
    old.pooled_tree(0, 0, *_tree(sid, 30, 0))  # the oldest tree, neither served nor previous
    previous = json.dumps({"version": 1, "slot": 1, "tag": "1.old"})
    old.state(2, nodes, sid, revision=0, forgotten=0, replaced="{}", slot=2, tag=tag, previous=previous)

    store = any_store.channel(channel)

    slots = {m["slot"] for m in old.collection("tree").get(include=["metadatas"])["metadatas"]}
    assert slots == {0, 1}
    state = store.live_state()
    assert state is not None and (state.version, state.slot, state.tag) == (2, 0, tag)
    assert store.query_tree(2, vectors[5], 1)[0].node.text == nodes[5].text
    assert store.get_nodes(1, ["s1.root"])[0].text == "summary 1"  # the previous tree stays readable
    new_nodes, new_vectors = _tree(sid, 7, 3)
    store.write_tree(3, new_nodes, new_vectors)  # into slot 1, over the previous tree
    assert store.switch_to(TreeState(3, "now", "m", (sid,), {0: 7, 1: 1}))
    assert store.query_tree(3, new_vectors[0], 1)[0].node.text == new_nodes[0].text
    assert store.query_tree(2, vectors[5], 1)[0].node.text == nodes[5].text


def test_every_old_collection_gets_the_short_write_log(any_store: ChromaStore, channel: ChannelKey) -> None:
    old = OldVersion(any_store, channel)
    old.source("f" * 64, "text")
    old.answer("a1", "an answer", "f" * 64)
    assert {old.collection(s).configuration_json["hnsw"]["sync_threshold"] for s in ("src", "answers")} == {1000}
    any_store.channel(channel)
    assert {old.collection(s).configuration_json["hnsw"]["sync_threshold"] for s in ("src", "answers")} == {50}


def test_the_migration_runs_when_the_store_opens_logs_once_and_never_runs_again(
    any_store: ChromaStore, channel: ChannelKey, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    old = OldVersion(any_store, channel)
    sid = "g" * 64
    old.source(sid, "a source from before")
    old.answer("a1", "an answer", sid)
    caplog.set_level(logging.INFO, logger=STORE_LOG)

    reopened = _reopened(any_store, request)  # a process starting: every listed channel is migrated

    src = old.collection("src")
    assert src.get(ids=[f"{sid}#0"], include=["metadatas"])["metadatas"][0]["state"] == "stored"
    [said] = _migration_logs(caplog, channel)
    assert "texts copied from documents into metadata: 2" in said and "sources given a state or file name: 1" in said
    assert "answers given the fields added since: 1" in said and "collections given the short write log: 2" in said
    registry = any_store._client.get_collection(REGISTRY_COLLECTION, embedding_function=None)
    assert registry.get(ids=[channel_digest(channel)], include=["metadatas"])["metadatas"][0]["format"] == 2

    # Written in an older shape after the migration: a run would rewrite it, but none comes.
    src.update(ids=[f"{sid}#0"], metadatas=[{"state": None}])
    caplog.clear()
    assert [s.id for s in reopened.channel(channel).list_sources()] == []
    assert [s.id for s in _reopened(any_store, request).channel(channel).list_sources()] == []
    assert _migration_logs(caplog, channel) == []
    assert "state" not in src.get(ids=[f"{sid}#0"], include=["metadatas"])["metadatas"][0]


def test_a_new_channel_is_registered_in_the_current_format(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    store.set_note("n", "v")
    registry = any_store._client.get_collection(REGISTRY_COLLECTION, embedding_function=None)
    assert registry.get(ids=[channel_digest(channel)], include=["metadatas"])["metadatas"][0]["format"] == 2
    assert store.notes() == {"n": "v"}


class CountedListings:
    """A real Chroma client that counts how often every collection of the database is listed."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.listings = 0

    def list_collections(self, *args: Any, **kwargs: Any) -> Any:
        self.listings += 1
        return self.client.list_collections(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_opening_a_new_channel_looks_up_its_collections_by_name_and_lists_none(
    any_store: ChromaStore, channel: ChannelKey
) -> None:
    """Listing every collection grows with the channels (a second at 3,000 collections on a
    server): a new channel, unlisted, is told apart by name, and no listing is made."""
    counted = CountedListings(any_store._client)
    other = ChannelKey(channel.platform, channel.workspace, f"{channel.channel}-other")
    any_store.channel(other).put_answer(AnswerRecord("a0", "q?", "another channel's", "bob", "now"))

    store = ChromaStore(counted).channel(channel)
    store.set_note("n", "v")

    assert counted.listings == 0
    registry = any_store._client.get_collection(REGISTRY_COLLECTION, embedding_function=None)
    assert registry.get(ids=[channel_digest(channel)], include=["metadatas"])["metadatas"][0]["format"] == 2
    assert store.notes() == {"n": "v"} and store.get_answer("a0") is None


def test_an_unlisted_channel_an_older_writer_wrote_into_is_migrated(any_store: ChromaStore, channel: ChannelKey) -> None:
    """An older version's writer in another process, writing after the channel was dropped,
    re-created its collections without listing it: found by name, and migrated."""
    old = OldVersion(any_store, channel, listed=False)
    sid = "j" * 64
    old.source(sid, "written after the drop")
    old.leaf("p", sid, "its leaf", _vectors(1)[0])

    store = any_store.channel(channel)

    assert [(s.id, store.source_text(s.id)) for s in store.list_sources()] == [(sid, "written after the drop")]
    assert [c.text for c in store.cached_leaves("p", [sid])[sid][0]] == ["its leaf"]
    assert channel in any_store.channels()


def test_opening_a_store_lists_the_collections_once_for_every_older_channel(
    any_store: ChromaStore, channel: ChannelKey
) -> None:
    keys = [ChannelKey(channel.platform, channel.workspace, f"{channel.channel}-{n}") for n in range(3)]
    for n, key in enumerate(keys):
        OldVersion(any_store, key).source(f"{n}" * 64, f"source {n}")
    counted = CountedListings(any_store._client)

    migrate_listed(counted)

    assert counted.listings == 1
    for n, key in enumerate(keys):
        source, state = any_store.channel(key).source_record(f"{n}" * 64)  # type: ignore[misc]
        assert state is SourceState.STORED and source.file_name == ""
