"""The Slack vocabulary every translation module shares: where something happened, who
the bot is, who a person is, and Slack's message markup as plain text.

Pure: nothing here performs input/output. Contract:

* a channel's key is ``ChannelKey("slack", team_id, channel_id)`` (:func:`channel_key`);
  a direct message conversation is a channel of its own;
* a pinned message's external id is ``"<channel>:<ts>"`` (:func:`message_external_id`),
  the same for its :class:`~bot.neutral.Pin` and its :class:`~bot.neutral.Unpin`;
* the ``as_*`` readers never raise: a missing or mistyped field reads as empty (or 0),
  which is how a malformed payload ends up dropped with a log line, not an exception.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.neutral import ChannelKey, Person

PLATFORM = "slack"
WORKING_REACTION = "hourglass_flowing_sand"  # shown on the message being worked on, removed after

Payload = Mapping[str, Any]

# <@U123>, <@U123|name>, <#C123|general>, <!here>, <!subteam^S123|@team>, <https://x|label>, <mailto:a@b|a@b>
_ANGLE = re.compile(r"<([^<>|]*)(?:\|([^<>]*))?>")
_SPACES = re.compile(r"[ \t]+")


# -- who and where ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is in its workspace (from ``auth.test``): its user id, its bot id, its team."""

    user_id: str
    bot_id: str = ""
    team_id: str = ""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an arrival came from: the team, the conversation, who did it, the message
    that carried it (``ts``, empty when none, e.g. a slash command) and that message's
    thread (``thread_ts``, empty outside threads; equal to ``ts`` for a thread's root)."""

    team: str
    channel: str
    user: str
    ts: str = ""
    thread_ts: str = ""

    @property
    def key(self) -> ChannelKey:
        return channel_key(self.team, self.channel)


def channel_key(team: str, channel: str) -> ChannelKey:
    """The key of a Slack conversation: ``ChannelKey("slack", team_id, channel_id)``."""
    return ChannelKey(PLATFORM, team, channel)


def is_direct(channel: str) -> bool:
    """Whether ``channel`` is a direct conversation with the bot (Slack's ids of those start with D)."""
    return channel.startswith("D")


def message_external_id(channel: str, ts: str) -> str:
    """The external id of a pinned message: its channel and its ``ts`` (unique in a workspace)."""
    return f"{channel}:{ts}"


# -- reading payload fields without trusting them -------------------------------------


def as_text(value: Any) -> str:
    """``value`` when it is a string, else empty."""
    return value if isinstance(value, str) else ""


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int:
    """``value`` as an int, 0 when it is not one."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


# -- text and people ----------------------------------------------------------------


def plain_text(text: str, bot_user_id: str = "") -> str:
    """Slack's message markup as plain text: the bot's own mention removed, other
    mentions as ``@name``/``@U123``, channels as ``#name``, links as their URL (with the
    label first when it says something else), ``&amp;``/``&lt;``/``&gt;`` unescaped.
    Runs of spaces are folded and the ends stripped; line breaks are kept."""

    def replace(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith("@"):
            user = target[1:]
            return "" if bot_user_id and user == bot_user_id else "@" + (label or user)
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            special = target[1:].split("^", 1)[0]
            return label if label and label.startswith("@") else "@" + (label or special)
        url = target.removeprefix("mailto:") if target.startswith("mailto:") else target
        if label and label not in target:
            return f"{label} ({url})"
        return url

    converted = _ANGLE.sub(replace, text)
    unescaped = converted.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    lines = [_SPACES.sub(" ", line).strip() for line in unescaped.split("\n")]
    return "\n".join(lines).strip()


def mentions(text: str, user_id: str) -> bool:
    """True when the message text tags ``user_id`` (``<@U123>`` or ``<@U123|name>``)."""
    return bool(user_id) and (f"<@{user_id}>" in text or f"<@{user_id}|" in text)


def person_from_user(user: Mapping[str, Any], home_team: str, fallback_id: str = "") -> Person:
    """A person from a ``users.info`` user: the display name (else real name, else handle).
    Admins and owners of ``home_team``, the installing workspace, manage every channel; a
    member of another organisation (a Slack Connect guest, whose ``team_id`` is theirs) never
    does, whatever their own workspace made them."""
    profile = as_mapping(user.get("profile"))
    name = (
        as_text(profile.get("display_name"))
        or as_text(profile.get("real_name"))
        or as_text(user.get("real_name"))
        or as_text(user.get("name"))
    )
    admin = bool(user.get("is_admin") or user.get("is_owner") or user.get("is_primary_owner"))
    manages = admin and bool(home_team) and as_text(user.get("team_id")) == home_team
    return Person(as_text(user.get("id")) or fallback_id, name, manages)
