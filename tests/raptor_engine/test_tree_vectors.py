"""The served tree's vectors in memory: searched instead of Chroma, as Chroma would answer,
read anew for each new tree (a rebuild, a forget), fresh leaves still found, memory bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytest

from raptor_engine import SentenceTransformerEmbedder, search_indexes, tree_vectors
from raptor_engine.engine import Engine
from raptor_engine.retrieval import RetrievalSettings
from raptor_engine.store import ChannelStore, ChromaStore
from raptor_engine.tree_vectors import InMemoryTree, TreeVectorCache, TreeVectors, best_rows, nearest_leaves
from raptor_engine.types import ChannelKey, Document, Hit, Node, RetrievalMode
from tests.conftest import SAMPLE, make_engine
from tests.raptor_engine.test_answering import LIGHTHOUSE

QUESTIONS = ("What happens if a page is not acknowledged within ten minutes?",
             "What is this handbook about? Summarize its main points.",
             "Who keeps the lamp of the lighthouse lit at night?")
LAMP = "How often must the keepers wind the lamp's clockwork?"


def _node(node_id: str, layer: int = 0) -> Node:
    return Node(id=node_id, layer=layer, text=node_id, tokens=1, source_ids=("s",))


def test_nearest_is_exact_with_ties_in_row_order_and_filters() -> None:
    vectors = np.array([[1, 0], [0, 1], [1, 1], [1, 0]], dtype=np.float32)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    nodes = (_node("a"), _node("b"), _node("c", layer=1), _node("d"))
    tree = TreeVectors((1, 0, "t"), nodes, unit, {n.id: row for row, n in enumerate(nodes)})
    assert [hit.node.id for hit in tree.nearest(np.array([2.0, 0.0]), 3)] == ["a", "d", "c"]
    assert [hit.node.id for hit in tree.nearest(np.array([1.0, 0.0]), 9, ids=["b", "x", "c"])] == ["c", "b"]
    assert [hit.node.id for hit in tree.nearest(np.array([1.0, 0.0]), 9, where={"layer": 1})] == ["c"]
    assert tree.nearest(np.array([1.0, 0.0]), 0) == [] and tree.nearest(np.array([1.0, 0.0]), 3, ids=[]) == []


def test_best_rows_are_what_a_stable_sort_gives() -> None:
    rng = np.random.default_rng(3)
    for size in (1, 7, 50, 400):
        scores = rng.integers(0, 12, size).astype(np.float32) / 11  # many ties
        for n in (1, 2, size // 2 or 1, size, size + 3):
            assert best_rows(scores, n).tolist() == np.argsort(-scores, kind="stable")[:n].tolist()


def _layered_tree() -> TreeVectors:
    """Three leaves and two summaries, the summaries nearest to (1, 0), rows not in layer order."""
    rows = {"s1": ([1.0, 0.0], 1), "a": ([0.9, 0.1], 0), "s2": ([0.99, 0.05], 2), "b": ([0.5, 0.5], 0), "c": ([0.0, 1.0], 0)}
    nodes = tuple(_node(node_id, layer) for node_id, (_, layer) in rows.items())
    matrix = np.array([vector for vector, _ in rows.values()], dtype=np.float32)
    return TreeVectors((1, 0, "t"), nodes, matrix / np.linalg.norm(matrix, axis=1, keepdims=True),
                       {node.id: row for row, node in enumerate(nodes)},
                       {0: np.array([1, 3, 4]), 1: np.array([0]), 2: np.array([2])})


def test_a_layer_is_found_by_its_rows_as_by_reading_every_node() -> None:
    tree = _layered_tree()
    unindexed = TreeVectors(tree.tag, tree.nodes, tree.vectors, tree.rows)  # no layer rows: every node is read
    vector = np.array([1.0, 0.2])
    for where, ids in (({"layer": 0}, None), ({"layer": 2}, None), ({"layer": 0}, ["c", "s1", "a"]), (None, ["b", "a"])):
        found = [hit.node.id for hit in tree.nearest(vector, 9, where, ids)]
        assert found == [hit.node.id for hit in unindexed.nearest(vector, 9, where, ids)]
    assert [hit.node.id for hit in tree.nearest(vector, 9, {"layer": 0}, ["c", "s1", "a"])] == ["a", "c"]


def test_a_tree_whose_nodes_were_all_forgotten_finds_nothing(store: ChromaStore) -> None:
    """A forget can leave the served tree without a node (an edit took a channel's only text
    away): its matrix is empty, and every query finds nothing instead of failing."""
    empty = TreeVectors((1, 1, "t"), (), np.zeros((0, 0), np.float32))
    memory = InMemoryTree(store.channel(ChannelKey("slack", "T1", "C1")), empty)
    vector = np.ones(4, dtype=np.float32)
    assert memory.query_tree(1, vector, 5) == [] and nearest_leaves(memory, 1, vector, 5) == []
    assert memory.query_tree(1, vector, 5, ids=["a"]) == [] and empty.nearest(vector, 5) == []


def test_one_product_serves_every_query_with_the_same_vector(store: ChromaStore, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _layered_tree()
    vector = np.array([1.0, 0.2])
    expected = [tree.nearest(vector, 3), tree.nearest(vector, 9, ids=["c", "b"]), tree.nearest(vector, 9, {"layer": 0})]
    products: list[int] = []
    original = TreeVectors.cosines
    monkeypatch.setattr(TreeVectors, "cosines", lambda self, vector: products.append(1) or original(self, vector))
    memory = InMemoryTree(store.channel(ChannelKey("slack", "T1", "C1")), tree)
    found = [memory.query_tree(1, vector, 3), memory.query_tree(1, vector, 9, ids=["c", "b"]),
             memory.query_tree(1, vector, 9, where={"layer": 0})]
    assert found == expected and len(products) == 1
    memory.query_tree(1, np.array([0.0, 1.0]), 3)  # another question's vector: another product
    assert len(products) == 2


def test_nodes_of_the_served_tree_are_read_from_memory_in_the_order_asked(store: ChromaStore) -> None:
    tree = _layered_tree()

    class Store:  # another version is read from the store
        def get_nodes(self, version: int, ids: Sequence[str]) -> list[Node]:
            return [_node(f"stored-{node_id}") for node_id in ids]

    memory = InMemoryTree(cast(ChannelStore, Store()), tree)
    assert [node.id for node in memory.get_nodes(1, ["c", "missing", "s1", "a"])] == ["c", "s1", "a"]
    assert [node.id for node in memory.get_nodes(2, ["c"])] == ["stored-c"]


def test_nearest_leaves_in_memory_are_the_nearest_leaves_and_from_chroma_those_among_twice_as_many_nodes() -> None:
    tree = _layered_tree()

    class Store:  # what Chroma answers: the nodes nearest, every layer, best first
        def query_tree(self, version: int, vector: np.ndarray, n: int, where: dict[str, Any] | None = None,
                       ids: Sequence[str] | None = None) -> list[Hit]:
            return tree.nearest(vector, n, where, ids)

    vector = np.array([1.0, 0.0])
    memory = InMemoryTree(cast(ChannelStore, Store()), tree)
    assert [hit.node.id for hit in nearest_leaves(memory, 1, vector, 1)] == ["a"]
    assert nearest_leaves(Store(), 1, vector, 1) == []  # the 2 nearest nodes are the summaries
    assert [hit.node.id for hit in nearest_leaves(memory, 1, vector, 2)] == ["a", "b"]
    assert [hit.node.id for hit in nearest_leaves(Store(), 1, vector, 2)] == ["a", "b"]  # of s1, s2, a, b


def _counting_store_queries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the Chroma queries of tree nodes made from now on."""
    calls: list[int] = []
    original = ChannelStore.query_tree

    def counted(self: ChannelStore, version: int, vector: np.ndarray, n: int, where: dict[str, Any] | None = None,
                ids: Sequence[str] | None = None) -> list[Hit]:
        calls.append(version)
        return original(self, version, vector, n, where, ids)

    monkeypatch.setattr(ChannelStore, "query_tree", counted)
    return calls


def _answers(engine: Engine, channel: ChannelKey, questions: Sequence[str]) -> list[list[tuple[str, float]]]:
    found = []
    for question in questions:
        for mode in RetrievalMode:
            hits = engine.retrieve(channel, question, RetrievalSettings(mode=mode, budget=600))
            found.append([(hit.node.id, round(hit.score, 4)) for hit in hits])
    return found


def test_retrieval_searches_the_tree_in_memory_and_finds_what_chroma_finds(
    store: ChromaStore, engine: Engine, embedder: SentenceTransformerEmbedder, channel: ChannelKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine.ingest_file(channel, SAMPLE)
    engine.ingest(channel, Document(LIGHTHOUSE, "Keepers' manual"))
    asyncio.run(engine.rebuild(channel))
    engine.retrieve(channel, QUESTIONS[0])  # reads the tree's vectors once
    queries = _counting_store_queries(monkeypatch)
    in_memory = _answers(engine, channel, QUESTIONS)
    assert queries == []  # no Chroma query at all: every mode searched the served tree in memory
    monkeypatch.setattr(tree_vectors, "MEMORY_NODES", 0)  # an engine that keeps no tree: Chroma, as before
    assert _answers(make_engine(store, embedder), channel, QUESTIONS) == in_memory
    assert queries  # that engine did query Chroma


def test_a_new_tree_is_searched_after_a_rebuild_and_a_forget_and_fresh_leaves_meanwhile(
    engine: Engine, channel: ChannelKey
) -> None:
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))
    engine.retrieve(channel, LAMP)  # the handbook's tree in memory now
    lighthouse = engine.ingest(channel, Document(LIGHTHOUSE, "Keepers' manual")).source
    fresh = engine.retrieve(channel, LAMP, RetrievalSettings(mode=RetrievalMode.LEAVES))
    assert fresh[0].node.source_ids == (lighthouse.id,)  # a fresh leaf, before any rebuild
    asyncio.run(engine.rebuild(channel))
    built = engine.retrieve(channel, LAMP, RetrievalSettings(mode=RetrievalMode.LEAVES))
    assert built[0].node.id == fresh[0].node.id  # now from the new tree, searched in memory
    engine.forget(channel, lighthouse.id)  # the served tree loses its nodes: a new revision
    after = engine.retrieve(channel, LAMP, RetrievalSettings(mode=RetrievalMode.LEAVES))
    assert all(lighthouse.id not in hit.node.source_ids for hit in after)


def test_a_first_question_builds_the_trees_word_index_and_summary_map_from_the_vectors_it_read(
    store: ChromaStore, engine: Engine, embedder: SentenceTransformerEmbedder, channel: ChannelKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tree's nodes and vectors, read once for the in-memory search, serve its BM25 index and
    summary map too: no second read of its texts or its summaries, and the same indexes as read."""
    engine.ingest_file(channel, SAMPLE)
    engine.ingest(channel, Document(LIGHTHOUSE, "Keepers' manual"))
    asyncio.run(engine.rebuild(channel))
    texts_read: list[int] = []
    original = ChannelStore.node_texts
    monkeypatch.setattr(ChannelStore, "node_texts", lambda self, version: texts_read.append(version) or original(self, version))
    fresh = make_engine(store, embedder)
    in_memory = _answers(fresh, channel, QUESTIONS)
    assert texts_read == []
    channel_store = store.channel(channel)
    state = channel_store.live_state()
    kept = search_indexes._tree_of(channel_store, state, tree_vectors.tree_vectors(channel_store, state))
    read = search_indexes._tree_of(channel_store, state)
    assert texts_read == [state.version]
    for question in (*QUESTIONS, LAMP):
        assert kept.lexical.top(question, 50) == read.lexical.top(question, 50)
    assert kept.summaries.nodes == read.summaries.nodes and kept.summaries.tops == read.summaries.tops
    assert np.allclose(kept.summaries.vectors, read.summaries.vectors, atol=1e-6)
    monkeypatch.setattr(tree_vectors, "MEMORY_NODES", 0)  # a tree too large to keep: read as before
    assert _answers(make_engine(store, embedder), channel, QUESTIONS) == in_memory


def test_the_first_question_after_a_rebuild_reads_nothing_of_the_tree(
    engine: Engine, channel: ChannelKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild reads the tree it served once, for its vectors and indexes together."""
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))
    reads: list[str] = []
    for name in ("list_layer", "get_tree_embeddings", "node_texts", "query_tree"):
        original = getattr(ChannelStore, name)
        monkeypatch.setattr(ChannelStore, name, lambda self, *a, _name=name, _f=original, **k: reads.append(_name) or _f(self, *a, **k))
    assert engine.retrieve(channel, QUESTIONS[0]) and engine.retrieve(channel, QUESTIONS[1])
    assert reads == []


def test_an_answer_citing_a_summary_reads_the_excerpts_beneath_it_from_memory(
    engine: Engine, channel: ChannelKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine.ingest_file(channel, SAMPLE)
    engine.ingest(channel, Document(LIGHTHOUSE, "Keepers' manual"))
    asyncio.run(engine.rebuild(channel))
    engine.retrieve(channel, QUESTIONS[0])  # the tree in memory
    reads: list[int] = []
    original = ChannelStore.get_nodes
    monkeypatch.setattr(ChannelStore, "get_nodes", lambda self, version, ids: reads.append(version) or original(self, version, ids))
    answer = asyncio.run(engine.answer(channel, QUESTIONS[1]))
    summaries = [citation for citation in answer.citations if citation.layer > 0]
    assert summaries and all(citation.quote for citation in summaries)  # quoted from the excerpts beneath
    assert reads == []


def test_the_trees_kept_stay_within_the_bound(engine: Engine, channel: ChannelKey) -> None:
    other = ChannelKey(channel.platform, channel.workspace, channel.channel + "-2")
    engine.ingest_file(channel, SAMPLE)
    engine.ingest(other, Document(LIGHTHOUSE, "Keepers' manual"))
    for key in (channel, other):
        asyncio.run(engine.rebuild(key))
    stores = {key: engine.store.channel(key) for key in (channel, other)}
    states = {key: stores[key].live_state() for key in (channel, other)}
    sizes = {key: sum(state.nodes_per_layer.values()) for key, state in states.items() if state}
    cache = TreeVectorCache(limit=max(sizes.values()))
    for key in (channel, other):
        assert isinstance(cache.searched(key, stores[key], states[key]), InMemoryTree)
        assert cache.nodes() <= max(sizes.values())
    assert list(cache.kept()) == [other]  # the first was let go to make room
    small = TreeVectorCache(limit=min(sizes.values()) - 1)
    assert all(small.searched(key, stores[key], states[key]) is stores[key] for key in (channel, other))
    assert small.nodes() == 0  # a tree over the bound is searched in Chroma, never kept
