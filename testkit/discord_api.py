"""A stand-in for Discord on 127.0.0.1: the REST API (``/api/v10``), the gateway and the CDN.

The real discord.py client talks to it through its two seams,
``discord.http.Route.BASE`` (:attr:`FakeDiscord.api_base_url`) and
``DiscordWebSocket.DEFAULT_GATEWAY`` (:attr:`FakeDiscord.gateway_url`); the
attachments it serves have loopback URLs in their payloads. It runs on the
event loop of the test (aiohttp), so each test owns one and stops it.

What it models, because the bot depends on it:

* the gateway handshake (HELLO with :attr:`FakeDiscord.heartbeat_interval_ms`,
  heartbeats and their ACKs, IDENTIFY, READY, one GUILD_CREATE per guild), then
  events the test dispatches; a connection that goes silent
  (:meth:`FakeDiscord.go_silent`: open, but no ACK and no event any more) and the
  connections opened (:attr:`FakeDiscord.connections`); RESUME of the current
  session (:attr:`FakeDiscord.resumable`), else an invalid session; the content of
  a message is blanked, as Discord does, when the client lacks the message
  content intent and the message neither mentions the bot nor is a DM;
* messages: create (JSON or multipart with files), history, fetch (saying whether
  the message is pinned), pins (the paginated ``GET /channels/{id}/messages/pins`` of
  discord.py 2.7),
  threads started from a message (with the starter message Discord puts first)
  and private threads;
* Discord's message limits, answered with Discord's 400 error body
  (``{"code": 50035, "errors": {...}, "message": "Invalid Form Body"}``);
* interactions: the callback (refused with 10062 "Unknown interaction" after
  3 s or 40060 when answered twice), follow-ups, and the rule that the first
  follow-up after a "thinking" defer edits the deferred message and inherits
  its ephemerality, unless that message was deleted;
* modals: the modal response (callback type 9, checked against Discord's limits and
  refused to a modal submit; recorded as :attr:`Interaction.modal`) and the MODAL_SUBMIT
  interaction (type 5) of a shown modal (:meth:`FakeDiscord.submit`) or of any data
  (:meth:`FakeDiscord.submit_modal`);
* failures on demand (:meth:`FakeDiscord.fail_next`).

Every REST request is recorded as a :class:`Call` with the time it arrived
(``time.perf_counter``), so tests and benchmarks can wait for calls and time
them. Payloads are built by the factory functions below, never inline in a
test: discord.py indexes many keys without ``.get()``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

log = logging.getLogger(__name__)

API = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
INTERACTION_DEADLINE_S = 3.0
POLL_S = 0.05
HEARTBEAT_ACK_DELAY_S = 0.02
MESSAGE_CONTENT_INTENT = 1 << 15
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

# Discord's limits on a message (https://discord.com/developers/docs/resources/message).
CONTENT_LIMIT = 2000
EMBEDS_PER_MESSAGE = 10
EMBED_TOTAL = 6000
EMBED_TITLE = 256
EMBED_DESCRIPTION = 4096
EMBED_FIELDS = 25
FIELD_NAME = 256
FIELD_VALUE = 1024
FOOTER_TEXT = 2048
AUTHOR_NAME = 256
ACTION_ROWS = 5
ROW_WIDTH = 5
CUSTOM_ID = 100
BUTTON_LABEL = 80
MODAL_TITLE = 45  # a modal's title, and a text input's label
MODAL_ROWS = 5
TEXT_INPUT_VALUE = 4000

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


# -- Components v2 (answers as one message) -------------------------------------------------
#
# From Discord's docs (docs.discord.com/developers/components, "Using Message Components" and
# the component reference; resources/message "Message Flags" and "Edit Message"): a message sent
# with the flag IS_COMPONENTS_V2 (1 << 15) has no ``content`` nor ``embeds``, up to 40 components
# in all (nested ones included), and at most 4,000 characters of text over all of them; an edit
# may set the flag (never unset it) when ``content`` is null and ``embeds`` empty. Component types
# as discord.py 2.7 sends them (``discord.enums.ComponentType``): 1 action row, 2 button, 10 text
# display, 14 separator, 17 container; discord.py sets the flag itself for a ``LayoutView``
# (``http.handle_message_parameters``).

IS_COMPONENTS_V2 = 1 << 15
V2_TEXT_LIMIT = 4000
V2_COMPONENTS_LIMIT = 40
TEXT_DISPLAY = 10


def is_components_v2(body: Mapping[str, Any]) -> bool:
    return bool(int(body.get("flags") or 0) & IS_COMPONENTS_V2)


def all_components(components: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Every component, nested ones included (a section's accessory too), depth first."""
    found: list[Mapping[str, Any]] = []
    for component in components:
        found.append(component)
        found += all_components(component.get("components") or [])
        if component.get("accessory"):
            found += all_components([component["accessory"]])
    return found


def layout_text(message: Mapping[str, Any]) -> str:
    """What a person reads in a Components v2 message: its text displays, in order."""
    return "\n".join(c.get("content") or "" for c in all_components(message.get("components") or [])
                     if c.get("type") == TEXT_DISPLAY)


def layout_custom_ids(message: Mapping[str, Any]) -> list[str]:
    """The custom ids of a Components v2 message's buttons, in order."""
    return [c["custom_id"] for c in all_components(message.get("components") or []) if c.get("custom_id")]


def _form_error(field: str, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"code": 50035, "message": "Invalid Form Body",
                 "errors": {field: {"_errors": [{"code": code, "message": message}]}}}


def components_v2_errors(body: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """Discord's answer to a Components v2 message it refuses (legacy fields, over its limits),
    as (status, error body); None if valid."""
    if body.get("content") or body.get("embeds"):
        field = "content" if body.get("content") else "embeds"
        return _form_error(field, "MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2",
                           f"The '{field}' field cannot be used when using MessageFlags.IS_COMPONENTS_V2")
    components = all_components(body.get("components") or [])
    if not components:
        return _form_error("components", "BASE_TYPE_REQUIRED", "This field is required")
    if len(components) > V2_COMPONENTS_LIMIT:
        return _form_error("components", "BASE_TYPE_MAX_LENGTH", f"Must be {V2_COMPONENTS_LIMIT} or fewer in length.")
    text = sum(len(c.get("content") or "") + len(c.get("label") or "") for c in components)
    if text > V2_TEXT_LIMIT:
        return _form_error("components", "COMPONENT_MAX_TOTAL_TEXT_LENGTH_EXCEEDED",
                           f"The total text length of all components must be {V2_TEXT_LIMIT} or fewer.")
    return None


def components_v2_refusal() -> tuple[int, dict[str, Any]]:
    """What an API without Components v2 answers to one: the 400 "Invalid Form Body" of a
    message flag it does not know (the shape of Discord's form errors; the code is ours)."""
    return _form_error("flags", "MESSAGE_FLAGS_INVALID", "Invalid message flags")


# -- records -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """One REST request: ``body`` is the JSON (or ``payload_json``) sent, ``files`` the
    uploaded (filename, bytes), ``at`` the ``perf_counter`` time it arrived."""

    method: str
    path: str
    params: dict[str, str]
    body: Any
    files: tuple[tuple[str, bytes], ...]
    at: float
    status: int = 0


@dataclass(slots=True)
class Interaction:
    """An interaction the test dispatched, and how the bot answered it.

    ``messages`` are the visible messages the bot made for it, in order
    (the deferred one once it has content, then follow-ups), each carrying
    ``flags`` (64 = ephemeral)."""

    id: str
    token: str
    kind: int
    channel_id: str
    dispatched_at: float
    callback_type: int | None = None
    callback_at: float | None = None
    callback_data: dict[str, Any] | None = None
    original: dict[str, Any] | None = None
    loading: bool = False
    original_deleted: bool = False
    deferred_ephemeral: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)

    def texts(self) -> list[str]:
        return [message_text(m) for m in self.messages]

    @property
    def modal(self) -> dict[str, Any] | None:
        """The modal the interaction was answered with (custom_id, title, components), if it was."""
        return self.callback_data if self.callback_type == MODAL_CALLBACK else None


@dataclass(slots=True)
class Failure:
    method: str
    path: re.Pattern[str]
    status: int
    body: dict[str, Any]
    times: int


def message_text(message: Mapping[str, Any]) -> str:
    """Everything a person reads in a message: content, then every embed's title,
    description, field names and values, footer."""
    parts = [message.get("content") or ""]
    for embed in message.get("embeds") or []:
        parts += [embed.get("title") or "", embed.get("description") or ""]
        for item in embed.get("fields") or []:
            parts += [item.get("name") or "", item.get("value") or ""]
        parts.append((embed.get("footer") or {}).get("text") or "")
    return "\n".join(p for p in parts if p)


def custom_ids(message: Mapping[str, Any]) -> list[str]:
    """The custom ids of every button of a message, row by row."""
    return [
        component.get("custom_id", "")
        for row in message.get("components") or []
        for component in row.get("components") or []
    ]


# -- limits --------------------------------------------------------------------------


def _too_long(limit: int) -> dict[str, Any]:
    return {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {limit} or fewer in length."}]}


def _required() -> dict[str, Any]:
    return {"_errors": [{"code": "BASE_TYPE_REQUIRED", "message": "This field is required"}]}


def embed_length(embed: Mapping[str, Any]) -> int:
    """The characters of an embed that count towards Discord's 6,000."""
    total = len(embed.get("title") or "") + len(embed.get("description") or "")
    total += len((embed.get("footer") or {}).get("text") or "") + len((embed.get("author") or {}).get("name") or "")
    for item in embed.get("fields") or []:
        total += len(item.get("name") or "") + len(item.get("value") or "")
    return total


def _embed_errors(embed: Mapping[str, Any]) -> dict[str, Any]:
    errors: dict[str, Any] = {}
    for key, limit in (("title", EMBED_TITLE), ("description", EMBED_DESCRIPTION)):
        if len(embed.get(key) or "") > limit:
            errors[key] = _too_long(limit)
    if len((embed.get("footer") or {}).get("text") or "") > FOOTER_TEXT:
        errors["footer"] = {"text": _too_long(FOOTER_TEXT)}
    if len((embed.get("author") or {}).get("name") or "") > AUTHOR_NAME:
        errors["author"] = {"name": _too_long(AUTHOR_NAME)}
    fields = embed.get("fields") or []
    if len(fields) > EMBED_FIELDS:
        errors["fields"] = _too_long(EMBED_FIELDS)
    for index, item in enumerate(fields):
        problems: dict[str, Any] = {}
        for key, limit in (("name", FIELD_NAME), ("value", FIELD_VALUE)):
            text = item.get(key) or ""
            if not text.strip():
                problems[key] = _required()
            elif len(text) > limit:
                problems[key] = _too_long(limit)
        if problems:
            errors.setdefault("fields", {})[str(index)] = problems
    return errors


def _component_errors(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    errors: dict[str, Any] = {}
    if len(rows) > ACTION_ROWS:
        errors["_errors"] = _too_long(ACTION_ROWS)["_errors"]
    for index, row in enumerate(rows):
        items = row.get("components") or []
        problems: dict[str, Any] = {}
        if len(items) > ROW_WIDTH:
            problems["components"] = _too_long(ROW_WIDTH)
        for position, item in enumerate(items):
            bad: dict[str, Any] = {}
            if len(item.get("custom_id") or "") > CUSTOM_ID:
                bad["custom_id"] = _too_long(CUSTOM_ID)
            if len(item.get("label") or "") > BUTTON_LABEL:
                bad["label"] = _too_long(BUTTON_LABEL)
            if bad:
                problems.setdefault("components", {})[str(position)] = bad
        if problems:
            errors[str(index)] = problems
    return errors


def modal_errors(data: Mapping[str, Any], interaction_kind: int) -> tuple[int, dict[str, Any]] | None:
    """Discord's answer to a modal response it refuses (to a modal submit, or over its
    limits), as (status, error body); None if valid."""
    if interaction_kind == MODAL_SUBMIT:  # a modal cannot answer a modal
        return 400, {"code": 50035, "message": "Invalid Form Body",
                     "errors": {"type": {"_errors": [{"code": "BASE_TYPE_CHOICES",
                                                      "message": "Value must be one of {4, 5, 6, 7, 10, 12}."}]}}}
    errors: dict[str, Any] = {}
    for key, limit in (("title", MODAL_TITLE), ("custom_id", CUSTOM_ID)):
        text = data.get(key) or ""
        if not text.strip():
            errors[key] = _required()
        elif len(text) > limit:
            errors[key] = _too_long(limit)
    rows = data.get("components") or []
    if not rows or len(rows) > MODAL_ROWS:
        errors["components"] = _required() if not rows else _too_long(MODAL_ROWS)
    for index, row in enumerate(rows):
        for position, item in enumerate(row.get("components") or []):
            bad = {key: _too_long(limit) for key, limit in (("label", MODAL_TITLE), ("custom_id", CUSTOM_ID))
                   if len(item.get(key) or "") > limit}
            if int(item.get("max_length") or 0) > TEXT_INPUT_VALUE:
                bad["max_length"] = _too_long(TEXT_INPUT_VALUE)
            if bad:
                errors.setdefault("components", {}).setdefault(str(index), {"components": {}})["components"][
                    str(position)] = bad
    return (400, {"code": 50035, "errors": errors, "message": "Invalid Form Body"}) if errors else None


def message_errors(body: Mapping[str, Any], files: int = 0) -> tuple[int, dict[str, Any]] | None:
    """Discord's answer to a message body over its limits, as (status, error body); None if valid."""
    if is_components_v2(body):
        return components_v2_errors(body)
    errors: dict[str, Any] = {}
    content = body.get("content") or ""
    if len(content) > CONTENT_LIMIT:
        errors["content"] = _too_long(CONTENT_LIMIT)
    embeds = body.get("embeds") or []
    if len(embeds) > EMBEDS_PER_MESSAGE:
        errors["embeds"] = _too_long(EMBEDS_PER_MESSAGE)
    for index, embed in enumerate(embeds):
        problems = _embed_errors(embed)
        if problems:
            errors.setdefault("embeds", {})[str(index)] = problems
    if sum(embed_length(e) for e in embeds) > EMBED_TOTAL:
        errors.setdefault("embeds", {}).setdefault("_errors", []).append(
            {"code": "MAX_EMBED_SIZE_EXCEEDED", "message": f"Embed size exceeds maximum size of {EMBED_TOTAL}"}
        )
    component_problems = _component_errors(body.get("components") or [])
    if component_problems:
        errors["components"] = component_problems
    if errors:
        return 400, {"code": 50035, "errors": errors, "message": "Invalid Form Body"}
    if not content.strip() and not embeds and not files and not body.get("components") and not body.get("attachments"):
        return 400, {"code": 50006, "message": "Cannot send an empty message"}
    return None


# -- the stand-in ------------------------------------------------------------------------


def _json(data: Any, status: int = 200) -> web.Response:
    # Exactly "application/json": discord.py compares the header as a string (see the notes).
    return web.Response(status=status, body=json.dumps(data).encode(), headers={"Content-Type": "application/json"})


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"message": message, "code": code}, status)


class FakeDiscord:
    """The stand-in Discord. ``await start()`` it on the test's loop, ``await stop()`` it at the end.

    It starts with one bot user and application, and no guilds: tests add them
    with :meth:`add_guild` before the client connects (or dispatch GUILD_CREATE
    themselves after).
    """

    def __init__(self, bot_name: str = "Raptor") -> None:
        self.bot_user = user_payload(snowflake(), bot_name, bot=True)
        self.application_id = snowflake()
        self.owner = user_payload(snowflake(), "Owner")
        self.calls: list[Call] = []
        self.guilds: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[dict[str, Any]]] = {}  # channel id -> messages, oldest first
        self.pins: dict[str, list[tuple[str, str]]] = {}  # channel id -> (message id, pinned_at), newest first
        self.files: dict[str, bytes] = {}  # CDN path -> bytes
        self.interactions: dict[str, Interaction] = {}  # token -> interaction
        self.commands: list[dict[str, Any]] = []
        self.identifies: list[dict[str, Any]] = []
        self.failures: list[Failure] = []
        self.frames_sent = 0
        self.connections = 0  # gateway connections opened so far
        self.heartbeat_interval_ms = 45000  # what HELLO asks for (Discord's is 41250)
        self._silent: set[web.WebSocketResponse] = set()  # open, but neither ACKing nor dispatching
        self.resumable = True  # RESUME of the current session is accepted (else: invalid session)
        self.resumes = 0
        self._sequence = 0
        self._socket: web.WebSocketResponse | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._identified = asyncio.Event()
        self._acks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/", self._gateway)
        app.router.add_get("/cdn/{path:.*}", self._cdn)
        app.router.add_route("*", API + "/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base_url(self) -> str:
        return self.base_url + API

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def bot_id(self) -> str:
        return str(self.bot_user["id"])

    # -- the world ---------------------------------------------------------------------

    def add_guild(self, name: str, channel_names: Sequence[str], members: Sequence[dict[str, Any]],
                  roles: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """A guild with text channels named ``channel_names``, the bot and ``members`` as
        members (from :func:`member_payload`), an @everyone role with the usual permissions
        plus ``roles``. Returns the guild payload (its channels under ``"channels"``)."""
        guild_id = snowflake()
        everyone = role_payload(guild_id, "@everyone", EVERYONE_PERMISSIONS)
        channels = [channel_payload(snowflake(), guild_id, n, i) for i, n in enumerate(channel_names)]
        bot_member = member_payload(self.bot_user)
        guild = guild_payload(guild_id, name, str(self.owner["id"]), [everyone, *roles], channels, [bot_member, *members])
        self.guilds[guild_id] = guild
        for channel in channels:
            self.channels[channel["id"]] = channel
            self.messages[channel["id"]] = []
        return guild

    def add_dm(self, user: Mapping[str, Any]) -> str:
        """A DM channel between ``user`` and the bot; returns its id."""
        channel_id = snowflake()
        self.channels[channel_id] = dm_channel_payload(channel_id, user)
        self.messages[channel_id] = []
        return channel_id

    def channel_id(self, guild: Mapping[str, Any], name: str) -> str:
        return next(str(c["id"]) for c in guild["channels"] if c["name"] == name)

    def permissions(self, guild_id: str, member: Mapping[str, Any]) -> int:
        """A member's guild permissions from its roles, as Discord resolves them for interactions."""
        guild = self.guilds[guild_id]
        roles = {str(r["id"]): int(r["permissions"]) for r in guild["roles"]}
        value = roles.get(guild_id, 0)
        for role_id in member.get("roles") or []:
            value |= roles.get(str(role_id), 0)
        return value

    def add_file(self, channel_id: str, filename: str, data: bytes, content_type: str = "text/plain") -> dict[str, Any]:
        """An attachment served by the stand-in's CDN; returns its payload."""
        attachment_id = snowflake()
        path = f"attachments/{channel_id}/{attachment_id}/{filename}"
        self.files[path] = data
        return attachment_payload(attachment_id, filename, f"{self.base_url}/cdn/{path}", len(data), content_type)

    # -- what a test does ----------------------------------------------------------------

    async def post(
        self,
        channel_id: str,
        author: Mapping[str, Any],
        content: str,
        member: Mapping[str, Any] | None = None,
        mention_bot: bool = False,
        attachments: Sequence[Mapping[str, Any]] = (),
        dispatch: bool = True,
    ) -> dict[str, Any]:
        """Someone posts a message: stored, then MESSAGE_CREATE. ``mention_bot`` prefixes
        ``<@bot>`` and lists the bot in ``mentions``. Returns the stored payload."""
        channel = self.channels[channel_id]
        mentions = [self.bot_user] if mention_bot else []
        text = f"<@{self.bot_id}> {content}" if mention_bot else content
        payload = message_payload(
            snowflake(), channel_id, author, text, channel.get("guild_id"), member, mentions, attachments
        )
        self.messages.setdefault(channel_id, []).append(payload)
        if dispatch:
            await self.dispatch("MESSAGE_CREATE", self._as_delivered(payload))
        return payload

    async def edit(self, channel_id: str, message_id: str, content: str) -> dict[str, Any]:
        """Its author edits a message: stored, then MESSAGE_UPDATE with the whole message as it
        is now, ``pinned`` included (as Discord sends it). Returns the stored payload."""
        [payload] = [m for m in self.messages.get(channel_id, []) if str(m["id"]) == str(message_id)]
        payload["content"] = content
        payload["edited_timestamp"] = iso_now()
        pinned = any(pinned_id == str(message_id) for pinned_id, _ in self.pins.get(channel_id, []))
        await self.dispatch("MESSAGE_UPDATE", self._as_delivered({**payload, "pinned": pinned}))
        return payload

    async def delete_message(self, channel_id: str, message_id: str) -> None:
        """Someone deletes a message: it goes (and its pin), then MESSAGE_DELETE with the fields
        Discord sends (``id``, ``channel_id``, ``guild_id`` in a guild)."""
        self._forget_message(channel_id, message_id)
        await self.dispatch("MESSAGE_DELETE", {"id": message_id, "channel_id": channel_id,
                                               **self._guild_of(channel_id)})

    async def delete_messages(self, channel_id: str, message_ids: Sequence[str]) -> None:
        """A moderator deletes several messages at once: MESSAGE_DELETE_BULK (``ids``, ``channel_id``, ``guild_id``)."""
        for message_id in message_ids:
            self._forget_message(channel_id, message_id)
        await self.dispatch("MESSAGE_DELETE_BULK", {"ids": list(message_ids), "channel_id": channel_id,
                                                    **self._guild_of(channel_id)})

    async def remove_attachment(self, channel_id: str, message_id: str, attachment_id: str) -> dict[str, Any]:
        """Its author removes one attachment from a message: MESSAGE_UPDATE with the whole
        message as it is now (the attachments it keeps), as Discord sends it."""
        [payload] = [m for m in self.messages.get(channel_id, []) if str(m["id"]) == str(message_id)]
        payload["attachments"] = [a for a in payload["attachments"] if str(a["id"]) != str(attachment_id)]
        payload["edited_timestamp"] = iso_now()
        pinned = any(pinned_id == str(message_id) for pinned_id, _ in self.pins.get(channel_id, []))
        await self.dispatch("MESSAGE_UPDATE", self._as_delivered({**payload, "pinned": pinned}))
        return payload

    async def delete_channel(self, channel_id: str) -> None:
        """An admin deletes a guild channel: CHANNEL_DELETE with the channel object."""
        channel = self.channels.pop(channel_id)
        self.messages.pop(channel_id, None)
        await self.dispatch("CHANNEL_DELETE", channel)

    async def delete_thread(self, thread_id: str) -> None:
        """A thread is deleted: THREAD_DELETE with ``id``, ``guild_id``, ``parent_id`` and ``type``."""
        thread = self.channels.pop(thread_id)
        self.messages.pop(thread_id, None)
        await self.dispatch("THREAD_DELETE", {k: thread[k] for k in ("id", "guild_id", "parent_id", "type")})

    async def remove_bot(self, guild_id: str) -> None:
        """The bot is kicked from a guild: GUILD_DELETE without ``unavailable`` (an outage sets it)."""
        await self.dispatch("GUILD_DELETE", {"id": guild_id})

    def _forget_message(self, channel_id: str, message_id: str) -> None:
        self.messages[channel_id] = [m for m in self.messages.get(channel_id, []) if str(m["id"]) != str(message_id)]
        self.pins[channel_id] = [p for p in self.pins.get(channel_id, []) if p[0] != str(message_id)]

    def _guild_of(self, channel_id: str) -> dict[str, Any]:
        guild_id = self.channels.get(channel_id, {}).get("guild_id")
        return {"guild_id": guild_id} if guild_id else {}

    async def start_thread(self, channel_id: str, starter: Mapping[str, Any], name: str,
                           owner: Mapping[str, Any]) -> dict[str, Any]:
        """Someone starts a thread from ``starter``: the thread, its starter message, THREAD_CREATE."""
        thread = self._make_thread(channel_id, starter, name, str(owner["id"]))
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return thread

    async def start_private_thread(self, channel_id: str, name: str, owner: Mapping[str, Any]) -> dict[str, Any]:
        """Someone starts a private thread in ``channel_id`` (and adds the bot): the thread,
        with no starter message (Discord opens private threads from none), THREAD_CREATE."""
        parent = self.channels[channel_id]
        guild_id = str(parent["guild_id"])
        thread = thread_payload(snowflake(), guild_id, channel_id, name, str(owner["id"]), PRIVATE_THREAD)
        thread["thread_metadata"]["invitable"] = True
        self.channels[thread["id"]] = thread
        self.messages[thread["id"]] = []
        self.guilds[guild_id]["threads"].append(thread)
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return thread

    async def pin(self, channel_id: str, message_id: str) -> None:
        self.pins.setdefault(channel_id, []).insert(0, (message_id, iso_now()))
        await self._pins_update(channel_id)

    async def unpin(self, channel_id: str, message_id: str) -> None:
        self.pins[channel_id] = [p for p in self.pins.get(channel_id, []) if p[0] != message_id]
        await self._pins_update(channel_id)

    async def slash(self, channel_id: str, member: Mapping[str, Any], subcommand: str,
                    options: Mapping[str, str] | None = None, command: str = "raptor",
                    focused: str | None = None) -> Interaction:
        """``/command subcommand`` by ``member`` in a guild channel (or thread)."""
        kind = 4 if focused else 2
        return await self._interact(channel_id, member, kind, slash_data(command, subcommand, options, focused))

    async def message_command(self, message: Mapping[str, Any], member: Mapping[str, Any], name: str) -> Interaction:
        """``member`` runs the message command ``name`` on ``message`` (right-click, Apps): an
        APPLICATION_COMMAND interaction (type 2) in the message's channel carrying the message
        itself (see :func:`message_command_data`), so the bot needs no fetch of it."""
        return await self._interact(str(message["channel_id"]), member, 2, message_command_data(name, message))

    async def click(self, message: Mapping[str, Any], member: Mapping[str, Any], custom_id: str) -> Interaction:
        """``member`` presses the button ``custom_id`` of a message the bot sent."""
        return await self._interact(str(message["channel_id"]), member, 3, button_data(custom_id), message)

    async def submit(self, opened: Interaction, member: Mapping[str, Any], values: Mapping[str, str]) -> Interaction:
        """``member`` submits the modal ``opened`` was answered with, typing ``values`` (by the
        text inputs' custom ids; the others are sent empty, as Discord sends them)."""
        modal = opened.modal
        if modal is None:
            raise AssertionError(f"interaction {opened.id} was not answered with a modal")
        inputs = [item["custom_id"] for row in modal.get("components") or [] for item in row.get("components") or []]
        unknown = set(values) - set(inputs)
        if unknown:
            raise AssertionError(f"the modal has no text input {sorted(unknown)}; it has {inputs}")
        data = modal_submit_data(modal["custom_id"], {input_id: values.get(input_id, "") for input_id in inputs})
        return await self.submit_modal(opened.channel_id, member, data)

    async def submit_modal(self, channel_id: str, member: Mapping[str, Any], data: dict[str, Any]) -> Interaction:
        """A MODAL_SUBMIT interaction carrying ``data`` (see :func:`modal_submit_data`), well formed or not."""
        return await self._interact(channel_id, member, MODAL_SUBMIT, data)

    async def dispatch(self, event: str, data: Any) -> float:
        """Sends one gateway event; returns the ``perf_counter`` time it was sent."""
        self._sequence += 1
        return await self.send_frame(json.dumps({"op": 0, "t": event, "s": self._sequence, "d": data}))

    async def send_frame(self, text: str) -> float:
        """Sends a raw text frame (valid or not) on the identified connection."""
        await asyncio.wait_for(self._identified.wait(), 10)
        assert self._socket is not None
        sent = time.perf_counter()
        await self._socket.send_str(text)
        self.frames_sent += 1
        return sent

    def fail_next(self, method: str, path_pattern: str, status: int = 500, body: dict[str, Any] | None = None,
                  times: int = 1) -> None:
        """The next ``times`` requests matching (method, regex on the path after ``/api/v10``
        or ``/cdn``) fail with ``status`` and ``body``."""
        error = body or {"message": "500: Internal Server Error", "code": 0}
        self.failures.append(Failure(method, re.compile(path_pattern), status, error, times))

    # -- what a test reads -------------------------------------------------------------

    def calls_to(self, method: str, pattern: str, since: int = 0) -> list[Call]:
        regex = re.compile(pattern)
        return [c for c in self.calls[since:] if c.method == method and regex.search(c.path)]

    def is_pinned(self, channel_id: str, message_id: str) -> bool:
        """Whether the message is pinned in the channel now."""
        return any(pinned_id == str(message_id) for pinned_id, _ in self.pins.get(channel_id, []))

    def bot_messages(self, channel_id: str) -> list[dict[str, Any]]:
        return [m for m in self.messages.get(channel_id, []) if m["author"]["id"] == self.bot_id]

    async def wait_for(self, condition: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Waits until ``condition()`` is truthy (checked after every request, and every
        ``POLL_S`` for conditions on things outside the stand-in); returns its value."""
        async def until() -> Any:
            async with self._changed:
                while not (value := condition()):
                    with suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), POLL_S)
                return value

        try:
            return await asyncio.wait_for(until(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout} s waiting; calls: {self._recent_calls()}") from None

    async def wait_identified(self, count: int = 1, timeout: float = 10.0) -> None:
        await self.wait_for(lambda: len(self.identifies) >= count, timeout)

    def _recent_calls(self) -> list[str]:
        return [f"{c.method} {c.path} {c.status}" for c in self.calls[-8:]]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- gateway ---------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self._sockets.add(socket)
        self.connections += 1
        try:
            await socket.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}))
            async for frame in socket:
                if frame.type is not WSMsgType.TEXT:
                    continue
                await self._on_frame(socket, json.loads(frame.data))
        finally:
            self._sockets.discard(socket)
            self._silent.discard(socket)
            if self._socket is socket:
                self._socket = None
                self._identified.clear()
        return socket

    async def _on_frame(self, socket: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        if op == 1:
            # After a network's round trip, as from Discord: an ACK arriving before discord.py's
            # heartbeat thread has noted its send makes it warn of a 45 s latency.
            task = asyncio.get_running_loop().create_task(self._ack_later(socket))
            self._acks.add(task)
            task.add_done_callback(self._acks.discard)
        elif op == 2:
            await self._identify(socket, frame["d"])
        elif op == 6:
            await self._resume(socket, frame["d"])

    async def _resume(self, socket: web.WebSocketResponse, resume: dict[str, Any]) -> None:
        """RESUME of the current session (after :meth:`go_silent`, say) when ``resumable``:
        RESUMED, and events dispatched meanwhile follow. Otherwise, or for an older session,
        an invalid session: the client identifies again."""
        if not (self.resumable and self.identifies and resume.get("session_id") == self._session_id()):
            await socket.send_str(json.dumps({"op": 9, "d": False}))
            return
        self.resumes += 1
        self._socket = socket
        self._sequence += 1
        await socket.send_str(json.dumps({"op": 0, "t": "RESUMED", "s": self._sequence, "d": {}}))
        self._identified.set()
        await self._notify()

    def _session_id(self) -> str:
        return f"session-{len(self.identifies)}"

    def go_silent(self) -> None:
        """The open gateway connections go silent: they stay open but ACK no heartbeat and
        carry no event any more (a zombied connection). Events wait for the next IDENTIFY or RESUME."""
        self._silent.update(self._sockets)
        self._socket = None
        self._identified.clear()

    async def _ack_later(self, socket: web.WebSocketResponse) -> None:
        await asyncio.sleep(HEARTBEAT_ACK_DELAY_S)
        if not socket.closed and socket not in self._silent:
            with suppress(ConnectionError):
                await socket.send_str(json.dumps({"op": 11}))

    async def _identify(self, socket: web.WebSocketResponse, identify: dict[str, Any]) -> None:
        self.identifies.append(identify)
        self._socket = socket
        self._sequence = 1
        ready = {
            "v": 10,
            "user": self.bot_user,
            "session_id": self._session_id(),
            "resume_gateway_url": self.gateway_url,
            "guilds": [{"id": g, "unavailable": True} for g in self.guilds],
            "application": {"id": self.application_id, "flags": 0},
            "private_channels": [],
        }
        await socket.send_str(json.dumps({"op": 0, "t": "READY", "s": self._sequence, "d": ready}))
        for guild in self.guilds.values():
            self._sequence += 1
            await socket.send_str(json.dumps({"op": 0, "t": "GUILD_CREATE", "s": self._sequence, "d": guild}))
        self._identified.set()
        await self._notify()

    def _intents(self) -> int:
        return int(self.identifies[-1].get("intents", 0)) if self.identifies else 0

    def _as_delivered(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A message as the gateway delivers it: content blanked without the message content
        intent, unless it mentions the bot or is a DM (Discord's rule)."""
        if self._intents() & MESSAGE_CONTENT_INTENT:
            return payload
        mentioned = any(str(m["id"]) == self.bot_id for m in payload.get("mentions", []))
        if mentioned or "guild_id" not in payload:
            return payload
        return {**payload, "content": "", "attachments": [], "embeds": []}

    async def _pins_update(self, channel_id: str) -> None:
        channel = self.channels[channel_id]
        data: dict[str, Any] = {"channel_id": channel_id, "last_pin_timestamp": iso_now()}
        if channel.get("guild_id"):
            data["guild_id"] = channel["guild_id"]
        await self.dispatch("CHANNEL_PINS_UPDATE", data)

    async def _interact(self, channel_id: str, member: Mapping[str, Any], kind: int, data: dict[str, Any],
                        message: Mapping[str, Any] | None = None) -> Interaction:
        channel = self.channels[channel_id]
        permissions = self.permissions(str(channel["guild_id"]), member)  # no overwrites here: threads get the guild's too
        partial: dict[str, Any] = {k: channel[k] for k in ("id", "type", "guild_id", "name", "parent_id") if k in channel}
        payload = interaction_payload(self.application_id, kind, partial, data, member=member, permissions=permissions,
                                      message=message)
        record = Interaction(payload["id"], payload["token"], kind, channel_id, time.perf_counter())
        self.interactions[payload["token"]] = record
        record.dispatched_at = await self.dispatch("INTERACTION_CREATE", payload)
        return record

    # -- REST ----------------------------------------------------------------------------

    _ROUTES: tuple[tuple[str, str, str], ...] = (
        ("GET", r"^/users/@me$", "_get_me"),
        ("GET", r"^/oauth2/applications/@me$", "_get_application"),
        ("PUT", r"^/applications/\d+/commands$", "_put_commands"),
        ("PUT", r"^/applications/\d+/guilds/\d+/commands$", "_put_commands"),
        ("GET", r"^/channels/(?P<channel>\d+)/messages/pins$", "_get_pins"),
        ("POST", r"^/channels/(?P<channel>\d+)/messages/(?P<message>\d+)/threads$", "_post_thread"),
        ("GET", r"^/channels/(?P<channel>\d+)/messages/(?P<message>\d+)$", "_get_message"),
        ("GET", r"^/channels/(?P<channel>\d+)/messages$", "_get_history"),
        ("POST", r"^/channels/(?P<channel>\d+)/messages$", "_post_message"),
        ("PATCH", r"^/channels/(?P<channel>\d+)/messages/(?P<message>\d+)$", "_patch_message"),
        ("POST", r"^/channels/(?P<channel>\d+)/typing$", "_post_typing"),
        ("GET", r"^/channels/(?P<channel>\d+)$", "_get_channel"),
        ("POST", r"^/interactions/(?P<interaction>\d+)/(?P<token>[^/]+)/callback$", "_post_callback"),
        ("POST", r"^/webhooks/\d+/(?P<token>[^/]+)$", "_post_followup"),
        ("PATCH", r"^/webhooks/\d+/(?P<token>[^/]+)/messages/(?P<message>@original|\d+)$", "_patch_webhook_message"),
        ("DELETE", r"^/webhooks/\d+/(?P<token>[^/]+)/messages/(?P<message>@original|\d+)$", "_delete_webhook_message"),
    )

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        body, files = await _read_body(request)
        call = Call(request.method, path, dict(request.query), body, tuple(files), time.perf_counter())
        response: web.StreamResponse | None = self._injected_failure(request.method, path)
        if response is None:
            response = await self._route(request.method, path, call)
        self.calls.append(replace(call, status=response.status))
        await self._notify()
        return response

    async def _route(self, method: str, path: str, call: Call) -> web.StreamResponse:
        for route_method, pattern, name in self._ROUTES:
            found = re.match(pattern, path)
            if found and route_method == method:
                handler = getattr(self, name)
                return await handler(call, **found.groupdict())
        log.warning("the Discord stand-in has no route for %s %s", method, path)
        return _error(404, 0, "404: Not Found")

    def _injected_failure(self, method: str, path: str) -> web.Response | None:
        for failure in self.failures:
            if failure.times > 0 and failure.method == method and failure.path.search(path):
                failure.times -= 1
                return _json(failure.body, failure.status)
        return None

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        call = Call("GET", "/cdn/" + path, dict(request.query), None, (), time.perf_counter())
        response = self._injected_failure("GET", "/cdn/" + path)
        if response is None:
            data = self.files.get(path)
            response = web.Response(body=data) if data is not None else _error(404, 0, "404: Not Found")
        self.calls.append(replace(call, status=response.status))
        await self._notify()
        return response

    async def _get_me(self, call: Call) -> web.Response:
        return _json(self.bot_user)

    async def _get_application(self, call: Call) -> web.Response:
        return _json({
            "id": self.application_id,
            "name": self.bot_user["username"],
            "description": "",
            "icon": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": self.owner,
            "verify_key": "0" * 64,
            "flags": 0,
            "team": None,
            "interactions_endpoint_url": None,
            "bot": self.bot_user,
        })

    async def _put_commands(self, call: Call) -> web.Response:
        self.commands = [
            # Discord answers "" for a MESSAGE or USER command's description (they have none).
            {"description": "", **command, "id": snowflake(), "application_id": self.application_id,
             "version": snowflake()}
            for command in call.body or []
        ]
        return _json(self.commands)

    async def _get_channel(self, call: Call, channel: str) -> web.Response:
        found = self.channels.get(channel)
        return _json(found) if found else _error(404, 10003, "Unknown Channel")

    async def _post_typing(self, call: Call, channel: str) -> web.Response:
        if channel not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        return web.Response(status=204)

    async def _get_history(self, call: Call, channel: str) -> web.Response:
        if channel not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        limit = int(call.params.get("limit", 50))
        newest_first = list(reversed(self.messages.get(channel, [])))
        if "before" in call.params:
            newest_first = [m for m in newest_first if int(m["id"]) < int(call.params["before"])]
        if "after" in call.params:
            newest_first = [m for m in newest_first if int(m["id"]) > int(call.params["after"])]
        return _json(newest_first[:limit])

    async def _get_message(self, call: Call, channel: str, message: str) -> web.Response:
        found = self._find(channel, message)
        if found is None:
            return _error(404, 10008, "Unknown Message")
        return _json({**found, "pinned": self.is_pinned(channel, message)})  # as Discord: pinned now or not

    async def _get_pins(self, call: Call, channel: str) -> web.Response:
        limit = min(int(call.params.get("limit", 50)), 50)
        pins = self.pins.get(channel, [])
        if "before" in call.params:
            before = datetime.fromisoformat(call.params["before"])
            pins = [p for p in pins if datetime.fromisoformat(p[1]) < before]
        page = pins[:limit]
        found = [(at, self._find(channel, mid)) for mid, at in page]
        items = [{"pinned_at": at, "message": {**message, "pinned": True}} for at, message in found if message]
        return _json({"items": items, "has_more": len(pins) > limit})

    async def _post_message(self, call: Call, channel: str) -> web.Response:
        if channel not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        refused = self._message_errors(call.body or {}, len(call.files))
        if refused:
            return _json(refused[1], refused[0])
        payload = self._bot_message(channel, call)
        self.messages[channel].append(payload)
        return _json(payload)

    # An API without Components v2: a message or edit with IS_COMPONENTS_V2 gets a 400. Class-level: set per instance.
    refuses_components_v2 = False

    def _message_errors(self, body: Mapping[str, Any], files: int) -> tuple[int, dict[str, Any]] | None:
        """:func:`message_errors`, and the refusal of Components v2 when :attr:`refuses_components_v2`."""
        if self.refuses_components_v2 and is_components_v2(body):
            return components_v2_refusal()
        return message_errors(body, files)

    # Discord's limit on editing messages: 5 edits per 5 s in a channel; more get a 429 with
    # ``retry_after`` (discord.py waits and retries). None: no limit. Class-level: set per instance.
    edit_limit: tuple[int, float] | None = (5, 5.0)

    async def _patch_message(self, call: Call, channel: str, message: str) -> web.Response:
        """An edit of the bot's message: content, embeds and components replaced as sent."""
        found = self._find(channel, message)
        if found is None:
            return _error(404, 10008, "Unknown Message")
        if found["author"]["id"] != self.bot_user["id"]:
            return _error(403, 50005, "Cannot edit a message authored by another user")
        wait = self._edit_wait(channel, call.at)
        if wait > 0:  # as Discord sends it: discord.py takes a 429 without Via for a Cloudflare ban
            limited = _json({"message": "You are being rate limited.", "retry_after": wait, "global": False}, 429)
            limited.headers.update({"Via": "1.1 google", "Retry-After": str(wait), "X-RateLimit-Scope": "user"})
            return limited
        body = call.body or {}
        merged = {key: body.get(key, found.get(key)) for key in ("content", "embeds", "components")}
        flags = int(found.get("flags") or 0) | (int(body.get("flags") or 0) & IS_COMPONENTS_V2)  # never unset
        refused = self._message_errors({**{k: v for k, v in merged.items() if v is not None}, "flags": flags},
                                       len(call.files))
        if refused:
            return _json(refused[1], refused[0])
        found.update({key: value if value is not None else ([] if key != "content" else "")
                      for key, value in merged.items()})
        found["flags"] = flags
        found["edited_timestamp"] = datetime.now(UTC).isoformat()
        return _json(found)

    def _edit_wait(self, channel: str, at: float) -> float:
        """Seconds until one more edit in ``channel`` keeps :attr:`edit_limit` (0: now)."""
        if self.edit_limit is None:
            return 0.0
        count, window = self.edit_limit
        pattern = re.compile(rf"^/channels/{channel}/messages/\d+$")
        recent = [c.at for c in self.calls if c.method == "PATCH" and c.status == 200 and pattern.match(c.path)
                  and c.at > at - window]
        return 0.0 if len(recent) < count else round(min(recent) + window - at, 3)

    async def _post_thread(self, call: Call, channel: str, message: str) -> web.Response:
        starter = self._find(channel, message)
        if starter is None:
            return _error(404, 10008, "Unknown Message")
        name = str((call.body or {}).get("name", ""))
        if not 1 <= len(name) <= 100:
            return _json({"code": 50035, "errors": {"name": _too_long(100)}, "message": "Invalid Form Body"}, 400)
        thread = self._make_thread(channel, starter, name, self.bot_id)
        # Discord tells the bot about the thread it created, as it does for any thread.
        asyncio.get_running_loop().create_task(self.dispatch("THREAD_CREATE", {**thread, "newly_created": True}))
        return _json(thread)

    async def _post_callback(self, call: Call, interaction: str, token: str) -> web.Response:
        record = self.interactions.get(token)
        if record is None or record.id != interaction:
            return _error(404, 10062, "Unknown interaction")
        if record.callback_type is not None:
            return _error(400, 40060, "Interaction has already been acknowledged.")
        if call.at - record.dispatched_at > INTERACTION_DEADLINE_S:
            return _error(404, 10062, "Unknown interaction")
        body = call.body or {}
        kind = int(body.get("type", 0))
        data = body.get("data") or {}
        if kind == 4:
            refused = self._message_errors(data, len(call.files))
            if refused:
                return _json(refused[1], refused[0])
        if kind == MODAL_CALLBACK:
            refused = modal_errors(data, record.kind)
            if refused:
                return _json(refused[1], refused[0])
        record.callback_type, record.callback_at, record.callback_data = kind, call.at, data
        ephemeral = bool(int(data.get("flags", 0)) & EPHEMERAL)
        if kind == 5:
            record.loading, record.deferred_ephemeral = True, ephemeral
            record.original = self._webhook_message(record, {"content": ""}, ephemeral, [])
        elif kind == 4:
            record.original = self._webhook_message(record, data, ephemeral, call.files)
            record.messages.append(record.original)
        response = {
            "interaction": {"id": record.id, "type": record.kind, "response_message_loading": kind == 5,
                            "response_message_ephemeral": ephemeral},
        }
        if record.original is not None:
            response["resource"] = {"type": kind, "message": record.original}
        return _json(response)

    async def _post_followup(self, call: Call, token: str) -> web.Response:
        record = self.interactions.get(token)
        if record is None or record.callback_type is None:
            return _error(404, 10015, "Unknown Webhook")
        body = call.body or {}
        refused = self._message_errors(body, len(call.files))
        if refused:
            return _json(refused[1], refused[0])
        if record.loading and not record.original_deleted and record.original is not None:
            # The first follow-up after a "thinking" defer edits the deferred message, and its
            # ephemerality is the defer's, whatever the follow-up's flags say.
            message = self._webhook_message(record, body, record.deferred_ephemeral, call.files, record.original["id"])
            record.original, record.loading = message, False
        else:
            message = self._webhook_message(record, body, bool(int(body.get("flags", 0)) & EPHEMERAL), call.files)
        record.messages.append(message)
        return _json(message)

    async def _patch_webhook_message(self, call: Call, token: str, message: str) -> web.Response:
        record = self.interactions.get(token)
        if record is None or record.original is None or record.original_deleted:
            return _error(404, 10008, "Unknown Message")
        refused = self._message_errors(call.body or {}, len(call.files))
        if refused:
            return _json(refused[1], refused[0])
        edited = self._webhook_message(record, call.body or {}, record.deferred_ephemeral, call.files,
                                       record.original["id"])
        if record.loading:
            record.loading = False
            record.messages.append(edited)
        else:
            record.messages = [edited if m["id"] == edited["id"] else m for m in record.messages]
        record.original = edited
        return _json(edited)

    async def _delete_webhook_message(self, call: Call, token: str, message: str) -> web.Response:
        record = self.interactions.get(token)
        if record is None or record.original is None or record.original_deleted:
            return _error(404, 10008, "Unknown Message")
        original_id = record.original["id"]
        record.original_deleted, record.loading = True, False
        record.messages = [m for m in record.messages if m["id"] != original_id]
        self.messages[record.channel_id] = [m for m in self.messages.get(record.channel_id, []) if m["id"] != original_id]
        return web.Response(status=204)

    # -- helpers -----------------------------------------------------------------------------

    def _find(self, channel_id: str, message_id: str) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel_id, []) if m["id"] == message_id), None)

    def _make_thread(self, channel_id: str, starter: Mapping[str, Any], name: str, owner_id: str) -> dict[str, Any]:
        parent = self.channels[channel_id]
        guild_id = str(parent["guild_id"])
        thread = thread_payload(str(starter["id"]), guild_id, channel_id, name, owner_id)
        self.channels[thread["id"]] = thread
        # A thread started from a message opens with a starter message pointing at it.
        first = message_payload(
            snowflake(), thread["id"], starter["author"], "", guild_id, message_type=THREAD_STARTER_MESSAGE,
            reference={"message_id": starter["id"], "channel_id": channel_id, "guild_id": guild_id},
            referenced=starter,
        )
        self.messages[thread["id"]] = [first]
        for guild_channel in self.guilds[guild_id]["threads"]:
            if guild_channel["id"] == thread["id"]:
                break
        else:
            self.guilds[guild_id]["threads"].append(thread)
        return thread

    def _bot_message(self, channel_id: str, call: Call) -> dict[str, Any]:
        body = call.body or {}
        channel = self.channels[channel_id]
        attachments = [self.add_file(channel_id, name, data, "image/png") for name, data in call.files]
        reference = body.get("message_reference")
        if reference:  # Discord answers with string ids, whatever the client sent
            reference = {k: str(v) if k.endswith("_id") else v for k, v in reference.items()}
        referenced = self._find(channel_id, reference["message_id"]) if reference else None
        return message_payload(
            snowflake(), channel_id, self.bot_user, body.get("content") or "", channel.get("guild_id"),
            embeds=body.get("embeds") or [], components=body.get("components") or [], attachments=attachments,
            message_type=REPLY_MESSAGE if reference else DEFAULT_MESSAGE, reference=reference, referenced=referenced,
            flags=int(body.get("flags") or 0) & IS_COMPONENTS_V2,
        )

    def _webhook_message(self, record: Interaction, body: Mapping[str, Any], ephemeral: bool,
                         files: Iterable[tuple[str, bytes]], message_id: str | None = None) -> dict[str, Any]:
        channel = self.channels.get(record.channel_id, {})
        attachments = [self.add_file(record.channel_id, name, data, "image/png") for name, data in files]
        payload = message_payload(
            message_id or snowflake(), record.channel_id, self.bot_user, body.get("content") or "",
            channel.get("guild_id"), embeds=body.get("embeds") or [], components=body.get("components") or [],
            attachments=attachments, message_type=20,
            flags=(EPHEMERAL if ephemeral else 0) | (int(body.get("flags") or 0) & IS_COMPONENTS_V2),
        )
        payload["webhook_id"] = self.application_id
        payload["application_id"] = self.application_id
        if not ephemeral:
            stored = self.messages.setdefault(record.channel_id, [])
            self.messages[record.channel_id] = [m for m in stored if m["id"] != payload["id"]] + [payload]
        return payload


async def _read_body(request: web.Request) -> tuple[Any, list[tuple[str, bytes]]]:
    """The JSON body (``payload_json`` of a multipart body) and the files sent with it."""
    if not request.can_read_body:
        return None, []
    content_type = request.headers.get("Content-Type", "")
    if content_type.startswith("multipart/"):
        files: list[tuple[str, bytes]] = []
        body: Any = None
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            data = await part.read()  # type: ignore[union-attr]
            if part.name == "payload_json":  # type: ignore[union-attr]
                body = json.loads(data)
            elif part.filename:  # type: ignore[union-attr]
                files.append((part.filename, bytes(data)))  # type: ignore[union-attr]
        return body, files
    raw = await request.read()
    if not raw:
        return None, []
    try:
        return json.loads(raw), []
    except ValueError:
        return raw.decode(errors="replace"), []



# -- forum channels, their posts and tags ----------------------------------------------------
# Kept apart from the class: a forum is made, a post opened and tagged through these functions,
# which drive a started FakeDiscord as Discord does. Payload shapes: Discord's channel resource
# (https://discord.com/developers/docs/resources/channel: channel type GUILD_FORUM = 15, the
# forum tag object {id, name, moderated, emoji_id, emoji_name}, a thread's ``applied_tags``; "the
# thread starter message ID is the same ID as the thread") and discord.py's own types
# (discord/types/channel.py: ForumChannel, ForumTag; discord/types/threads.py: Thread.applied_tags;
# discord/types/gateway.py: ThreadCreateEvent.newly_created, ThreadUpdateEvent = Thread).

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
