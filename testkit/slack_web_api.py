"""The Slack stand-in's Web API: the methods under ``/api/``, and what the bot's calls did.

:class:`SlackWebApi` answers the Web API (``auth.test``, ``apps.connections.open``,
``chat.postMessage``/``postEphemeral``/``getPermalink``, ``views.open`` (a modal's basic shape
checked), ``conversations.replies``/``history``/``open``/``info``, ``users.info``,
``reactions.add``/``remove``, ``files.info``, ``files.getUploadURLExternal`` + the upload URL +
``files.completeUploadExternal``), checking the bearer token as Slack does and recording every
call (:class:`ApiCall`) with the time it arrived; messages over Slack's limits are refused as
Slack refuses them (:mod:`testkit.slack_limits`). It also serves file downloads
(``/files-pri/...``: the bytes for the bot token and, like Slack, a 200 *HTML sign-in page* for
any other token) and the ``response_url`` endpoints (``/respond/<n>``), recording what is sent
there. A method is the handler ``_m_<method with dots as underscores>``, so other parts of the
stand-in (:mod:`testkit.slack_streaming`, :mod:`testkit.slack_assistant`) add methods by
defining such handlers.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from testkit.slack_limits import as_slack_keeps, message_problem, view_problem
from testkit.slack_workspace import APP_ID, BOT_ID, BOT_USER, SlackWorkspace

LOGIN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One Web API call as received: its method, its merged parameters (query, form or
    JSON), the token it carried, and when it arrived (``time.perf_counter``)."""

    method: str
    params: dict[str, Any]
    token: str
    at: float
    ok: bool = True
    error: str = ""


@dataclass(slots=True)
class _Upload:
    file_id: str
    filename: str
    data: bytes = b""
    channel: str = ""
    thread_ts: str = ""
    title: str = ""


class SlackWebApi(SlackWorkspace):
    """The Web API part of :class:`~testkit.slack_api.SlackStandIn` (see the module docstring)."""

    def init_web_api(self) -> None:
        """Sets up the Web API's state (called once, by the stand-in's constructor)."""
        self.calls: list[ApiCall] = []
        self.responses: list[tuple[str, dict[str, Any], float]] = []  # (response_url path, JSON, time)
        self.uploads: dict[str, _Upload] = {}
        self.reactions: set[tuple[str, str, str]] = set()
        self.not_member: set[str] = set()  # channels where posting fails with not_in_channel
        self.download_token = self.bot_token  # the token file downloads accept (others get the sign-in page)
        self._failures: dict[str, list[str]] = {}
        self.latency: dict[str, float] = {}  # seconds a Web API method takes to answer (a slow Slack)

    def fail(self, method: str, error: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` fail with Slack's ``error``."""
        self._failures.setdefault(method, []).extend([error] * times)

    # -- what the bot did -----------------------------------------------------------------

    def calls_of(self, method: str, **where: Any) -> list[ApiCall]:
        """Successful calls of ``method`` whose parameters include ``where``."""
        return [
            c for c in self.calls
            if c.method == method and c.ok and all(c.params.get(k) == v for k, v in where.items())
        ]

    def posts(self, channel: str | None = None, thread_ts: str | None = None) -> list[dict[str, Any]]:
        """Messages the bot posted (``chat.postMessage`` accepted), oldest first."""
        found = []
        for call in self.calls_of("chat.postMessage"):
            if channel is not None and call.params.get("channel") != channel:
                continue
            if thread_ts is not None and call.params.get("thread_ts") != thread_ts:
                continue
            found.append(call.params)
        return found

    def ephemerals(self, channel: str | None = None) -> list[dict[str, Any]]:
        return [c.params for c in self.calls_of("chat.postEphemeral") if channel in (None, c.params.get("channel"))]

    def rejected(self) -> list[ApiCall]:
        """Calls Slack would have refused (limits, bad token, injected failures)."""
        return [c for c in self.calls if not c.ok]

    # -- the Web API --------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _params(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip() or str(params.get("token", ""))
        at = time.perf_counter()
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != expected:
            return self._answer(method, params, token, at, {"ok": False, "error": "invalid_auth"})
        injected = self._failures.get(method)
        if injected:
            return self._answer(method, params, token, at, {"ok": False, "error": injected.pop(0)})
        if self.latency.get(method):
            await asyncio.sleep(self.latency[method])
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return self._answer(method, params, token, at, {"ok": False, "error": "unknown_method"})
        result = handler(params)
        return self._answer(method, params, token, at, result)

    def _answer(self, method: str, params: dict[str, Any], token: str, at: float, result: dict[str, Any]) -> web.Response:
        ok = bool(result.get("ok", True))
        self.calls.append(ApiCall(method, params, token, at, ok, str(result.get("error", ""))))
        return web.json_response({"ok": True, **result} if ok else result)

    def _m_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": f"{self.root}/", "team": "Stand-in", "user": "raptor", "team_id": self.team,
                "user_id": BOT_USER, "bot_id": BOT_ID}

    def _m_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": f"ws://127.0.0.1:{self.port}/link?ticket={next(self._counter)}"}

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        problem = self._check_message(params)
        if problem:
            return {"ok": False, "error": problem}
        channel = str(params.get("channel", ""))
        ts = self.next_ts()
        message = {"type": "message", "user": BOT_USER, "bot_id": BOT_ID, "ts": ts,
                   "text": params.get("text", ""), "blocks": as_slack_keeps(params.get("blocks")), "team": self.team}
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        self._store(channel, message)
        return {"channel": channel, "ts": ts, "message": message}

    def _m_chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        problem = self._check_message(params) or ("" if params.get("user") else "user_not_found")
        if problem:
            return {"ok": False, "error": problem}
        return {"message_ts": self.next_ts()}

    def _m_views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        """Opens a modal: a ``trigger_id`` is required (Slack: ``invalid_arguments``) and the view
        must have a modal's basic shape (Slack: ``invalid_arguments`` too); the view, with its
        new ``id``, is what :meth:`opened_views` reads back from the recorded call."""
        view = params.get("view")
        if isinstance(view, str):
            try:
                view = json.loads(view)
            except ValueError:
                return {"ok": False, "error": "invalid_arguments"}
        if not params.get("trigger_id") or not isinstance(view, dict) or view_problem(view):
            return {"ok": False, "error": "invalid_arguments"}
        return {"view": {**view, "id": f"V{next(self._counter):08d}", "team_id": self.team, "app_id": APP_ID,
                         "state": {"values": {}}}}

    def opened_views(self) -> list[dict[str, Any]]:
        """The modals opened so far (``views.open`` calls Slack accepted), oldest first, as sent."""
        views = []
        for call in self.calls_of("views.open"):
            if call.ok:
                view = call.params["view"]
                views.append(json.loads(view) if isinstance(view, str) else dict(view))
        return views

    def _check_message(self, params: dict[str, Any]) -> str:
        return self._channel_problem(params) or message_problem(params)

    def _channel_problem(self, params: dict[str, Any]) -> str:
        """Slack's error for a message to no channel or to one the bot is not in, else empty
        (checked first by every method that posts, streamed or not)."""
        channel = str(params.get("channel", ""))
        if not channel:
            return "channel_not_found"
        return "not_in_channel" if channel in self.not_member else ""

    def _m_chat_getPermalink(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("message_ts", ""))
        if self.message(channel, ts) is None:
            return {"ok": False, "error": "message_not_found"}
        return {"channel": channel, "permalink": self.permalink_of(channel, ts)}

    def _m_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        thread = self.thread(channel, ts)
        if not thread:
            return {"ok": False, "error": "thread_not_found"}
        limit = int(params.get("limit") or 1000)
        start = int(params.get("cursor") or 0)
        page = thread[start : start + limit]
        more = start + limit < len(thread)
        return {"messages": page, "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _m_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        messages = [m for m in self.messages.get(channel, ()) if not m.get("thread_ts") or m["thread_ts"] == m["ts"]]
        latest = str(params.get("latest") or "")
        if latest:
            inclusive = str(params.get("inclusive", "")).lower() in ("1", "true")
            messages = [m for m in messages if m["ts"] < latest or (inclusive and m["ts"] == latest)]
        limit = int(params.get("limit") or 100)
        return {"messages": sorted(messages, key=lambda m: str(m["ts"]), reverse=True)[:limit], "has_more": False}

    def _m_conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        user = str(params.get("users", "")).split(",")[0]
        return {"channel": {"id": f"D{user}"}}

    def _m_conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        other = self.shared_with.get(channel, "")
        return {"channel": {"id": channel, "name": channel.lower(), "is_channel": not channel.startswith("D"),
                            "is_im": channel.startswith("D"), "is_private": False, "is_archived": False,
                            "is_shared": bool(other), "is_ext_shared": bool(other), "is_org_shared": False,
                            "is_pending_ext_shared": False, "context_team_id": self.team,
                            "shared_team_ids": [self.team, other] if other else [self.team]}}

    def _m_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(params.get("user", "")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"user": {"id": user.id, "team_id": user.team or self.team, "name": user.name.lower(), "real_name": user.name,
                         "is_admin": user.admin, "is_owner": user.owner, "is_bot": user.id == BOT_USER,
                         "profile": {"display_name": user.name, "real_name": user.name}}}

    def _m_reactions_add(self, params: dict[str, Any]) -> dict[str, Any]:
        key = (str(params.get("channel")), str(params.get("timestamp")), str(params.get("name")))
        if self.message(key[0], key[1]) is None:
            return {"ok": False, "error": "message_not_found"}
        if key in self.reactions:
            return {"ok": False, "error": "already_reacted"}
        self.reactions.add(key)
        return {}

    def _m_reactions_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        key = (str(params.get("channel")), str(params.get("timestamp")), str(params.get("name")))
        if key not in self.reactions:
            return {"ok": False, "error": "no_reaction"}
        self.reactions.discard(key)
        return {}

    def _m_files_info(self, params: dict[str, Any]) -> dict[str, Any]:
        found = self.files.get(str(params.get("file", "")))
        if found is None:
            return {"ok": False, "error": "file_not_found"}
        return {"file": found.meta}

    def _m_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("filename") or not params.get("length"):
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"FUP{next(self._counter):05d}"
        self.uploads[file_id] = _Upload(file_id, str(params["filename"]))
        return {"upload_url": f"{self.root}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files")
        entries = json.loads(files) if isinstance(files, str) else files or []
        done = []
        for entry in entries:
            upload = self.uploads.get(str(entry.get("id")))
            if upload is None or not upload.data:
                return {"ok": False, "error": "file_not_found"}
            upload.channel = str(params.get("channel_id") or "")
            upload.thread_ts = str(params.get("thread_ts") or "")
            upload.title = str(entry.get("title") or upload.filename)
            done.append({"id": upload.file_id, "title": upload.title, "name": upload.filename})
        return {"files": done}

    async def _receive_upload(self, request: web.Request) -> web.Response:
        upload = self.uploads.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404, text="no such upload")
        upload.data = await request.read()
        return web.Response(text=f"OK - {len(upload.data)}")

    async def _download(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization", "") != f"Bearer {self.download_token}":
            # What Slack does for a missing or wrong token: a sign-in page, status 200.
            return web.Response(body=LOGIN_PAGE, content_type="text/html")
        path = request.match_info["path"]
        for stored in self.files.values():
            if stored.meta["url_private_download"].endswith("/files-pri/" + path):
                return web.Response(body=stored.data, content_type=stored.meta["mimetype"])
        return web.Response(status=404, text="not found")

    async def _respond(self, request: web.Request) -> web.Response:
        self.responses.append((request.path, await request.json(), time.perf_counter()))
        return web.Response(text="ok")


async def _params(request: web.Request) -> dict[str, Any]:
    """A call's parameters as slack_sdk sends them: query string, form body, or JSON body."""
    params: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        content_type = request.content_type
        if content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
    return params
