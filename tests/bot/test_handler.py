"""The chat handler with real components: the engine on embedded Chroma, the real scheduler.

Each test runs its own event loop (``asyncio.run``). Sources are short pins,
so every rebuild here takes a moment only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from bot import replies
from bot.commands import may_manage, parse_command
from bot.config import BotConfig, ChannelConfig, Config, LimitsConfig, RateLimitConfig
from bot.engine_calls import AsyncEngine
from bot.handler import ChatHandler
from bot.ingestion import pin_title
from bot.neutral import Command, Feedback, Person, Pin, Question, Reply, ReplyKind, Unpin, Upload, Vote
from bot.platform_config import SlackConfig
from bot.question_handling import retrieval_query
from bot.rebuilds.in_process import RebuildScheduler
from bot.rebuilds.service import ScheduleStatus
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey, Document, SourceKind, TreeStats
from tests.faults import first_sources_leaves_lost

GUEST = Person("U-guest", "Guest")
ADMIN = Person("U-admin", "Admin")  # listed in bot.admins
CHANNEL_ADMIN = Person("U-chan", "Chan")  # listed in bot.channels[key].admins
MANAGER = Person("U-manager", "Manager", manages_channel=True)

NOTE = "Deploys are frozen on Fridays after noon, so that nobody is paged over the weekend."
OTHER_NOTE = "The staging database is refreshed from production every Sunday night."
THIRD_NOTE = "Incident reviews are written within two working days and read aloud at the Friday demo."


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Session:
    """A started handler on the test's engine, and every reply it sent."""

    handler: ChatHandler
    scheduler: RebuildScheduler
    key: ChannelKey
    sent: list[Reply]

    async def send(self, reply: Reply) -> None:
        self.sent.append(reply)

    async def do(self, event: object) -> Reply:
        """Handles ``event`` and returns its (last) reply."""
        before = len(self.sent)
        await self.handler.handle(event, self.send)  # type: ignore[arg-type]
        assert len(self.sent) > before, "the handler replied nothing"
        return self.sent[-1]

    def command(self, person: Person, name: str, argument: str = "") -> Command:
        return Command(self.key, person, name, argument)

    def pin(self, text: str, external_id: str, replies_: tuple[str, ...] = (), person: Person = GUEST) -> Pin:
        link = f"https://chat/{external_id}"
        return Pin(self.key, person, text, external_id, link=link, author="Ana", replies=replies_)


def make_config(tmp_path: Path, key: ChannelKey, **bot: object) -> Config:
    settings: dict[str, object] = {
        "admins": [ADMIN.id],
        "channels": {str(key): ChannelConfig(admins=[CHANNEL_ADMIN.id])},
        **bot,
    }
    return Config(data_dir=tmp_path, bot=BotConfig(**settings))  # type: ignore[arg-type]


def run(
    engine: Engine, config: Config, key: ChannelKey, body: Callable[[Session], Awaitable[None]], clock: Clock | None = None
) -> None:
    async def session() -> None:
        scheduler = RebuildScheduler(AsyncEngine(engine), config.bot)
        await scheduler.start()
        handler = ChatHandler(AsyncEngine(engine), config, scheduler, clock=clock or Clock())
        try:
            await body(Session(handler, scheduler, key, []))
        finally:
            await scheduler.stop()

    asyncio.run(session())


def test_only_admins_rebuild_and_forget(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    async def body(s: Session) -> None:
        added = await s.do(s.pin(NOTE, "m1"))
        assert added.kind is ReplyKind.INFO and added.text.startswith("Added “Ana: Deploys are frozen")
        await s.do(s.pin(OTHER_NOTE, "m2"))

        refused = await s.do(s.command(GUEST, "rebuild"))
        assert refused.kind is ReplyKind.ERROR and refused.text.startswith("Only this channel's admins can rebuild")
        refused = await s.do(s.command(GUEST, "forget", "m1"))
        assert refused.kind is ReplyKind.ERROR and "Only this channel's admins can forget" in refused.text
        assert len(engine.sources(channel)) == 2

        started = await s.do(s.command(ADMIN, "/rebuild"))
        assert started.text == replies.REBUILD_STARTED
        await s.scheduler.wait_idle(channel)
        assert s.sent[-1].text.startswith("Rebuilt: tree v1 from 2 sources")

        forgot = await s.do(s.command(CHANNEL_ADMIN, "forget", "m1"))
        assert forgot.kind is ReplyKind.INFO and forgot.text.startswith("Forgot “Ana: Deploys are frozen")
        forgot = await s.do(s.command(MANAGER, "forget", "nosuchsource"))
        assert forgot.kind is ReplyKind.ERROR and "No source 'nosuchsource'" in forgot.text
        assert [source.external_id for source in engine.sources(channel)] == ["m2"]

    run(engine, make_config(tmp_path, channel), channel, body)


def test_a_rebuild_with_nothing_changed_is_said_at_once_and_costs_no_rebuild_of_the_hour(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    """Issue 31: with one rebuild an hour allowed, asking twice more with nothing changed says so
    each time, writes nothing, and leaves the hour's rebuild for `rebuild force`."""
    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        assert engine.unchanged_since(channel) == 0  # never built
        engine.ingest(channel, Document(OTHER_NOTE, "Other", SourceKind.MESSAGE, "", "Ana", "", "m2"))
        await engine.rebuild(channel)
        for _ in range(2):
            said = await s.do(s.command(ADMIN, "rebuild"))
            assert said.kind is ReplyKind.INFO and said.text.startswith("Nothing changed since tree v1")
            assert "`rebuild force` rebuilds anyway" in said.text
        assert engine.stats(channel).version == 1
        started = await s.do(s.command(ADMIN, "rebuild", "force"))
        assert started.text == replies.REBUILD_STARTED
        await s.scheduler.wait_idle(channel)
        assert s.sent[-1].text.startswith("Rebuilt: tree v2")

    config = make_config(tmp_path, channel, rate_limits=RateLimitConfig(rebuilds_per_channel_per_hour=1))
    run(engine, config, channel, body)


def test_a_distributed_slack_app_keeps_an_admins_correction_out_of_the_material(
    engine: Engine, tmp_path: Path
) -> None:
    """Issue 30, point 4: with ``slack.distribution: distributed`` nothing from Slack becomes a
    source, a channel admin's right answer included; the 👎 and its reason are kept."""
    channel = ChannelKey("slack", "T1", uuid.uuid4().hex[:10].upper())
    engine.ingest(channel, Document(NOTE, "Deploys", SourceKind.FILE, "", "Ana", "", "f1"))
    right = "Deploys are frozen from Thursday evening until Monday morning."

    async def body(s: Session) -> None:
        first = await s.do(Question(channel, GUEST, "When are deploys frozen?"))
        said = await s.do(Feedback(channel, ADMIN, first.answer_id, "Outdated.", right))
        assert said.private and said.text == replies.DISTRIBUTED_CORRECTION
        assert [src.kind for src in engine.sources(channel)] == [SourceKind.FILE]
        (record,) = engine.answers(channel)
        assert record.reasons == {ADMIN.id: "Outdated."} and record.downs == 1

    config = make_config(tmp_path, channel)
    config = config.model_copy(update={"slack": SlackConfig(distribution="distributed")})
    run(engine, config, channel, body)


def test_may_manage_and_parse_command(channel: ChannelKey) -> None:
    config = BotConfig(admins=["A"], channels={str(channel): ChannelConfig(admins=["C"])})
    assert may_manage(Person("A"), channel, config) and may_manage(Person("C"), channel, config)
    assert may_manage(Person("X", manages_channel=True), channel, config)
    assert not may_manage(Person("X"), channel, config)
    assert not may_manage(Person("C"), ChannelKey("test", "workspace", "elsewhere"), config)
    assert parse_command("/Rebuild") == ("rebuild", "")
    assert parse_command("forget  3f9a1c2b7d ") == ("forget", "3f9a1c2b7d")
    assert parse_command(" / ") == ("help", "")


def test_question_rate_limit_says_when_to_retry(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    clock = Clock()
    limits = RateLimitConfig(questions_per_user_per_minute=2, rebuilds_per_channel_per_hour=1)

    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        for _ in range(2):
            answer = await s.do(Question(channel, GUEST, "When are deploys frozen?", thread="t1"))
            assert answer.kind is ReplyKind.ANSWER and answer.citations and answer.thread == "t1"
            assert len(answer.answer_id) == 12
        clock.now += 20
        limited = await s.do(Question(channel, GUEST, "When are deploys frozen?"))
        assert limited.kind is ReplyKind.INFO and limited.private
        assert "2 questions in the last minute" in limited.text and "in 40 seconds" in limited.text
        other = await s.do(Question(channel, ADMIN, "When are deploys frozen?"))  # per person
        assert other.kind is ReplyKind.ANSWER
        clock.now += 41
        assert (await s.do(Question(channel, GUEST, "When are deploys frozen?"))).kind is ReplyKind.ANSWER

        assert (await s.do(s.command(ADMIN, "rebuild"))).text == replies.REBUILD_STARTED
        await s.scheduler.wait_idle(channel)
        await s.do(s.pin(OTHER_NOTE, "m2"))  # something to rebuild (nothing changed costs no rebuild)
        limited = await s.do(s.command(ADMIN, "rebuild"))
        assert "1 rebuild in the last hour" in limited.text and "in 60 minutes" in limited.text
        clock.now += 3601
        assert (await s.do(s.command(ADMIN, "rebuild"))).text == replies.REBUILD_STARTED
        await s.scheduler.wait_idle(channel)

    config = make_config(tmp_path, channel, rate_limits=limits)
    run(engine, config, channel, body, clock)


def test_pinned_thread_is_one_source_and_unpin_removes_it(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    async def body(s: Session) -> None:
        thread = s.pin("Which port does the ledger service use?", "t-1", ("It listens on 7443.", "Only inside the VPN."))
        added = await s.do(thread)
        assert added.text.startswith("Added “Thread by Ana: Which port does the ledger service use?” (")
        (source,) = engine.sources(channel)
        assert source.kind is SourceKind.THREAD and source.external_id == "t-1" and source.link == "https://chat/t-1"
        assert source.added_by == "Guest (id U-guest)"  # the name to show, and the id that says who pinned it
        again = await s.do(thread)
        assert "is already in this channel" in again.text
        answer = await s.do(Question(channel, GUEST, "Which port does the ledger listen on?"))
        cited = answer.citations[0]  # the thread's one excerpt: root and replies together
        assert cited.title.startswith("Thread by Ana")
        excerpt = engine.store.channel(channel).source_text(source.id)  # one source, one excerpt
        assert "It listens on 7443." in excerpt and "Only inside the VPN." in excerpt and cited.quote in excerpt

        removed = await s.do(Unpin(channel, GUEST, "t-1"))
        assert removed.kind is ReplyKind.INFO and removed.text.startswith("Removed “Thread by Ana")
        assert engine.sources(channel) == []
        none = await s.do(Unpin(channel, GUEST, "t-1"))
        assert none.kind is ReplyKind.INFO and "nothing to remove" in none.text

        empty = await s.do(s.pin("   ", "t-2"))
        assert empty.kind is ReplyKind.ERROR and "no text" in empty.text

    run(engine, make_config(tmp_path, channel), channel, body)


def test_an_edit_updates_a_pinned_source_and_leaves_other_messages_alone(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        (pinned,) = engine.sources(channel)
        editor = Person("U-ben", "Ben")

        quiet = len(s.sent)
        await s.handler.handle(Pin(channel, editor, "Lunch is at two.", "m9", edited=True), s.send)  # no source
        await s.handler.handle(Pin(channel, editor, NOTE, "m1", author="Ana", edited=True), s.send)  # same text
        assert len(s.sent) == quiet and engine.sources(channel) == [pinned]

        new_text = NOTE.replace("Fridays", "Thursdays")
        updated = await s.do(Pin(channel, editor, new_text, "m1", author="Ana", edited=True))
        assert updated.kind is ReplyKind.INFO and updated.text.startswith("Updated “Ana: Deploys are frozen on Thursdays")
        (source,) = engine.sources(channel)
        assert source.id != pinned.id and source.external_id == "m1"
        assert (source.added_by, source.link) == (pinned.added_by, pinned.link)  # who pinned it, where it is
        answer = await s.do(Question(channel, GUEST, "When are deploys frozen?"))
        assert "Thursdays" in answer.text and "Fridays" not in answer.text

        emptied = await s.do(Pin(channel, editor, "  ", "m1", edited=True))
        assert emptied.kind is ReplyKind.ERROR and engine.sources(channel) == [source]  # the last text stays

        removed = await s.do(Unpin(channel, GUEST, "m1"))  # the pinner may still unpin it
        assert removed.text.startswith("Removed “Ana: Deploys are frozen on Thursdays")

    run(engine, make_config(tmp_path, channel), channel, body)


def test_feedback_is_stored_and_an_admins_right_answer_is_cited_next_time(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    question = "When are deploys frozen?"
    right = "Deploys are frozen from Thursday evening until Monday morning, since the March change."

    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        first = await s.do(Question(channel, GUEST, question))
        assert first.answer_id and "Correction" not in " ".join(c.title for c in first.citations)

        stored = await s.do(Feedback(channel, GUEST, first.answer_id, "It misses the March change.", right))
        assert stored.private and "Only a channel admin's right answer becomes a source" in stored.text
        assert [src.kind for src in engine.sources(channel)] == [SourceKind.MESSAGE]  # a guest's correction: kept out
        (record,) = engine.answers(channel)
        assert record.reasons == {GUEST.id: "It misses the March change."} and record.downs == 1

        added = await s.do(Feedback(channel, ADMIN, first.answer_id, "Outdated.", right))
        assert added.private and "is a source of this channel now" in added.text
        correction = next(src for src in engine.sources(channel) if src.kind is SourceKind.CORRECTION)
        assert correction.title == f"Correction: {question}" and "Admin" in correction.added_by
        again = await s.do(Question(channel, GUEST, question))
        assert any(c.title == f"Correction: {question}" for c in again.citations), again.citations
        assert "Thursday evening" in again.text

        missed = await s.do(Question(channel, GUEST, "Which colour is the ledger service's logo?"))
        refused = await s.do(s.command(GUEST, "feedback"))
        assert refused.kind is ReplyKind.ERROR
        report = await s.do(s.command(ADMIN, "feedback"))
        assert f"“{question}” (0 👍, 2 👎" in report.text, report.text
        assert "– It misses the March change." in report.text and "– Outdated." in report.text
        assert not missed.citations  # nothing in the material: a coverage gap, listed as such
        assert "Which colour is the ledger service's logo?" in report.text.split("could not answer", 1)[1]

    run(engine, make_config(tmp_path, channel), channel, body)


def test_unpin_keeps_the_source_when_configured(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        kept = await s.do(Unpin(channel, GUEST, "m1"))
        assert kept.kind is ReplyKind.INFO and "stays a source" in kept.text and "forget " in kept.text
        assert [source.external_id for source in engine.sources(channel)] == ["m1"]

    run(engine, make_config(tmp_path, channel, unpin_removes_source=False), channel, body)


def test_rejected_upload_keeps_everything_else(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        refused = await s.do(Upload(channel, GUEST, "scan.txt", b"\x00\x01\x02\x03" * 500))
        assert refused.kind is ReplyKind.ERROR and refused.text.startswith("I could not add “scan.txt”:")
        assert not refused.reference  # a known refusal, not a failure of ours
        added = await s.do(Upload(channel, GUEST, "notes.md", b"# Release notes\n\nVersion 2 ships on Monday.\n"))
        assert added.text.startswith("Added “Release notes” (1 excerpt)")
        assert len(engine.sources(channel)) == 2

    run(engine, make_config(tmp_path, channel), channel, body)


@dataclass(frozen=True)
class Reaction:
    """An event type the handler has never heard of."""

    channel: ChannelKey
    emoji: str


def test_unexpected_failure_is_an_error_reply_with_a_logged_reference(
    engine: Engine, channel: ChannelKey, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(s: Session) -> None:
        with caplog.at_level(logging.ERROR, logger="bot.handler"):
            reply = await s.do(Reaction(channel, "tada"))
        assert reply.kind is ReplyKind.ERROR and len(reply.reference) == 8
        assert reply.text.startswith("Something went wrong") and f"(reference {reply.reference})" in reply.text
        (record,) = [r for r in caplog.records if reply.reference in r.getMessage()]
        assert record.levelno == logging.ERROR and record.exc_info is not None

        unknown = await s.do(s.command(GUEST, "frobnicate"))
        assert unknown.kind is ReplyKind.INFO and unknown.text.startswith("I don't know the command “frobnicate”")
        assert unknown.private  # shown to the person who typed it only
        assert "rebuild" in unknown.text and "node ID" in unknown.text

    run(engine, make_config(tmp_path, channel), channel, body)


def test_status_text(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        status = (await s.do(s.command(GUEST, "status"))).text
        assert status.startswith("No tree built yet; 1 source in this channel.")
        assert "Next scheduled rebuild (if anything changed): " in status
        await s.do(s.command(MANAGER, "rebuild"))
        await s.scheduler.wait_idle(channel)
        await s.do(s.pin(OTHER_NOTE, "m2"))
        status = (await s.do(s.command(GUEST, "status"))).text
        assert status.startswith("2 sources in this channel; tree v1 built ")
        assert "Nodes: 1 excerpt (layer 0)." in status
        assert "1 source changed since it was built (added or removed); the next rebuild brings the summaries up to date." in status
        listed = (await s.do(s.command(GUEST, "sources"))).text
        assert listed.startswith("2 sources:") and "“Ana: Deploys are frozen on Fridays after noon, so…” · message · added by Guest on " in listed

    run(engine, make_config(tmp_path, channel), channel, body)

    stats = TreeStats(channel, 3, "2024-05-01T14:03:00+00:00", 2, {0: 15, 1: 3, 2: 1}, 0)
    running = ScheduleStatus(running=True, queued=True, next_run=None)
    text = replies.status_text(stats, running)
    assert text.splitlines() == [
        "2 sources in this channel; tree v3 built 2024-05-01 14:03 UTC.",
        "Nodes: 15 excerpts (layer 0), 3 summaries (layer 1), 1 summary (layer 2).",
        "Up to date with its sources.",
        "A rebuild is running now, and another is queued.",
    ]
    later = ScheduleStatus(False, False, datetime(2024, 5, 1, 15, 0, tzinfo=timezone.utc))
    assert replies.status_text(stats, later).endswith("Next scheduled rebuild (if anything changed): 2024-05-01 15:00 UTC.")


def test_follow_up_questions_carry_their_thread() -> None:
    key = ChannelKey("test", "workspace", "c")
    plain = Question(key, GUEST, "  Who approves it? ")
    assert retrieval_query(plain) == "Who approves it?"
    followup = Question(key, GUEST, "Who approves it?", thread="t", context=("hi", "How do we roll back?", "Use the button."))
    assert retrieval_query(followup) == "How do we roll back?\nUse the button.\nWho approves it?"
    assert pin_title("word " * 20, "Ana").startswith("Ana: word word") and pin_title("Hi", "") == "Hi"


def test_forget_the_only_source_of_a_built_tree(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        await s.do(s.command(MANAGER, "rebuild"))
        await s.scheduler.wait_idle(channel)
        forgot = await s.do(s.command(MANAGER, "forget", "m1"))
        assert forgot.kind is ReplyKind.INFO, forgot.text

    run(engine, make_config(tmp_path, channel), channel, body)


def test_votes_are_stored_with_the_question_and_answer(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m-1"))
        answer = await s.do(Question(channel, GUEST, "When are deploys frozen?"))
        assert answer.kind is ReplyKind.ANSWER and len(answer.answer_id) == 12
        thanks = await s.do(Vote(channel, MANAGER, answer.answer_id, up=True))
        assert thanks.private and "1 👍, 0 👎" in thanks.text
        await s.do(Vote(channel, GUEST, answer.answer_id, up=False))
        (kept,) = engine.answers(channel)
        assert kept.question == "When are deploys frozen?" and kept.text == answer.text
        assert kept.votes == {MANAGER.id: 1, GUEST.id: -1}
        stale = await s.do(Vote(channel, GUEST, "000000000000", up=True))
        assert stale.kind is ReplyKind.ERROR and "no longer kept" in stale.text

    run(engine, make_config(tmp_path, channel), channel, body)


def test_chroma_going_away_is_a_clear_reply_and_the_bot_keeps_going(
    embedder: Any, channel: ChannelKey, tmp_path: Path
) -> None:
    from raptor_engine.store import ChromaStore
    from tests.conftest import make_engine, start_chroma_server

    process, port = start_chroma_server(tmp_path / "db", tmp_path / "server.log")
    engine = make_engine(ChromaStore.remote("127.0.0.1", port), embedder)

    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m-1"))
        assert (await s.do(Question(channel, GUEST, "When are deploys frozen?"))).kind is ReplyKind.ANSWER
        process.terminate()
        process.wait(timeout=15)
        for event in (Question(channel, GUEST, "When are deploys frozen?"), s.command(GUEST, "status"),
                      s.pin(OTHER_NOTE, "m-2")):
            reply = await s.do(event)
            assert reply.kind is ReplyKind.ERROR and "Chroma" in reply.text, reply.text

    try:
        run(engine, make_config(tmp_path, channel), channel, body)
    finally:
        if process.poll() is None:
            process.kill()


def test_a_failing_model_endpoint_is_a_clear_reply(embedder: Any, channel: ChannelKey, tmp_path: Path) -> None:
    from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings
    from raptor_engine.store import ChromaStore
    from testkit.openai_stub import Behaviour, running_stub

    with running_stub() as stub:
        settings = LLMSettings(base_url=stub.base_url, model="stub-model", max_retries=1, backoff_base_s=0.01,
                               timeout_s=1.0)
        with LLMClient(settings) as client:
            counter = embedder.token_counter()
            from raptor_engine.summarizing import ExtractiveSummarizer

            engine = Engine(ChromaStore.embedded(tmp_path / "chroma"), embedder, counter,
                            ExtractiveSummarizer(counter), LLMAnswerer(client, settings))

            async def body(s: Session) -> None:
                await s.do(s.pin(NOTE, "m-1"))
                for behaviour, said in ((Behaviour.error(500), "HTTP 500"), (Behaviour.hang(), "did not answer"),
                                        (Behaviour.malformed(), "unusable response")):
                    stub.default = behaviour
                    reply = await s.do(Question(channel, GUEST, "When are deploys frozen?"))
                    assert reply.kind is ReplyKind.ERROR and said in reply.text, reply.text
                stub.default = Behaviour.ok()
                assert (await s.do(Question(channel, GUEST, "When are deploys frozen?"))).kind is ReplyKind.ANSWER

            run(engine, make_config(tmp_path, channel), channel, body)


OTHER = Person("U-other", "Other")  # neither an admin nor the pinner
NAMESAKE = Person("U-namesake", "Guest")  # GUEST's display name, another person


def note_file(topic: str, size: int) -> bytes:
    """A markdown file of about ``size`` bytes (at least one sentence) about ``topic``."""
    sentence = f"The {topic} service restarts every night at two, and its owner is paged on failure. "
    return (f"# {topic.title()}\n\n" + sentence * max(1, size // len(sentence))).encode()


def test_uploads_over_the_hourly_count_are_refused_and_nothing_stored(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    clock = Clock()

    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        await s.do(Upload(channel, GUEST, "alpha.md", note_file("alpha", 300)))
        clock.now += 600
        refused = await s.do(Upload(channel, GUEST, "beta.md", note_file("beta", 300)))
        assert refused.kind is ReplyKind.INFO and refused.private
        assert refused.text == (
            "I did not add “beta.md”: you have added 2 files and pins in the last hour, the most allowed. "
            "Please try again in 50 minutes."
        )
        pinned = await s.do(s.pin(OTHER_NOTE, "m2"))  # pins count as uploads too
        assert "you have added 2 files and pins" in pinned.text
        assert len(engine.sources(channel)) == 2
        other = await s.do(Upload(channel, OTHER, "beta.md", note_file("beta", 300)))  # per person
        assert other.text.startswith("Added “Beta”")
        clock.now += 3001
        again = await s.do(Upload(channel, GUEST, "gamma.md", note_file("gamma", 300)))
        assert again.text.startswith("Added “Gamma”")
        assert len(engine.sources(channel)) == 4

    config = make_config(tmp_path, channel, rate_limits=RateLimitConfig(uploads_per_user_per_hour=2))
    run(engine, config, channel, body, clock)


def test_bytes_over_the_daily_channel_budget_are_refused_before_loading(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    clock = Clock()
    budget = int(0.003 * 1024 * 1024)  # 3,145 bytes a day
    alpha, beta, gamma = (note_file(topic, 1200) for topic in ("alpha", "beta", "gamma"))
    assert 2 * len(alpha) + len(NOTE) < budget < len(alpha) + len(beta) + len(gamma)

    async def body(s: Session) -> None:
        assert (await s.do(Upload(channel, GUEST, "alpha.md", alpha))).text.startswith("Added “Alpha”")
        twice = await s.do(Upload(channel, OTHER, "alpha copy.md", alpha))  # a duplicate gives its bytes back
        assert "already in this channel" in twice.text
        junk = await s.do(Upload(channel, OTHER, "scan.txt", b"\x00\x01\x02\x03" * 300))  # so does a rejected file
        assert junk.kind is ReplyKind.ERROR and junk.text.startswith("I could not add “scan.txt”")
        clock.now += 3600
        assert (await s.do(Upload(channel, OTHER, "beta.md", beta))).text.startswith("Added “Beta”")
        refused = await s.do(Upload(channel, OTHER, "gamma.md", gamma))
        assert refused.kind is ReplyKind.INFO and refused.private
        assert refused.text == (
            "I did not add “gamma.md” (1.1 KB): this channel may take in 3.1 KB of files and pins per day, "
            "and that is used up. Please try again in 23 hours."
        )
        huge = await s.do(Upload(channel, OTHER, "huge.md", note_file("huge", 5000)))
        assert huge.text == (
            "I did not add “huge.md”: at 4.8 KB it is more than this channel may take in per day (3.1 KB)."
        )
        assert [source.title for source in engine.sources(channel)] == ["Alpha", "Beta"]
        short = await s.do(s.pin(NOTE, "m1"))  # a short pin still fits what is left
        assert short.text.startswith("Added “Ana: Deploys")
        clock.now += 23 * 3600  # 24 hours after alpha: its bytes leave the window
        assert (await s.do(Upload(channel, OTHER, "gamma.md", gamma))).text.startswith("Added “Gamma”")

    config = make_config(tmp_path, channel, rate_limits=RateLimitConfig(upload_mb_per_channel_per_day=0.003))
    run(engine, config, channel, body, clock)


def test_caps_on_a_channels_sources_and_stored_bytes(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    capped = ChannelKey(channel.platform, channel.workspace, channel.channel + "-capped")

    async def body(s: Session) -> None:
        for n, text in enumerate((NOTE, OTHER_NOTE)):
            await s.do(s.pin(text, f"m{n}"))
        full = await s.do(s.pin("The cafeteria closes at three on Fridays.", "m3"))
        assert full.kind is ReplyKind.ERROR and full.text == (
            "I did not add “Ana: The cafeteria closes at three on Fridays.”: this channel already holds "
            "2 sources, the most allowed. An admin can forget one to make room."
        )
        assert len(engine.sources(channel)) == 2

        # Another channel with its own cap on stored bytes (and no cap on the number of sources).
        big = await s.do(Upload(capped, GUEST, "alpha.md", note_file("alpha", 1500)))
        assert big.text.startswith("Added “Alpha”")
        over = await s.do(Upload(capped, GUEST, "beta.md", note_file("beta", 700)))
        assert over.kind is ReplyKind.ERROR and over.text == (
            "I did not add “beta.md” (0.6 KB): this channel holds 1.4 KB of sources and may hold at most 2 KB. "
            "An admin can forget a source to make room."
        )
        assert (await s.do(Pin(capped, GUEST, NOTE, "m1"))).text.startswith("Added “Deploys")  # a pin still fits
        assert len(engine.sources(capped)) == 2

    channels = {
        str(channel): ChannelConfig(admins=[CHANNEL_ADMIN.id]),
        str(capped): ChannelConfig(limits=LimitsConfig(max_stored_mb_per_channel=0.002, max_sources_per_channel=0)),
    }
    config = make_config(tmp_path, channel, limits=LimitsConfig(max_sources_per_channel=2), channels=channels)
    run(engine, config, channel, body)


def test_unpin_removes_a_source_only_for_admins_and_its_pinner(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        kept = await s.do(Unpin(channel, OTHER, "m1"))
        assert kept.kind is ReplyKind.INFO and kept.text == (
            "“Ana: Deploys are frozen on Fridays after noon, so…” stays a source of this channel: "
            "only Guest, who added it, or this channel's admins can remove it."
        )
        assert (await s.do(Unpin(channel, NAMESAKE, "m1"))).text == kept.text  # the same name is not the same person
        assert [source.external_id for source in engine.sources(channel)] == ["m1"]
        listed = (await s.do(s.command(OTHER, "sources"))).text
        assert " · added by Guest on " in listed  # the name is shown, not the id
        removed = await s.do(Unpin(channel, GUEST, "m1"))  # the pinner
        assert removed.text.startswith("Removed “Ana: Deploys are frozen")
        assert engine.sources(channel) == []

        for unpinner in (ADMIN, CHANNEL_ADMIN, MANAGER):
            await s.do(s.pin(OTHER_NOTE, "m2"))
            removed = await s.do(Unpin(channel, unpinner, "m2"))
            assert removed.text.startswith("Removed “Ana: The staging database"), unpinner
            assert engine.sources(channel) == []

        # A source kept before pinners' ids were stored names nobody who could prove to be its pinner.
        old = Document(NOTE, "Old note", SourceKind.MESSAGE, added_by="Guest", external_id="m-old")
        await asyncio.to_thread(engine.ingest, channel, old)
        kept = await s.do(Unpin(channel, GUEST, "m-old"))
        assert kept.text == "“Old note” stays a source of this channel: only this channel's admins can remove it."
        assert (await s.do(Unpin(channel, CHANNEL_ADMIN, "m-old"))).text.startswith("Removed “Old note”")

    run(engine, make_config(tmp_path, channel), channel, body)


def test_a_channel_keeps_its_configured_number_of_answers(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    """Answers are kept for their buttons, the newest ``kept_answers_per_channel`` of them
    (pruned once ten more have come); a vote on one that went is refused with the reason."""
    limits = LimitsConfig(kept_answers_per_channel=2)
    config = make_config(tmp_path, channel, channels={str(channel): ChannelConfig(limits=limits)},
                         rate_limits=RateLimitConfig(questions_per_user_per_minute=0))

    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m-1"))
        ids = [(await s.do(Question(channel, GUEST, f"When are deploys frozen? ({n})"))).answer_id for n in range(13)]
        kept = [a.answer_id for a in engine.answers(channel)]
        assert len(kept) == 2 and set(kept) == set(ids[-2:])
        gone = await s.do(Vote(channel, GUEST, ids[0], up=True))
        assert gone.kind is ReplyKind.ERROR and "no longer kept" in gone.text

    run(engine, config, channel, body)


def test_a_held_back_rebuild_is_said_and_rebuild_force_serves_it(
    engine: Engine, channel: ChannelKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        await s.do(s.pin(OTHER_NOTE, "m2"))
        await s.do(s.command(ADMIN, "rebuild"))
        await s.scheduler.wait_idle(channel)
        assert s.sent[-1].text.startswith("Rebuilt: tree v1")
        none_yet = await s.do(s.command(ADMIN, "check"))
        assert none_yet.text.startswith("No approved questions yet")
        refused = await s.do(s.command(GUEST, "check"))
        assert refused.kind is ReplyKind.ERROR

        await s.do(s.pin(THIRD_NOTE, "m3"))  # something to rebuild (nothing changed builds nothing)
        first_sources_leaves_lost(monkeypatch)  # a broken leaf cache: one source's excerpts lost
        await s.do(s.command(ADMIN, "rebuild"))
        await s.scheduler.wait_idle(channel)
        held = s.sent[-1]
        assert held.kind is ReplyKind.INFO and held.text.startswith("Rebuild held back: it holds 2 of the 3 excerpts")
        assert "`rebuild force` serves the new one anyway" in held.text
        status = await s.do(s.command(ADMIN, "status"))
        assert "tree v1 built" in status.text and "The last rebuild was held back" in status.text

        await s.do(s.command(ADMIN, "rebuild", "force"))
        await s.scheduler.wait_idle(channel)
        served = s.sent[-1].text
        assert served.startswith("Rebuilt: tree v3") and "Served although the check would have held it back" in served

    run(engine, make_config(tmp_path, channel), channel, body)


def test_edits_of_one_message_are_applied_in_the_order_they_were_made(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    from dataclasses import replace

    async def body(s: Session) -> None:
        pinned = s.pin("The release train leaves on Mondays at nine.", "m9")
        await s.do(pinned)

        def edit(text: str, at: float) -> Pin:
            return replace(pinned, text=text, edited=True, revision=at)

        # Two edits at once, handled concurrently: the later one wins, and only one version stays.
        await asyncio.gather(s.handler.handle(edit("The release train leaves on Tuesdays at nine.", 200.0), s.send),
                             s.handler.handle(edit("The release train leaves on Fridays at noon.", 300.0), s.send))
        # An older edit delivered late (a retry, another replica's backlog) changes nothing.
        await s.handler.handle(edit("The release train leaves on Sundays.", 100.0), s.send)
        [source] = [x for x in engine.sources(channel) if x.external_id == "m9"]
        assert engine.store.channel(channel).source_text(source.id).endswith("Fridays at noon.")

    run(engine, make_config(tmp_path, channel), channel, body)


def test_a_scheduled_rebuild_held_back_is_told_in_the_channel_once(
    engine: Engine, channel: ChannelKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.neutral import ReplyAddress

    posted: list[tuple[ReplyAddress, Reply]] = []

    def courier(address: ReplyAddress) -> Callable[[Reply], Awaitable[None]]:
        async def send(reply: Reply) -> None:
            posted.append((address, reply))
        return send

    async def session() -> None:
        config = make_config(tmp_path, channel)
        scheduler = RebuildScheduler(AsyncEngine(engine), config.bot, couriers={channel.platform: courier})
        await scheduler.start()
        try:
            engine.ingest(channel, Document(NOTE, "Note", SourceKind.MESSAGE, "", "Ana", "", "m1"))
            engine.ingest(channel, Document(OTHER_NOTE, "Other", SourceKind.MESSAGE, "", "Ana", "", "m2"))
            assert await scheduler.check(channel)
            await scheduler.wait_idle(channel)
            assert posted == []  # a scheduled build that was served posts nothing
            engine.ingest(channel, Document(NOTE + " Ask Ben.", "Note", SourceKind.MESSAGE, "", "Ana", "", "m3"))
            first_sources_leaves_lost(monkeypatch)  # a broken leaf cache: one source's excerpts lost
            for _ in range(2):  # held back twice, for the same reason: told once
                assert await scheduler.check(channel)
                await scheduler.wait_idle(channel)
        finally:
            await scheduler.stop()

    asyncio.run(session())
    [(address, reply)] = posted
    assert address == ReplyAddress(channel) and reply.text.startswith("Rebuild held back:")
