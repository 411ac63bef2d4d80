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
them.

This module is the one tests and benchmarks import: it re-exports (``name as name``) the public
names of the modules the stand-in is made of, each with one concern:

* :mod:`testkit.discord_payloads`: snowflakes and the payload builders (users, roles, members,
  channels, threads, messages, guilds, interactions) with their constants;
* :mod:`testkit.discord_limits`: Discord's message, modal and Components v2 limits and its 400
  answers;
* :mod:`testkit.discord_records`: :class:`Call`, :class:`Interaction`, :class:`Failure`, and
  reading a message as a person does;
* :mod:`testkit.discord_http`: the REST path prefix, JSON and error answers, request bodies;
* :mod:`testkit.discord_state`: what the stand-in holds and what a test reads of it;
* :mod:`testkit.discord_faults`: failures on demand, the edit rate limit, no Components v2;
* :mod:`testkit.discord_gateway`: the gateway websocket and its events;
* :mod:`testkit.discord_world`: guilds, channels and files, and what a test does in them;
* :mod:`testkit.discord_interaction_routes`: interaction callbacks, follow-ups and their messages;
* :mod:`testkit.discord_rest`: the REST and CDN routes;
* :mod:`testkit.discord_fake`: :class:`FakeDiscord`, the server that runs all of it;
* :mod:`testkit.discord_forums`: forum channels, posts and tags.
"""

from __future__ import annotations

from testkit.discord_fake import FakeDiscord as FakeDiscord
from testkit.discord_forums import (
    GUILD_FORUM as GUILD_FORUM,
    create_forum as create_forum,
    forum_channel_payload as forum_channel_payload,
    forum_tag_id as forum_tag_id,
    forum_tag_payload as forum_tag_payload,
    open_forum_post as open_forum_post,
    tag_forum_post as tag_forum_post,
)
from testkit.discord_gateway import (
    HEARTBEAT_ACK_DELAY_S as HEARTBEAT_ACK_DELAY_S,
    MESSAGE_CONTENT_INTENT as MESSAGE_CONTENT_INTENT,
)
from testkit.discord_http import API as API
from testkit.discord_interaction_routes import INTERACTION_DEADLINE_S as INTERACTION_DEADLINE_S
from testkit.discord_limits import (
    ACTION_ROWS as ACTION_ROWS,
    AUTHOR_NAME as AUTHOR_NAME,
    BUTTON_LABEL as BUTTON_LABEL,
    CONTENT_LIMIT as CONTENT_LIMIT,
    CUSTOM_ID as CUSTOM_ID,
    EMBED_DESCRIPTION as EMBED_DESCRIPTION,
    EMBED_FIELDS as EMBED_FIELDS,
    EMBED_TITLE as EMBED_TITLE,
    EMBED_TOTAL as EMBED_TOTAL,
    EMBEDS_PER_MESSAGE as EMBEDS_PER_MESSAGE,
    FIELD_NAME as FIELD_NAME,
    FIELD_VALUE as FIELD_VALUE,
    FOOTER_TEXT as FOOTER_TEXT,
    IS_COMPONENTS_V2 as IS_COMPONENTS_V2,
    MODAL_ROWS as MODAL_ROWS,
    MODAL_TITLE as MODAL_TITLE,
    ROW_WIDTH as ROW_WIDTH,
    TEXT_DISPLAY as TEXT_DISPLAY,
    TEXT_INPUT_VALUE as TEXT_INPUT_VALUE,
    V2_COMPONENTS_LIMIT as V2_COMPONENTS_LIMIT,
    V2_TEXT_LIMIT as V2_TEXT_LIMIT,
    all_components as all_components,
    components_v2_errors as components_v2_errors,
    components_v2_refusal as components_v2_refusal,
    embed_length as embed_length,
    is_components_v2 as is_components_v2,
    layout_custom_ids as layout_custom_ids,
    layout_text as layout_text,
    message_errors as message_errors,
    modal_errors as modal_errors,
)
from testkit.discord_payloads import (
    ATTACH_FILES as ATTACH_FILES,
    COMPONENT_INTERACTION as COMPONENT_INTERACTION,
    CREATE_PUBLIC_THREADS as CREATE_PUBLIC_THREADS,
    DEFAULT_MESSAGE as DEFAULT_MESSAGE,
    DISCORD_EPOCH_MS as DISCORD_EPOCH_MS,
    DM as DM,
    EPHEMERAL as EPHEMERAL,
    EVERYONE_PERMISSIONS as EVERYONE_PERMISSIONS,
    GUILD_TEXT as GUILD_TEXT,
    MANAGE_MESSAGES as MANAGE_MESSAGES,
    MESSAGE_COMMAND as MESSAGE_COMMAND,
    MODAL_CALLBACK as MODAL_CALLBACK,
    MODAL_SUBMIT as MODAL_SUBMIT,
    PRIVATE_THREAD as PRIVATE_THREAD,
    PUBLIC_THREAD as PUBLIC_THREAD,
    READ_MESSAGE_HISTORY as READ_MESSAGE_HISTORY,
    REPLY_MESSAGE as REPLY_MESSAGE,
    SEND_MESSAGES as SEND_MESSAGES,
    SEND_MESSAGES_IN_THREADS as SEND_MESSAGES_IN_THREADS,
    THREAD_STARTER_MESSAGE as THREAD_STARTER_MESSAGE,
    VIEW_CHANNEL as VIEW_CHANNEL,
    attachment_payload as attachment_payload,
    button_data as button_data,
    channel_payload as channel_payload,
    dm_channel_payload as dm_channel_payload,
    guild_payload as guild_payload,
    interaction_payload as interaction_payload,
    iso_now as iso_now,
    member_payload as member_payload,
    message_command_data as message_command_data,
    message_payload as message_payload,
    modal_submit_data as modal_submit_data,
    role_payload as role_payload,
    slash_data as slash_data,
    snowflake as snowflake,
    thread_payload as thread_payload,
    user_payload as user_payload,
)
from testkit.discord_records import (
    Call as Call,
    Failure as Failure,
    Interaction as Interaction,
    custom_ids as custom_ids,
    message_text as message_text,
)
from testkit.discord_state import POLL_S as POLL_S
