"""The search indexes of at most ``indexed_channels`` channels stay in memory, least recently asked out.

A process serving a thousand channels must not keep every channel's BM25 words and summary
map: the bound is the engine's setting (``retrieval.indexed_channels``), not a constant.
"""

from __future__ import annotations

import numpy as np
import pytest

from raptor_engine.search_indexes import ChannelIndexes
from raptor_engine.store import ChromaStore, TreeState
from raptor_engine.types import ChannelKey, Node

KEYS = [ChannelKey("test", "W-indexed", f"C{n}") for n in range(3)]


def served_tree(store: ChromaStore, key: ChannelKey) -> TreeState:
    """A three-leaf tree written and served in ``key`` through the store API."""
    channel = store.channel(key)
    nodes = [Node(id=f"l{i}", layer=0, text=f"passage {i} of {key.channel}", tokens=4, source_ids=("s1",))
             for i in range(3)]
    version = channel.next_version()
    channel.write_tree(version, nodes, np.eye(3, 8, dtype=np.float32))
    assert channel.switch_to(TreeState(version=version, built_at="2026-01-01T00:00:00+00:00", embedder_id="test",
                                       source_ids=("s1",), nodes_per_layer={0: 3}))
    state = channel.live_state()
    assert state is not None
    return state


@pytest.mark.parametrize(("kept", "expected"), [(1, [KEYS[0]]), (2, [KEYS[2], KEYS[0]]), (3, [KEYS[1], KEYS[2], KEYS[0]])])
def test_only_the_most_recently_asked_channels_keep_their_indexes(store: ChromaStore, kept: int,
                                                                   expected: list[ChannelKey]) -> None:
    states = {key: served_tree(store, key) for key in KEYS}
    indexes = ChannelIndexes(kept)
    for key in [*KEYS, KEYS[0]]:  # the first channel asked again last
        indexes.tree(key, store.channel(key), states[key])
    assert list(indexes.served()) == expected


def test_a_channel_dropped_from_memory_gets_its_indexes_back_from_the_store(store: ChromaStore) -> None:
    states = {key: served_tree(store, key) for key in KEYS}
    indexes = ChannelIndexes(1)
    first = indexes.tree(KEYS[0], store.channel(KEYS[0]), states[KEYS[0]])
    indexes.tree(KEYS[1], store.channel(KEYS[1]), states[KEYS[1]])
    again = indexes.tree(KEYS[0], store.channel(KEYS[0]), states[KEYS[0]])
    assert again is not first and again.tag == first.tag
    assert again.lexical.frequencies(["passage"]) == first.lexical.frequencies(["passage"])


def test_at_least_one_channel_is_kept() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ChannelIndexes(0)
