"""The app manifest agrees with the code: the command, the events listened to, the scopes used."""

from __future__ import annotations

from pathlib import Path

import yaml

import adapters.slack
from adapters.slack.assistant_events import ASSISTANT_EVENTS
from adapters.slack.listeners import HANDLED_EVENTS
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


def test_the_manifest_declares_the_assistant_container() -> None:
    """Issue 30, point 4: the assistant view with its description and prompts, the events the
    adapter listens to for it (questions there are message.im), and the assistant:write scope."""
    manifest = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    view = manifest["features"]["assistant_view"]
    assert view["assistant_description"].strip()
    prompts = view["suggested_prompts"]
    assert 3 <= len(prompts) <= 4 and all(p["title"] and p["message"] for p in prompts)
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    assert {"assistant_thread_started", "assistant_thread_context_changed", "message.im"} <= events
    assert set(ASSISTANT_EVENTS) <= set(HANDLED_EVENTS) and set(ASSISTANT_EVENTS) <= events
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    # assistant.threads.*, and users.conversations (channels:read, groups:read) for memberships.
    assert {"assistant:write", "chat:write", "channels:read", "groups:read", "im:history"} <= scopes
