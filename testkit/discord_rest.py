"""The Discord stand-in's REST API and CDN: the route table, recording every request as a
:class:`~testkit.discord_records.Call` (after any injected failure), and the routes of the bot
user, the application and its commands, channels, typing, message history, fetch, pins, posts,
edits (rate limited) and threads started from a message.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from testkit.discord_http import error_response, json_response, read_body
from testkit.discord_interaction_routes import InteractionRoutes
from testkit.discord_limits import IS_COMPONENTS_V2, too_long
from testkit.discord_payloads import DEFAULT_MESSAGE, REPLY_MESSAGE, message_payload, snowflake
from testkit.discord_records import Call

log = logging.getLogger(__name__)


class DiscordRest(InteractionRoutes):
    """The REST and CDN routes, with the route table naming their handlers."""

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
        body, files = await read_body(request)
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
        return error_response(404, 0, "404: Not Found")

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        call = Call("GET", "/cdn/" + path, dict(request.query), None, (), time.perf_counter())
        response = self._injected_failure("GET", "/cdn/" + path)
        if response is None:
            data = self.files.get(path)
            response = web.Response(body=data) if data is not None else error_response(404, 0, "404: Not Found")
        self.calls.append(replace(call, status=response.status))
        await self._notify()
        return response

    async def _get_me(self, call: Call) -> web.Response:
        return json_response(self.bot_user)

    async def _get_application(self, call: Call) -> web.Response:
        return json_response({
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
        return json_response(self.commands)

    async def _get_channel(self, call: Call, channel: str) -> web.Response:
        found = self.channels.get(channel)
        return json_response(found) if found else error_response(404, 10003, "Unknown Channel")

    async def _post_typing(self, call: Call, channel: str) -> web.Response:
        if channel not in self.channels:
            return error_response(404, 10003, "Unknown Channel")
        return web.Response(status=204)

    async def _get_history(self, call: Call, channel: str) -> web.Response:
        if channel not in self.channels:
            return error_response(404, 10003, "Unknown Channel")
        limit = int(call.params.get("limit", 50))
        newest_first = list(reversed(self.messages.get(channel, [])))
        if "before" in call.params:
            newest_first = [m for m in newest_first if int(m["id"]) < int(call.params["before"])]
        if "after" in call.params:
            newest_first = [m for m in newest_first if int(m["id"]) > int(call.params["after"])]
        return json_response(newest_first[:limit])

    async def _get_message(self, call: Call, channel: str, message: str) -> web.Response:
        found = self._find(channel, message)
        if found is None:
            return error_response(404, 10008, "Unknown Message")
        return json_response({**found, "pinned": self.is_pinned(channel, message)})  # as Discord: pinned now or not

    async def _get_pins(self, call: Call, channel: str) -> web.Response:
        limit = min(int(call.params.get("limit", 50)), 50)
        pins = self.pins.get(channel, [])
        if "before" in call.params:
            before = datetime.fromisoformat(call.params["before"])
            pins = [p for p in pins if datetime.fromisoformat(p[1]) < before]
        page = pins[:limit]
        found = [(at, self._find(channel, mid)) for mid, at in page]
        items = [{"pinned_at": at, "message": {**message, "pinned": True}} for at, message in found if message]
        return json_response({"items": items, "has_more": len(pins) > limit})

    async def _post_message(self, call: Call, channel: str) -> web.Response:
        if channel not in self.channels:
            return error_response(404, 10003, "Unknown Channel")
        refused = self._message_errors(call.body or {}, len(call.files))
        if refused:
            return json_response(refused[1], refused[0])
        payload = self._bot_message(channel, call)
        self.messages[channel].append(payload)
        return json_response(payload)

    async def _patch_message(self, call: Call, channel: str, message: str) -> web.Response:
        """An edit of the bot's message: content, embeds and components replaced as sent."""
        found = self._find(channel, message)
        if found is None:
            return error_response(404, 10008, "Unknown Message")
        if found["author"]["id"] != self.bot_user["id"]:
            return error_response(403, 50005, "Cannot edit a message authored by another user")
        wait = self._edit_wait(channel, call.at)
        if wait > 0:  # as Discord sends it: discord.py takes a 429 without Via for a Cloudflare ban
            limited = json_response({"message": "You are being rate limited.", "retry_after": wait, "global": False}, 429)
            limited.headers.update({"Via": "1.1 google", "Retry-After": str(wait), "X-RateLimit-Scope": "user"})
            return limited
        body = call.body or {}
        merged = {key: body.get(key, found.get(key)) for key in ("content", "embeds", "components")}
        flags = int(found.get("flags") or 0) | (int(body.get("flags") or 0) & IS_COMPONENTS_V2)  # never unset
        refused = self._message_errors({**{k: v for k, v in merged.items() if v is not None}, "flags": flags},
                                       len(call.files))
        if refused:
            return json_response(refused[1], refused[0])
        found.update({key: value if value is not None else ([] if key != "content" else "")
                      for key, value in merged.items()})
        found["flags"] = flags
        found["edited_timestamp"] = datetime.now(UTC).isoformat()
        return json_response(found)

    async def _post_thread(self, call: Call, channel: str, message: str) -> web.Response:
        starter = self._find(channel, message)
        if starter is None:
            return error_response(404, 10008, "Unknown Message")
        name = str((call.body or {}).get("name", ""))
        if not 1 <= len(name) <= 100:
            return json_response({"code": 50035, "errors": {"name": too_long(100)}, "message": "Invalid Form Body"}, 400)
        thread = self._make_thread(channel, starter, name, self.bot_id)
        # Discord tells the bot about the thread it created, as it does for any thread.
        asyncio.get_running_loop().create_task(self.dispatch("THREAD_CREATE", {**thread, "newly_created": True}))
        return json_response(thread)

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
