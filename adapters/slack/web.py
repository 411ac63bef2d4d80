"""The Web API side of the Slack adapter: people, threads, downloads, reactions, and replies.

Everything here talks to Slack through the injected ``AsyncWebClient`` (whose
``base_url`` comes from the configuration) or, for file downloads and
``response_url`` notes, through the adapter's one ``aiohttp`` session.

Contracts:

* :class:`People` never raises: a failed ``users.info`` gives a person known
  by id only (who then manages nothing), logged.
* :class:`Downloader` raises :class:`DownloadError` with a sentence for the
  person (a sign-in page served instead of the file is named as a token or
  ``files:read`` problem). It sends the bot token only to Slack's own hosts
  (:func:`carries_token`): a file link pointing anywhere else is refused
  before any request is made.
* :func:`working` shows the work with a reaction and never fails the work
  because a reaction failed.
* :class:`Outbox` never raises for Slack's or the network's failures: it logs
  one line with a fresh reference and tells the person in a short note,
  through the first way that works (the command's ``response_url``, an
  ephemeral message, a plain message).
* :class:`SlackDraft` shows an answer while a language model writes it. In a
  thread it uses Slack's native streaming (``chat.startStream``, then
  ``chat.appendStream`` at most every :data:`STREAM_EVERY_S`); where Slack
  refuses streaming (an older workspace or plan, a conversation that does not
  allow it, no thread) it posts a message and edits it with ``chat.update``
  at most every :data:`UPDATE_EVERY_S`, well under Slack's limit of about 50
  updates a minute. Slack answers an update over its limit with HTTP 200 and
  ``ok: false, "ratelimited"``: such an update is skipped (the next carries
  all the text) and the next one waits the delay out. At the end the stream
  is stopped and the message replaced by the reply exactly as
  :meth:`Outbox.deliver` renders it (a ``ratelimited`` replacement is retried
  after its delay); should that fail, the whole reply is posted anew and the
  draft removed, so no text is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient
from yarl import URL

from adapters.slack import translate
from adapters.slack.blocks import SlackMessage, escape, render_reply
from adapters.slack.translate import SlackFile
from bot.errors import new_reference
from bot.neutral import Attachment, Person, Reply, ReplyKind

log = logging.getLogger(__name__)

MAX_THREAD_MESSAGES = 1000  # a thread is read up to this many messages (pages of REPLIES_PAGE)
REPLIES_PAGE = 200
DOWNLOAD_TIMEOUT_S = 120.0
# Where Slack serves files (url_private, url_private_download): its commercial and GovSlack
# domains and their subdomains (files.slack.com, files.slack-gov.com, an Enterprise Grid's
# <org>.enterprise.slack.com), and its CDN. The token is sent nowhere else.
SLACK_FILE_DOMAINS = ("slack.com", "slack-gov.com", "slack-edge.com")
OUTSIDE_SLACK_PROBLEM = "its link does not point to Slack, and I send my Slack token to Slack only."
NOTE_TIMEOUT_S = 10.0

STREAM_EVERY_S = 1.0  # between two chat.appendStream calls of one answer
UPDATE_EVERY_S = 2.0  # between two chat.update calls of one answer: 30 a minute, Slack allows about 50
RATELIMITED_WAIT_S = 3.0  # after "ratelimited" without a Retry-After
MAX_RATELIMITED_WAIT_S = 30.0
FINAL_TRIES = 5  # attempts at putting the finished reply in the draft's place
DRAFT_CHARS = 3000  # a draft shows at most this much (the finished reply is paginated as always)

# What the network can throw at a call, besides Slack's own refusals.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (SlackClientError, aiohttp.ClientError, TimeoutError)
NOTE_ERRORS = TRANSPORT_ERRORS + (OSError,)  # a response_url's webhook also fails with plain socket errors


def error_code(error: BaseException) -> str:
    """Slack's error code of a refused call (``not_in_channel``), else the exception's name."""
    if isinstance(error, SlackApiError):
        return str(error.response.get("error") or "unknown_error")
    return type(error).__name__


# -- people -------------------------------------------------------------------------


class People:
    """Who a user id is (``users.info``), cached for ``ttl_s`` seconds, at most ``max_entries``."""

    def __init__(
        self,
        client: AsyncWebClient,
        ttl_s: float = 300.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, Person]] = OrderedDict()

    async def get(self, user_id: str) -> Person:
        """The person; never raises (a lookup failure gives ``Person(user_id)``, logged)."""
        if not user_id:
            return Person("unknown")
        cached = self._cache.get(user_id)
        now = self._clock()
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        try:
            response = await self._client.users_info(user=user_id)
        except TRANSPORT_ERRORS as exc:
            # Not cached: the next event asks again, so a passing failure costs one event's name.
            log.warning("users.info for %s failed (%s); treating them as a member", user_id, error_code(exc))
            return Person(user_id)
        person = translate.person_from_user(response.get("user") or {}, user_id)
        self._cache[user_id] = (now, person)
        self._cache.move_to_end(user_id)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)
        return person


# -- threads and messages -------------------------------------------------------------


async def thread_messages(client: AsyncWebClient, channel: str, thread_ts: str) -> list[dict[str, Any]]:
    """The messages of a thread, root first (``conversations.replies``, every page up to
    :data:`MAX_THREAD_MESSAGES`). For a message that is no thread's root, that message alone.
    Raises what the client raises."""
    messages: list[dict[str, Any]] = []
    cursor: str | None = None
    while len(messages) < MAX_THREAD_MESSAGES:
        response = await client.conversations_replies(channel=channel, ts=thread_ts, limit=REPLIES_PAGE, cursor=cursor)
        messages += [m for m in response.get("messages") or () if isinstance(m, dict)]
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor or not response.get("has_more", True):
            break
    return messages


async def permalink(client: AsyncWebClient, channel: str, ts: str) -> str:
    """The message's permalink (``chat.getPermalink``); empty (logged) when Slack cannot say."""
    try:
        response = await client.chat_getPermalink(channel=channel, message_ts=ts)
    except TRANSPORT_ERRORS as exc:
        log.warning("chat.getPermalink for %s/%s failed (%s); the source has no link", channel, ts, error_code(exc))
        return ""
    return str(response.get("permalink") or "")


async def file_info(client: AsyncWebClient, file_id: str) -> SlackFile | None:
    """The file as ``files.info`` describes it; None when Slack sends no file object.
    Raises what the client raises."""
    response = await client.files_info(file=file_id)
    raw = response.get("file")
    return translate.slack_file(raw) if isinstance(raw, Mapping) else None


# -- reactions ------------------------------------------------------------------------


@asynccontextmanager
async def working(client: AsyncWebClient, channel: str, ts: str) -> AsyncIterator[None]:
    """Shows :data:`~adapters.slack.translate.WORKING_REACTION` on the message ``ts`` while the
    block runs, and removes it after (whatever the outcome). A reaction that cannot be
    added or removed is logged and the work goes on; no ``ts``, no reaction."""
    added = bool(ts) and await _react(client.reactions_add, channel, ts, ("already_reacted",))
    try:
        yield
    finally:
        if added:
            await _react(client.reactions_remove, channel, ts, ("no_reaction",))


async def _react(method: Callable[..., Awaitable[Any]], channel: str, ts: str, harmless: tuple[str, ...]) -> bool:
    try:
        await method(channel=channel, timestamp=ts, name=translate.WORKING_REACTION)
        return True
    except SlackApiError as exc:
        code = error_code(exc)
        if code in harmless:
            return True
        log.warning("%s on %s/%s failed (%s)", method.__name__, channel, ts, code)
    except TRANSPORT_ERRORS as exc:
        log.warning("%s on %s/%s failed (%s)", method.__name__, channel, ts, error_code(exc))
    return False


# -- downloads ------------------------------------------------------------------------


class DownloadError(Exception):
    """A shared file could not be downloaded; ``problem`` says why, for the person."""

    def __init__(self, problem: str, detail: str = "") -> None:
        super().__init__(detail or problem)
        self.problem = problem
        self.detail = detail or problem


def carries_token(url: URL, api_base_url: str = "") -> bool:
    """True when the bot token may be sent to ``url``: HTTPS to one of
    :data:`SLACK_FILE_DOMAINS` or a subdomain, or the very origin (scheme, host and
    port) of the configured Web API ``api_base_url`` (a proxy, or a stand-in in tests)."""
    host = (url.host or "").lower().rstrip(".")
    if url.scheme == "https" and any(host == d or host.endswith("." + d) for d in SLACK_FILE_DOMAINS):
        return True
    if not api_base_url:
        return False
    try:
        api = URL(api_base_url)
    except ValueError:
        return False
    return api.is_absolute() and url.is_absolute() and url.origin() == api.origin()


class Downloader:
    """Downloads shared files with the bot token (``Authorization: Bearer``), at most
    ``max_bytes + 1`` bytes of each: one byte past the limit is enough for the engine
    to refuse the file as too large, without reading the rest.

    The token goes only where :func:`carries_token` allows (``api_base_url`` is the
    configured ``slack.api_base_url``); any other link is refused unrequested. A
    redirect to another origin loses the token (aiohttp drops ``Authorization`` then)."""

    def __init__(self, session: aiohttp.ClientSession, token: str, max_bytes: int, api_base_url: str = "") -> None:
        self._session = session
        self._token = token
        self._max_bytes = max_bytes
        self._api_base_url = api_base_url

    async def fetch(self, file: SlackFile) -> bytes:
        """The file's bytes; raises :class:`DownloadError`."""
        if not file.url:
            raise DownloadError("Slack gave me no link to download it (it may be an external or deleted file).")
        try:
            url = URL(file.url)
        except ValueError:
            url = URL()
        if not carries_token(url, self._api_base_url):
            # The same parsed URL is requested below, so what is checked is what would be fetched.
            raise DownloadError(OUTSIDE_SLACK_PROBLEM, f"its link points outside Slack (host {url.host or '?'}); "
                                                       "the token was not sent")
        headers = {"Authorization": f"Bearer {self._token}"}
        timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_S)
        try:
            async with self._session.get(url, headers=headers, timeout=timeout) as response:
                if response.status != 200:
                    raise DownloadError(f"Slack answered HTTP {response.status}.", f"HTTP {response.status}")
                if translate.is_login_page(response.headers.get("Content-Type", ""), file):
                    raise DownloadError(translate.LOGIN_PAGE_PROBLEM, "a sign-in page (text/html) instead of the file")
                return await self._read(response)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise DownloadError("the download failed; please share it again.", error_code(exc)) from exc

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        data = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            data += chunk
            if len(data) > self._max_bytes:
                break
        return bytes(data[: self._max_bytes + 1])


# -- replies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """Where replies to one event go: the conversation, the person the event came from
    (ephemeral replies are theirs), the thread used when a reply names none, and the
    ``response_url`` of a slash command or a click (empty otherwise)."""

    channel: str
    user: str
    thread: str = ""
    response_url: str = ""


class Outbox:
    """Posts replies to Slack; see the module docstring for what happens when Slack refuses.
    ``team`` is the workspace's id (``auth.test``), which Slack's streaming asks for."""

    def __init__(self, client: AsyncWebClient, session: aiohttp.ClientSession, team: str = "") -> None:
        self._client = client
        self._session = session
        self.team = team

    @property
    def client(self) -> AsyncWebClient:
        return self._client

    def sender(self, target: Target) -> SlackSend:
        """The ``send`` the handler gets for an event from ``target`` (it can show drafts)."""
        return SlackSend(self, target)

    async def deliver(self, target: Target, reply: Reply) -> None:
        """Posts the reply (its messages in order, then its attachments) in its thread, or
        in ``target.thread``; ephemeral when ``private``. Never raises for Slack's or the
        network's failures: they are logged under a reference and the person is told."""
        thread = reply.thread or target.thread
        try:
            for message in render_reply(reply):
                await self.post(target, message, thread, private=reply.private)
            for attachment in reply.attachments:
                await self._upload(target, attachment, thread, private=reply.private)
        except TRANSPORT_ERRORS as exc:
            await self.report(target, thread, f"a {reply.kind.value} reply", exc)

    async def post(self, target: Target, message: SlackMessage, thread: str = "", private: bool = False) -> str:
        """Posts one message; returns its ``ts`` (empty for an ephemeral one). Raises what the client raises."""
        arguments: dict[str, Any] = message.payload()
        if thread:
            arguments["thread_ts"] = thread
        if private:
            await self._client.chat_postEphemeral(channel=target.channel, user=target.user, **arguments)
            return ""
        # No unfurling: a citation's link must not grow a preview under every answer.
        response = await self._client.chat_postMessage(
            channel=target.channel, unfurl_links=False, unfurl_media=False, **arguments
        )
        return str(response.get("ts") or "")

    async def _upload(self, target: Target, attachment: Attachment, thread: str, private: bool) -> None:
        channel = target.channel
        if private:
            # Files cannot be ephemeral: a private picture goes to the person's direct conversation.
            opened = await self._client.conversations_open(users=target.user)
            channel = str((opened.get("channel") or {}).get("id") or "")
            thread = ""
        await self._client.files_upload_v2(
            channel=channel,
            thread_ts=thread or None,
            file=attachment.data,
            filename=attachment.filename,
            title=attachment.filename,
        )

    async def report(self, target: Target, thread: str, what: str, error: BaseException) -> None:
        """Logs a failure to deliver ``what`` under a new reference and tells the person."""
        code = error_code(error)
        reference = new_reference()
        log.error(
            "delivering %s to %s failed: %s (reference %s)", what, target.channel, code, reference,
            exc_info=not isinstance(error, SlackApiError),
        )
        await self.note(target, thread, translate.posting_failure_text(code, reference))

    async def note(self, target: Target, thread: str, text: str) -> bool:
        """Tells the person ``text`` (plain, short) by the first way that works; False if none did."""
        for attempt in (self._by_response_url, self._by_ephemeral, self._by_message):
            try:
                if await asyncio.wait_for(attempt(target, thread, text), NOTE_TIMEOUT_S):
                    return True
            except NOTE_ERRORS as exc:
                log.info("telling %s in %s by %s failed: %s", target.user, target.channel, attempt.__name__,
                         error_code(exc))
        log.error("could not tell anyone in %s: %s", target.channel, text)
        return False

    async def _by_response_url(self, target: Target, thread: str, text: str) -> bool:
        # A slash command's or a click's response_url works even where the bot is no member.
        if not target.response_url:
            return False
        webhook = AsyncWebhookClient(target.response_url, session=self._session, timeout=int(NOTE_TIMEOUT_S))
        response = await webhook.send(text=text, response_type="ephemeral", replace_original=False)
        return response.status_code == 200

    async def _by_ephemeral(self, target: Target, thread: str, text: str) -> bool:
        if not target.user:
            return False
        await self._client.chat_postEphemeral(channel=target.channel, user=target.user, text=text, **_in(thread))
        return True

    async def _by_message(self, target: Target, thread: str, text: str) -> bool:
        await self._client.chat_postMessage(channel=target.channel, text=text, **_in(thread))
        return True


class SlackSend:
    """The ``Send`` of replies to one :class:`Target` (:meth:`Outbox.deliver`), which can also
    show an answer while it is written (:meth:`draft`, a :class:`~bot.neutral.DraftingSend`)."""

    def __init__(self, outbox: Outbox, target: Target) -> None:
        self._outbox = outbox
        self._target = target

    async def __call__(self, reply: Reply) -> None:
        await self._outbox.deliver(self._target, reply)

    def draft(self, thread: str = "") -> SlackDraft:
        return SlackDraft(self._outbox, self._target, thread or self._target.thread)


class SlackDraft:
    """An answer shown while it is written: a native stream in a thread, else a message edited
    by ``chat.update``; see the module docstring. An :class:`~bot.neutral.AnswerDraft`."""

    def __init__(self, outbox: Outbox, target: Target, thread: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._outbox = outbox
        self._client = outbox.client
        self._target = target
        self._thread = thread
        self._clock = clock
        self._mode = "new"  # new, stream (native), edits (chat.update), or stuck (neither works any more)
        self._ts = ""
        self._streamed_text = ""  # the text appended to the native stream so far
        self._not_before = 0.0  # no update before this (Slack said "ratelimited")

    @property
    def interval_s(self) -> float:
        return STREAM_EVERY_S if self._mode == "stream" else UPDATE_EVERY_S

    @property
    def ts(self) -> str:
        """The draft message's ``ts``; empty before anything was shown."""
        return self._ts

    async def show(self, text: str) -> None:
        """Shows ``text`` (the answer so far); raises only what the network raises."""
        if self._mode == "new":
            if not (self._thread and await self._start_stream(text)):
                await self._post(text)
        elif self._mode == "stream":
            await self._append(text)
        elif self._mode == "edits" and self._clock() >= self._not_before:
            await self._edit(text)

    async def finish(self, reply: Reply) -> None:
        """Puts ``reply`` in the draft's place (see the module docstring); never raises for Slack's failures."""
        if not self._ts:
            await self._outbox.deliver(self._target, reply)
            return
        if self._mode == "stream":
            await self._stop_stream(reply)
        if reply.private:  # it cannot replace a message everyone sees: delivered to the person, the draft goes
            await self._outbox.deliver(self._target, reply)
            await self._delete()
            return
        thread = reply.thread or self._thread
        messages = render_reply(reply)
        try:
            await self._replace(messages[0])
        except SlackApiError as exc:
            log.warning("could not put the finished answer in place of its draft %s in %s (%s): posting it anew",
                        self._ts, self._target.channel, error_code(exc))
            await self._outbox.deliver(self._target, reply)
            await self._delete()
            return
        except TRANSPORT_ERRORS as exc:
            await self._outbox.report(self._target, thread, f"a {reply.kind.value} reply", exc)
            return
        try:
            for message in messages[1:]:
                await self._outbox.post(self._target, message, thread)
            for attachment in reply.attachments:  # the same module's Outbox: its upload is ours to call
                await self._outbox._upload(self._target, attachment, thread, private=False)
        except TRANSPORT_ERRORS as exc:
            await self._outbox.report(self._target, thread, f"a {reply.kind.value} reply", exc)

    # -- native streaming ----------------------------------------------------------------------

    async def _start_stream(self, text: str) -> bool:
        """Starts a native stream with ``text``; False (logged) when Slack refuses streaming here."""
        try:
            response = await self._client.chat_startStream(
                channel=self._target.channel, thread_ts=self._thread, markdown_text=text,
                recipient_team_id=self._outbox.team or None, recipient_user_id=self._target.user or None,
            )
        except SlackApiError as exc:
            log.info("Slack refused to stream an answer in %s (%s): showing it by edits instead",
                     self._target.channel, error_code(exc))
            return False
        self._ts = str(response.get("ts") or "")
        if not self._ts:
            return False
        self._mode, self._streamed_text = "stream", text
        return True

    async def _append(self, text: str) -> None:
        delta = text[len(self._streamed_text):]
        if not delta:
            return
        try:
            await self._client.chat_appendStream(channel=self._target.channel, ts=self._ts, markdown_text=delta)
        except SlackApiError as exc:
            if error_code(exc) == "ratelimited":
                return  # the next append carries this text too
            log.warning("appending to the answer stream %s in %s failed (%s): the finished answer will replace it",
                        self._ts, self._target.channel, error_code(exc))
            self._mode = "stuck"
            return
        self._streamed_text = text

    async def _stop_stream(self, reply: Reply) -> None:
        """Stops the stream, with the rest of an answer's text (the stream itself ends complete)."""
        shown = self._streamed_text
        rest = reply.text[len(shown):] if reply.kind is ReplyKind.ANSWER and reply.text.startswith(shown) else ""
        try:
            await self._client.chat_stopStream(channel=self._target.channel, ts=self._ts, markdown_text=rest or None)
        except SlackApiError as exc:  # the update below replaces the text all the same
            log.info("stopping the answer stream %s in %s failed (%s)", self._ts, self._target.channel, error_code(exc))

    # -- edits -------------------------------------------------------------------------------------

    async def _post(self, text: str) -> None:
        response = await self._client.chat_postMessage(channel=self._target.channel, text=_draft_text(text),
                                                       unfurl_links=False, unfurl_media=False, **_in(self._thread))
        self._ts = str(response.get("ts") or "")
        self._mode = "edits" if self._ts else "stuck"

    async def _edit(self, text: str) -> None:
        try:
            await self._client.chat_update(channel=self._target.channel, ts=self._ts, text=_draft_text(text))
        except SlackApiError as exc:
            if error_code(exc) != "ratelimited":
                raise
            delay = _ratelimited_delay(exc)
            log.info("Slack limited the edits of answer %s in %s: the next in %.1f s", self._ts,
                     self._target.channel, delay)
            self._not_before = self._clock() + delay

    async def _replace(self, message: SlackMessage) -> None:
        """``chat.update`` of the draft with ``message``, retried after Slack's delay when
        ``ratelimited``; raises the last failure."""
        for attempt in range(1, FINAL_TRIES + 1):
            wait = self._not_before - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await self._client.chat_update(channel=self._target.channel, ts=self._ts, **message.payload())
                return
            except SlackApiError as exc:
                if error_code(exc) != "ratelimited" or attempt == FINAL_TRIES:
                    raise
                self._not_before = self._clock() + _ratelimited_delay(exc)

    async def _delete(self) -> None:
        try:
            await self._client.chat_delete(channel=self._target.channel, ts=self._ts)
        except TRANSPORT_ERRORS as exc:
            log.warning("could not remove the draft %s in %s (%s)", self._ts, self._target.channel, error_code(exc))


def _draft_text(text: str) -> str:
    """A draft's text as a message's ``text``: escaped for mrkdwn, within :data:`DRAFT_CHARS`."""
    return escape(text if len(text) <= DRAFT_CHARS else text[: DRAFT_CHARS - 1] + "…")


def _ratelimited_delay(error: SlackApiError) -> float:
    """Seconds to wait after ``ratelimited``: Slack's Retry-After if it sent one, else :data:`RATELIMITED_WAIT_S`."""
    headers = getattr(error.response, "headers", None) or {}
    value = next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    try:
        return min(max(float(value), 0.0), MAX_RATELIMITED_WAIT_S) if value is not None else RATELIMITED_WAIT_S
    except (TypeError, ValueError):
        return RATELIMITED_WAIT_S


def _in(thread: str) -> dict[str, Any]:
    """``thread_ts`` only when there is a thread: JSON calls would send a null otherwise."""
    return {"thread_ts": thread} if thread else {}
