"""The Web API basics of the Slack adapter: what a call can fail with, people, threads,
permalinks, files' descriptions, and the working reaction.

Everything here talks to Slack through the injected ``AsyncWebClient`` (whose
``base_url`` comes from the configuration). Replies are posted by
:mod:`adapters.slack.outbox` (and, while a language model writes an answer, by
:mod:`adapters.slack.sending`); shared files are downloaded by
:mod:`adapters.slack.downloads`.

Contracts:

* :data:`TRANSPORT_ERRORS` is what a call can raise besides Slack's own refusal, and
  :func:`error_code` names either in one word, for logs and notes.
* :class:`People` never raises: a failed ``users.info`` gives a person known
  by id only (who then manages nothing), logged. Only admins and owners of the
  installing workspace manage channels (see ``translate.person_from_user``).
* :class:`SharedChannels` says whether a conversation is shared with another
  organisation (Slack Connect): what the events said last (``is_ext_shared_channel``),
  else ``conversations.info`` (``is_ext_shared``), each remembered for a while. It never
  raises: when Slack cannot say, the conversation counts as shared (logged, not
  remembered), so a refusal errs on the side of storing nothing.
* :func:`working` shows the work with a reaction and never fails the work
  because a reaction failed.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import translate
from adapters.slack.translate import SlackFile
from bot.neutral import Person

log = logging.getLogger(__name__)

V = TypeVar("V")

MAX_THREAD_MESSAGES = 1000  # a thread is read up to this many messages (pages of REPLIES_PAGE)
REPLIES_PAGE = 200

# What the network can throw at a call, besides Slack's own refusals.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (SlackClientError, aiohttp.ClientError, TimeoutError)


def error_code(error: BaseException) -> str:
    """Slack's error code of a refused call (``not_in_channel``), else the exception's name."""
    if isinstance(error, SlackApiError):
        return str(error.response.get("error") or "unknown_error")
    return type(error).__name__


def in_thread(thread: str) -> dict[str, Any]:
    """A call's ``thread_ts`` argument, only when there is a thread: JSON calls would send a null otherwise."""
    return {"thread_ts": thread} if thread else {}


# -- people -------------------------------------------------------------------------


class Remembered(Generic[V]):
    """Values by key, each forgotten ``ttl_s`` seconds after it was put; at most ``max_entries``
    (the least recently put go first)."""

    def __init__(self, ttl_s: float, max_entries: int, clock: Callable[[], float]) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def get(self, key: str) -> V | None:
        """The value put under ``key`` less than ``ttl_s`` ago, else None."""
        entry = self._entries.get(key)
        if entry is None or self._clock() - entry[0] >= self._ttl_s:
            return None
        return entry[1]

    def put(self, key: str, value: V) -> None:
        self._entries[key] = (self._clock(), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)


class People:
    """Who a user id is (``users.info``), cached for ``ttl_s`` seconds, at most ``max_entries``.
    ``home_team`` is the installing workspace: only its admins and owners manage channels."""

    def __init__(
        self,
        client: AsyncWebClient,
        home_team: str,
        ttl_s: float = 300.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._home_team = home_team
        self._cache: Remembered[Person] = Remembered(ttl_s, max_entries, clock)

    async def get(self, user_id: str) -> Person:
        """The person; never raises (a lookup failure gives ``Person(user_id)``, logged)."""
        if not user_id:
            return Person("unknown")
        cached = self._cache.get(user_id)
        if cached is not None:
            return cached
        try:
            response = await self._client.users_info(user=user_id)
        except TRANSPORT_ERRORS as exc:
            # Not cached: the next event asks again, so a passing failure costs one event's name.
            log.warning("users.info for %s failed (%s); treating them as a member", user_id, error_code(exc))
            return Person(user_id)
        person = translate.person_from_user(response.get("user") or {}, self._home_team, user_id)
        self._cache.put(user_id, person)
        return person


class SharedChannels:
    """Whether a conversation is shared with another organisation; see the module docstring.
    What is known is remembered for ``ttl_s`` seconds, at most ``max_entries`` conversations."""

    def __init__(
        self,
        client: AsyncWebClient,
        ttl_s: float = 300.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._known: Remembered[bool] = Remembered(ttl_s, max_entries, clock)

    def note(self, channel: str, shared: bool) -> None:
        """What an event said about its conversation (its ``is_ext_shared_channel``)."""
        if channel:
            self._known.put(channel, shared)

    async def external(self, channel: str) -> bool:
        """True when ``channel`` is shared with another organisation, or Slack cannot say."""
        known = self._known.get(channel)
        if known is not None:
            return known
        info = await conversation_info(self._client, channel, "treating it as shared with another organisation")
        if info is None:
            return True
        shared = bool(info.get("is_ext_shared"))
        self._known.put(channel, shared)
        return shared


async def conversation_info(client: AsyncWebClient, channel: str, fallback: str) -> Mapping[str, Any] | None:
    """The channel object ``conversations.info`` gives for ``channel``; None when Slack cannot
    say, logged with what the caller does instead (``fallback``)."""
    try:
        response = await client.conversations_info(channel=channel)
    except TRANSPORT_ERRORS as exc:
        log.warning("conversations.info for %s failed (%s); %s", channel, error_code(exc), fallback)
        return None
    info = response.get("channel")
    if not isinstance(info, Mapping):
        log.warning("conversations.info for %s gave no channel; %s", channel, fallback)
        return None
    return info


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
