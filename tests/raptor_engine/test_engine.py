"""The Engine facade end to end on the offline defaults and real Chroma."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from raptor_engine.engine import Engine
from raptor_engine.errors import BuildError, ChannelError, NodeNotFound, NoMaterial, NothingToBuild, ProviderError
from raptor_engine.retrieval import RetrievalSettings
from raptor_engine.summarizing import ExtractiveSummarizer
from raptor_engine.types import ChannelKey, Document, Node, RetrievalMode
from tests.conftest import SAMPLE, make_engine, quality_articles

OTHER_TEXT = (
    "The garden committee meets on the first Sunday of every month. Tomatoes are planted in May, "
    "after the last frost, and watered every second evening. The compost heap sits behind the shed; "
    "only vegetable scraps and leaves go into it. Volunteers sign up for watering on the board by the gate."
)


def build(engine: Engine, channel: ChannelKey):  # type: ignore[no-untyped-def]
    return asyncio.run(engine.rebuild(channel))


def test_sample_builds_layers_and_a_root(engine: Engine, channel: ChannelKey) -> None:
    result = engine.ingest_file(channel, SAMPLE)
    assert result.leaves > 11 and not result.duplicate
    report = build(engine, channel)
    layers = report.nodes_per_layer
    assert layers[0] == result.leaves
    assert max(layers) >= 1 and layers[max(layers)] == 1  # a single root on top
    assert report.leaves_reused == result.leaves and report.leaves_embedded == 0
    for stage in ("load", "cluster", "summarise", "store", "index"):
        assert stage in report.stage_seconds
    # The new tree's BM25 index and summary map were built with it: the first question finds them.
    assert engine._indexes.served()[channel] == (report.version, 0)


def test_only_the_served_trees_indexes_stay_in_memory(engine: Engine, channel: ChannelKey) -> None:
    """A long-running bot rebuilds a channel hundreds of times: the BM25 index and summary map
    of every tree it served once must not pile up (they did, up to 64, in the soak's first minutes)."""
    engine.ingest_file(channel, SAMPLE)
    versions = []
    for _ in range(3):
        versions.append(build(engine, channel).version)
        assert engine.retrieve(channel, "When is the office closed?")
    assert len(set(versions)) == 3
    assert engine._indexes.served() == {channel: (versions[-1], 0)}


def test_every_summary_is_traceable_to_leaves_and_its_source(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    build(engine, channel)
    root = engine.top_nodes(channel, 1)[0]
    frontier, leaves = [root.id], set()
    while frontier:
        view = engine.node(channel, frontier.pop())
        if view.node.layer == 0:
            leaves.add(view.node.id)
            assert view.node.link.startswith("file://") and view.node.start >= 0
            continue
        assert view.children, view.node.id
        for child in view.children:
            assert view.node.id in child.parents
            frontier.append(child.id)
    assert len(leaves) == engine.stats(channel).nodes_per_layer[0]


class RecordingSummarizer:
    """The offline summariser, recording what each call was given: ("part" or "whole", texts).
    With ``reads_leaves`` false it stands for a language model, which reads its members."""

    def __init__(self, counter, reads_leaves: bool) -> None:  # type: ignore[no-untyped-def]
        self._inner = ExtractiveSummarizer(counter)
        self.identity = f"{self._inner.identity}/recording-{reads_leaves}"
        self.reads_leaves = reads_leaves
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    async def summarize(self, texts: Sequence[str]) -> str:
        self.calls.append(("part", tuple(texts)))
        return await self._inner.summarize(texts)

    async def summarize_whole(self, texts: Sequence[str]) -> str:
        self.calls.append(("whole", tuple(texts)))
        return await self._inner.summarize_whole(texts)


def _leaves_under(engine: Engine, channel: ChannelKey, node_id: str) -> list[str]:
    """The texts of the leaves beneath a node, in tree order."""
    view = engine.node(channel, node_id)
    if view.node.layer == 0:
        return [view.node.text]
    return [text for child in view.children for text in _leaves_under(engine, channel, child.id)]


def test_offline_summaries_read_the_leaves_beneath_and_the_root_covers_more(store, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    counter = embedder.token_counter()
    recording = RecordingSummarizer(counter, reads_leaves=True)
    engine = Engine(store, embedder, counter, recording, make_engine(store, embedder)._answerer)
    engine.ingest_file(channel, SAMPLE)
    report = build(engine, channel)
    assert max(report.nodes_per_layer) >= 2  # there are summaries of summaries to check
    root = engine.top_nodes(channel, 1)[0]
    under_root = _leaves_under(engine, channel, root.id)
    assert [kind for kind, _ in recording.calls].count("whole") == 1  # one source: one root
    assert ("whole", tuple(under_root)) in recording.calls  # the root read every leaf of the document
    leaf_texts = set(under_root)
    assert all(set(texts) <= leaf_texts for _, texts in recording.calls)  # never a summary's text
    for layer in range(2, max(report.nodes_per_layer)):
        for node in engine.store.channel(channel).list_layer(report.version, layer, 100):
            assert ("part", tuple(_leaves_under(engine, channel, node.id))) in recording.calls
    assert 130 < root.tokens <= 3 * 130  # a root may hold up to three summaries' worth


def test_a_summariser_that_reads_members_gets_the_summaries_below(store, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    """A language model keeps the paper's way: each summary is made from its members' texts."""
    counter = embedder.token_counter()
    recording = RecordingSummarizer(counter, reads_leaves=False)
    engine = Engine(store, embedder, counter, recording, make_engine(store, embedder)._answerer)
    engine.ingest_file(channel, SAMPLE)
    build(engine, channel)
    root = engine.node(channel, engine.top_nodes(channel, 1)[0].id)
    assert all(kind == "part" for kind, _ in recording.calls)
    assert ("part", tuple(child.text for child in root.children)) in recording.calls
    assert root.node.tokens <= 130


def test_single_sentence_channel_gets_a_valid_tree(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest(channel, Document("Our office is closed on public holidays.", "note"))
    report = build(engine, channel)
    assert report.nodes_per_layer == {0: 1}
    answer = asyncio.run(engine.answer(channel, "When is the office closed?"))
    assert answer.found and answer.citations[0].layer == 0


def test_same_content_twice_is_stored_once(engine: Engine, channel: ChannelKey) -> None:
    first = engine.ingest(channel, Document(OTHER_TEXT, "garden"))
    second = engine.ingest(channel, Document(OTHER_TEXT, "garden copy"))
    assert second.duplicate and second.source.id == first.source.id
    assert len(engine.sources(channel)) == 1


def test_new_source_is_found_before_any_rebuild(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    build(engine, channel)
    engine.ingest(channel, Document(OTHER_TEXT, "Garden rules", link="https://chat.test/m/1"))
    hits = engine.retrieve(channel, "When are tomatoes planted?")
    assert hits[0].node.title == "Garden rules" and hits[0].node.link == "https://chat.test/m/1"
    assert engine.stats(channel).pending_sources == 1


@pytest.mark.parametrize("mode", list(RetrievalMode))
def test_every_mode_respects_the_budget(engine: Engine, channel: ChannelKey, mode: RetrievalMode) -> None:
    engine.ingest_file(channel, SAMPLE)
    build(engine, channel)
    hits = engine.retrieve(channel, "How are deployments rolled out?", RetrievalSettings(mode=mode, budget=300, top_k=10))
    assert hits and sum(h.node.tokens for h in hits) <= 300
    if mode is not RetrievalMode.COLLAPSED:  # collapsed ranks by fused dense + BM25 rank, not by score
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    if mode is RetrievalMode.LEAVES:
        assert {h.node.layer for h in hits} == {0}
    if mode is RetrievalMode.TRAVERSAL:
        wide = engine.retrieve(channel, "How are deployments rolled out?", RetrievalSettings(mode=mode, per_layer=2))
        top = max(engine.stats(channel).nodes_per_layer)
        assert {h.node.layer for h in wide} == set(range(top + 1))  # the top layer, then down to leaves
        assert sum(1 for h in wide if h.node.layer == 0) <= 2


def test_answer_cites_relevant_excerpts(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    build(engine, channel)
    answer = asyncio.run(engine.answer(channel, "What happens if a page is not acknowledged within ten minutes?"))
    assert answer.found and "[1]" in answer.text
    assert "escalates" in answer.text or "secondary" in answer.text
    citation = answer.citations[0]
    assert citation.title == "The Aurora Team Handbook" and citation.quote and citation.link


def test_unrelated_question_says_nothing_was_found(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest(channel, Document(OTHER_TEXT, "garden"))
    build(engine, channel)
    answer = asyncio.run(engine.answer(channel, "What is the boiling point of liquid nitrogen in kelvin?"))
    assert not answer.found and answer.citations == ()
    assert "could not find" in answer.text


def test_forget_removes_the_source_and_what_was_built_from_it(engine: Engine, channel: ChannelKey) -> None:
    handbook = engine.ingest_file(channel, SAMPLE).source
    garden = engine.ingest(channel, Document(OTHER_TEXT, "garden")).source
    build(engine, channel)
    engine.forget(channel, garden.id[:8])
    assert [s.id for s in engine.sources(channel)] == [handbook.id]
    hits = engine.retrieve(channel, "When are tomatoes planted?", RetrievalSettings(top_k=100, budget=100_000))
    assert all(garden.id not in h.node.source_ids for h in hits)
    report = build(engine, channel)
    assert report.sources == 1
    with pytest.raises(ChannelError, match="no source"):
        engine.forget(channel, garden.id[:8])


def test_rebuild_without_change_reuses_all_work(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    first = build(engine, channel)
    second = build(engine, channel)
    assert second.summaries_made == 0 and second.summaries_reused == first.summaries_made
    assert second.leaves_embedded == 0 and second.nodes_per_layer == first.nodes_per_layer
    assert second.version == first.version + 1


def test_same_input_gives_the_same_tree_whatever_the_arrival_order(store, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    other = ChannelKey(channel.platform, channel.workspace, channel.channel + "-twin")
    engine = make_engine(store, embedder)
    garden = Document(OTHER_TEXT, "garden")
    engine.ingest_file(channel, SAMPLE)
    engine.ingest(channel, garden)
    engine.ingest(other, garden)
    engine.ingest_file(other, SAMPLE)
    trees = []
    for key in (channel, other):
        build(engine, key)
        root = engine.top_nodes(key, 1)[0]
        trees.append((engine.stats(key).nodes_per_layer, root.id, root.text))
    assert trees[0] == trees[1]


class FailingSummarizer:
    """Stands in for a language-model endpoint that fails (the remote service, not our code)."""

    identity = "failing"

    async def summarize(self, texts: Sequence[str]) -> str:
        raise ProviderError("the model endpoint answered 500")


def test_failed_build_leaves_previous_tree_answering(engine: Engine, store, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    engine.ingest_file(channel, SAMPLE)
    good = build(engine, channel)
    broken = Engine(store, embedder, embedder.token_counter(), FailingSummarizer(), engine._answerer)
    broken.ingest(channel, Document(OTHER_TEXT, "garden"))
    with pytest.raises(BuildError, match="previous tree still answers"):
        build(broken, channel)
    assert engine.stats(channel).version == good.version
    assert len(engine.sources(channel)) == 2
    answer = asyncio.run(engine.answer(channel, "Who can roll back a deployment?"))
    assert answer.found


def test_errors_for_empty_channel_and_unknown_node(engine: Engine, channel: ChannelKey) -> None:
    with pytest.raises(NothingToBuild):
        build(engine, channel)
    with pytest.raises(NoMaterial):  # nothing to search: not the same as "searched, found nothing"
        engine.retrieve(channel, "anything")
    with pytest.raises(NoMaterial):
        asyncio.run(engine.answer(channel, "anything"))
    with pytest.raises(NodeNotFound):
        engine.node(channel, "s1.nothing")


def test_same_behaviour_on_a_chroma_server(any_store, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(any_store, embedder)
    engine.ingest_file(channel, SAMPLE)
    garden = engine.ingest(channel, Document(OTHER_TEXT, "garden")).source
    report = build(engine, channel)
    assert report.sources == 2 and max(report.nodes_per_layer) >= 1
    answer = asyncio.run(engine.answer(channel, "When are tomatoes planted?"))
    assert answer.found and answer.citations[0].title == "garden"
    engine.forget(channel, garden.id)
    hits = engine.retrieve(channel, "When are tomatoes planted?")
    assert all(garden.id not in h.node.source_ids for h in hits)


def test_hybrid_retrieval_finds_exact_codes(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    tickets = engine.ingest(channel, Document("Ticket QX-4471 tracks the broken refund export. " + OTHER_TEXT, "tickets"))
    build(engine, channel)
    hybrid = engine.retrieve(channel, "QX-4471")
    assert "QX-4471" in hybrid[0].node.text
    engine.forget(channel, tickets.source.id)  # the BM25 index must not serve removed nodes
    assert all("QX-4471" not in hit.node.text for hit in engine.retrieve(channel, "QX-4471"))


def test_a_source_forgotten_during_a_rebuild_stays_forgotten(store, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(store, embedder)
    engine.ingest_file(channel, SAMPLE)
    garden = engine.ingest(channel, Document(OTHER_TEXT, "garden")).source
    inner = ExtractiveSummarizer(embedder.token_counter())

    class ForgetsMidway:
        """A summariser during whose first call someone forgets the garden source."""

        identity = inner.identity

        def __init__(self) -> None:
            self.forgotten = False

        async def summarize(self, texts: Sequence[str]) -> str:
            if not self.forgotten:
                self.forgotten = True
                await asyncio.to_thread(engine.forget, channel, garden.id)
            return await inner.summarize(texts)

    racing = Engine(store, embedder, embedder.token_counter(), ForgetsMidway(), engine._answerer)
    build(racing, channel)
    hits = engine.retrieve(channel, "When are tomatoes planted?", RetrievalSettings(top_k=1000, budget=100_000))
    assert hits and all(garden.id not in h.node.source_ids for h in hits)


def test_rebuild_cost_follows_the_change(store, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    articles = quality_articles(5)
    engine = make_engine(store, embedder)
    everything = ChannelKey(channel.platform, channel.workspace, channel.channel + "-all")
    for index, article in enumerate(articles):
        engine.ingest(everything, Document(article, f"article {index}"))
        if index < 4:
            engine.ingest(channel, Document(article, f"article {index}"))
    full = build(engine, everything)
    build(engine, channel)
    assert build(engine, channel).summaries_made == 0  # nothing changed: nothing asked of the summariser
    stored = engine.store.channel(channel)

    def served_summaries() -> list[Node]:
        state = stored.live_state()
        assert state is not None
        return [n for layer in state.nodes_per_layer if layer for n in stored.list_layer(state.version, layer, 10**6)]

    before = {n.id for n in served_summaries()}
    added = engine.ingest(channel, Document(articles[4], "article 4")).source.id
    grown = build(engine, channel)
    assert grown.nodes_per_layer == full.nodes_per_layer  # the same tree as building all five at once
    root = engine.top_nodes(channel, 1)[0]
    assert len(root.source_ids) == 5 and len(root.children) == 5  # one root over the five sources' roots
    summaries = served_summaries()
    assert [n.id for n in summaries if len(n.source_ids) > 1] == [root.id]  # below it, one source per subtree
    # Only the new source's subtree and the channel's root are new; the four others' come from the cache.
    # (A share of the full build's count, as before, hung on how the clustering split the new article.)
    new = {n.id for n in summaries if n.id not in before}
    assert new <= {n.id for n in summaries if n.source_ids == (added,)} | {root.id}
    assert 0 < grown.summaries_made <= len(new) < full.summaries_made


def test_a_failed_build_keeps_the_summaries_it_paid_for(store, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(store, embedder)
    engine.ingest_file(channel, SAMPLE)
    engine.ingest(channel, Document(OTHER_TEXT, "garden"))
    inner = ExtractiveSummarizer(embedder.token_counter())

    class FailsOnTheRoot:
        """A model endpoint that fails the one call mixing both sources (the channel's root)."""

        identity = inner.identity
        reads_leaves = inner.reads_leaves

        async def summarize(self, texts: Sequence[str]) -> str:
            self._fail_on_both(texts)
            return await inner.summarize(texts)

        async def summarize_whole(self, texts: Sequence[str]) -> str:
            self._fail_on_both(texts)
            return await inner.summarize_whole(texts)

        @staticmethod
        def _fail_on_both(texts: Sequence[str]) -> None:
            if any("Tomatoes" in text for text in texts):
                raise ProviderError("the model endpoint answered 500")

    failing = Engine(store, embedder, embedder.token_counter(), FailsOnTheRoot(), engine._answerer)
    with pytest.raises(BuildError):
        build(failing, channel)
    report = build(engine, channel)
    assert report.summaries_made == 1 and report.summaries_reused >= 2  # only the root is asked again


def test_answers_are_kept_with_votes_and_go_with_their_sources(engine: Engine, channel: ChannelKey) -> None:
    source = engine.ingest_file(channel, SAMPLE).source
    question = "Who can roll back a deployment?"
    answer = asyncio.run(engine.answer(channel, question))
    assert answer.citations
    engine.keep_answer(channel, "a1", question, answer, "alice")
    engine.vote(channel, "a1", "bob", up=True)
    engine.vote(channel, "a1", "carol", up=False)
    record = engine.vote(channel, "a1", "carol", up=True)  # a later vote replaces the earlier one
    assert (record.ups, record.downs) == (2, 0)
    [kept] = engine.answers(channel)
    assert kept.question == question and kept.text == answer.text and kept.asked_by == "alice"
    assert kept.source_ids == (source.id,) and kept.votes == {"bob": 1, "carol": 1}
    engine.forget(channel, source.id)
    assert engine.answers(channel) == []
    with pytest.raises(ChannelError, match="no longer kept"):
        engine.vote(channel, "a1", "bob", up=False)


def test_feedback_pressed_at_once_by_many_people_keeps_every_reason(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    question = "Who can roll back a deployment?"
    engine.keep_answer(channel, "a1", question, asyncio.run(engine.answer(channel, question)), "alice")
    voters = [f"person{i}" for i in range(12)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda voter: engine.add_feedback(channel, "a1", voter, f"{voter}: incomplete"), voters))
    [kept] = engine.answers(channel)
    assert kept.reasons == {voter: f"{voter}: incomplete" for voter in voters}
    assert kept.votes == dict.fromkeys(voters, -1)


def test_status_counts_follow_a_forget(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    garden = engine.ingest(channel, Document(OTHER_TEXT, "garden")).source
    build(engine, channel)
    engine.forget(channel, garden.id)
    stats = engine.stats(channel)
    stored = engine.store.channel(channel)
    actual = {layer: len(stored.list_layer(stats.version, layer, 10**6)) for layer in range(8)}
    assert stats.nodes_per_layer == {layer: n for layer, n in actual.items() if n}
    engine.forget(channel, engine.sources(channel)[0].id)  # the last source: every node goes
    assert engine.stats(channel).nodes_per_layer == {} and engine.sources(channel) == []
