"""Trees in the store over months: bounded storage, durability across a kill, a served tree
that never goes missing. Against embedded Chroma and a real `chroma run` server."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from raptor_engine.errors import StoreError
from raptor_engine.reclaim import FULL_TEXT_BLOAT, free_bytes, full_text_bytes, integrity
from raptor_engine.store import TEXT_KEY, TREE_SLOTS, ChannelStore, ChromaStore, TreeState
from raptor_engine.store.tree_format import state_metadata
from raptor_engine.types import ChannelKey, Node
from tests.conftest import REPO, start_chroma_server

DIM = 32


def _tree(source_id: str, leaves: int, seed: int) -> tuple[list[Node], np.ndarray]:
    """A two-layer tree: ``leaves`` leaves under one summary."""
    nodes = [Node(f"{source_id[:12]}.{i}", 0, f"leaf {i} of {seed}", 3, parents=("s1.root",),
                  source_ids=(source_id,), ordinal=i) for i in range(leaves)]
    nodes.append(Node("s1.root", 1, f"summary {seed}", 2, children=tuple(n.id for n in nodes), source_ids=(source_id,)))
    rows = np.random.default_rng(seed).normal(size=(len(nodes), DIM)).astype(np.float32)
    return nodes, rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _state(version: int, nodes: list[Node], source_id: str) -> TreeState:
    layers = {0: sum(1 for n in nodes if n.layer == 0), 1: sum(1 for n in nodes if n.layer == 1)}
    return TreeState(version, "now", "m", (source_id,), layers)


def _build(store: ChannelStore, source_id: str, leaves: int, seed: int) -> tuple[list[Node], np.ndarray]:
    version = store.next_version()
    nodes, vectors = _tree(source_id, leaves, seed)
    store.write_tree(version, nodes, vectors)
    assert store.switch_to(_state(version, nodes, source_id))
    return nodes, vectors


def _du(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def test_rebuilds_reuse_storage(any_store: ChromaStore, channel: ChannelKey, tmp_path: Path) -> None:
    store = any_store.channel(channel)
    collections = None
    for seed in range(40):
        _build(store, "a" * 64, 40 + seed % 7, seed)  # trees of changing size
        if seed == 3:
            collections = len(any_store._client.list_collections())
            first = _du(tmp_path / "chroma") if (tmp_path / "chroma").exists() else None
    assert len(any_store._client.list_collections()) == collections  # no collection per version
    records = store._tree_pool.collection().get(include=[])["ids"]
    assert len(records) <= TREE_SLOTS * 47
    if first is not None:  # embedded: the data directory stays the size it had after a few builds
        size, files = _du(tmp_path / "chroma")
        assert files == first[1] and size < 1.5 * first[0]
    state = store.live_state()
    nodes, vectors = _tree("a" * 64, 40 + 39 % 7, 39)
    assert state.version == 40
    assert store.query_tree(40, vectors[0], 1)[0].node.text == nodes[0].text


def test_forgetting_leaves_no_text_and_space_is_reused(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    for seed in range(3):
        _build(store, "b" * 64, 30, seed)
    assert store.remove_source_from_trees("b" * 64) == 31
    pool = store._tree_pool.collection().get(include=["documents", "metadatas"])
    assert not any(pool["documents"]) and all(m["tree"].startswith("free") and TEXT_KEY not in m for m in pool["metadatas"])
    assert not store._tree_pool.collection().get(where={"sources": {"$contains": "b" * 64}}, include=[])["ids"]
    assert store.live_state().nodes_per_layer == {}
    before = len(pool["ids"])
    _build(store, "c" * 64, 30, 7)
    assert len(store._tree_pool.collection().get(include=[])["ids"]) == before  # freed records are written over
    assert {h.node.source_ids[0] for h in store.query_tree(store.live_state().version, _tree("c", 1, 7)[1][0], 50)} == {"c" * 64}


def test_an_older_build_never_switches_back(any_store: ChromaStore, channel: ChannelKey) -> None:
    slow, fast = any_store.channel(channel), any_store.channel(channel)  # two builders, as two processes
    slow_version = slow.next_version()
    slow_nodes, slow_vectors = _tree("d" * 64, 20, 1)
    slow.write_tree(slow_version, slow_nodes, slow_vectors)
    fast_nodes, fast_vectors = _build(fast, "e" * 64, 25, 2)  # began later, finished first
    served = fast.live_state().version
    assert served > slow_version
    assert not slow.switch_to(_state(slow_version, slow_nodes, "d" * 64))
    reader = any_store.channel(channel)
    assert reader.live_state().version == served
    ids, _, _ = reader.node_texts(served)  # read whole: the nearest-neighbour query below is approximate
    assert sorted(ids) == sorted(node.id for node in fast_nodes)  # (a filtered HNSW search missed one once)
    hits = reader.query_tree(served, fast_vectors[0], 100)
    assert hits and {h.node.source_ids[0] for h in hits} == {"e" * 64}
    newer = slow.next_version()  # the slow builder's next build is newer again, and is served
    slow.write_tree(newer, slow_nodes, slow_vectors)
    assert slow.switch_to(_state(newer, slow_nodes, "d" * 64))
    assert {h.node.source_ids[0] for h in reader.query_tree(newer, slow_vectors[0], 100)} == {"d" * 64}


def test_two_builders_of_one_version_never_mix(any_store: ChromaStore, channel: ChannelKey) -> None:
    one, two = any_store.channel(channel), any_store.channel(channel)
    version = one.next_version()
    assert two.next_version() == version  # both looked before either wrote
    one_nodes, one_vectors = _tree("j" * 64, 30, 1)
    two_nodes, two_vectors = _tree("k" * 64, 20, 2)
    one.write_tree(version, one_nodes, one_vectors)
    two.write_tree(version, two_nodes, two_vectors)  # the same free slot, written over
    with pytest.raises(StoreError, match="incomplete"):  # what is left of one's tree is not served
        one.switch_to(_state(version, one_nodes, "j" * 64))
    assert two.switch_to(_state(version, two_nodes, "k" * 64))
    assert not one.switch_to(_state(version, one_nodes, "j" * 64))  # not newer than the served one
    reader = any_store.channel(channel)
    ids, _, _ = reader.node_texts(version)  # read whole: the nearest-neighbour query below is approximate
    assert sorted(ids) == sorted(node.id for node in two_nodes)
    hits = reader.query_tree(version, one_vectors[0], 100)
    assert hits and {h.node.source_ids[0] for h in hits} == {"k" * 64}


def test_a_build_never_writes_over_a_tree_served_meanwhile(any_store: ChromaStore, channel: ChannelKey) -> None:
    one, two = any_store.channel(channel), any_store.channel(channel)
    _build(one, "f" * 64, 5, 1)
    # Both builders chose the same free slot; the first to finish serves it, the other must not write on.
    slot = two._tree_builds._free_slot()
    two._tree_builds._free_slot = lambda: slot  # type: ignore[method-assign]  # as if chosen before one switched
    _build(one, "f" * 64, 5, 3)
    nodes, vectors = _tree("f" * 64, 5, 2)
    with pytest.raises(StoreError, match="another rebuild"):
        two.write_tree(two.next_version(), nodes, vectors)
    state = one.live_state()
    assert state.slot == slot and len(one.query_tree(state.version, vectors[0], 100)) == 6


class _SmallBatches:
    """A Chroma client whose writes go in batches of two records (the rest passes through)."""

    def __init__(self, client: object) -> None:
        self._client = client

    def get_max_batch_size(self) -> int:
        return 2

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)


def test_a_served_tree_written_over_by_a_racing_build_heals_at_once(
    any_store: ChromaStore, channel: ChannelKey, caplog: pytest.LogCaptureFixture
) -> None:
    """Two processes on one server: ``two`` looked at the slot before ``one`` served a tree
    there and wrote its first batch after. The served tree is then broken; the channel heals
    to the newest complete tree instead of serving a part of one."""
    one, two = any_store.channel(channel), any_store.channel(channel)
    first, first_vectors = _build(one, "n" * 64, 5, 1)
    slot = two._tree_builds._free_slot()
    two._tree_builds._free_slot = lambda: slot  # type: ignore[method-assign]  # chosen before one switched
    looks = iter([False])  # the first look found the slot free, as it was then; later ones are real
    real_claim = two._tree_builds._claim
    two._tree_builds._claim = lambda s: next(looks, True) and real_claim(s)  # type: ignore[method-assign]
    _build(one, "n" * 64, 5, 3)
    assert one.live_state().slot == slot and one.live_state().version == 2
    two._collections.client = _SmallBatches(two._collections.client)
    nodes, vectors = _tree("n" * 64, 5, 2)
    caplog.set_level(logging.WARNING, logger="raptor_engine.store")
    with pytest.raises(StoreError, match="another rebuild"):
        two.write_tree(2, nodes, vectors)  # its first two records land on the served tree
    assert "v2 is missing; serving v1" in caplog.text
    reader = any_store.channel(channel)
    state = reader.live_state()
    assert state.version == 1
    hits = reader.query_tree(state.version, first_vectors[0], 100)
    assert sorted(h.node.text for h in hits) == sorted(n.text for n in first)


def test_an_incomplete_tree_is_never_served(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    _build(store, "g" * 64, 5, 1)
    nodes, vectors = _tree("g" * 64, 8, 2)
    store.write_tree(2, nodes[:-3], vectors[:-3])  # stopped half-way
    with pytest.raises(StoreError, match="incomplete"):
        store.switch_to(_state(2, nodes, "g" * 64))
    assert store.live_state().version == 1


def test_a_forget_between_write_and_switch_does_not_stop_the_switch(any_store: ChromaStore, channel: ChannelKey) -> None:
    store = any_store.channel(channel)
    nodes, vectors = _tree("l" * 64, 5, 1)
    nodes.append(Node("mmmmmmmmmmmm.0", 0, "other leaf", 2, source_ids=("m" * 64,)))
    vectors = np.vstack([vectors, vectors[:1]])
    store.write_tree(1, nodes, vectors)
    store.remove_source_from_trees("m" * 64)  # a forget while the build finished
    assert store.switch_to(TreeState(1, "now", "m", ("l" * 64,), {0: 6, 1: 1}))
    assert store.live_state().nodes_per_layer == {0: 5, 1: 1}  # counts what is there
    assert len(store.query_tree(1, vectors[0], 100)) == 6


def test_a_missing_served_tree_heals_to_the_newest_complete(
    any_store: ChromaStore, channel: ChannelKey, caplog: pytest.LogCaptureFixture
) -> None:
    store = any_store.channel(channel)
    _build(store, "h" * 64, 5, 1)
    nodes, vectors = _build(store, "h" * 64, 6, 2)
    # What issue 13 saw: the state names a tree that is gone (a racing build wrote over it, or
    # an older store lost its collection: see test_migrations).
    gone = TreeState(3, "now", "m", (), {0: 9}, slot=0, tag="3.gone")
    store._collections.open("meta").upsert(ids=["state"], embeddings=[[1.0]], metadatas=[state_metadata(gone, None)])
    caplog.set_level(logging.WARNING, logger="raptor_engine.store")
    fresh = any_store.channel(channel)
    state = fresh.live_state()
    assert state.version == 2 and state.nodes_per_layer == {0: 6, 1: 1} and state.source_ids == ("h" * 64,)
    assert "v3 is missing; serving v2" in caplog.text
    assert fresh.query_tree(2, vectors[0], 1)[0].node.text == nodes[0].text
    assert any_store.channel(channel).live_state().version == 2  # healed in the store, not in memory


# -- durability across a kill --------------------------------------------------------

_WRITER = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    from raptor_engine.store import ChromaStore, TreeState
    from raptor_engine.types import ChannelKey, Node
    where = sys.argv[1]
    store = (ChromaStore.remote("127.0.0.1", int(where)) if where.isdigit() else ChromaStore.embedded(__import__("pathlib").Path(where)))
    channel = store.channel(ChannelKey("test", "w", sys.argv[2]))
    nodes = [Node(f"n.{i}", 0, f"leaf {i}", 2, source_ids=("s" * 64,), ordinal=i) for i in range(250)]
    rows = np.random.default_rng(5).normal(size=(250, 384)).astype(np.float32)
    channel.write_tree(1, nodes, rows / np.linalg.norm(rows, axis=1, keepdims=True))
    assert channel.switch_to(TreeState(1, "now", "m", ("s" * 64,), {0: 250}))
    print("written", flush=True)
    if not where.isdigit():
        os.kill(os.getpid(), signal.SIGKILL)
    signal.pause()
""")


def _assert_whole(store: ChromaStore, name: str) -> None:
    channel = store.channel(ChannelKey("test", "w", name))
    state = channel.live_state()
    assert state is not None and state.nodes_per_layer == {0: 250}
    rows = np.random.default_rng(5).normal(size=(250, 384)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    for i in range(250):  # every node is found through the index by its own vector
        assert channel.query_tree(1, rows[i], 1)[0].node.id == f"n.{i}"


def _write_then_kill(where: str, name: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, where, name], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "written"
    return writer


def test_an_embedded_tree_written_then_killed_comes_back_whole(tmp_path: Path) -> None:
    writer = _write_then_kill(str(tmp_path / "db"), "embedded")
    assert writer.wait(timeout=30) == -signal.SIGKILL
    _assert_whole(ChromaStore.embedded(tmp_path / "db"), "embedded")


def test_a_server_killed_after_a_write_comes_back_whole(tmp_path: Path) -> None:
    server, port = start_chroma_server(tmp_path / "db", tmp_path / "server.log")
    try:
        writer = _write_then_kill(str(port), "server")
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=15)
        writer.kill()
        writer.wait(timeout=15)
        server, port = start_chroma_server(tmp_path / "db", tmp_path / "server2.log")
        _assert_whole(ChromaStore.remote("127.0.0.1", port), "server")
    finally:
        server.kill()
        server.wait(timeout=15)


def test_rebuilds_write_no_text_into_chromas_full_text_index(tmp_path: Path, channel: ChannelKey) -> None:
    """Texts are kept in metadata: rebuilds writing trees over older ones leave Chroma's
    full-text index empty, and the store stays the size it had once both slots were written."""
    path = tmp_path / "chroma"
    store = ChromaStore.embedded(path)
    one = store.channel(channel)
    words = " ".join(f"word{i} token{i * 7} term{i * 13}" for i in range(60))
    sizes = []
    for build in range(1, 21):
        nodes, vectors = _tree("q" * 64, 60, build)
        nodes = [replace(n, text=f"{n.text} {build} {words}") for n in nodes]
        one.write_tree(build, nodes, vectors)
        assert one.switch_to(_state(build, nodes, "q" * 64))
        store.tidy()
        sizes.append(_du(path)[0])
    assert full_text_bytes(path)[1] == 0  # no document, so nothing for the index to hold
    assert max(sizes[2:]) < 1.1 * sizes[2], sizes
    assert integrity(path) == "ok"
    assert [h.node.text for h in one.query_tree(20, vectors[0], 1)] == [nodes[0].text]


def test_tidy_merges_the_full_text_index_an_older_store_bloated(tmp_path: Path) -> None:
    """Older stores kept texts as documents: every record written over left a deletion marker
    in Chroma's full-text index until its segments merged. A tidy merges such an index once it
    passes FULL_TEXT_BLOAT times its text, and gives every free page back."""
    path = tmp_path / "chroma"
    store = ChromaStore.embedded(path)
    older = store._client.get_or_create_collection("rc-older-pool", embedding_function=None)
    words = " ".join(f"word{i} token{i * 7} term{i * 13}" for i in range(60))
    rng = np.random.default_rng(0)
    for build in range(80):  # written over until the index is past the point a tidy merges it
        older.upsert(ids=[f"{build % 2}:{i}" for i in range(150)], embeddings=rng.random((150, DIM)).astype(np.float32),
                     documents=[f"leaf {i} of {build} {words}" for i in range(150)])
        bloated, text = full_text_bytes(path)
        if bloated >= FULL_TEXT_BLOAT * text + (1 << 20):
            break
    assert bloated >= FULL_TEXT_BLOAT * text + (1 << 20), (bloated, text)
    store.tidy()
    index, _ = full_text_bytes(path)
    assert index < bloated / 2 and free_bytes(path) == 0
    assert integrity(path) == "ok"
    assert older.get(ids=[f"{build % 2}:7"], include=["documents"])["documents"] == [f"leaf 7 of {build} {words}"]


def test_merging_the_full_text_index_beside_a_writing_client_breaks_nothing(tmp_path: Path) -> None:
    """The merge runs in a child process while this process's client writes. Made from this
    process instead, with Python's own copy of SQLite beside Chroma's, it corrupted the
    database in a soak and hung this very test: the two copies do not see each other's locks."""
    from raptor_engine.reclaim import _in_child

    path = tmp_path / "chroma"
    store = ChromaStore.embedded(path)
    collection = store._client.get_or_create_collection("stress", embedding_function=None)
    failures: list[str] = []
    stop = threading.Event()

    def write() -> None:
        rng = np.random.default_rng(0)
        for round_ in range(10_000):
            if stop.is_set():
                return
            try:
                collection.upsert(ids=[str(i) for i in range(50)], embeddings=rng.random((50, DIM)).astype(np.float32),
                                  documents=[f"text {i} of round {round_} " * 30 for i in range(50)])
            except Exception as exc:  # noqa: BLE001  # any failure of a write is the finding
                failures.append(repr(exc))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(10):
            _in_child("merge", path / "chroma.sqlite3")
    finally:
        stop.set()
        writer.join(timeout=60)
    assert failures == [] and integrity(path) == "ok"
    assert collection.count() == 50


def test_a_forget_never_frees_records_a_build_wrote_meanwhile(any_store: ChromaStore, channel: ChannelKey) -> None:
    """A forget frees the records of the forgotten source in every tree, the previous one
    included; a build writes its tree over the previous one's records. A forget that read
    those records before the build wrote over them, and freed them after, broke the new tree
    (a soak saw "tree v83 is incomplete (101 of 135 nodes)"). Within a process the two take
    turns: the build waits here until the forget is done."""
    forgetting, building = any_store.channel(channel), any_store.channel(channel)
    _build(building, "x" * 64, 20, 1)  # the previous tree (slot 0) will be written over...
    _build(building, "x" * 64, 20, 2)  # ...by the next build, after this served one (slot 1)
    reached, go = threading.Event(), threading.Event()
    real_free = forgetting._tree_pool.free

    def paused_free(*args: object, **kwargs: object) -> None:
        reached.set()
        go.wait(timeout=10)
        real_free(*args, **kwargs)  # type: ignore[arg-type]

    forgetting._tree_pool.free = paused_free  # type: ignore[method-assign]  # read done, free not yet
    forget = threading.Thread(target=forgetting.remove_source_from_trees, args=("x" * 64,))
    forget.start()
    assert reached.wait(timeout=10)
    nodes, vectors = _tree("y" * 64, 20, 3)
    build = threading.Thread(target=lambda: (building.write_tree(3, nodes, vectors),
                                             building.switch_to(_state(3, nodes, "y" * 64))))
    build.start()
    build.join(timeout=1.0)  # without the turn-taking it writes over slot 0 now
    go.set()
    forget.join(timeout=30)
    build.join(timeout=30)
    reader = any_store.channel(channel)
    state = reader.live_state()
    assert state.version == 3 and state.nodes_per_layer == {0: 20, 1: 1}
    assert sorted(h.node.text for h in reader.query_tree(3, vectors[0], 100)) == sorted(n.text for n in nodes)
