"""The app manifest agrees with the code: the command, the events listened to, the scopes used."""

from __future__ import annotations

from pathlib import Path

import yaml

import adapters.slack
from adapters.slack.removals import FOLLOWED_EVENTS
from bot.config import SlackConfig

MANIFEST = Path(adapters.slack.__file__).parent / "manifest.yaml"


def test_the_manifest_matches_the_adapter() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    [command] = manifest["features"]["slash_commands"]
    assert command["command"] == SlackConfig().command
    settings = manifest["settings"]
    assert settings["socket_mode_enabled"] is True and settings["interactivity"]["is_enabled"] is True
    events = set(settings["event_subscriptions"]["bot_events"])
    assert {"app_mention", "message.channels", "message.im", "pin_added", "pin_removed"} <= events
    # Every event the adapter follows to forget what was deleted (message_deleted comes with message.*).
    assert set(FOLLOWED_EVENTS) <= events
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    # One scope per Web API method the adapter calls (and for the events above).
    needed = {"chat:write", "commands", "files:read", "files:write", "reactions:write", "users:read",
              "channels:history", "im:history", "pins:read", "app_mentions:read", "im:write",
              "channels:read", "groups:read", "im:read", "mpim:read"}  # conversations.info (Slack Connect)
    assert needed <= scopes
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True
