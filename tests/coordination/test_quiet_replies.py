"""Several replicas without noise (issue 28, point 8), against a real Valkey: a reply that waited
in the stream longer than ``coordination.reply_max_age_s`` (an outage) is dropped and logged,
not posted late in a burst."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from bot.coordination.reply_stream import REPLY_PURPOSE, ReplyPublisher, encode
from bot.deploy_config import REPLY_MAX_AGE_S
from bot.neutral import ChannelKey, Reply, ReplyAddress, ReplyKind
from tests.coordination.conftest import coordination_config, reply_reader, signer
from tests.coordination.test_signed_replies import Platform, ask, link_to

KEY = ChannelKey("slack", "T1", "CQUIET")
ASKED = ReplyAddress(KEY, "1700000000.000200")


def stale_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "bot.coordination.reply_stream" and "older than" in r.getMessage()]


def test_replies_older_than_the_limit_are_dropped_and_logged_once(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    ask(redis_url, ASKED)
    platform = Platform()
    link = link_to(redis_url)
    stream = link.key("replies", "slack")
    eleven_minutes_ago = int(time.time() * 1000) - 11 * 60 * 1000
    for number, text in enumerate(("Rebuilding: clustering layer 1…", "Rebuilding: summarising…", "Rebuilt: tree v1")):
        kind = ReplyKind.INFO if text.startswith("Rebuilt") else ReplyKind.PROGRESS
        entry = signer().signed(REPLY_PURPOSE, encode(ASKED, Reply(kind, text)))
        link.blocking.xadd(stream, entry, id=f"{eleven_minutes_ago + number}-0")  # type: ignore[arg-type]

    async def run() -> None:
        reader = reply_reader(link_to(redis_url), {"slack": platform.courier}, "front-1")
        ReplyPublisher(link, signer()).publish(ASKED, Reply(ReplyKind.INFO, "Rebuilt: tree v2"))
        while await reader.read_once():
            pass

    asyncio.run(run())
    assert [reply.text for _, reply in platform.posts] == ["Rebuilt: tree v2"]  # only the fresh one
    [line] = stale_lines(caplog)
    assert line.startswith(f"dropped 3 rebuild replies older than {REPLY_MAX_AGE_S:.0f} s"), line
    assert not link.blocking.xpending(stream, "front-ends")["pending"]  # all acknowledged: never posted later


def test_the_limit_is_the_front_ends_setting(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    assert coordination_config(redis_url).reply_max_age_s == REPLY_MAX_AGE_S == 300
    ask(redis_url, ASKED)
    platform = Platform()

    async def run() -> None:
        link = link_to(redis_url)
        reader = reply_reader(link, {"slack": platform.courier}, "front-1", max_age_s=1.0)
        await reader.read_once()  # makes the group, then the front-ends go quiet (an outage)
        ReplyPublisher(link, signer()).publish(ASKED, Reply(ReplyKind.INFO, "Rebuilt: tree v1"))
        await asyncio.sleep(1.5)
        while await reader.read_once():
            pass

    asyncio.run(run())
    assert platform.posts == []
    assert stale_lines(caplog)
