"""The Discord stand-in's REST routes of interactions: the callback (refused with 10062 "Unknown
interaction" after :data:`INTERACTION_DEADLINE_S` or 40060 when answered twice; a modal checked
against Discord's limits), follow-ups (the first after a "thinking" defer edits the deferred
message and inherits its ephemerality, unless that message was deleted), and edits and deletes
of the original message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from testkit.discord_faults import DiscordFaults
from testkit.discord_http import error_response, json_response
from testkit.discord_limits import IS_COMPONENTS_V2, modal_errors
from testkit.discord_payloads import EPHEMERAL, MODAL_CALLBACK, message_payload, snowflake
from testkit.discord_records import Call, Interaction
from testkit.discord_world import DiscordWorld

INTERACTION_DEADLINE_S = 3.0


class InteractionRoutes(DiscordWorld, DiscordFaults):
    """The interaction callback and webhook routes, and the messages they make."""

    async def _post_callback(self, call: Call, interaction: str, token: str) -> web.Response:
        record = self.interactions.get(token)
        if record is None or record.id != interaction:
            return error_response(404, 10062, "Unknown interaction")
        if record.callback_type is not None:
            return error_response(400, 40060, "Interaction has already been acknowledged.")
        if call.at - record.dispatched_at > INTERACTION_DEADLINE_S:
            return error_response(404, 10062, "Unknown interaction")
        body = call.body or {}
        kind = int(body.get("type", 0))
        data = body.get("data") or {}
        if kind == 4:
            refused = self._message_errors(data, len(call.files))
            if refused:
                return json_response(refused[1], refused[0])
        if kind == MODAL_CALLBACK:
            refused = modal_errors(data, record.kind)
            if refused:
                return json_response(refused[1], refused[0])
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
        return json_response(response)

    async def _post_followup(self, call: Call, token: str) -> web.Response:
        record = self.interactions.get(token)
        if record is None or record.callback_type is None:
            return error_response(404, 10015, "Unknown Webhook")
        body = call.body or {}
        refused = self._message_errors(body, len(call.files))
        if refused:
            return json_response(refused[1], refused[0])
        if record.loading and not record.original_deleted and record.original is not None:
            # The first follow-up after a "thinking" defer edits the deferred message, and its
            # ephemerality is the defer's, whatever the follow-up's flags say.
            message = self._webhook_message(record, body, record.deferred_ephemeral, call.files, record.original["id"])
            record.original, record.loading = message, False
        else:
            message = self._webhook_message(record, body, bool(int(body.get("flags", 0)) & EPHEMERAL), call.files)
        record.messages.append(message)
        return json_response(message)

    async def _patch_webhook_message(self, call: Call, token: str, message: str) -> web.Response:
        record = self.interactions.get(token)
        if record is None or record.original is None or record.original_deleted:
            return error_response(404, 10008, "Unknown Message")
        refused = self._message_errors(call.body or {}, len(call.files))
        if refused:
            return json_response(refused[1], refused[0])
        edited = self._webhook_message(record, call.body or {}, record.deferred_ephemeral, call.files,
                                       record.original["id"])
        if record.loading:
            record.loading = False
            record.messages.append(edited)
        else:
            record.messages = [edited if m["id"] == edited["id"] else m for m in record.messages]
        record.original = edited
        return json_response(edited)

    async def _delete_webhook_message(self, call: Call, token: str, message: str) -> web.Response:
        record = self.interactions.get(token)
        if record is None or record.original is None or record.original_deleted:
            return error_response(404, 10008, "Unknown Message")
        original_id = record.original["id"]
        record.original_deleted, record.loading = True, False
        record.messages = [m for m in record.messages if m["id"] != original_id]
        self.messages[record.channel_id] = [m for m in self.messages.get(record.channel_id, []) if m["id"] != original_id]
        return web.Response(status=204)

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
