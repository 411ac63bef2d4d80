"""The Chroma store's invariants, against embedded Chroma and a real `chroma run` server."""

from __future__ import annotations

import numpy as np
import pytest

from raptor_engine.errors import StoreUnavailable
from raptor_engine.store import (
    SEGMENT_CHARS,
    ChromaStore,
    SourceState,
    TreeState,
    channel_digest,
)
from raptor_engine.types import AnswerRecord, ChannelKey, Chunk, Node, Source, SourceKind
from tests.conftest import free_port


def _source(source_id: str, text: str) -> Source:
    return Source(source_id, "Title", SourceKind.FILE, "https://example.test/f", "alice", "2026-01-01T00:00:00+00:00", len(text))


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _tree(source_id: str) -> tuple[list[Node], np.ndarray]:
    leaves = [Node(f"{source_id[:12]}.{i}", 0, f"leaf {i}", 3, parents=("s1.x",), source_ids=(source_id,), ordinal=i) for i in range(3)]
    root = Node("s1.x", 1, "summary", 2, children=tuple(n.id for n in leaves), source_ids=(source_id,))
    return [*leaves, root], _vectors(4)


def test_collection_names_are_valid_and_distinct() -> None:
    a = channel_digest(ChannelKey("slack", "T1", "C1"))
    b = channel_digest(ChannelKey("slack", "T1C", "1"))  # same characters, other split
    assert a != b and len(a) == 24 and a.isalnum()


def test_long_source_text_round_trips_in_segments(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    text = "é" + "x" * (SEGMENT_CHARS * 2 + 17)
    store.put_source(_source("a" * 64, text), text)
    assert store.source_text("a" * 64) == text
    assert [s.id for s in store.list_sources()] == ["a" * 64]
    store.delete_source("a" * 64)
    assert store.list_sources() == [] and store.get_source("a" * 64) is None


def test_channels_never_see_each_other(any_store: ChromaStore, channel: ChannelKey) -> None:
    other = ChannelKey(channel.platform, channel.workspace, channel.channel + "-other")
    mine, theirs = any_store.channel(channel), any_store.channel(other)
    nodes, vectors = _tree("b" * 64)
    mine.write_tree(1, nodes, vectors)
    mine.switch_to(TreeState(1, "now", "m", ("b" * 64,), {0: 3, 1: 1}))
    assert len(mine.query_tree(1, vectors[0], 10)) == 4
    assert theirs.live_state() is None
    theirs_nodes, theirs_vectors = _tree("c" * 64)
    theirs.write_tree(1, theirs_nodes, theirs_vectors)
    theirs.switch_to(TreeState(1, "now", "m", ("c" * 64,), {0: 3, 1: 1}))
    assert {h.node.source_ids[0] for h in theirs.query_tree(1, vectors[0], 10)} == {"c" * 64}
    assert {h.node.source_ids[0] for h in mine.query_tree(1, vectors[0], 10)} == {"b" * 64}
    assert channel in any_store.channels() and other in any_store.channels()


def test_switch_keeps_previous_version_and_drops_older(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    nodes, vectors = _tree("d" * 64)
    for version in (1, 2, 3):
        assert store.next_version() == version
        store.write_tree(version, nodes, vectors)
        store.switch_to(TreeState(version, "now", "m", ("d" * 64,), {0: 3, 1: 1}))
    assert store.live_state().version == 3
    assert store.get_nodes(2, ["s1.x"])  # the previous one stays for readers in flight
    store.write_tree(4, nodes, vectors)  # a build that crashed before switching
    store.drop_stale_trees()
    assert store.live_state().version == 3 and store.next_version() == 4


def test_leaf_cache_round_trip(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    chunks = [Chunk("e" * 64, i, f"text {i}.", i * 10, i * 10 + 7, 3) for i in range(5)]
    store.put_leaves("prof", chunks, _vectors(5))
    cached = store.cached_leaves("prof", ["e" * 64, "f" * 64])
    assert list(cached) == ["e" * 64]
    got_chunks, got_vectors = cached["e" * 64]
    assert got_chunks == chunks and got_vectors.shape == (5, 8)


def test_removing_a_source_cleans_links(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    keep = [Node("k.0", 0, "kept leaf", 2, parents=("s1.mixed",), source_ids=("k" * 64,))]
    gone = [Node("g.0", 0, "gone leaf", 2, parents=("s1.mixed",), source_ids=("g" * 64,))]
    mixed = Node("s1.mixed", 1, "mixed summary", 3, children=("k.0", "g.0"), source_ids=("k" * 64, "g" * 64))
    store.write_tree(1, [*keep, *gone, mixed], _vectors(3))
    store.switch_to(TreeState(1, "now", "m", ("k" * 64, "g" * 64), {0: 2, 1: 1}))
    assert store.remove_source_from_trees("g" * 64) == 2  # its leaf and the summary covering it
    remaining = store.get_nodes(1, ["k.0", "g.0", "s1.mixed"])
    assert [n.id for n in remaining] == ["k.0"] and remaining[0].parents == ()


def test_only_stored_sources_are_listed_and_forgetting_is_seen(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    done, half, going = "h" * 64, "i" * 64, "j" * 64
    store.put_source(_source(done, "done"), "done")
    store.put_source(_source(half, "half"), "half", SourceState.STORING)
    store.put_source(_source(going, "going"), "going")
    store.set_source_state(going, SourceState.FORGETTING)
    assert [s.id for s in store.list_sources()] == [done]
    assert store.get_source(half) is None and store.source_record(half)[1] is SourceState.STORING
    assert store.sources_in_state(SourceState.FORGETTING) == [going]
    assert store.forgotten_among([done, half, going, "k" * 64]) == {going, "k" * 64}  # half is not forgotten
    store.set_source_state(half, SourceState.STORED)
    store.set_source_state("k" * 64, SourceState.STORED)  # no record: nothing happens
    assert {s.id for s in store.list_sources()} == {done, half} and store.source_record("k" * 64) is None


def test_removing_a_source_takes_its_id_out_of_the_served_state(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    nodes, vectors = _tree("m" * 64)
    store.write_tree(1, nodes, vectors)
    store.switch_to(TreeState(1, "now", "m", ("m" * 64, "n" * 64), {0: 3, 1: 1}))
    assert store.remove_source_from_trees("m" * 64) == 4
    state = store.live_state()
    assert state.source_ids == ("n" * 64,) and state.forgotten == 1 and state.nodes_per_layer == {}
    assert store.remove_source_from_trees("m" * 64) == 0 and store.live_state().forgotten == 1


def test_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match="cannot reach the Chroma server"):
        ChromaStore.remote("127.0.0.1", free_port())


def test_a_server_going_away_is_a_clear_error(tmp_path, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import start_chroma_server

    process, port = start_chroma_server(tmp_path / "db", tmp_path / "server.log")
    try:
        store = ChromaStore.remote("127.0.0.1", port).channel(channel)
        assert store.list_sources() == []
    finally:
        process.terminate()
        process.wait(timeout=15)
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        store.list_sources()


def test_notes_are_kept_per_channel_and_removable(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    other = any_store.channel(ChannelKey(channel.platform, channel.workspace, channel.channel + "-other"))
    assert store.notes() == {}
    store.set_note("rebuild", "alice")
    store.set_note("weird: name", "x y")
    assert any_store.channel(channel).notes() == {"rebuild": "alice", "weird: name": "x y"}
    assert other.notes() == {}
    store.set_note("rebuild", None)
    assert store.notes() == {"weird: name": "x y"}
    assert store.live_state() is None  # notes are not a tree state


def test_every_collection_keeps_a_short_write_log(any_store: ChromaStore, channel: ChannelKey) -> None:
    """Chroma keeps each record's vector and text in its log until the collection's index is
    saved, every sync_threshold records: the store's collections use a short threshold, and
    one an older version made with Chroma's default (1,000) is changed to it when opened."""
    client = any_store._client
    digest = channel_digest(channel)
    old = client.get_or_create_collection(f"rc-{digest}-answers", embedding_function=None)
    assert old.configuration_json["hnsw"]["sync_threshold"] == 1000
    store = any_store.channel(channel)
    store.put_source(_source("a" * 64, "text"), "text")
    store.put_leaves("p1", [Chunk("a" * 64, 0, "text", 0, 4, 1)], _vectors(1))
    nodes, vectors = _tree("a" * 64)
    store.write_tree(1, nodes, vectors)
    store.list_answers()
    thresholds = {c.name: client.get_collection(c.name).configuration_json["hnsw"]["sync_threshold"]
                  for c in client.list_collections() if c.name.startswith(f"rc-{digest}")}
    assert set(thresholds) >= {f"rc-{digest}-{s}" for s in ("src", "leaf-p1", "tree", "answers")}
    assert set(thresholds.values()) == {50}


def test_only_the_newest_answers_are_kept(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    for i in range(25):
        store.put_answer(AnswerRecord(f"a{i:02d}", "q?", "text", "alice", f"2026-01-01T00:00:{i:02d}+00:00"))
        store.prune_answers(10)
    kept = [a.answer_id for a in store.list_answers()]
    # Pruned in steps (at 21 answers, down to 10), never below the newest 10.
    assert kept == [f"a{i:02d}" for i in range(11, 25)]
    assert store.prune_answers(10) == 0
    assert store.prune_answers(3) == 11 and [a.answer_id for a in store.list_answers()] == ["a22", "a23", "a24"]


def test_texts_are_kept_in_metadata_not_as_documents(any_store: ChromaStore, channel: ChannelKey) -> None:
    """No record gets a Chroma document: Chroma would index it for full-text search, which
    nothing here uses, at several times its size (see ``TEXT_KEY``)."""
    store = any_store.channel(channel)
    text = "the whole text"
    store.put_source(_source("e" * 64, text), text)
    store.put_leaves("p", [Chunk("e" * 64, 0, text, 0, len(text), 3)], _vectors(1))
    store.put_summaries("p", [("k", "a summary", ["e" * 64])], _vectors(1, 1))
    store.put_answer(AnswerRecord("a1", "q", "an answer", "alice", "2026-01-01T00:00:00+00:00", ("e" * 64,)))
    nodes, vectors = _tree("e" * 64)
    store.write_tree(1, nodes, vectors)
    names = [str(getattr(c, "name", c)) for c in any_store._client.list_collections()]
    mine = [name for name in names if name.startswith(store._collections.prefix)]  # a server holds other tests' too
    assert len(mine) >= 5
    for name in mine:
        assert not any(any_store._client.get_collection(name).get(include=["documents"])["documents"] or []), name
    assert store.source_text("e" * 64) == text and store.get_answer("a1").text == "an answer"  # type: ignore[union-attr]


def test_forgetting_a_source_clears_every_cache_profile_after_one_listing(
    any_store: ChromaStore, channel: ChannelKey
) -> None:
    """The caches' profiles are found by name among every collection of the database, a listing
    that grows with the channels (about a second at 3,000 collections on a server): one serves
    both caches, and every profile of each loses the source, the other source kept."""
    from tests.raptor_engine.test_migrations import CountedListings

    counted = CountedListings(any_store._client)
    store = ChromaStore(counted).channel(channel)
    gone, kept = "f" * 64, "g" * 64
    for source_id in (gone, kept):
        store.put_source(_source(source_id, "text"), "text")
        for profile in ("p1", "p2"):
            store.put_leaves(profile, [Chunk(source_id, 0, "text", 0, 4, 1)], _vectors(1))
            store.put_summaries(profile, [(f"{source_id[:4]}{profile}", "a summary", (source_id,))], _vectors(1))
    counted.listings = 0

    store.delete_source(gone)

    assert counted.listings == 1
    for profile in ("p1", "p2"):
        assert set(store.cached_leaves(profile, [gone, kept])) == {kept}
        assert set(store.cached_summaries(profile, [f"{gone[:4]}{profile}", f"{kept[:4]}{profile}"])) == {
            f"{kept[:4]}{profile}"}
    assert store.get_source(gone) is None and store.get_source(kept) is not None
