"""Pure translation of Slack's deletions and channel changes into what the bot follows.

:func:`platform_change` reads an Events API payload (``event_callback``) and gives the
:data:`~bot.neutral.PlatformChange` it stands for, or None when it is none of these:

* ``file_deleted``: the file's sources go (:class:`~bot.neutral.Deleted` under the file's id,
  in the channels the event names, else in every channel of the workspace: Slack's own
  example names none);
* a ``message`` of subtype ``message_deleted``: the sources the message became (a pin:
  ``"<channel>:<ts>"`` of the deleted ``deleted_ts``) go; a deleted thread reply is also told
  by :func:`deleted_reply`, so that a pinned thread's source loses it;
* ``channel_archive``, ``group_archive``, ``channel_deleted``, ``group_deleted``,
  ``channel_left``, ``group_left`` (the bot was removed), and ``member_left_channel`` of the
  bot itself: :class:`~bot.neutral.ChannelGone`;
* ``channel_unarchive``, ``group_unarchive``, and ``member_joined_channel`` of the bot itself:
  :class:`~bot.neutral.ChannelBack`.

Never raises: a payload missing what it needs is None (and then ignored as any other event).
"""

from __future__ import annotations

from adapters.slack.payload import (
    BotIdentity,
    Origin,
    Payload,
    as_list,
    as_mapping,
    as_text,
    channel_key,
    message_external_id,
)
from bot.neutral import ChannelBack, ChannelGone, Deleted, PlatformChange

GONE_EVENTS = {
    "channel_archive": "archived",
    "group_archive": "archived",
    "channel_deleted": "deleted",
    "group_deleted": "deleted",
    "channel_left": "the bot was removed from it",
    "group_left": "the bot was removed from it",
}
BACK_EVENTS = ("channel_unarchive", "group_unarchive")
FOLLOWED_EVENTS = ("file_deleted", *GONE_EVENTS, *BACK_EVENTS, "member_left_channel", "member_joined_channel")
"""The event types (besides ``message``) that may be a platform change: the app listens to them."""


def platform_change(body: Payload, identity: BotIdentity) -> PlatformChange | None:
    """The deletion or channel change an Events API payload stands for, or None. Never raises."""
    event = as_mapping(body.get("event"))
    kind = as_text(event.get("type"))
    team = as_text(body.get("team_id")) or as_text(event.get("team")) or identity.team_id
    channel = as_text(event.get("channel"))
    if kind == "file_deleted":
        return _file_deleted(event, team)
    if kind == "message" and event.get("subtype") == "message_deleted":
        deleted_ts = as_text(event.get("deleted_ts")) or as_text(as_mapping(event.get("previous_message")).get("ts"))
        if not channel or not deleted_ts:
            return None
        return Deleted(channel_key(team, channel), external_ids=(message_external_id(channel, deleted_ts),))
    if not channel:
        return None
    if kind in GONE_EVENTS:
        return ChannelGone(channel_key(team, channel), f"{kind}: {GONE_EVENTS[kind]}")
    if kind in BACK_EVENTS:
        return ChannelBack(channel_key(team, channel))
    its_bot = as_text(event.get("user")) == identity.user_id and bool(identity.user_id)
    if kind == "member_left_channel" and its_bot:
        return ChannelGone(channel_key(team, channel), f"{kind}: the bot was removed from it")
    if kind == "member_joined_channel" and its_bot:
        return ChannelBack(channel_key(team, channel))
    return None


def deleted_reply(body: Payload, identity: BotIdentity) -> Origin | None:
    """Where a deleted thread reply was (``ts`` the reply, ``thread_ts`` its root, ``user`` its
    author), for a pinned thread's source to lose it; None for anything else. Never raises."""
    event = as_mapping(body.get("event"))
    if event.get("type") != "message" or event.get("subtype") != "message_deleted":
        return None
    previous = as_mapping(event.get("previous_message"))
    ts = as_text(event.get("deleted_ts")) or as_text(previous.get("ts"))
    root = as_text(previous.get("thread_ts"))
    team = as_text(body.get("team_id")) or identity.team_id
    channel, user = as_text(event.get("channel")), as_text(previous.get("user"))
    if not (channel and ts and root and user) or root == ts:
        return None
    return Origin(team, channel, user, ts, root)


def _file_deleted(event: Payload, team: str) -> Deleted | None:
    """``file_deleted``: the file's id, and the channels it was shared in when Slack says them."""
    file_id = as_text(event.get("file_id")) or as_text(as_mapping(event.get("file")).get("id"))
    if not file_id:
        return None
    channels = [as_text(c) for c in as_list(event.get("channel_ids")) if as_text(c)]
    if len(channels) == 1:
        return Deleted(channel_key(team, channels[0]), external_ids=(file_id,))
    # None named (Slack's documented example), or several: every channel of the workspace is looked at.
    return Deleted(channel_key(team, channels[0] if channels else ""), external_ids=(file_id,), whole_workspace=True)
