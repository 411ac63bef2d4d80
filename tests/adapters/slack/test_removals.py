"""Slack's deletions and channel changes, read from the payload shapes of Slack's reference."""

from __future__ import annotations

from typing import Any

from adapters.slack.payload import BotIdentity
from adapters.slack.removals import platform_change
from bot.neutral import ChannelBack, ChannelGone, ChannelKey, Deleted

BOT = BotIdentity("UBOT", "BBOT", "T1")
KEY = ChannelKey("slack", "T1", "C1")


def callback(event: dict[str, Any]) -> dict[str, Any]:
    return {"token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback", "event_id": "Ev1",
            "event_time": 1, "event": event}


def test_deleted_files_and_messages_become_deletions() -> None:
    documented = platform_change(callback({"type": "file_deleted", "file_id": "F2147483862",
                                           "event_ts": "1361482916.000004"}), BOT)
    assert documented == Deleted(ChannelKey("slack", "T1", ""), external_ids=("F2147483862",), whole_workspace=True)
    named = platform_change(callback({"type": "file_deleted", "file_id": "F1", "channel_ids": ["C1"],
                                      "event_ts": "1.2"}), BOT)
    assert named == Deleted(KEY, external_ids=("F1",))
    message = platform_change(callback({"type": "message", "subtype": "message_deleted", "hidden": True,
                                        "channel": "C1", "ts": "1358878755.000001",
                                        "deleted_ts": "1358878749.000002"}), BOT)
    assert message == Deleted(KEY, external_ids=("C1:1358878749.000002",))
    assert platform_change(callback({"type": "file_deleted", "event_ts": "1.2"}), BOT) is None


def test_channels_archived_deleted_or_left_by_the_bot_are_gone_and_unarchived_ones_back() -> None:
    for kind in ("channel_archive", "channel_deleted", "group_archive", "group_deleted", "channel_left", "group_left"):
        change = platform_change(callback({"type": kind, "channel": "C1", "user": "U1", "event_ts": "1.2"}), BOT)
        assert isinstance(change, ChannelGone) and change.channel == KEY, kind
    left = {"type": "member_left_channel", "channel": "C1", "channel_type": "C", "team": "T1", "event_ts": "1.2"}
    assert isinstance(platform_change(callback({**left, "user": "UBOT"}), BOT), ChannelGone)
    assert platform_change(callback({**left, "user": "UBEN"}), BOT) is None  # someone else left
    joined = {**left, "type": "member_joined_channel", "user": "UBOT", "inviter": "UANA"}
    assert platform_change(callback(joined), BOT) == ChannelBack(KEY)
    for kind in ("channel_unarchive", "group_unarchive"):
        assert platform_change(callback({"type": kind, "channel": "C1", "user": "U1"}), BOT) == ChannelBack(KEY)
    assert platform_change(callback({"type": "channel_archive", "user": "U1"}), BOT) is None  # no channel
    assert platform_change(callback({"type": "message", "channel": "C1", "user": "U1", "text": "hi", "ts": "1.2"}),
                           BOT) is None
