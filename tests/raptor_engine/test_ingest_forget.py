"""All-or-nothing ingest and a forget that leaves nothing behind, on embedded Chroma with the real engine.

Forgetting is checked the hard way: every collection of the Chroma client is read
whole (ids, documents, metadata) and searched for the forgotten text's rare words
and its source id. Slow language models are stood in for by summarisers that wait
on an event; a failing embedding endpoint by the OpenAI stand-in on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from raptor_engine.answering import ExtractiveAnswerer
from raptor_engine.engine import Engine
from raptor_engine.errors import BuildError, ProviderError
from raptor_engine.llm import LLMClient, LLMSettings, OpenAIEmbedder
from raptor_engine.retrieval import RetrievalSettings
from raptor_engine.store import SEGMENT_CHARS, ChromaStore, SourceState, channel_digest
from raptor_engine.summarizing import ExtractiveSummarizer
from raptor_engine.types import ChannelKey, Document
from testkit.openai_stub import Behaviour, OpenAIStub
from tests.conftest import make_engine, traces

RARE_WORDS = ("quillorbant", "zephyrine", "marrowfield", "snorkelwick")
SECRET = (
    "The Quillorbant archive stores the zephyrine ledgers of the Marrowfield cooperative. "
    "Every zephyrine ledger is copied twice and sealed with snorkelwick wax before it leaves Quillorbant. "
    "Only the Marrowfield treasurer may open the snorkelwick seals, and only on the first day of frost. "
    "A broken snorkelwick seal means the zephyrine ledger goes back to Quillorbant for a new copy. "
    "The Marrowfield auditors count the zephyrine pages each spring and write the total on the Quillorbant wall. "
    "Nobody outside Marrowfield has ever read a zephyrine ledger, the treasurer says, because the snorkelwick "
    "wax turns green when it is touched by a stranger. "
    "The Quillorbant night porter keeps the only key, hung on a snorkelwick cord, in a Marrowfield tin box. "
    "When the zephyrine ledgers are moved, four Marrowfield porters carry them through the Quillorbant tunnel. "
)
GARDEN = (
    "The garden committee meets on the first Sunday of every month. Tomatoes are planted in May, "
    "after the last frost, and watered every second evening. The compost heap sits behind the shed; "
    "only vegetable scraps and leaves go into it. Volunteers sign up for watering on the board by the gate."
)
WIDE = RetrievalSettings(top_k=1000, budget=100_000)


def build(engine: Engine, key: ChannelKey) -> Any:
    return asyncio.run(engine.rebuild(key))


def secret_traces(store: ChromaStore, source_id: str) -> list[str]:
    return traces(store, [*RARE_WORDS, source_id])


class Held:
    """A summariser standing in for a slow language-model endpoint: each call waits for ``release``.

    ``fail_mixed`` makes the call mixing both sources (the channel's root) fail as an
    endpoint answering 500; ``hold_mixed`` makes it wait for ``root_release`` instead.
    """

    def __init__(self, inner: ExtractiveSummarizer, fail_mixed: bool = False, hold_mixed: bool = False) -> None:
        self.identity = inner.identity
        self._inner = inner
        self._fail_mixed = fail_mixed
        self._hold_mixed = hold_mixed
        self.called = threading.Event()
        self.release = threading.Event()
        self.at_root = threading.Event()
        self.root_release = threading.Event()

    async def summarize(self, texts: Sequence[str]) -> str:
        self.called.set()
        await asyncio.to_thread(self.release.wait, 60)
        if any("Tomatoes" in text for text in texts):
            self.at_root.set()
            if self._fail_mixed:
                raise ProviderError("the model endpoint answered 500")
            if self._hold_mixed:
                await asyncio.to_thread(self.root_release.wait, 60)
        return await self._inner.summarize(texts)


def held_engine(store: ChromaStore, embedder: Any, held: Held) -> Engine:
    return Engine(store, embedder, embedder.token_counter(), held, ExtractiveAnswerer(embedder))


def in_thread(work: Any) -> tuple[threading.Thread, list[Any]]:
    """Runs ``work`` on a thread; its result or exception lands in the returned list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


# ------------------------------------------------------------------------------ atomic ingest


@pytest.fixture
def api_engine(stub: OpenAIStub, store: ChromaStore, embedder: Any) -> Iterator[Engine]:
    """An engine embedding through the stand-in endpoint, two texts per request, no retries."""
    client = LLMClient(LLMSettings(base_url=stub.base_url, model="stub-model", max_retries=0, backoff_base_s=0.01))
    remote = OpenAIEmbedder(client, "stub-embed", dimension=32, batch_size=2)
    counter = embedder.token_counter()
    yield Engine(store, remote, counter, ExtractiveSummarizer(counter), ExtractiveAnswerer(remote))
    client.close()


def test_an_embedding_endpoint_failing_mid_ingest_leaves_nothing_and_a_new_upload_stores_it(
    api_engine: Engine, stub: OpenAIStub, store: ChromaStore, channel: ChannelKey
) -> None:
    stub.script(Behaviour.ok(), Behaviour.error(503))  # the second request of the upload fails
    with pytest.raises(ProviderError):
        api_engine.ingest(channel, Document(SECRET, "ledgers"))
    assert api_engine.sources(channel) == [] and api_engine.stats(channel).sources == 0
    assert traces(store, RARE_WORDS) == []  # not listed, and not kept unseen either

    result = api_engine.ingest(channel, Document(SECRET, "ledgers"))
    assert not result.duplicate and result.leaves >= 3
    assert [s.id for s in api_engine.sources(channel)] == [result.source.id]
    stored = store.channel(channel).cached_leaves(api_engine._leaf_profile, [result.source.id])
    assert len(stored[result.source.id][0]) == result.leaves
    hits = api_engine.retrieve(channel, "snorkelwick seals", WIDE)
    assert len(hits) == result.leaves  # every excerpt is searchable at once
    assert api_engine.ingest(channel, Document(SECRET, "ledgers")).duplicate


def test_an_ingest_killed_half_way_is_invisible_until_an_upload_repairs_it(
    engine: Engine, store: ChromaStore, channel: ChannelKey
) -> None:
    done = engine.ingest(channel, Document(SECRET, "ledgers"))
    # What a process killed between its writes leaves: the text, marked unfinished, and some leaves.
    stored = store.channel(channel)
    chunks, vectors = stored.cached_leaves(engine._leaf_profile, [done.source.id])[done.source.id]
    stored.set_source_state(done.source.id, SourceState.STORING)
    stored.delete_leaves(done.source.id)
    stored.put_leaves(engine._leaf_profile, chunks[:2], vectors[:2])
    garden = engine.ingest(channel, Document(GARDEN, "garden"))

    assert [s.title for s in engine.sources(channel)] == ["garden"] and engine.stats(channel).sources == 1
    hits = engine.retrieve(channel, "Who may open the snorkelwick seals?", WIDE)
    assert hits and all(done.source.id not in h.node.source_ids for h in hits)  # its leaves are not searched
    report = build(engine, channel)
    assert report.sources == 1 and report.leaves == garden.leaves  # nor built from

    repaired = engine.ingest(channel, Document(SECRET, "ledgers"))
    assert repaired.repaired and not repaired.duplicate and repaired.leaves == len(chunks)
    assert {s.title for s in engine.sources(channel)} == {"garden", "ledgers"}
    found = [h for h in engine.retrieve(channel, "Who may open the snorkelwick seals?", WIDE)
             if done.source.id in h.node.source_ids]
    assert len(found) == len(chunks)
    assert engine.stats(channel).pending_sources == 1


def _write_the_old_way(store: ChromaStore, key: ChannelKey, source_id: str, text: str) -> None:
    """A source as versions before source states wrote it: its text only (leaves may follow),
    in a channel not opened yet (opening it brings its records to the current format)."""
    collection = store._client.get_or_create_collection(f"rc-{channel_digest(key)}-src", embedding_function=None)
    metadata = {"source_id": source_id, "segment": 0, "segments": 1, "title": "old ledgers", "kind": "file",
                "link": "", "added_by": "alice", "added_at": "2025-01-01T00:00:00+00:00", "chars": len(text),
                "external_id": ""}
    assert len(text) < SEGMENT_CHARS
    collection.upsert(ids=[f"{source_id}#0"], documents=[text], metadatas=[metadata], embeddings=[[1.0]])


def test_sources_written_the_old_way_stay_listed_as_stored(
    engine: Engine, store: ChromaStore, channel: ChannelKey
) -> None:
    """Sources written before source states were listed whether or not their leaves were all
    written: opening the channel migrates them to ``stored``, as they were listed. One whose
    old ingest died before its leaves is then a duplicate when uploaded again, kept as it was;
    the next rebuild embeds it (the test below)."""
    secret_id = hashlib.sha256(SECRET.encode()).hexdigest()
    garden_id = hashlib.sha256(GARDEN.encode()).hexdigest()
    _write_the_old_way(store, channel, secret_id, SECRET)  # the old ingest died before its leaves
    _write_the_old_way(store, channel, garden_id, GARDEN)

    assert {s.id for s in engine.sources(channel)} == {secret_id, garden_id}  # old sources stay listed
    assert store.channel(channel).source_record(secret_id)[1] is SourceState.STORED  # type: ignore[index]
    again = engine.ingest(channel, Document(SECRET, "ledgers"))
    assert again.duplicate and again.source.title == "old ledgers"


def test_a_rebuild_still_embeds_an_old_source_without_leaves(
    engine: Engine, store: ChromaStore, channel: ChannelKey
) -> None:
    secret_id = hashlib.sha256(SECRET.encode()).hexdigest()
    _write_the_old_way(store, channel, secret_id, SECRET)
    report = build(engine, channel)
    assert report.sources == 1 and report.leaves_embedded == report.leaves >= 3
    assert engine.ingest(channel, Document(SECRET, "ledgers")).duplicate  # the rebuild completed it


# ------------------------------------------------------------------------------ forget means gone


def _two_sources(engine: Engine, key: ChannelKey) -> tuple[str, str]:
    secret = engine.ingest(key, Document(SECRET, "ledgers")).source.id
    garden = engine.ingest(key, Document(GARDEN, "garden")).source.id
    return secret, garden


def test_a_plain_forget_leaves_no_trace_in_any_collection(
    store: ChromaStore, embedder: Any, channel: ChannelKey
) -> None:
    engine = make_engine(store, embedder)
    secret, _ = _two_sources(engine, channel)
    build(engine, channel)
    build(engine, channel)  # the previous version stays stored beside the served one
    question = "Who may open the snorkelwick seals?"
    engine.keep_answer(channel, "a1", question, asyncio.run(engine.answer(channel, question)), "alice")
    assert secret_traces(store, secret)  # the scan does see it while it is there

    engine.forget(channel, secret)

    assert secret_traces(store, secret) == []
    assert traces(store, ["tomatoes"])  # the other source is untouched
    assert engine.stats(channel).pending_sources == 1  # its summaries still want a rebuild
    assert build(engine, channel).sources == 1 and engine.stats(channel).pending_sources == 0


def test_a_forget_during_a_rebuild_leaves_no_trace_once_the_rebuild_ends(
    store: ChromaStore, embedder: Any, channel: ChannelKey
) -> None:
    secret, _ = _two_sources(make_engine(store, embedder), channel)
    held = Held(ExtractiveSummarizer(embedder.token_counter()))
    engine = held_engine(store, embedder, held)
    thread, outcome = in_thread(lambda: build(engine, channel))
    try:
        assert held.called.wait(120), "the rebuild never asked for a summary"
        engine.forget(channel, secret)
    finally:
        held.release.set()
        thread.join(120)
    [report] = outcome
    assert report.sources == 2  # it began with both
    assert secret_traces(store, secret) == []
    assert traces(store, ["tomatoes"])
    hits = engine.retrieve(channel, "Who may open the snorkelwick seals?", WIDE)
    assert hits and all(secret not in h.node.source_ids for h in hits)


def test_a_rebuild_failing_after_a_forget_leaves_no_trace(
    store: ChromaStore, embedder: Any, channel: ChannelKey
) -> None:
    secret, _ = _two_sources(make_engine(store, embedder), channel)
    held = Held(ExtractiveSummarizer(embedder.token_counter()), fail_mixed=True)
    engine = held_engine(store, embedder, held)
    thread, outcome = in_thread(lambda: build(engine, channel))
    try:
        assert held.called.wait(120), "the rebuild never asked for a summary"
        engine.forget(channel, secret)
    finally:
        held.release.set()
        thread.join(120)
    [error] = outcome
    assert isinstance(error, BuildError) and held.at_root.is_set()
    assert secret_traces(store, secret) == []


def test_a_rebuild_cancelled_after_a_forget_leaves_no_trace(
    store: ChromaStore, embedder: Any, channel: ChannelKey
) -> None:
    secret, _ = _two_sources(make_engine(store, embedder), channel)
    held = Held(ExtractiveSummarizer(embedder.token_counter()), hold_mixed=True)
    engine = held_engine(store, embedder, held)

    async def cancel_midway() -> None:
        task = asyncio.create_task(engine.rebuild(channel))
        await asyncio.to_thread(held.called.wait, 120)
        await asyncio.to_thread(engine.forget, channel, secret)
        held.release.set()  # the secret's own summaries are made now, after the forget
        assert await asyncio.to_thread(held.at_root.wait, 120)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_midway())
    finally:
        held.release.set()
        held.root_release.set()
    for thread in threading.enumerate():  # the build cleans up on its own thread after the cancel
        if thread.name == f"rebuild {channel}":
            thread.join(120)
    assert secret_traces(store, secret) == []
