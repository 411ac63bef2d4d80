"""Forgetting every source of a channel drops it whole and, on the embedded store, gives its disk
space back: what Chroma leaves after deleting collections (segment directories, the SQLite file's
free pages and full-text index) is reclaimed. Real engine, embedded Chroma and a `chroma run` server."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raptor_engine.answering import ExtractiveAnswerer
from raptor_engine.engine import Engine
from raptor_engine.errors import NothingToBuild
from raptor_engine.reclaim import integrity, live_segments, orphan_segment_dirs
from raptor_engine.store import REGISTRY_COLLECTION, ChromaStore, channel_digest
from raptor_engine.summarizing import ExtractiveSummarizer
from raptor_engine.types import ChannelKey, Document
from tests.conftest import SAMPLE, make_engine, traces

SECRET = (
    "The Quillorbant archive stores the zephyrine ledgers of the Marrowfield cooperative. "
    "Every zephyrine ledger is copied twice and sealed with snorkelwick wax before it leaves Quillorbant. "
    "Only the Marrowfield treasurer may open the snorkelwick seals, and only on the first day of frost. "
    "A broken snorkelwick seal means the zephyrine ledger goes back to Quillorbant for a new copy. "
)
GARDEN = (
    "The garden committee meets on the first Sunday of every month. Tomatoes are planted in May, "
    "after the last frost, and watered every second evening. The compost heap sits behind the shed; "
    "only vegetable scraps and leaves go into it. Volunteers sign up for watering on the board by the gate."
)
NEW_UPLOAD = (
    "The lighthouse keeper lights the lamp at dusk and winds the clockwork every four hours. "
    "Spare wicks are kept in the brass chest below the stairs, and the logbook records every ship seen."
)
# Within this much of its size before the channel was filled, the data directory counts as
# shrunk back: compacting rewrites the SQLite file, which then packs its pages differently
# from the file before (it came out 8 kB smaller here); 32 pages of 4 kB is that noise,
# against the 1.1 MB the filled channel adds (at least 0.75 MB is asserted).
MARGIN_BYTES = 128 * 1024


def build(engine: Engine, key: ChannelKey) -> Any:
    return asyncio.run(engine.rebuild(key))


def handbook_parts() -> list[str]:
    """The sample handbook as three documents (its sections, in three groups)."""
    sections = SAMPLE.read_text().split("\n## ")
    third = max(1, len(sections) // 3)
    return ["\n## ".join(sections[i : i + third]) for i in range(0, 3 * third, third)]


def fill(engine: Engine, key: ChannelKey) -> None:
    """A channel as people use it: a few documents, two rebuilds, a kept answer."""
    engine.ingest(key, Document(SECRET, "ledgers"))
    engine.ingest(key, Document(handbook_parts()[0], "handbook, part 1"))
    build(engine, key)
    for number, part in enumerate(handbook_parts()[1:], 2):
        engine.ingest(key, Document(part, f"handbook, part {number}"))
    build(engine, key)
    question = "Who may open the snorkelwick seals?"
    engine.keep_answer(key, "a1", question, asyncio.run(engine.answer(key, question)), "alice")


def forget_all(engine: Engine, key: ChannelKey) -> None:
    for source in engine.sources(key):
        engine.forget(key, source.id)


def collections_of(store: ChromaStore, key: ChannelKey) -> list[str]:
    prefix = f"rc-{channel_digest(key)}-"
    return sorted(n for n in (str(getattr(c, "name", c)) for c in store._client.list_collections()) if n.startswith(prefix))


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def works_again(engine: Engine, key: ChannelKey) -> None:
    """A new upload to the channel works end to end: ingest, rebuild, retrieve."""
    result = engine.ingest(key, Document(NEW_UPLOAD, "lighthouse"))
    assert not result.duplicate and result.leaves >= 1
    assert build(engine, key).sources == 1
    hits = engine.retrieve(key, "Where are the spare wicks kept?")
    assert hits and "brass chest" in " ".join(h.node.text for h in hits)
    assert key in engine.channels()
    assert [s.title for s in engine.sources(key)] == ["lighthouse"]


def test_forgetting_every_source_shrinks_the_embedded_store_back(
    store: ChromaStore, engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    data = tmp_path / "chroma"
    other = ChannelKey(channel.platform, channel.workspace, channel.channel + "-other")
    engine.ingest(other, Document(GARDEN, "garden"))
    build(engine, other)
    before = size(data)

    fill(engine, channel)
    filled = size(data)
    assert filled - before > 750_000  # what the channel added, so the margin below means something
    assert collections_of(store, channel)

    forget_all(engine, channel)

    assert size(data) <= before + MARGIN_BYTES, (before, filled, size(data))
    assert orphan_segment_dirs(data) == []
    assert collections_of(store, channel) == [] and channel not in engine.channels()
    assert traces(store, ["zephyrine", "snorkelwick", "pull request"]) == []
    # The other channel, in the same process and client, still answers after the reclaim.
    hits = engine.retrieve(other, "When are tomatoes planted?")
    assert hits and "May" in hits[0].node.text
    assert other in engine.channels()
    works_again(engine, channel)  # new collections, created and queried after the reclaim
    assert integrity(data) == "ok"  # the reclaim ran beside a client open in this process


def test_forgetting_the_last_source_drops_every_collection_of_the_channel(
    any_store: ChromaStore, embedder: Any, channel: ChannelKey
) -> None:
    engine = make_engine(any_store, embedder)
    engine.ingest(channel, Document(SECRET, "ledgers"))
    engine.ingest(channel, Document(GARDEN, "garden"))
    build(engine, channel)
    build(engine, channel)
    question = "When are tomatoes planted?"
    engine.keep_answer(channel, "a1", question, asyncio.run(engine.answer(channel, question)), "alice")
    engine.set_note(channel, "rebuild_requested", "alice at noon")
    names = collections_of(any_store, channel)
    assert {n.rsplit("-", 1)[-1] for n in names} >= {"src", "tree", "meta", "answers"}

    forget_all(engine, channel)

    assert collections_of(any_store, channel) == []  # sources, caches, trees, notes, answers
    registry = any_store._client.get_collection(REGISTRY_COLLECTION, embedding_function=None)
    assert not registry.get(ids=[channel_digest(channel)], include=[])["ids"]
    # Clearing the pending-rebuild note afterwards (as the scheduler does) writes nothing back.
    engine.set_note(channel, "rebuild_requested", None)
    assert engine.notes(channel) == {}
    works_again(engine, channel)


def test_a_channel_dropped_by_another_process_works_again_there(
    any_store: ChromaStore, embedder: Any, channel: ChannelKey
) -> None:
    forgetting, serving = make_engine(any_store, embedder), make_engine(any_store, embedder)  # two processes
    forgetting.ingest(channel, Document(GARDEN, "garden"))
    build(forgetting, channel)
    assert serving.retrieve(channel, "When are tomatoes planted?")  # it holds its handles now

    forget_all(forgetting, channel)
    works_again(forgetting, channel)

    hits = serving.retrieve(channel, "Where are the spare wicks kept?")
    assert hits and "brass chest" in " ".join(h.node.text for h in hits)


class HeldSummarizer:
    """A summariser standing in for a slow language model: every call waits for ``release``."""

    def __init__(self, inner: ExtractiveSummarizer) -> None:
        self.identity = inner.identity
        self._inner = inner
        self.called = threading.Event()
        self.release = threading.Event()

    async def summarize(self, texts: Sequence[str]) -> str:
        self.called.set()
        await asyncio.to_thread(self.release.wait, 60)
        return await self._inner.summarize(texts)


def test_forgetting_the_last_source_during_a_rebuild_drops_the_channel_when_the_rebuild_ends(
    store: ChromaStore, embedder: Any, channel: ChannelKey, tmp_path: Path
) -> None:
    held = HeldSummarizer(ExtractiveSummarizer(embedder.token_counter()))
    engine = Engine(store, embedder, embedder.token_counter(), held, ExtractiveAnswerer(embedder))
    secret = engine.ingest(channel, Document(SECRET + GARDEN, "ledgers")).source.id
    outcome: list[Any] = []

    def rebuild() -> None:
        try:
            outcome.append(build(engine, channel))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=rebuild, daemon=True)
    thread.start()
    try:
        assert held.called.wait(120), "the rebuild never asked for a summary"
        engine.forget(channel, secret)
        # The rebuild still runs: its collections stay until it ends.
        assert collections_of(store, channel)
    finally:
        held.release.set()
        thread.join(120)

    [error] = outcome
    assert isinstance(error, NothingToBuild) and "forgotten while the rebuild ran" in str(error)
    assert collections_of(store, channel) == [] and channel not in engine.channels()
    assert traces(store, ["zephyrine", "tomatoes", secret]) == []
    assert orphan_segment_dirs(tmp_path / "chroma") == []
    works_again(engine, channel)


def test_opening_an_embedded_store_reclaims_what_a_crash_left(
    store: ChromaStore, engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    data = tmp_path / "chroma"
    engine.ingest(channel, Document(GARDEN, "garden"))
    left = ChannelKey(channel.platform, channel.workspace, channel.channel + "-left")
    engine.ingest(left, Document(SECRET, "ledgers"))
    # A crash right after the drop: Chroma deleted the collections, nothing reclaimed them.
    engine._channel(left).drop()
    orphans = orphan_segment_dirs(data)
    assert orphans
    live = [p for p in data.iterdir() if p.is_dir() and p not in orphans]
    named = live_segments(data)  # read from a child process: see reclaim.py on SQLite's locks
    assert {p.name for p in live} <= named

    reopened = ChromaStore.embedded(data)

    assert orphan_segment_dirs(data) == [] and all(p.exists() for p in live)  # named ones untouched
    assert make_engine(reopened, engine._embedder).retrieve(channel, "When are tomatoes planted?")
    assert engine.retrieve(channel, "When are tomatoes planted?")  # the first client too


def test_a_directory_chroma_still_names_is_never_taken_for_an_orphan(store: ChromaStore, tmp_path: Path) -> None:
    data = tmp_path / "chroma"
    kept = store._client.get_or_create_collection("kept-here", embedding_function=None)
    kept.upsert(ids=["a"], embeddings=[[1.0, 0.0]], documents=["still here"])
    stray = data / "00000000-0000-4000-8000-000000000000"  # a UUID no segment has
    shutil.copytree(next(p for p in data.iterdir() if p.is_dir()), stray)

    assert orphan_segment_dirs(data) == [stray]
    store.reclaim()

    assert not stray.exists() and kept.get(ids=["a"])["documents"] == ["still here"]
    assert store._client.get_collection("kept-here", embedding_function=None).query(
        query_embeddings=[[1.0, 0.0]], n_results=1)["ids"] == [["a"]]
