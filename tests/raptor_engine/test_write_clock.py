"""The reads every question makes (served state, sources) are kept on an embedded store until
this process writes to it, and made every time on a Chroma server (raptor_engine.store.write_clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from raptor_engine import ChannelKey, ChromaStore
from raptor_engine.store import TreeState
from raptor_engine.store.sources import SourceState
from raptor_engine.store.write_clock import CountingClient, Remembered, WriteClock
from raptor_engine.types import Node, Source, SourceKind


class CountedReads:
    """Counts the ``get`` calls made on the collections a client hands out (the rest passes)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.gets = 0

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._client, name)
        if name not in ("get_collection", "get_or_create_collection"):
            return found

        def opened(*args: Any, **kwargs: Any) -> Any:
            return _CountedCollection(found(*args, **kwargs), self)

        return opened


class _CountedCollection:
    def __init__(self, collection: Any, counter: CountedReads) -> None:
        self._collection = collection
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        if name == "get":
            self._counter.gets += 1
        return getattr(self._collection, name)


def _source(sid: str, title: str) -> Source:
    return Source(sid, title, SourceKind.FILE, "", "ann", f"2026-12-05T10:00:0{ord(title) % 10}", 6)


def _serve(store: Any, sid: str) -> TreeState:
    """A one-leaf tree of source ``sid`` written and served."""
    version = store.next_version()
    leaf = Node(f"{sid[:12]}.0", 0, "a leaf", 2, source_ids=(sid,))
    store.write_tree(version, [leaf], np.ones((1, 4), dtype=np.float32))
    state = TreeState(version, "now", "e", (sid,), {0: 1})
    assert store.switch_to(state)
    return state


def _counted(store: ChromaStore, key: ChannelKey) -> tuple[Any, CountedReads]:
    channel = store.channel(key)
    counter = CountedReads(channel._collections.client)
    channel._collections.client = counter
    return channel, counter


def test_an_embedded_store_reads_the_state_and_sources_once_until_it_writes(tmp_path: Path, channel: ChannelKey) -> None:
    store = ChromaStore.embedded(tmp_path / "chroma")
    writer = store.channel(channel)
    writer.put_source(_source("a" * 64, "A"), "text a")
    _serve(writer, "a" * 64)
    reader, counter = _counted(store, channel)

    first = (reader.live_state(), reader.list_sources())
    read = counter.gets
    for _ in range(5):
        assert (reader.live_state(), reader.list_sources()) == first
    assert counter.gets == read  # nothing written since: kept

    writer.put_source(_source("b" * 64, "B"), "text b")  # through another handle of the store
    assert [s.title for s in reader.list_sources()] == ["A", "B"]
    state = _serve(writer, "b" * 64)
    assert reader.live_state().version == state.version
    assert counter.gets > read


def test_the_kept_state_is_parsed_once_and_a_new_one_after_a_write(tmp_path: Path, channel: ChannelKey,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Every question reads the served state: while the record is kept, so is what it parses to."""
    from raptor_engine.store import tree_state

    store = ChromaStore.embedded(tmp_path / "chroma")
    channel_store = store.channel(channel)
    channel_store.put_source(_source("a" * 64, "A"), "text a")
    _serve(channel_store, "a" * 64)
    parsed: list[int] = []
    original = tree_state.state_from
    monkeypatch.setattr(tree_state, "state_from", lambda meta: parsed.append(1) or original(meta))
    first = channel_store.live_state()
    assert all(channel_store.live_state() is first for _ in range(3)) and len(parsed) == 1
    channel_store.put_source(_source("b" * 64, "B"), "text b")
    served = _serve(channel_store, "b" * 64)
    again = channel_store.live_state()  # read afresh after the writes (the switch reads it too)
    assert again is not None and again.version == served.version != first.version
    count = len(parsed)
    assert channel_store.live_state() is again and len(parsed) == count


def test_a_write_through_another_store_of_the_same_directory_is_seen(tmp_path: Path, channel: ChannelKey) -> None:
    """Two stores opened on one data directory in one process (a bot and a command) share a clock."""
    one = ChromaStore.embedded(tmp_path / "chroma")
    two = ChromaStore.embedded(tmp_path / "chroma")
    one.channel(channel).put_source(_source("a" * 64, "A"), "text a")
    reader = two.channel(channel)
    assert [s.title for s in reader.list_sources()] == ["A"]
    one.channel(channel).set_source_state("a" * 64, SourceState.FORGETTING)
    assert reader.list_sources() == []


def test_a_dropped_channel_is_not_remembered(tmp_path: Path, channel: ChannelKey) -> None:
    store = ChromaStore.embedded(tmp_path / "chroma")
    channel_store = store.channel(channel)
    channel_store.put_source(_source("a" * 64, "A"), "text a")
    _serve(channel_store, "a" * 64)
    assert channel_store.live_state() is not None and channel_store.list_sources()
    channel_store.set_source_state("a" * 64, SourceState.FORGETTING)
    channel_store.delete_source("a" * 64)
    channel_store.drop()
    assert channel_store.list_sources() == [] and channel_store.live_state() is None


def test_a_chroma_server_is_read_every_time(chroma_server: tuple[str, int], channel: ChannelKey) -> None:
    """Other processes write to a server: nothing read from it is kept."""
    host, port = chroma_server
    store = ChromaStore.remote(host, port)
    store.channel(channel).put_source(_source("a" * 64, "A"), "text a")
    reader, counter = _counted(store, channel)
    reader.list_sources()
    read = counter.gets
    reader.list_sources()
    assert counter.gets > read


def test_a_read_running_alongside_a_write_is_not_kept_past_it() -> None:
    """The count goes up before and after a write: a read that began during it is labelled
    with a count the write's end leaves behind."""
    clock = WriteClock()
    kept = Remembered(clock)
    values = iter(["old", "new"])

    def write_during_read() -> str:
        return clock.around(lambda: next(values))  # the write ends after the read began

    assert kept.get("x", write_during_read) == "old"
    assert kept.get("x", lambda: next(values)) == "new"


def test_a_failed_write_still_counts() -> None:
    clock = WriteClock()

    class Failing:
        def upsert(self, **_: Any) -> None:
            raise RuntimeError("half written")

    class Client:
        def get_collection(self, name: str) -> Failing:
            return Failing()

    counted = CountingClient(Client(), clock)
    before = clock.now
    with pytest.raises(RuntimeError):
        counted.get_collection("c").upsert(ids=["x"])
    assert clock.now > before
