"""Summaries built before a source under them changed (issue 29, point 3), with the real engine
and Chroma: a summary quoting none of the text an edit removed stays, counted by ``stats`` and
cited with a mark until the next rebuild; one quoting removed text goes at once, and the removed
text is nowhere in the store."""

from __future__ import annotations

import asyncio

from raptor_engine.chunking import sentences
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey, Document, SourceKind
from tests.conftest import quality_articles, traces

OVERVIEW = "Summarize this story."


def story(engine: Engine, key: ChannelKey, text: str) -> str:
    return engine.ingest(key, Document(text, "The story", SourceKind.MESSAGE, "", "Ana", "", "m1")).source.id


def edited(engine: Engine, key: ChannelKey, old: str, text: str) -> None:
    engine.replace_source(key, old, story(engine, key, text))


def summary_texts(engine: Engine, key: ChannelKey) -> list[str]:
    stats = engine.stats(key)
    channel = engine.store.channel(key)
    return [node.text for layer in stats.nodes_per_layer if layer > 0
            for node in channel.list_layer(stats.version, layer, 1000)]


def test_an_edit_that_only_adds_keeps_the_summaries_marked_until_the_next_rebuild(
    engine: Engine, channel: ChannelKey
) -> None:
    text = quality_articles(1)[0][:12000]
    old = story(engine, channel, text)
    asyncio.run(engine.rebuild(channel))
    summaries = len(summary_texts(engine, channel))
    assert summaries > 1
    edited(engine, channel, old, text + "\n\nThe end.")
    assert engine.stats(channel).outdated_summaries == summaries  # nothing was removed: they all stay
    answer = asyncio.run(engine.answer(channel, OVERVIEW))
    marked = [c for c in answer.citations if c.layer > 0]
    assert marked and all(c.outdated_by == "The story" for c in marked)
    assert all(not c.outdated_by for c in answer.citations if c.layer == 0)  # excerpts are current
    asyncio.run(engine.rebuild(channel))
    assert engine.stats(channel).outdated_summaries == 0  # a rebuild clears the marks
    assert not any(c.outdated_by for c in asyncio.run(engine.answer(channel, OVERVIEW)).citations)


def test_an_edit_that_removes_text_takes_the_summaries_quoting_it_at_once(engine: Engine, channel: ChannelKey) -> None:
    text = quality_articles(1)[0][:12000]
    old = story(engine, channel, text)
    asyncio.run(engine.rebuild(channel))
    before = summary_texts(engine, channel)
    quoted = max(sentences(before[0]), key=len)  # an extractive summary's sentence: the story's words
    assert len(quoted.split()) >= 6 and " ".join(quoted.split()) in " ".join(text.split())
    edited(engine, channel, old, " ".join(text.split()).replace(" ".join(quoted.split()), ""))
    after = summary_texts(engine, channel)
    assert all(quoted not in " ".join(summary.split()) for summary in after)
    assert not traces(engine.store, [quoted.lower()]), traces(engine.store, [quoted.lower()])
    assert 0 < engine.stats(channel).outdated_summaries == len(after) < len(before)  # the others stay, marked


def test_a_source_added_beside_marks_the_summaries_over_several_sources_until_the_next_rebuild(
    engine: Engine, channel: ChannelKey
) -> None:
    first, second, third = (text[:8000] for text in quality_articles(3))
    for n, text in enumerate((first, second)):
        engine.ingest(channel, Document(text, f"Story {n}", SourceKind.MESSAGE, "", "Ana", "", f"m{n}"))
    asyncio.run(engine.rebuild(channel))
    stats = engine.stats(channel)
    channel_store = engine.store.channel(channel)
    summaries = [node for layer in stats.nodes_per_layer if layer > 0
                 for node in channel_store.list_layer(stats.version, layer, 1000)]
    spanning = {node.id for node in summaries if len(node.source_ids) > 1}
    assert spanning and len(spanning) < len(summaries) and stats.outdated_summaries == 0

    engine.ingest(channel, Document(third, "Story 2", SourceKind.MESSAGE, "", "Ana", "", "m2"))
    assert engine.stats(channel).outdated_summaries == len(spanning)  # those over one story stay true of it
    citations = asyncio.run(engine.answer(channel, "Summarize these stories.")).citations
    marked = {c.node_id for c in citations if c.outdated_by}
    assert marked and marked <= spanning
    assert all(c.outdated_by == "Story 2" and c.outdated_by_addition for c in citations if c.node_id in marked)
    assert all(not c.outdated_by for c in citations if c.node_id not in spanning)

    asyncio.run(engine.rebuild(channel))
    assert engine.stats(channel).outdated_summaries == 0
    assert not any(c.outdated_by for c in asyncio.run(engine.answer(channel, "Summarize these stories.")).citations)
