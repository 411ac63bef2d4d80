"""Pending rebuilds resume in one process only: the one whose schedule is enabled for the channel.

Runs the real scheduler on the real engine (packaged model, embedded Chroma). A rebuild
requested before a restart is represented by its store note, as a cut request leaves it.
"""

from __future__ import annotations

import asyncio

from bot.config import BotConfig, ChannelConfig, ScheduleConfig
from bot.engine_calls import AsyncEngine
from bot.rebuilds.in_process import NOTE, RebuildScheduler
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey, Document

OFF = ScheduleConfig(enabled=False)


def pending_rebuild(engine: Engine, key: ChannelKey) -> None:
    """A channel with a source and a rebuild requested before the restart."""
    engine.ingest(key, Document("Penguins live in Antarctica. They eat krill.", "note"))
    engine.set_note(key, NOTE, "ann at 2026-01-01T00:00:00+00:00")


async def resumed(engine: Engine, config: BotConfig, key: ChannelKey) -> bool:
    """Starts a scheduler as a restarted process would; True if it resumed the channel's rebuild."""
    scheduler = RebuildScheduler(AsyncEngine(engine), config)
    await scheduler.start()
    try:
        running = (await scheduler.status(key)).running
        await scheduler.wait_idle()
        return running
    finally:
        await scheduler.stop()


def test_a_process_without_the_schedule_never_resumes(engine: Engine, channel: ChannelKey) -> None:
    pending_rebuild(engine, channel)
    assert not asyncio.run(resumed(engine, BotConfig(schedule=OFF), channel))
    # Left for the process that runs the schedule: the note stays, nothing was built.
    assert NOTE in engine.notes(channel) and engine.stats(channel).version == 0

    assert asyncio.run(resumed(engine, BotConfig(), channel))
    assert NOTE not in engine.notes(channel) and engine.stats(channel).version == 1


def test_a_channel_schedule_decides_for_its_channel(engine: Engine, channel: ChannelKey) -> None:
    other = ChannelKey(channel.platform, channel.workspace, channel.channel + "-b")
    pending_rebuild(engine, channel)
    pending_rebuild(engine, other)
    # Off for everything except `channel`, which has its own schedule.
    config = BotConfig(schedule=OFF, channels={str(channel): ChannelConfig(schedule=ScheduleConfig())})

    async def scenario() -> tuple[bool, bool]:
        scheduler = RebuildScheduler(AsyncEngine(engine), config)
        await scheduler.start()
        try:
            return (await scheduler.status(channel)).running, (await scheduler.status(other)).running
        finally:
            await scheduler.wait_idle()
            await scheduler.stop()

    assert asyncio.run(scenario()) == (True, False)
    assert NOTE not in engine.notes(channel) and NOTE in engine.notes(other)
