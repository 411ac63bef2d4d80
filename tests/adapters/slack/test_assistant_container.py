"""Slack's assistant container (issue 30, point 1), end to end: the real slack-bolt ``AsyncApp``
against the stand-in (``testkit/slack_api.py``, :class:`~testkit.slack_api.AssistantContainer`),
the real engine on embedded Chroma.

Payload shapes: ``assistant_thread_started`` / ``assistant_thread_context_changed`` and the
question (a ``message`` with ``channel_type: "im"`` and the thread's ``thread_ts``) as
bolt-python's ``tests/scenario_tests_async/test_events_assistant.py`` sends them and Slack's
event reference describes them; the thread's root of subtype ``assistant_app_thread`` as in
that file's ``message_changed`` fixture. ``assistant.threads.setSuggestedPrompts`` / ``setTitle``
arguments as docs.slack.dev documents them (at most four prompts, each a title and a message).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.slack.app import SlackRunning
from bot import replies
from bot.assistant_threads import (
    MAX_TITLE_CHARS,
    VIEWED,
    AssistantThreads,
    LocalThreadState,
    SharedThreadState,
    ThreadState,
    thread_title,
)
from bot.coordination.link import RedisLink
from bot.deploy_config import CoordinationConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import Question
from bot.runtime import Assistant
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from raptor_engine.store import ChromaStore
from testkit.cluster import COORDINATION_SECRET
from testkit.slack_api import SlackStandIn, app_running, assistant_event
from testkit.valkey import ValkeyProcess
from tests.adapters.recording import recorded
from tests.adapters.slack.test_app import ANA, BEN, ON_CALL, bot_config, key, run, settle
from tests.conftest import SAMPLE, make_engine

BUILT = "CBUILT"  # holds the sample handbook, its tree built
PROMPTS_WITHIN_S = 3.0
LONG_QUESTION = ("What exactly does the on-call engineer have to do during the first hour of an incident, "
                 "and who do they tell?")


@pytest.fixture(scope="module")
def built_engine(embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    engine = make_engine(ChromaStore.embedded(tmp_path_factory.mktemp("built") / "chroma"), embedder)
    engine.ingest_bytes(key(BUILT), SAMPLE.read_bytes(), "aurora-handbook.md", "https://x.test/f", "Ana", "F0")
    asyncio.run(engine.rebuild(key(BUILT)))
    return engine


def prompts_for(slack: SlackStandIn, dm: str, thread_ts: str) -> list[dict[str, str]]:
    [call] = slack.calls_of("assistant.threads.setSuggestedPrompts", channel_id=dm, thread_ts=thread_ts)
    return list(call.params["prompts"])


def test_a_new_thread_gets_prompts_about_the_channel_viewed_only_by_its_members(
        built_engine: Engine, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        slack.join(BUILT, ANA)
        dm, thread, delivery = await slack.open_assistant(ANA, viewing=BUILT)
        await slack.wait_until(lambda: slack.calls_of("assistant.threads.setSuggestedPrompts", channel_id=dm),
                               timeout=PROMPTS_WITHIN_S, what="the prompts")
        [call] = slack.calls_of("assistant.threads.setSuggestedPrompts", channel_id=dm)
        assert call.at - delivery.sent_at < PROMPTS_WITHIN_S
        prompts = prompts_for(slack, dm, thread)
        assert len(prompts) >= 3
        assert prompts[0]["title"] == "Summarise #cbuilt's material"
        assert any(p["title"] == "What changed in #cbuilt this week?" for p in prompts)

        # Ben views the same channel but is no member of it; a channel without a tree; no channel.
        for user, viewing in ((BEN, BUILT), (ANA, "CEMPTY"), (ANA, "")):
            slack.join("CEMPTY", ANA)
            dm, thread, _ = await slack.open_assistant(user, viewing=viewing)
            await slack.wait_until(lambda: slack.calls_of("assistant.threads.setSuggestedPrompts", thread_ts=thread),
                                   timeout=PROMPTS_WITHIN_S, what="the prompts")
            prompts = prompts_for(slack, dm, thread)
            assert len(prompts) >= 3 and not any("#" in p["title"] for p in prompts), (user, viewing, prompts)

    run(built_engine, tmp_path, "socket", body)


def test_a_question_is_answered_from_the_viewed_channel_for_its_members_only(
        built_engine: Engine, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        events = recorded(bot)
        slack.join(BUILT, ANA)
        # Ana opens a thread viewing nothing, then turns to the channel: the change is kept.
        dm, thread, _ = await slack.open_assistant(ANA)
        await slack.view_channel(ANA, dm, thread, BUILT)
        await settle(running, bot)
        asked, _ = await slack.ask_assistant(ANA, dm, thread, LONG_QUESTION)
        [answer] = await slack.wait_until(lambda: slack.posts(dm, thread), what="the answer")
        await settle(running, bot)
        [question] = [e for e in events if isinstance(e, Question)]
        assert question.channel == key(BUILT) and question.thread == thread
        assert "[1]" in answer["text"], answer["text"]
        # The thread is titled from its first question, once.
        [title] = slack.calls_of("assistant.threads.setTitle", channel_id=dm, thread_ts=thread)
        assert title.params["title"] == thread_title(LONG_QUESTION)
        assert len(title.params["title"]) <= MAX_TITLE_CHARS and title.params["title"].endswith("…")
        await slack.ask_assistant(ANA, dm, thread, ON_CALL)
        await slack.wait_until(lambda: len(slack.posts(dm, thread)) == 2, what="the second answer")
        await settle(running, bot)
        assert len(slack.calls_of("assistant.threads.setTitle", thread_ts=thread)) == 1
        # Her 👍 on the answer in her direct conversation counts on the channel that answered.
        first = next(m for m in slack.thread(dm, thread) if m.get("text") == answer["text"])
        await slack.click_feedback(dm, ANA, first, up=True)
        await settle(running, bot)
        [voted] = [record for record in built_engine.answers(key(BUILT)) if record.votes]
        assert voted.votes == {ANA: 1} and voted.question == LONG_QUESTION

        # Ben views the channel without being a member: told so, and nothing is searched.
        dm, thread, _ = await slack.open_assistant(BEN, viewing=BUILT)
        await slack.ask_assistant(BEN, dm, thread, ON_CALL)
        [refusal] = await slack.wait_until(lambda: slack.posts(dm, thread), what="the refusal")
        await settle(running, bot)
        assert refusal["text"] == replies.not_a_member_text("cbuilt")
        assert len([e for e in events if isinstance(e, Question)]) == 2  # Ana's two only

    run(built_engine, tmp_path, "socket", body)


@pytest.fixture
def valkey(tmp_path: Path) -> Iterator[ValkeyProcess]:
    """A started Valkey server of this test's own, stopped at its end."""
    with ValkeyProcess(directory=tmp_path / "valkey") as server:
        yield server


def coordination_links(valkey: ValkeyProcess, count: int) -> list[RedisLink]:
    """``count`` replicas' links to ``valkey``, as the bot's coordination makes them."""
    coordination = CoordinationConfig.model_validate({"redis_url": valkey.url, "connect_timeout_s": 0.5,
                                                    "secret": COORDINATION_SECRET})
    return [RedisLink(coordination) for _ in range(count)]


def test_the_viewed_channel_is_shared_by_coordinated_replicas(built_engine: Engine, tmp_path: Path,
                                                              valkey: ValkeyProcess) -> None:
    """The context arrives at one replica, the question at another (HTTP mode behind a
    balancer): with the thread state in Redis (a real Valkey), the second knows the channel.
    In each process's memory alone, it would answer from the direct conversation (no material)."""

    async def session() -> None:
        bots = [Assistant(bot_config(tmp_path / name), AsyncEngine(built_engine)) for name in ("one", "two")]
        links = coordination_links(valkey, len(bots))
        for bot, link in zip(bots, links, strict=True):
            bot.assistant_threads = AssistantThreads(bot.calls, SharedThreadState(link))
            await bot.start(warm_up=False)
        try:
            async with SlackStandIn() as slack:
                slack.add_user(ANA, "Ana", admin=True)
                slack.join(BUILT, ANA)
                async with app_running(bots[0], slack, "http") as one, app_running(bots[1], slack, "http") as two:
                    slack.app_url = one.url
                    dm, thread, _ = await slack.open_assistant(ANA)
                    await slack.view_channel(ANA, dm, thread, BUILT)
                    await settle(one, bots[0])
                    slack.app_url = two.url
                    await slack.ask_assistant(ANA, dm, thread, ON_CALL)
                    [answer] = await slack.wait_until(lambda: slack.posts(dm, thread), what="the answer")
                    await settle(two, bots[1])
                    assert "[1]" in answer["text"] and answer["text"] != replies.NO_MATERIAL
        finally:
            for bot, link in zip(bots, links, strict=True):
                await bot.stop()
                await link.close()

    asyncio.run(session())


def test_a_started_event_handled_after_a_later_context_change_does_not_undo_it(
        built_engine: Engine, tmp_path: Path) -> None:
    """Slack delivers the thread's events apart and the bot handles each in a task of its own:
    a context change can be handled before the ``assistant_thread_started`` that precedes it.
    The view kept is the later event's, by its ``event_ts``: Ana's question is answered from
    the channel she turned to, not from the one she viewed when the thread opened."""

    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        events = recorded(bot)
        slack.join(BUILT, ANA)
        slack.join("COTHER", ANA)
        dm, thread = f"D{ANA}", slack.next_ts()
        slack.store_message(dm, {"type": "message", "subtype": "assistant_app_thread", "user": ANA,
                                 "text": "New chat", "ts": thread, "thread_ts": thread, "channel": dm})
        opened_at, turned_at = slack.next_ts(), slack.next_ts()
        changed = assistant_event(slack.team, turned_at, "assistant_thread_context_changed", ANA, dm, thread, BUILT)
        started = assistant_event(slack.team, opened_at, "assistant_thread_started", ANA, dm, thread, "COTHER")
        for event in (changed, started):  # the later event first
            assert (await slack.deliver_event(event)).status == 200
            await settle(running, bot)
        await slack.ask_assistant(ANA, dm, thread, ON_CALL)
        [answer] = await slack.wait_until(lambda: slack.posts(dm, thread), what="the answer")
        await settle(running, bot)
        [question] = [e for e in events if isinstance(e, Question)]
        assert question.channel == key(BUILT), question.channel
        assert "[1]" in answer["text"], answer["text"]

    run(built_engine, tmp_path, "socket", body)


async def check_latest_view_kept(state: ThreadState) -> None:
    """Views set out of their events' order: the latest event's stays."""
    await state.set_viewed("t1", "CLATE", "1700000002.000200")
    await state.set_viewed("t1", "CEARLY", "1700000002.000100")
    assert await state.viewed("t1") == "CLATE"
    await state.set_viewed("t1", "CLATER", "1700000003.000000")
    assert await state.viewed("t1") == "CLATER"
    # An event without a time is kept (as before events were ordered), and any timed one replaces it.
    await state.set_viewed("t2", "CUNTIMED", "")
    assert await state.viewed("t2") == "CUNTIMED"
    await state.set_viewed("t2", "CTIMED", "1600000000.000001")
    assert await state.viewed("t2") == "CTIMED"
    await state.set_viewed("t2", "CJUNK", "not a ts")
    assert await state.viewed("t2") == "CJUNK"


def test_the_latest_view_is_kept_in_memory() -> None:
    asyncio.run(check_latest_view_kept(LocalThreadState()))


def test_the_latest_view_is_kept_in_redis_and_read_from_an_older_version(valkey: ValkeyProcess) -> None:
    async def session() -> None:
        links = coordination_links(valkey, 2)
        try:
            await check_latest_view_kept(SharedThreadState(links[0]))
            # Another replica, with nothing in its memory, reads what the first kept.
            other = SharedThreadState(links[1])
            assert await other.viewed("t1") == "CLATER"
            await other.set_viewed("t1", "CEARLIEST", "1600000000.000000")
            assert await SharedThreadState(links[0]).viewed("t1") == "CLATER"
            # A value kept by a version before events were ordered: the channel id alone.
            await links[0].run(lambda r: r.set(links[0].key("assistant", VIEWED, "t3"), "COLD"))
            assert await other.viewed("t3") == "COLD"
            await other.set_viewed("t3", "CNEW", "1600000000.000000")
            assert await other.viewed("t3") == "CNEW"
        finally:
            for link in links:
                await link.close()

    asyncio.run(session())


def test_thread_titles_are_one_line_of_at_most_sixty_characters() -> None:
    assert thread_title("  What is\n the on-call rota?  ") == "What is the on-call rota?"
    title = thread_title("word " * 40)
    assert len(title) <= MAX_TITLE_CHARS and title.endswith("…") and "\n" not in title
    assert len(thread_title("x" * 200)) == MAX_TITLE_CHARS
