"""What a front-end posts from the reply stream, and whom a worker tells, when someone else can
write to Redis: against a real Valkey, with a front-end's reader and a courier stand-in that
records what would reach the platform. Only entries signed with the bot's secret, of the kinds
a worker sends, to where someone asked for a rebuild, are posted; requests the bot did not sign
are never told."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from bot.coordination.lease import ChannelLeases
from bot.coordination.link import RedisLink
from bot.coordination.reply_stream import REPLY_PURPOSE, ReplyPublisher, encode
from bot.coordination.signing import RecordSigner
from bot.neutral import ChannelKey, Reply, ReplyAddress, ReplyKind, Send
from bot.rebuilds.requests import REQUEST_PURPOSE, RebuildRequests, Requester
from raptor_engine import channel_digest
from testkit.cluster import COORDINATION_SECRET
from tests.coordination.conftest import coordination_config, reply_reader, signer

KEY = ChannelKey("slack", "T1", "CASKED")
ASKED = ReplyAddress(KEY, "1700000000.000100")
STRANGER = RecordSigner("someone-else's-secret-0123456789abcdef")


class Platform:
    """The courier stand-in: what the front-end would post, where."""

    def __init__(self) -> None:
        self.posts: list[tuple[ReplyAddress, Reply]] = []

    def courier(self, address: ReplyAddress) -> Send:
        async def send(reply: Reply) -> None:
            self.posts.append((address, reply))
        return send


def link_to(url: str) -> RedisLink:
    """A process's link (its asyncio client belongs to the first loop that uses it: one per ``asyncio.run``)."""
    return RedisLink(coordination_config(url))


def ask(url: str, address: ReplyAddress = ASKED) -> None:
    asyncio.run(RebuildRequests(link_to(url), signer()).add(address.channel, Requester("ana", address)))


def deliver(url: str, *entries: dict[str, str]) -> Platform:
    """Appends ``entries`` to the Slack reply stream as they are, and lets one front-end read them."""
    platform = Platform()

    async def run() -> None:
        reader = reply_reader(link_to(url), {"slack": platform.courier}, "front-1")
        await reader.read_once()  # makes the group
        link = link_to(url)
        for entry in entries:
            link.blocking.xadd(link.key("replies", "slack"), entry)  # type: ignore[arg-type]
        while await reader.read_once():
            pass

    asyncio.run(run())
    return platform


def dropped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "bot.coordination.reply_stream" and r.getMessage().startswith("dropped")]


RESULT = Reply(ReplyKind.INFO, "Rebuilt: tree v2 from 3 sources")


def test_a_signed_result_for_a_requester_is_posted(redis_url: str) -> None:
    ask(redis_url)
    entry = signer().signed(REPLY_PURPOSE, encode(ASKED, RESULT))
    assert [(address, reply.text) for address, reply in deliver(redis_url, entry).posts] == [(ASKED, RESULT.text)]


def test_the_publisher_signs_what_it_appends(redis_url: str) -> None:
    ask(redis_url)
    platform = Platform()

    async def run() -> None:
        link = link_to(redis_url)
        reader = reply_reader(link, {"slack": platform.courier}, "front-1")
        await reader.read_once()
        ReplyPublisher(link, signer()).publish(ASKED, Reply(ReplyKind.PROGRESS, "Clustering layer 1"))
        await reader.read_once()

    asyncio.run(run())
    assert [reply.text for _, reply in platform.posts] == ["Clustering layer 1"]


FORGED_TEXT = "Click https://evil.example to re-authorise the bot"


@pytest.mark.parametrize(("entry", "why"), [
    (encode(ASKED, Reply(ReplyKind.INFO, FORGED_TEXT)), "not signed"),
    (STRANGER.signed(REPLY_PURPOSE, encode(ASKED, Reply(ReplyKind.INFO, FORGED_TEXT))), "not signed"),
    ({**signer().signed(REPLY_PURPOSE, encode(ASKED, RESULT)), "text": FORGED_TEXT}, "not signed"),
    (signer().signed(REQUEST_PURPOSE, encode(ASKED, Reply(ReplyKind.INFO, FORGED_TEXT))), "not signed"),
    ({**encode(ASKED, Reply(ReplyKind.INFO, FORGED_TEXT)), "sig": "é" * 64}, "not signed"),
], ids=["unsigned", "another secret", "text changed", "signed for another purpose", "not ascii"])
def test_an_entry_not_signed_by_the_bot_is_dropped_and_logged(
        redis_url: str, caplog: pytest.LogCaptureFixture, entry: dict[str, str], why: str) -> None:
    caplog.set_level(logging.WARNING)
    ask(redis_url)
    assert deliver(redis_url, entry).posts == []
    [message] = dropped(caplog)
    assert why in message and COORDINATION_SECRET not in caplog.text


@pytest.mark.parametrize(("address", "reply", "why"), [
    (ReplyAddress(ChannelKey("slack", "T1", "CGENERAL")), RESULT, "nobody there asked"),
    (ReplyAddress(KEY, "1700000999.000200"), RESULT, "nobody there asked"),  # another thread of the channel
    (ReplyAddress(KEY), RESULT, "nobody there asked"),  # the channel itself, where nobody asked
    (ASKED, Reply(ReplyKind.ANSWER, FORGED_TEXT), "only progress and results"),
    (ReplyAddress(ChannelKey("discord", "G1", "C1")), RESULT, "another platform"),
], ids=["another channel", "another thread", "the channel, not the thread", "an answer", "another platform"])
def test_a_signed_entry_not_to_a_requester_or_not_a_workers_kind_is_dropped(
        redis_url: str, caplog: pytest.LogCaptureFixture, address: ReplyAddress, reply: Reply, why: str) -> None:
    caplog.set_level(logging.WARNING)
    ask(redis_url)
    ask(redis_url, ReplyAddress(ChannelKey("discord", "G1", "C1")))  # asked there, but it is no Slack channel
    assert deliver(redis_url, signer().signed(REPLY_PURPOSE, encode(address, reply))).posts == []
    [message] = dropped(caplog)
    assert why in message


def test_a_result_is_posted_after_its_build_ended_and_the_requester_was_moved_to_told(redis_url: str) -> None:
    ask(redis_url)
    link = link_to(redis_url)
    requests, leases = RebuildRequests(link, signer()), ChannelLeases(link, 5, "worker")
    with leases.hold(KEY) as held:
        assert requests.take(KEY, leases, held) == [Requester("ana", ASKED)]
        assert requests.finish(KEY, leases, held) == 0  # told: the build's lists are gone
    entry = signer().signed(REPLY_PURPOSE, encode(ASKED, RESULT))
    assert [reply.text for _, reply in deliver(redis_url, entry).posts] == [RESULT.text]
    assert 0 < link.blocking.ttl(link.key("told", channel_digest(KEY))) <= 3600


def test_a_worker_takes_only_requests_the_bot_signed_for_the_channel(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    link = link_to(redis_url)
    requests, leases = RebuildRequests(link, signer()), ChannelLeases(link, 5, "worker")
    ask(redis_url)
    waiting = link.key("requests", channel_digest(KEY))
    elsewhere = Requester("mallory", ReplyAddress(ChannelKey("slack", "T1", "CGENERAL")))
    link.blocking.rpush(waiting, json.dumps(Requester("mallory", ReplyAddress(KEY, "9.9")).fields()),  # unsigned
                        json.dumps(STRANGER.signed(REQUEST_PURPOSE, elsewhere.fields())),  # another secret
                        json.dumps(signer().signed(REQUEST_PURPOSE, elsewhere.fields())),  # copied from another channel
                        "not even JSON")
    with leases.hold(KEY) as held:
        assert requests.take(KEY, leases, held) == [Requester("ana", ASKED)]
    assert len([r for r in caplog.records if "did not sign" in r.getMessage()]) == 4
    assert not asyncio.run(RebuildRequests(link_to(redis_url), signer()).asked(ReplyAddress(KEY, "9.9")))


def test_a_request_is_recorded_only_for_its_own_channel(redis_url: str) -> None:
    with pytest.raises(ValueError, match="answered in that channel"):
        asyncio.run(RebuildRequests(link_to(redis_url), signer()).add(ChannelKey("slack", "T1", "CGENERAL"),
                                                                     Requester("ana", ASKED)))
