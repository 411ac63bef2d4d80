"""The Discord stand-in's world and what a test does in it: guilds, channels, DMs and CDN files
set up beforehand; then people posting, editing and deleting messages, pinning, starting threads,
deleting channels, kicking the bot, running commands, pressing buttons and submitting modals,
each stored and sent as the gateway event Discord sends.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from testkit.discord_gateway import DiscordGateway
from testkit.discord_payloads import (
    EVERYONE_PERMISSIONS,
    MODAL_SUBMIT,
    PRIVATE_THREAD,
    THREAD_STARTER_MESSAGE,
    attachment_payload,
    button_data,
    channel_payload,
    dm_channel_payload,
    guild_payload,
    interaction_payload,
    iso_now,
    member_payload,
    message_command_data,
    message_payload,
    modal_submit_data,
    role_payload,
    slash_data,
    snowflake,
    thread_payload,
)
from testkit.discord_records import Interaction


class DiscordWorld(DiscordGateway):
    """The world's set-up and the actions of the people in it."""

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
