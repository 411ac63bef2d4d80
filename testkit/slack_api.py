"""A stand-in for Slack on 127.0.0.1, for the real slack-bolt and slack_sdk to talk to.

One aiohttp server (port chosen by the system) plays every part of Slack the
adapter meets:

* the **Web API** under ``/api/`` (``auth.test``, ``apps.connections.open``,
  ``chat.postMessage``/``postEphemeral``/``getPermalink``,
  ``conversations.replies``/``history``/``open``/``info`` (Slack Connect channels: :meth:`SlackStandIn.share_channel`), ``users.info`` (guests of another organisation: ``add_user(team=...)``),
  ``reactions.add``/``remove``, ``files.info``, ``views.open`` (a modal's basic shape checked),
  ``files.getUploadURLExternal`` + the upload URL + ``files.completeUploadExternal``,
  the assistant container's ``assistant.threads.setStatus``/``setTitle``/``setSuggestedPrompts``,
  ``users.conversations`` and its events (:class:`AssistantContainer`),
  and for streamed answers ``chat.startStream``/``appendStream``/``stopStream``,
  ``chat.update`` and ``chat.delete``; :attr:`SlackStandIn.streaming_refusal` refuses
  streaming, :attr:`SlackStandIn.update_limit` rate-limits updates with HTTP 200
  ``ok: false, "ratelimited"`` as Slack does),
  checking the bearer token as Slack does and recording every call with the
  time it arrived;
* **message limits as Slack enforces them**: over 50 blocks, a section or
  context text over 3,000 characters, markdown blocks over 12,000 characters
  together, a duplicate block id, oversized buttons, a malformed ``context_actions``
  block (Slack's native ``feedback_buttons``, also in ``chat.stopStream``'s ``blocks``)
  → ``invalid_blocks``; a
  ``text`` over 40,000 characters → ``msg_too_long``;
* **file downloads** (``/files-pri/...``): the bytes for the bot token, and,
  like Slack, a 200 *HTML sign-in page* for any other token;
* **Socket Mode**: ``/link`` is the websocket ``apps.connections.open`` hands
  out; envelopes are pushed to the app and its acknowledgements awaited; like
  Slack, it pings the app every :attr:`SlackStandIn.ping_every_s` and answers the
  app's pings; :meth:`SlackStandIn.go_silent` makes the open sockets stop
  delivering (no envelope, no ping of its own) while they stay open and still
  answer pings, and :attr:`SlackStandIn.connections` counts the sockets opened;
* the **Events API sender** for an app in HTTP mode: payloads POSTed with
  ``X-Slack-Signature`` computed as Slack does (``v0=`` + HMAC-SHA256 of
  ``v0:{timestamp}:{body}`` with the signing secret), retries marked with
  ``X-Slack-Retry-Num``;
* ``response_url`` endpoints (``/respond/<n>``) recording what is sent there.

It keeps a small workspace (users, the messages of each conversation,
files) so that what the bot posts can be read back by ``conversations.replies``
as on Slack. The helpers ``user_says``, ``share_file``, ``pin``, ``unpin``,
``slash``, ``click``, ``click_feedback`` (the native 👍/👎) and ``submit_view`` do what a person does and deliver the events Slack
would send for it, over the socket or over HTTP (:attr:`SlackStandIn.mode`).

Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

import aiohttp
from aiohttp import web

BOT_TOKEN = "xoxb-stand-in-bot"
APP_TOKEN = "xapp-1-A111-stand-in"
SIGNING_SECRET = "stand-in-signing-secret"
TEAM = "T111"
APP_ID = "A111"
BOT_USER = "UBOT"
BOT_ID = "BBOT"

# Slack's limits, as Slack applies them (independent of the adapter's constants on purpose).
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_MARKDOWN_TEXT = 12_000  # over all the markdown blocks of one message
MAX_TEXT = 40_000
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_BLOCK_ID = 255
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTION_ELEMENTS = 25
MAX_STREAM_TEXT = 12_000  # characters of markdown_text per streaming call

LOGIN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"
ACK_TIMEOUT_S = 10.0
SERVER_PING_S = 5.0  # Slack pings Socket Mode clients (bolt-js waits 30 s for one before reconnecting)


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


@dataclass(frozen=True, slots=True)
class Delivery:
    """What came back for one delivered payload: the HTTP status (200 for a socket
    acknowledgement), the body (the acknowledgement's payload, as JSON text, in Socket
    Mode), and the seconds from sending to the acknowledgement."""

    status: int
    body: str
    seconds: float
    sent_at: float


@dataclass(slots=True)
class _User:
    id: str
    name: str
    admin: bool = False
    owner: bool = False
    team: str = ""  # another organisation's, for a Slack Connect guest; empty: the stand-in's own


@dataclass(slots=True)
class _File:
    meta: dict[str, Any]
    data: bytes


@dataclass(slots=True)
class _Upload:
    file_id: str
    filename: str
    data: bytes = b""
    channel: str = ""
    thread_ts: str = ""
    title: str = ""


@dataclass(slots=True)
class _Socket:
    ws: web.WebSocketResponse
    acks: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    silent: bool = False  # open and answering pings, but delivering nothing (see go_silent)


# -- the assistant container (issue 30): assistant.threads.*, users.conversations, assistant events ----------
#
# Shapes as Slack documents them (docs.slack.dev/reference/methods/assistant.threads.setStatus,
# .setTitle, .setSuggestedPrompts; /reference/events/assistant_thread_started and
# assistant_thread_context_changed; /reference/methods/users.conversations) and as bolt-python's
# own tests send them (tests/scenario_tests_async/test_events_assistant.py: the two events, the
# question in the thread as a message with channel_type "im" and thread_ts, the thread's root
# of subtype "assistant_app_thread"). Kept apart from the rest so it can be read, and merged, alone.

MAX_SUGGESTED_PROMPTS = 4  # Slack shows at most four


def assistant_problem(method: str, params: Mapping[str, Any]) -> str:
    """Slack's error for an ``assistant.threads.*`` call it would refuse, else ``""``."""
    if not params.get("channel_id") or (method != "setSuggestedPrompts" and not params.get("thread_ts")):
        return "invalid_arguments"
    if method == "setStatus" and not isinstance(params.get("status"), str):
        return "invalid_arguments"
    if method == "setTitle" and not str(params.get("title") or "").strip():
        return "invalid_arguments"
    if method == "setSuggestedPrompts":
        prompts = params.get("prompts")
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_SUGGESTED_PROMPTS:
            return "invalid_arguments"
        if not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts):
            return "invalid_arguments"
    return ""


def assistant_event(team: str, event_ts: str, kind: str, user: str, dm: str, thread_ts: str,
                    viewing: str) -> dict[str, Any]:
    """An ``assistant_thread_started`` or ``assistant_thread_context_changed`` event (``viewing``:
    the channel viewed beside the thread, empty for none: an empty ``context``)."""
    context = {"channel_id": viewing, "team_id": team, "enterprise_id": None} if viewing else {}
    return {"type": kind, "assistant_thread": {"user_id": user, "context": context, "channel_id": dm,
                                               "thread_ts": thread_ts}, "event_ts": event_ts}


class StandInCore(Protocol):
    """What :class:`AssistantContainer` uses of the rest of :class:`SlackStandIn`."""

    team: str

    def next_ts(self) -> str: ...

    def store_message(self, channel: str, message: dict[str, Any]) -> dict[str, Any]: ...

    def calls_of(self, method: str, **where: Any) -> list[ApiCall]: ...

    async def deliver_event(self, event: dict[str, Any], *, event_id: str = "", retry: int = 0) -> Delivery: ...

    async def user_says(self, channel: str, user: str, text: str, *, thread_ts: str | None = None,
                        im: bool = False) -> tuple[dict[str, Any], list[Delivery]]: ...


class AssistantContainer:
    """The part of :class:`SlackStandIn` that plays Slack's assistant container: the
    ``assistant.threads.*`` methods (recorded as calls; :meth:`statuses` reads a thread's
    status lines back), ``users.conversations`` over the members set with :meth:`join`, and
    what a person does in the side panel (:meth:`open_assistant`, :meth:`view_channel`,
    :meth:`ask_assistant`). A status set in a channel thread is taken, unless
    :attr:`statuses_in_channels` is False (then refused with ``channel_type_not_supported``)."""

    members: dict[str, set[str]]
    statuses_in_channels: bool

    def init_assistant(self) -> None:
        self.members = {}
        self.statuses_in_channels = True

    def join(self, channel: str, *users: str) -> None:
        """``users`` become members of ``channel`` (``users.conversations`` lists it for them)."""
        self.members.setdefault(channel, set()).update(users)

    def _m_assistant_threads_setStatus(self, params: dict[str, Any]) -> dict[str, Any]:
        problem = assistant_problem("setStatus", params)
        if not problem and not str(params.get("channel_id")).startswith("D") and not self.statuses_in_channels:
            problem = "channel_type_not_supported"
        return {"ok": False, "error": problem} if problem else {}

    def _m_assistant_threads_setTitle(self, params: dict[str, Any]) -> dict[str, Any]:
        problem = assistant_problem("setTitle", params)
        return {"ok": False, "error": problem} if problem else {}

    def _m_assistant_threads_setSuggestedPrompts(self, params: dict[str, Any]) -> dict[str, Any]:
        problem = assistant_problem("setSuggestedPrompts", params)
        return {"ok": False, "error": problem} if problem else {}

    def _m_users_conversations(self, params: dict[str, Any]) -> dict[str, Any]:
        user = str(params.get("user") or "")
        channels = sorted(c for c, people in self.members.items() if user in people)
        return {"channels": [{"id": c, "name": c.lower(), "is_channel": True, "is_member": True} for c in channels],
                "response_metadata": {"next_cursor": ""}}

    def statuses(self: StandInCore, channel: str, thread_ts: str) -> list[tuple[str, float]]:
        """The status lines set on a thread, in order, each with when it was set."""
        return [(str(c.params.get("status")), c.at)
                for c in self.calls_of("assistant.threads.setStatus", channel_id=channel, thread_ts=thread_ts)]

    async def open_assistant(self: StandInCore, user: str, viewing: str = "") -> tuple[str, str, Delivery]:
        """The person opens a new thread in the container while viewing the channel ``viewing``
        (empty: none): its root is kept, ``assistant_thread_started`` delivered. The direct
        conversation, the thread's ts, and the delivery."""
        dm, thread_ts = f"D{user}", self.next_ts()
        self.store_message(dm, {"type": "message", "subtype": "assistant_app_thread", "user": user,
                                "text": "New chat", "ts": thread_ts, "thread_ts": thread_ts, "channel": dm})
        started = assistant_event(self.team, self.next_ts(), "assistant_thread_started", user, dm, thread_ts, viewing)
        delivery = await self.deliver_event(started)
        return dm, thread_ts, delivery

    async def view_channel(self: StandInCore, user: str, dm: str, thread_ts: str, viewing: str) -> Delivery:
        """The person turns to another channel with the thread open: ``assistant_thread_context_changed``."""
        return await self.deliver_event(assistant_event(self.team, self.next_ts(), "assistant_thread_context_changed",
                                                        user, dm, thread_ts, viewing))

    async def ask_assistant(self: StandInCore, user: str, dm: str, thread_ts: str,
                            text: str) -> tuple[dict[str, Any], list[Delivery]]:
        """The person asks in the thread: a ``message`` with ``channel_type`` ``im`` and the thread's ts."""
        message, deliveries = await self.user_says(dm, user, text, thread_ts=thread_ts, im=True)
        return message, deliveries


def as_slack_keeps(blocks: Any) -> list[Any]:
    """A message's blocks as Slack stores them: a markdown block's ``block_id`` dropped
    (Slack's reference: it "is ignored … and will not be retained")."""
    kept = []
    for block in blocks or []:
        if isinstance(block, dict) and block.get("type") == "markdown":
            block = {key: value for key, value in block.items() if key != "block_id"}
        kept.append(block)
    return kept


def sign(secret: str, timestamp: str, body: str | bytes) -> str:
    """``X-Slack-Signature`` as Slack computes it (over the body's bytes as sent)."""
    base = f"v0:{timestamp}:".encode() + (body.encode() if isinstance(body, str) else body)
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class SlackStandIn(AssistantContainer):
    """See the module docstring. ``async with SlackStandIn() as slack: ...`` starts and stops it."""

    def __init__(
        self,
        *,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        signing_secret: str = SIGNING_SECRET,
        team: str = TEAM,
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.team = team
        self.mode = "socket"  # how events are delivered: "socket" or "http"
        self.app_url = ""  # HTTP mode: where the app listens
        self.calls: list[ApiCall] = []
        self.responses: list[tuple[str, dict[str, Any], float]] = []  # (response_url path, JSON, time)
        self.uploads: dict[str, _Upload] = {}
        self.reactions: set[tuple[str, str, str]] = set()
        self.not_member: set[str] = set()  # channels where posting fails with not_in_channel
        self.download_token = bot_token  # the token file downloads accept (others get the sign-in page)
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.users: dict[str, _User] = {}
        self.files: dict[str, _File] = {}
        self.shared_with: dict[str, str] = {}  # channel -> the other organisation's team (Slack Connect)
        self._failures: dict[str, list[str]] = {}
        self.latency: dict[str, float] = {}  # seconds a Web API method takes to answer (a slow Slack)
        self._counter = itertools.count(1)
        self._sockets: list[_Socket] = []
        self._socket_ready = asyncio.Event()  # a socket that delivers is open
        self.connections = 0  # Socket Mode connections opened so far
        self.ping_every_s = SERVER_PING_S  # how often the stand-in pings each socket, as Slack does
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0
        self.add_user(BOT_USER, "raptor")
        self.init_assistant()

    # -- life cycle -----------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link", self._socket)
        app.router.add_get("/files-pri/{path:.*}", self._download)
        app.router.add_post("/upload/{file_id}", self._receive_upload)
        app.router.add_post("/respond/{n}", self._respond)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self._session = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        for socket in self._sockets:
            await socket.ws.close()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The Web API base URL for ``AsyncWebClient(base_url=...)``."""
        return f"{self.root}/api/"

    # -- the workspace ------------------------------------------------------------------

    def add_user(self, user_id: str, name: str, admin: bool = False, owner: bool = False, team: str = "") -> None:
        """A person; ``team`` makes them a member of another organisation (admin or owner there)."""
        self.users[user_id] = _User(user_id, name, admin, owner, team)

    def share_channel(self, channel: str, other_team: str) -> None:
        """Makes ``channel`` a Slack Connect channel shared with ``other_team``: ``conversations.info``
        says ``is_ext_shared``, and its events carry ``is_ext_shared_channel: true``."""
        self.shared_with[channel] = other_team

    def team_of(self, user_id: str) -> str:
        """The team a person belongs to: their organisation's, else the stand-in's."""
        user = self.users.get(user_id)
        return (user.team if user is not None else "") or self.team

    def next_ts(self) -> str:
        return f"1700000000.{next(self._counter):06d}"

    def _store(self, channel: str, message: dict[str, Any]) -> dict[str, Any]:
        self.messages.setdefault(channel, []).append(message)
        return message

    def store_message(self, channel: str, message: dict[str, Any]) -> dict[str, Any]:
        """Keeps ``message`` in ``channel`` as Slack would (nothing delivered)."""
        return self._store(channel, message)

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel, ()) if m.get("ts") == ts), None)

    def thread(self, channel: str, ts: str) -> list[dict[str, Any]]:
        """A thread's messages, root first (the message alone if it has no replies)."""
        found = self.message(channel, ts)
        if found is None:
            return []
        root = str(found.get("thread_ts") or ts)
        members = [m for m in self.messages.get(channel, ()) if m.get("ts") == root or m.get("thread_ts") == root]
        return sorted(members, key=lambda m: str(m["ts"]))

    def permalink_of(self, channel: str, ts: str) -> str:
        return f"{self.root}/archives/{channel}/p{ts.replace('.', '')}"

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

    async def wait_until(self, condition: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
        """Polls ``condition`` until it returns something truthy; raises TimeoutError naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what or condition}")
            await asyncio.sleep(0.01)

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
        channel = str(params.get("channel", ""))
        if not channel:
            return "channel_not_found"
        if channel in self.not_member:
            return "not_in_channel"
        return message_problem(params)

    # -- streaming and edits: chat.startStream / appendStream / stopStream, chat.update, chat.delete --

    # Class-level switches (immutable defaults; a test sets them on its instance):
    streaming_refusal = ""  # when set, the streaming methods answer ok: false with this error (e.g. "unknown_method")
    # (n, seconds): a chat.update beyond n in `seconds` in one channel answers HTTP 200
    # ok: false "ratelimited", as Slack does; None: no limit.
    update_limit: tuple[int, float] | None = None

    def _m_chat_startStream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(params.get("channel", "")), str(params.get("thread_ts", ""))
        problem = self.streaming_refusal or self._stream_problem(params)
        if not problem and not thread_ts:
            problem = "invalid_arguments"  # streamed messages are replies in a thread
        if not problem and not channel.startswith("D") and not (
                params.get("recipient_team_id") and params.get("recipient_user_id")):
            problem = "invalid_arguments"  # required when streaming to a channel
        if problem:
            return {"ok": False, "error": problem}
        message = {"type": "message", "user": BOT_USER, "bot_id": BOT_ID, "ts": self.next_ts(), "team": self.team,
                   "text": _stream_text(params), "blocks": [], "thread_ts": thread_ts, "streaming": True}
        self._store(channel, message)
        return {"channel": channel, "ts": message["ts"]}

    def _m_chat_appendStream(self, params: dict[str, Any]) -> dict[str, Any]:
        found, problem = self._streaming_message(params)
        if found is None:
            return {"ok": False, "error": problem}
        found["text"] += _stream_text(params)
        return {"channel": params.get("channel"), "ts": found["ts"]}

    def _m_chat_stopStream(self, params: dict[str, Any]) -> dict[str, Any]:
        found, problem = self._streaming_message(params)
        problem = problem or stop_blocks_problem(params)
        if found is None or problem:
            return {"ok": False, "error": problem}
        found["text"] += _stream_text(params)
        found["streaming"] = False
        if params.get("blocks"):
            found["blocks"] = as_slack_keeps(params["blocks"])
        return {"channel": params.get("channel"), "ts": found["ts"], "message": dict(found)}

    def _stream_problem(self, params: dict[str, Any]) -> str:
        channel = str(params.get("channel", ""))
        if not channel:
            return "channel_not_found"
        if channel in self.not_member:
            return "not_in_channel"
        return "msg_too_long" if len(_stream_text(params)) > MAX_STREAM_TEXT else ""

    def _streaming_message(self, params: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """The message a streaming call names, still streaming; else None and Slack's error."""
        problem = self.streaming_refusal or self._stream_problem(params)
        if problem:
            return None, problem
        found = self.message(str(params.get("channel", "")), str(params.get("ts", "")))
        if found is None:
            return None, "message_not_found"
        if not found.get("streaming"):
            return None, "message_not_in_streaming_state"
        return found, ""

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        problem = self._check_message(params)
        found = self.message(channel, ts)
        if not problem and found is None:
            problem = "message_not_found"
        if not problem and self._update_limited(channel):
            problem = "ratelimited"
        if problem or found is None:
            return {"ok": False, "error": problem}
        found["text"] = params.get("text", "")
        found["blocks"] = as_slack_keeps(params.get("blocks"))
        found["edited"] = {"user": BOT_USER, "ts": self.next_ts()}
        return {"channel": channel, "ts": ts, "text": found["text"], "message": dict(found)}

    def _update_limited(self, channel: str) -> bool:
        """Whether one more chat.update in ``channel`` now exceeds :attr:`update_limit`."""
        if self.update_limit is None:
            return False
        count, window = self.update_limit
        since = time.perf_counter() - window
        recent = [c for c in self.calls_of("chat.update", channel=channel) if c.at >= since]
        return len(recent) >= count

    def _m_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        found = self.message(channel, ts)
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        self.messages[channel].remove(found)
        return {"channel": channel, "ts": ts}

    def shown(self, channel: str, ts: str) -> dict[str, Any] | None:
        """The bot's message ``ts`` as people see it now (after streaming and edits)."""
        return self.message(channel, ts)

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

    # -- Socket Mode ----------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()  # autoping: the app's pings are answered while frames are read
        await ws.prepare(request)
        socket = _Socket(ws)
        self._sockets.append(socket)
        self.connections += 1
        await ws.send_str(json.dumps({"type": "hello", "num_connections": len(self._sockets),
                                      "connection_info": {"app_id": APP_ID}}))
        self._socket_ready.set()
        pinging = asyncio.get_running_loop().create_task(self._ping(socket))
        try:
            async for frame in ws:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    continue
                ack = json.loads(frame.data)
                waiter = socket.acks.pop(str(ack.get("envelope_id")), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(ack)
        finally:
            pinging.cancel()
            self._sockets.remove(socket)
            self._note_delivering()
        return ws

    async def _ping(self, socket: _Socket) -> None:
        """Slack's own keep-alive: a ping every ``ping_every_s``, until the socket goes silent."""
        while not socket.ws.closed and not socket.silent:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await socket.ws.ping(b"stand-in")
            await asyncio.sleep(self.ping_every_s)

    def _note_delivering(self) -> None:
        if any(not socket.silent for socket in self._sockets):
            self._socket_ready.set()
        else:
            self._socket_ready.clear()

    def go_silent(self) -> None:
        """The open sockets stop delivering: no envelope and no ping of Slack's own goes out on
        them any more, while they stay open and still answer the app's pings (the session that
        goes quiet without closing). Envelopes wait for a socket the app opens afterwards."""
        for socket in self._sockets:
            socket.silent = True
        self._note_delivering()

    async def wait_connected(self, timeout: float = 10.0) -> None:
        """Waits until a socket that delivers is open."""
        await asyncio.wait_for(self._socket_ready.wait(), timeout)

    async def _push(
        self, kind: str, payload: Any, retry: int = 0, raw: str | None = None, ack_timeout: float = ACK_TIMEOUT_S
    ) -> Delivery:
        """Sends an envelope and waits for its acknowledgement; status 0 when none came in
        ``ack_timeout`` seconds (bolt does not acknowledge what it failed to process)."""
        await self.wait_connected()
        socket = [s for s in self._sockets if not s.silent][-1]
        envelope_id = f"env-{next(self._counter)}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        socket.acks[envelope_id] = waiter
        envelope = {"envelope_id": envelope_id, "type": kind, "accepts_response_payload": kind != "events_api",
                    "payload": payload}
        if kind == "events_api":
            envelope.update({"retry_attempt": retry, "retry_reason": "timeout" if retry else ""})
        sent = time.perf_counter()
        await socket.ws.send_str(raw if raw is not None else json.dumps(envelope))
        if raw is not None:
            socket.acks.pop(envelope_id, None)
            return Delivery(0, "", 0.0, sent)
        try:
            ack = await asyncio.wait_for(waiter, ack_timeout)
        except TimeoutError:
            socket.acks.pop(envelope_id, None)
            return Delivery(0, "", ack_timeout, sent)
        return Delivery(200, json.dumps(ack.get("payload") or {}), time.perf_counter() - sent, sent)

    # -- delivering to the app --------------------------------------------------------------

    async def post_http(
        self,
        body: str | bytes,
        content_type: str,
        *,
        retry: int = 0,
        timestamp: str | None = None,
        secret: str | None = None,
    ) -> Delivery:
        """POSTs ``body`` to the app as Slack does, signed with ``secret`` (default: the real
        one) at ``timestamp`` (default: now). Bytes are sent as they are (a body that is
        not UTF-8); text is encoded as UTF-8."""
        assert self._session is not None and self.app_url, "the app's URL is not set"
        stamp = timestamp or str(int(time.time()))
        headers = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": sign(self.signing_secret if secret is None else secret, stamp, body),
        }
        if retry:
            headers.update({"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"})
        sent = time.perf_counter()
        data = body.encode() if isinstance(body, str) else body
        async with self._session.post(self.app_url, data=data, headers=headers) as response:
            text = await response.text()
            return Delivery(response.status, text, time.perf_counter() - sent, sent)

    async def deliver_event(self, event: dict[str, Any], *, event_id: str = "", retry: int = 0) -> Delivery:
        """Wraps ``event`` in an ``event_callback`` and delivers it (again, with the same
        ``event_id``, when retrying)."""
        body = self.event_callback(event, event_id)
        return await self.deliver_callback(body, retry=retry)

    def event_callback(self, event: dict[str, Any], event_id: str = "") -> dict[str, Any]:
        item = event.get("item")
        channel = str(event.get("channel") or event.get("channel_id")
                      or (item.get("channel") if isinstance(item, dict) else "") or "")
        return {
            "token": "legacy-verification-token",
            "team_id": self.team,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._counter):08d}",
            "event_time": int(time.time()),
            "authorizations": [{"enterprise_id": None, "team_id": self.team, "user_id": BOT_USER, "is_bot": True,
                                "is_enterprise_install": False}],
            "is_ext_shared_channel": channel in self.shared_with,
        }

    async def deliver_callback(
        self, body: dict[str, Any], *, retry: int = 0, ack_timeout: float = ACK_TIMEOUT_S
    ) -> Delivery:
        if self.mode == "socket":
            return await self._push("events_api", body, retry, ack_timeout=ack_timeout)
        return await self.post_http(json.dumps(body), "application/json", retry=retry)

    async def deliver_form(self, kind: str, fields: dict[str, str]) -> Delivery:
        """A slash command (``kind`` ``slash_commands``, the form's fields) or an interaction
        (``interactive``, fields ``{"payload": json}``)."""
        if self.mode == "socket":
            payload: Any = json.loads(fields["payload"]) if kind == "interactive" else fields
            return await self._push(kind, payload)
        return await self.post_http(urllib.parse.urlencode(fields), "application/x-www-form-urlencoded")

    async def deliver_raw_socket(self, text: str) -> None:
        """Sends any text over the socket (to test malformed frames); nothing is awaited."""
        await self._push("events_api", None, raw=text)

    # -- what people do ---------------------------------------------------------------------

    def _user_message(self, channel: str, user: str, text: str, thread_ts: str | None, im: bool) -> dict[str, Any]:
        ts = self.next_ts()
        message: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": ts, "team": self.team_of(user),
                                   "channel": channel, "event_ts": ts, "channel_type": "im" if im else "channel",
                                   "client_msg_id": f"cm-{ts}"}
        if thread_ts:
            message["thread_ts"] = thread_ts
        return message

    def say(self, channel: str, user: str, text: str, *, thread_ts: str | None = None, im: bool = False) -> dict[str, Any]:
        """A person posts ``text`` (stored, nothing delivered yet); the message as Slack keeps it."""
        return self._store(channel, self._user_message(channel, user, text, thread_ts, im))

    def events_for(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The events Slack sends for a person's message: ``message``, and ``app_mention`` too
        when it tags the bot outside a direct conversation."""
        events = [dict(message)]
        if message.get("channel_type") != "im" and f"<@{BOT_USER}>" in str(message.get("text", "")):
            mention = {k: message[k] for k in ("user", "text", "ts", "channel", "event_ts", "team")}
            mention["type"] = "app_mention"
            if message.get("thread_ts"):
                mention["thread_ts"] = message["thread_ts"]
            events.append(mention)
        return events

    async def user_says(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None, im: bool = False
    ) -> tuple[dict[str, Any], list[Delivery]]:
        """:meth:`say`, then every event of :meth:`events_for` delivered."""
        message = self.say(channel, user, text, thread_ts=thread_ts, im=im)
        return message, [await self.deliver_event(event) for event in self.events_for(message)]

    def add_file(self, user: str, name: str, data: bytes, mimetype: str = "text/plain",
                 url_root: str = "") -> dict[str, Any]:
        """A hosted file; its links point at this stand-in, or at ``url_root`` (a file whose
        links lead elsewhere, which the bot must not send its token to)."""
        file_id = f"F{next(self._counter):06d}"
        path = f"{self.team}-{file_id}"
        root = url_root or self.root
        meta = {
            "id": file_id, "name": name, "title": name, "mimetype": mimetype, "filetype": name.rsplit(".", 1)[-1],
            "user": user, "size": len(data), "mode": "hosted", "is_external": False,
            "url_private": f"{root}/files-pri/{path}/{name}",
            "url_private_download": f"{root}/files-pri/{path}/download/{name}",
            "permalink": f"{self.root}/files/{user}/{file_id}/{name}",
        }
        self.files[file_id] = _File(meta, data)
        return meta

    async def share_file(
        self, channel: str, user: str, name: str, data: bytes, *, mimetype: str = "text/plain",
        text: str = "", also_file_shared: bool = False, im: bool = False, url_root: str = "",
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A person shares a file: the ``message`` (subtype ``file_share``) event, and with
        ``also_file_shared`` the ``file_shared`` event Slack sends too when subscribed."""
        meta = self.add_file(user, name, data, mimetype, url_root)
        message = self._user_message(channel, user, text, None, im)
        message.update({"subtype": "file_share", "files": [meta], "upload": False, "display_as_bot": False})
        self._store(channel, message)
        await self.deliver_event(dict(message))
        if also_file_shared:
            await self.deliver_event({"type": "file_shared", "channel_id": channel, "file_id": meta["id"],
                                      "user_id": user, "file": {"id": meta["id"]}, "event_ts": self.next_ts()})
        return message, meta

    def _pin_event(self, kind: str, channel: str, user: str, ts: str) -> dict[str, Any]:
        message = dict(self.message(channel, ts) or {"ts": ts})
        message["permalink"] = self.permalink_of(channel, ts)
        message.pop("channel", None)
        return {"type": kind, "user": user, "channel_id": channel,
                "item": {"type": "message", "channel": channel, "created_by": user, "message": message},
                "event_ts": self.next_ts()}

    async def pin(self, channel: str, user: str, ts: str) -> Delivery:
        return await self.deliver_event(self._pin_event("pin_added", channel, user, ts))

    async def unpin(self, channel: str, user: str, ts: str) -> Delivery:
        return await self.deliver_event(self._pin_event("pin_removed", channel, user, ts))

    async def edit(self, channel: str, ts: str, text: str) -> Delivery:
        """A person edits their message: it changes in the workspace, and Slack sends a
        ``message`` event of subtype ``message_changed`` with the message as it is now and
        as it was (``previous_message``)."""
        stored = self.message(channel, ts)
        assert stored is not None, f"no message {ts} in {channel}"
        previous = dict(stored)
        stored["text"] = text
        stored["edited"] = {"user": stored.get("user", ""), "ts": self.next_ts()}
        now = {k: v for k, v in stored.items() if k != "channel"}
        return await self.deliver_event({
            "type": "message", "subtype": "message_changed", "hidden": True, "channel": channel,
            "message": now, "previous_message": {k: v for k, v in previous.items() if k != "channel"},
            "ts": self.next_ts(), "event_ts": self.next_ts(),
        })

    async def delete_message(self, channel: str, ts: str) -> Delivery:
        """A person deletes a message: it goes from the workspace, and Slack sends a ``message``
        event of subtype ``message_deleted`` (``deleted_ts`` the message's, ``previous_message``
        as it was), as in Slack's reference of the subtype."""
        stored = self.message(channel, ts)
        assert stored is not None, f"no message {ts} in {channel}"
        self.messages[channel] = [m for m in self.messages[channel] if m is not stored]
        now = self.next_ts()
        return await self.deliver_event({
            "type": "message", "subtype": "message_deleted", "hidden": True, "channel": channel,
            "ts": now, "deleted_ts": ts, "event_ts": now, "channel_type": "channel",
            "previous_message": {k: v for k, v in stored.items() if k != "channel"},
        })

    async def delete_file(self, file_id: str, channel_ids: Sequence[str] | None = None) -> Delivery:
        """A person deletes a file: it is no longer served, and Slack sends ``file_deleted``,
        with only the file's id as in Slack's own example, or with ``channel_ids`` too."""
        self.files.pop(file_id, None)
        event: dict[str, Any] = {"type": "file_deleted", "file_id": file_id, "event_ts": self.next_ts()}
        if channel_ids is not None:
            event["channel_ids"] = list(channel_ids)
        return await self.deliver_event(event)

    async def channel_event(self, kind: str, channel: str, user: str, member: str = BOT_USER) -> Delivery:
        """``user`` changes a channel: ``kind`` is ``channel_archive``/``channel_unarchive``/
        ``channel_deleted``, ``group_*`` for a private channel, ``channel_left``/``group_left``
        (``user`` removed the bot), or ``member_left_channel``/``member_joined_channel`` of
        ``member`` (default: the bot), each with the fields of Slack's reference of the event."""
        ts = self.next_ts()
        who = user
        events: dict[str, dict[str, Any]] = {
            "channel_archive": {"channel": channel, "user": who, "is_moved": 0},
            "channel_unarchive": {"channel": channel, "user": who},
            "channel_deleted": {"channel": channel},
            "group_archive": {"channel": channel, "is_moved": 0},
            "group_unarchive": {"channel": channel, "actor_id": who},
            "group_deleted": {"channel": channel, "date_deleted": int(time.time()), "actor_id": who},
            "channel_left": {"channel": channel, "actor_id": who},
            "group_left": {"channel": channel, "actor_id": who},
            "member_left_channel": {"user": member, "channel": channel, "channel_type": "C", "team": self.team},
            "member_joined_channel": {"user": member, "channel": channel, "channel_type": "C", "team": self.team,
                                      "inviter": who},
        }
        return await self.deliver_event({"type": kind, **events[kind], "event_ts": ts})

    async def slash(self, channel: str, user: str, text: str, command: str = "/raptor") -> Delivery:
        fields = {
            "token": "legacy-verification-token", "team_id": self.team_of(user), "team_domain": "stand-in",
            "channel_id": channel, "channel_name": channel.lower(), "user_id": user,
            "user_name": self.users[user].name if user in self.users else user, "command": command, "text": text,
            "api_app_id": APP_ID, "response_url": f"{self.root}/respond/{next(self._counter)}",
            "trigger_id": f"{next(self._counter)}.1.x",
        }
        return await self.deliver_form("slash_commands", fields)

    async def click(self, channel: str, user: str, message: Mapping[str, Any], action_id: str, value: str) -> Delivery:
        """A person clicks a button (``action_id``, ``value``) of a message the bot posted."""
        return await self._block_action(channel, user, message, {
            "type": "button", "action_id": action_id, "block_id": "b", "value": value,
            "action_ts": self.next_ts(), "text": {"type": "plain_text", "text": "x"}})

    async def _block_action(self, channel: str, user: str, message: Mapping[str, Any],
                            action: Mapping[str, Any]) -> Delivery:
        """The ``block_actions`` payload Slack sends when ``user`` acts (``action``) on ``message``."""
        container: dict[str, Any] = {"type": "message", "message_ts": message["ts"], "channel_id": channel,
                                     "is_ephemeral": False}
        if message.get("thread_ts"):
            container["thread_ts"] = message["thread_ts"]
        payload = {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": self.team_of(user)},
            "api_app_id": APP_ID, "token": "legacy-verification-token",
            "container": container, "trigger_id": f"{next(self._counter)}.1.x",
            "team": {"id": self.team_of(user), "domain": "stand-in"},
            "channel": {"id": channel, "name": channel.lower()},
            "message": dict(message),
            "response_url": f"{self.root}/respond/{next(self._counter)}",
            "actions": [dict(action)],
        }
        return await self.deliver_form("interactive", {"payload": json.dumps(payload)})

    # -- native feedback (issue 30, point 3): a click on a message's feedback_buttons element --

    async def click_feedback(self, channel: str, user: str, message: Mapping[str, Any], up: bool) -> Delivery:
        """``user`` clicks the 👍 (``up``) or 👎 of the ``feedback_buttons`` element in ``message``
        (as Slack keeps it, e.g. from :meth:`message`); raises LookupError when it has none.

        The action is shaped as bolt-js types a feedback buttons action (``FeedbackButtonsAction``
        in src/types/actions/block-action.ts, docs.slack.dev/tools/bolt-js/reference/interfaces/
        FeedbackButtonsAction: ``type: "feedback_buttons"``, ``action_id``, ``block_id``,
        ``action_ts``, and the clicked button's ``value`` and ``text``), in the usual
        ``block_actions`` envelope; Slack's Bolt for Python assistant template
        (slack-samples/bolt-python-assistant-template, listeners/actions/actions.py) reads the
        clicked button from ``body["actions"][0]["value"]`` and the answer from ``body["message"]``."""
        block, element = feedback_element(message)
        button = element["positive_button" if up else "negative_button"]
        return await self._block_action(channel, user, message, {
            "type": "feedback_buttons", "action_id": element.get("action_id", ""),
            "block_id": block.get("block_id", ""), "action_ts": self.next_ts(),
            "value": button["value"], "text": button["text"]})

    async def submit_view(
        self, user: str, view: Mapping[str, Any], values: Mapping[str, Mapping[str, str]], *,
        callback_id: str | None = None, private_metadata: str | None = None,
    ) -> Delivery:
        """A person submits a modal the bot opened (``view``, e.g. from :meth:`opened_views`),
        with ``values`` typed into its plain-text inputs as ``{block_id: {action_id: text}}``
        (inputs not named are left blank, which Slack sends as ``None``). ``callback_id`` and
        ``private_metadata`` replace the view's own (to send malformed submissions)."""
        state: dict[str, dict[str, Any]] = {}
        for block in view.get("blocks") or ():
            if isinstance(block, Mapping) and block.get("type") == "input":
                element = block.get("element") or {}
                block_id, action_id = str(block.get("block_id")), str(element.get("action_id"))
                text = values.get(block_id, {}).get(action_id) or None
                state[block_id] = {action_id: {"type": str(element.get("type")), "value": text}}
        payload = {
            "type": "view_submission",
            "team": {"id": self.team, "domain": "stand-in"},
            "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": self.team},
            "api_app_id": APP_ID, "token": "legacy-verification-token", "trigger_id": f"{next(self._counter)}.1.x",
            "view": {
                "id": str(view.get("id") or f"V{next(self._counter):08d}"), "team_id": self.team, "type": "modal",
                "blocks": list(view.get("blocks") or ()), "private_metadata":
                    str(view.get("private_metadata", "")) if private_metadata is None else private_metadata,
                "callback_id": str(view.get("callback_id", "")) if callback_id is None else callback_id,
                "state": {"values": state}, "hash": f"{next(self._counter)}.x", "title": view.get("title"),
                "app_id": APP_ID, "bot_id": BOT_ID, "root_view_id": None, "previous_view_id": None,
            },
            "response_urls": [], "is_enterprise_install": False, "enterprise": None,
        }
        return await self.deliver_form("interactive", {"payload": json.dumps(payload)})


def view_problem(view: Mapping[str, Any]) -> str:
    """Why Slack would refuse a modal (its basic shape only), or empty when it looks right."""
    title, blocks = view.get("title"), view.get("blocks")
    if view.get("type") != "modal":
        return "not a modal"
    if not (isinstance(title, dict) and title.get("type") == "plain_text" and 0 < len(str(title.get("text", ""))) <= 24):
        return "a modal's title is plain_text of 1-24 characters"
    if not isinstance(blocks, list) or not 0 < len(blocks) <= 100:
        return "a modal holds 1-100 blocks"
    if len(str(view.get("private_metadata", ""))) > 3000 or len(str(view.get("callback_id", ""))) > 255:
        return "private_metadata over 3,000 or callback_id over 255 characters"
    inputs = [b for b in blocks if isinstance(b, dict) and b.get("type") == "input"]
    for block in inputs:
        label, element = block.get("label"), block.get("element")
        if not (isinstance(label, dict) and label.get("type") == "plain_text"
                and 0 < len(str(label.get("text", ""))) <= 2000):
            return "an input's label is plain_text of 1-2,000 characters"
        if not (isinstance(element, dict) and element.get("action_id")
                and element.get("type") == "plain_text_input"):
            return "an input needs an element with an action_id"
    if inputs and not isinstance(view.get("submit"), dict):
        return "a modal with inputs needs a submit button"
    return ""


def _stream_text(params: Mapping[str, Any]) -> str:
    """The text a streaming call adds: its ``markdown_text`` and the text of its markdown chunks."""
    text = str(params.get("markdown_text") or "")
    chunks = params.get("chunks")
    if isinstance(chunks, str):
        try:
            chunks = json.loads(chunks)
        except ValueError:
            chunks = []
    for chunk in chunks or ():
        if isinstance(chunk, Mapping) and chunk.get("type") == "markdown_text":
            text += str(chunk.get("text") or "")
    return text


def message_problem(params: Mapping[str, Any]) -> str:
    """Slack's error for a message over its limits, or empty when it is acceptable."""
    text = params.get("text") or ""
    blocks = params.get("blocks")
    if isinstance(blocks, str):
        try:
            blocks = json.loads(blocks)
        except ValueError:
            return "invalid_blocks_format"
    if not text and not blocks:
        return "no_text"
    if len(str(text)) > MAX_TEXT:
        return "msg_too_long"
    if blocks is None:
        return ""
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        return "invalid_blocks"
    ids: set[str] = set()
    for block in blocks:
        if not isinstance(block, dict) or not _block_ok(block):
            return "invalid_blocks"
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in ids or not (0 < len(str(block_id)) <= MAX_BLOCK_ID):
                return "invalid_blocks"
            ids.add(block_id)
    markdown = sum(len(block["text"]) for block in blocks if block.get("type") == "markdown")
    if markdown > MAX_MARKDOWN_TEXT:
        return "invalid_blocks"
    return ""


def _text_ok(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("text"), str) and 0 < len(obj["text"]) <= MAX_SECTION_TEXT


def _button_ok(element: Any) -> bool:
    if not isinstance(element, dict) or element.get("type") != "button":
        return False
    label = element.get("text") or {}
    return (isinstance(label.get("text"), str) and 0 < len(label["text"]) <= MAX_BUTTON_TEXT
            and len(str(element.get("value", ""))) <= MAX_BUTTON_VALUE and bool(element.get("action_id")))


def _block_ok(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if kind == "section":
        accessory = block.get("accessory")
        return _text_ok(block.get("text")) and (accessory is None or _button_ok(accessory))
    if kind == "context":
        elements = block.get("elements")
        return (isinstance(elements, list) and 0 < len(elements) <= MAX_CONTEXT_ELEMENTS
                and all(_text_ok(e) for e in elements))
    if kind == "actions":
        elements = block.get("elements")
        action_ids = [e.get("action_id") for e in elements or () if isinstance(e, dict)]
        return (isinstance(elements, list) and 0 < len(elements) <= MAX_ACTION_ELEMENTS
                and all(_button_ok(e) for e in elements) and len(set(action_ids)) == len(action_ids))
    if kind == "markdown":  # standard Markdown as a plain string; the limit is per message
        return isinstance(block.get("text"), str) and bool(block["text"])
    if kind == "context_actions":
        return context_actions_ok(block)
    return kind in ("divider", "header", "image")


# -- native feedback (issue 30, point 3): the context_actions block and its feedback_buttons --
# Shapes from Slack's reference (docs.slack.dev/reference/block-kit/blocks/context-actions-block and
# .../block-elements/feedback-buttons-element) and slack_sdk's models and tests
# (slack_sdk/models/blocks: ContextActionsBlock, FeedbackButtonsElement, FeedbackButtonObject;
# tests/slack_sdk_async/web/test_async_chat_stream.py stops a stream with such a block).

MAX_CONTEXT_ACTIONS = 5  # elements of a context_actions block
MAX_ACTION_ID = 255


def context_actions_ok(block: Mapping[str, Any]) -> bool:
    """Whether Slack accepts a ``context_actions`` block: 1-5 elements, each a valid
    ``feedback_buttons`` (an ``icon_button`` needs its icon and text)."""
    elements = block.get("elements")
    if not isinstance(elements, list) or not 0 < len(elements) <= MAX_CONTEXT_ACTIONS:
        return False
    return all(_feedback_buttons_ok(e) or _icon_button_ok(e) for e in elements)


def _feedback_buttons_ok(element: Any) -> bool:
    if not isinstance(element, dict) or element.get("type") != "feedback_buttons":
        return False
    if len(str(element.get("action_id", ""))) > MAX_ACTION_ID:
        return False
    return all(_feedback_button_ok(element.get(side)) for side in ("positive_button", "negative_button"))


def _feedback_button_ok(button: Any) -> bool:
    """A feedback button: plain_text of 1-75 characters, a value of 1-2,000."""
    if not isinstance(button, dict):
        return False
    text, value = button.get("text"), button.get("value")
    return (isinstance(text, dict) and text.get("type") == "plain_text"
            and 0 < len(str(text.get("text", ""))) <= MAX_BUTTON_TEXT
            and isinstance(value, str) and 0 < len(value) <= MAX_BUTTON_VALUE)


def _icon_button_ok(element: Any) -> bool:
    return isinstance(element, dict) and element.get("type") == "icon_button" and bool(element.get("icon")) \
        and _text_ok(element.get("text"))


def stop_blocks_problem(params: Mapping[str, Any]) -> str:
    """Slack's error for the ``blocks`` of ``chat.stopStream`` (checked as a message's), or empty."""
    blocks = params.get("blocks")
    return message_problem({"blocks": blocks}) if blocks else ""


def feedback_element(message: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``context_actions`` block of ``message`` and its ``feedback_buttons`` element; LookupError if none."""
    for block in message.get("blocks") or ():
        if isinstance(block, dict) and block.get("type") == "context_actions":
            for element in block.get("elements") or ():
                if isinstance(element, dict) and element.get("type") == "feedback_buttons":
                    return block, element
    raise LookupError(f"message {message.get('ts')} has no feedback_buttons element")


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


def lines_of(posts: Sequence[Mapping[str, Any]]) -> str:
    """The fallback texts of posted messages, joined (for assertions)."""
    return "\n".join(str(p.get("text", "")) for p in posts)


# -- running the real adapter against the stand-in ---------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def slack_config(slack: SlackStandIn, mode: str, command: str = "/raptor") -> Any:
    """A ``SlackConfig`` pointing the adapter at the stand-in (HTTP mode on a free loopback port)."""
    from bot.config import SlackConfig

    return SlackConfig.model_validate({
        "bot_token": slack.bot_token, "app_token": slack.app_token, "signing_secret": slack.signing_secret,
        "mode": mode, "api_base_url": slack.base_url, "http_host": "127.0.0.1", "http_port": free_port(),
        "command": command,
    })


@contextlib.asynccontextmanager
async def app_running(bot: Any, slack: SlackStandIn, mode: str, **options: Any) -> AsyncIterator[Any]:
    """Runs ``adapters.slack.app.run_slack`` for ``bot`` against ``slack`` in ``mode`` (the
    stand-in delivers events the same way), yields the ``SlackRunning`` it reported, and
    cancels it at the end (re-raising anything it raised)."""
    from adapters.slack.app import run_slack

    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    config = options.pop("config", None) or slack_config(slack, mode)
    task = asyncio.create_task(run_slack(bot, config, on_ready=ready.set_result, **options))
    done, _ = await asyncio.wait({task, ready}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises what run_slack raised
    if ready not in done:
        task.cancel()
        raise TimeoutError("the Slack app did not become ready")
    running = ready.result()
    slack.mode = mode
    slack.app_url = running.url
    if mode == "socket":
        await slack.wait_connected()
    try:
        yield running
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
