"""Payload builders of the Discord stand-in (:mod:`testkit.discord_api`): snowflakes, and the
users, roles, members, channels, threads, DM channels, attachments, messages, guilds and
interactions that Discord's REST API and gateway carry, with the constants they use (permission
bits; channel, message and interaction types; the ephemeral flag).

Payloads are built by these functions, never inline in a test: discord.py indexes many keys
without ``.get()``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

DISCORD_EPOCH_MS = 1_420_070_400_000
EPHEMERAL = 64

# Permission bits (https://discord.com/developers/docs/topics/permissions).
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
MANAGE_MESSAGES = 1 << 13
ATTACH_FILES = 1 << 15
READ_MESSAGE_HISTORY = 1 << 16
SEND_MESSAGES_IN_THREADS = 1 << 38
CREATE_PUBLIC_THREADS = 1 << 35
EVERYONE_PERMISSIONS = VIEW_CHANNEL | SEND_MESSAGES | ATTACH_FILES | READ_MESSAGE_HISTORY | SEND_MESSAGES_IN_THREADS

# Channel and message types used here.
GUILD_TEXT = 0
DM = 1
PUBLIC_THREAD = 11
PRIVATE_THREAD = 12
DEFAULT_MESSAGE = 0
REPLY_MESSAGE = 19
THREAD_STARTER_MESSAGE = 21

# Interaction types, and the callback type of a modal response.
COMPONENT_INTERACTION = 3
MODAL_SUBMIT = 5
MODAL_CALLBACK = 9

_ids = itertools.count(1)


def snowflake(at: float | None = None) -> str:
    """A new, increasing snowflake whose timestamp is ``at`` (default now), as Discord makes them."""
    ms = int((time.time() if at is None else at) * 1000) - DISCORD_EPOCH_MS
    return str((ms << 22) | (next(_ids) & 0x3FFFFF))


def iso_now() -> str:
    return datetime.now(UTC).isoformat()


# -- payload factories ------------------------------------------------------------


def user_payload(user_id: str, name: str, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": name,
        "discriminator": "0",
        "global_name": name,
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
    }


def role_payload(role_id: str, name: str, permissions: int, position: int = 0) -> dict[str, Any]:
    return {
        "id": role_id,
        "name": name,
        "permissions": str(permissions),
        "position": position,
        "color": 0,
        "hoist": False,
        "managed": False,
        "mentionable": False,
        "flags": 0,
    }


def member_payload(user: Mapping[str, Any], roles: Sequence[str] = (), permissions: int | None = None) -> dict[str, Any]:
    """A guild member; ``permissions`` (the resolved ones) is what interactions carry."""
    member: dict[str, Any] = {
        "user": dict(user),
        "roles": list(roles),
        "joined_at": "2024-01-01T00:00:00+00:00",
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "nick": None,
        "avatar": None,
    }
    if permissions is not None:
        member["permissions"] = str(permissions)
    return member


def channel_payload(channel_id: str, guild_id: str, name: str, position: int = 0) -> dict[str, Any]:
    return {
        "id": channel_id,
        "type": GUILD_TEXT,
        "guild_id": guild_id,
        "name": name,
        "position": position,
        "permission_overwrites": [],
        "nsfw": False,
        "parent_id": None,
        "topic": None,
        "last_message_id": None,
        "rate_limit_per_user": 0,
    }


def thread_payload(thread_id: str, guild_id: str, parent_id: str, name: str, owner_id: str,
                   kind: int = PUBLIC_THREAD) -> dict[str, Any]:
    return {
        "id": thread_id,
        "type": kind,
        "guild_id": guild_id,
        "parent_id": parent_id,
        "owner_id": owner_id,
        "name": name,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "message_count": 0,
        "member_count": 1,
        "flags": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": iso_now(),
            "locked": False,
        },
    }


def dm_channel_payload(channel_id: str, recipient: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": channel_id, "type": DM, "recipients": [dict(recipient)], "last_message_id": None}


def attachment_payload(attachment_id: str, filename: str, url: str, size: int, content_type: str) -> dict[str, Any]:
    return {
        "id": attachment_id,
        "filename": filename,
        "size": size,
        "url": url,
        "proxy_url": url,
        "content_type": content_type,
    }


def message_payload(
    message_id: str,
    channel_id: str,
    author: Mapping[str, Any],
    content: str,
    guild_id: str | None = None,
    member: Mapping[str, Any] | None = None,
    mentions: Sequence[Mapping[str, Any]] = (),
    attachments: Sequence[Mapping[str, Any]] = (),
    embeds: Sequence[Mapping[str, Any]] = (),
    components: Sequence[Mapping[str, Any]] = (),
    message_type: int = DEFAULT_MESSAGE,
    reference: Mapping[str, Any] | None = None,
    referenced: Mapping[str, Any] | None = None,
    flags: int = 0,
) -> dict[str, Any]:
    """A message object as the REST API returns it and MESSAGE_CREATE carries it."""
    payload: dict[str, Any] = {
        "id": message_id,
        "channel_id": channel_id,
        "author": dict(author),
        "content": content,
        "timestamp": iso_now(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [dict(m) for m in mentions],
        "mention_roles": [],
        "attachments": [dict(a) for a in attachments],
        "embeds": [dict(e) for e in embeds],
        "components": [dict(c) for c in components],
        "pinned": False,
        "type": message_type,
        "flags": flags,
    }
    if guild_id is not None:
        payload["guild_id"] = guild_id
    if member is not None:
        payload["member"] = {k: v for k, v in member.items() if k != "user"}
    if reference is not None:
        payload["message_reference"] = dict(reference)
    if referenced is not None:
        payload["referenced_message"] = dict(referenced)
    return payload


def guild_payload(
    guild_id: str,
    name: str,
    owner_id: str,
    roles: Sequence[Mapping[str, Any]],
    channels: Sequence[Mapping[str, Any]],
    members: Sequence[Mapping[str, Any]],
    threads: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The full guild of a GUILD_CREATE (``member_count == len(members)``: no chunking)."""
    return {
        "id": guild_id,
        "name": name,
        "owner_id": owner_id,
        "unavailable": False,
        "member_count": len(members),
        "large": False,
        "roles": [dict(r) for r in roles],
        "channels": [dict(c) for c in channels],
        "threads": [dict(t) for t in threads],
        "members": [dict(m) for m in members],
        "features": [],
        "emojis": [],
        "stickers": [],
        "voice_states": [],
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
        "icon": None,
        "splash": None,
        "banner": None,
        "description": None,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "premium_tier": 0,
        "preferred_locale": "en-US",
        "nsfw_level": 0,
        "system_channel_flags": 0,
        "afk_timeout": 300,
        "joined_at": "2024-01-01T00:00:00+00:00",
    }


def slash_data(command: str, subcommand: str, options: Mapping[str, str] | None = None,
               focused: str | None = None) -> dict[str, Any]:
    """``data`` of ``/command subcommand option:value...``; ``focused`` names the option being typed
    (an autocomplete interaction)."""
    inner = []
    for name, value in (options or {}).items():
        option: dict[str, Any] = {"name": name, "type": 3, "value": value}
        if name == focused:
            option["focused"] = True
        inner.append(option)
    return {
        "id": snowflake(),
        "name": command,
        "type": 1,
        "options": [{"name": subcommand, "type": 1, "options": inner}],
    }


def button_data(custom_id: str) -> dict[str, Any]:
    return {"custom_id": custom_id, "component_type": 2}


def modal_submit_data(custom_id: str, values: Mapping[str, str]) -> dict[str, Any]:
    """``data`` of a MODAL_SUBMIT: one action row per text input, as Discord sends it."""
    return {
        "custom_id": custom_id,
        "components": [
            {"type": 1, "components": [{"type": 4, "custom_id": input_id, "value": value}]}
            for input_id, value in values.items()
        ],
    }


def interaction_payload(application_id: str, kind: int, channel: Mapping[str, Any], data: Mapping[str, Any], *,
                        member: Mapping[str, Any] | None = None, permissions: int = 0,
                        user: Mapping[str, Any] | None = None,
                        message: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An INTERACTION_CREATE payload of ``kind`` (see the interaction types above) carrying ``data``,
    from ``channel`` (a channel, thread or DM channel payload, whole or partial): by the guild
    ``member`` with the ``permissions`` Discord resolved for them there when the channel has a
    guild, else (a DM) by ``user``; ``message`` is the message holding a pressed button."""
    guild_id = channel.get("guild_id")
    payload: dict[str, Any] = {
        "id": snowflake(),
        "application_id": application_id,
        "type": kind,
        "token": f"token-{snowflake()}",
        "version": 1,
        "channel_id": channel["id"],
        "channel": dict(channel),
        "data": dict(data),
        "app_permissions": str(EVERYONE_PERMISSIONS | MANAGE_MESSAGES | CREATE_PUBLIC_THREADS),
        "locale": "en-US",
        "entitlements": [],
        "attachment_size_limit": 26214400,
    }
    if guild_id:
        payload.update({"guild_id": str(guild_id), "member": {**(member or {}), "permissions": str(permissions)},
                        "guild_locale": "en-US", "authorizing_integration_owners": {"0": str(guild_id)}, "context": 0})
    else:
        payload.update({"user": dict(user or {}), "context": 1})
    if message is not None:
        payload["message"] = dict(message)
    return payload


# -- message commands (context menus on a message) -----------------------------------------


MESSAGE_COMMAND = 3  # an application command's type: CHAT_INPUT 1, USER 2, MESSAGE 3


def message_command_data(name: str, target: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` of a message command ``name`` run on the message ``target`` (a message payload).

    Shape from Discord's "Interaction Object > Application Command Data Structure" and "Resolved
    Data Structure" (docs.discord.com/developers/interactions/receiving-and-responding): ``type`` 3
    (MESSAGE), ``target_id`` the message's id, and the whole message under
    ``resolved.messages[<id>]``, content included (Discord sends it there without the Message
    Content intent). discord.py reads it so in ``app_commands.Namespace._get_resolved_items``
    (``resolved['messages']``) and ``CommandTree._call_context_menu`` (``data['target_id']``)."""
    message_id = str(target["id"])
    return {"id": snowflake(), "name": name, "type": MESSAGE_COMMAND, "target_id": message_id,
            "resolved": {"messages": {message_id: dict(target)}}}
