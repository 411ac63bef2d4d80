"""Forum channels, their posts and tags in the Discord stand-in.

Kept apart from the class: a forum is made, a post opened and tagged through these functions,
which drive a started FakeDiscord as Discord does. Payload shapes: Discord's channel resource
(https://discord.com/developers/docs/resources/channel: channel type GUILD_FORUM = 15, the
forum tag object {id, name, moderated, emoji_id, emoji_name}, a thread's ``applied_tags``; "the
thread starter message ID is the same ID as the thread") and discord.py's own types
(discord/types/channel.py: ForumChannel, ForumTag; discord/types/threads.py: Thread.applied_tags;
discord/types/gateway.py: ThreadCreateEvent.newly_created, ThreadUpdateEvent = Thread).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from testkit.discord_fake import FakeDiscord
from testkit.discord_payloads import channel_payload, message_payload, snowflake, thread_payload

GUILD_FORUM = 15


def forum_tag_payload(tag_id: str, name: str, moderated: bool = False, emoji_name: str | None = None) -> dict[str, Any]:
    """One of a forum's ``available_tags``."""
    return {"id": tag_id, "name": name, "moderated": moderated, "emoji_id": None, "emoji_name": emoji_name}


def forum_channel_payload(channel_id: str, guild_id: str, name: str, tags: Sequence[Mapping[str, Any]],
                          position: int = 0) -> dict[str, Any]:
    """A forum channel (type 15) as CHANNEL_CREATE and GET /channels/{id} carry it."""
    return {
        **channel_payload(channel_id, guild_id, name, position),
        "type": GUILD_FORUM,
        "available_tags": [dict(tag) for tag in tags],
        "default_reaction_emoji": None,
        "default_sort_order": None,
        "default_forum_layout": 0,
        "default_thread_rate_limit_per_user": 0,
        "flags": 0,
    }


async def create_forum(fake: FakeDiscord, guild_id: str, name: str, tag_names: Sequence[str] = (),
                       forum_id: str | None = None) -> dict[str, Any]:
    """An admin creates a forum channel with tags named ``tag_names`` (``forum_id``: an id chosen
    beforehand, for a configuration naming it): stored, then CHANNEL_CREATE. Returns the forum."""
    tags = [forum_tag_payload(snowflake(), tag) for tag in tag_names]
    forum = forum_channel_payload(forum_id or snowflake(), guild_id, name, tags, len(fake.guilds[guild_id]["channels"]))
    fake.guilds[guild_id]["channels"].append(forum)
    fake.channels[forum["id"]] = forum
    fake.messages[forum["id"]] = []
    await fake.dispatch("CHANNEL_CREATE", forum)
    return forum


def forum_tag_id(forum: Mapping[str, Any], name: str) -> str:
    return next(str(tag["id"]) for tag in forum["available_tags"] if tag["name"] == name)


async def open_forum_post(fake: FakeDiscord, forum_id: str, member: Mapping[str, Any], title: str, content: str,
                          tag_ids: Sequence[str] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """``member`` opens a post in the forum: the thread (a public thread whose parent is the
    forum) with its opening message, whose id is the thread's; THREAD_CREATE (``newly_created``),
    then MESSAGE_CREATE of the opening message in the thread, in Discord's order. Returns
    (thread, opening message)."""
    forum = fake.channels[forum_id]
    guild_id = str(forum["guild_id"])
    author = member["user"]
    thread = thread_payload(snowflake(), guild_id, forum_id, title, str(author["id"]))
    thread.update({"applied_tags": list(tag_ids), "message_count": 1, "total_message_sent": 1})
    opening = message_payload(thread["id"], thread["id"], author, content, guild_id, member)
    fake.channels[thread["id"]] = thread
    fake.messages[thread["id"]] = [opening]
    fake.guilds[guild_id]["threads"].append(thread)
    await fake.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
    await fake.dispatch("MESSAGE_CREATE", fake._as_delivered(opening))
    return thread, opening


async def tag_forum_post(fake: FakeDiscord, post_id: str, tag_ids: Sequence[str]) -> dict[str, Any]:
    """The post's tags become ``tag_ids``: THREAD_UPDATE with the whole thread, as Discord sends it."""
    thread = fake.channels[post_id]
    thread["applied_tags"] = list(tag_ids)
    await fake.dispatch("THREAD_UPDATE", dict(thread))
    return thread
