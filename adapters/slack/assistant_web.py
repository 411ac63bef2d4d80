"""The Web API calls of Slack's assistant container: suggested prompts, a thread's title and
status line (``assistant.threads.*``), who belongs to which channel, channels' names.

Contracts (every call here never raises for Slack's or the network's failures; each is
logged, and the question goes on without it):

* :func:`set_prompts`, :func:`set_title`: ``assistant.threads.setSuggestedPrompts`` and
  ``setTitle`` of one thread;
* :class:`ThreadStatus`: the status line of one thread (``assistant.threads.setStatus``).
  Slack clears it by itself when the app replies in the thread; :meth:`ThreadStatus.clear`
  also clears it explicitly (an empty status, as Slack documents), so that a path that posts
  nothing, or whose reply Slack refused, leaves no line behind. Slack allows a status in
  the assistant container; in channel threads it may refuse one: after a refusal there
  (:class:`StatusSupport`) no status is tried in channels again by this process;
* :class:`Memberships`: the channels a person is a member of (``users.conversations`` with
  ``user``, every page), remembered for ``ttl_s``; a failed lookup counts as no membership
  (answering from a channel's material must never rest on a guess);
* :class:`ChannelNames`: a channel's name (``conversations.info``), remembered; its id when
  Slack cannot say.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.outbox import Outbox, Target
from adapters.slack.payload import is_direct
from adapters.slack.sending import SlackSend
from adapters.slack.web import TRANSPORT_ERRORS, Remembered, conversation_info, error_code
from bot.neutral import Stage
from bot.replies import stage_text

log = logging.getLogger(__name__)

MEMBERSHIP_TTL_S = 60.0  # a person joining or leaving a channel counts after at most this long
CONVERSATIONS_PAGE = 999  # users.conversations' largest page
MAX_CONVERSATION_PAGES = 20


async def set_prompts(client: AsyncWebClient, channel: str, thread_ts: str, title: str,
                      prompts: Sequence[tuple[str, str]]) -> bool:
    """Sets the thread's suggested prompts, each (title, message); whether Slack took them."""
    try:
        await client.assistant_threads_setSuggestedPrompts(
            channel_id=channel, thread_ts=thread_ts, title=title,
            prompts=[{"title": shown, "message": message} for shown, message in prompts])
    except TRANSPORT_ERRORS as exc:
        log.warning("assistant.threads.setSuggestedPrompts in %s/%s failed (%s)", channel, thread_ts, error_code(exc))
        return False
    return True


async def set_title(client: AsyncWebClient, channel: str, thread_ts: str, title: str) -> None:
    """Titles the thread."""
    try:
        await client.assistant_threads_setTitle(channel_id=channel, thread_ts=thread_ts, title=title)
    except TRANSPORT_ERRORS as exc:
        log.warning("assistant.threads.setTitle in %s/%s failed (%s)", channel, thread_ts, error_code(exc))


class StatusSupport:
    """Whether Slack takes status lines in channel threads (it does in the assistant
    container): assumed until it refuses one, then never tried there again."""

    def __init__(self) -> None:
        self.in_channels = True

    def refused_in_channel(self, code: str) -> None:
        if self.in_channels:
            log.info("Slack refused a status line in a channel thread (%s): no more are set in channels", code)
        self.in_channels = False


class ThreadStatus:
    """The status line of the thread ``thread_ts`` in ``channel``; see the module docstring.
    ``searched`` names the channel a question there is answered from (empty: "this channel")."""

    def __init__(self, client: AsyncWebClient, channel: str, thread_ts: str, support: StatusSupport,
                 searched: str = "") -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._support = support
        self._in_channel = not is_direct(channel)
        self._shown = False
        self.searched = searched

    async def show_stage(self, stage: Stage) -> None:
        await self.show(stage_text(stage, self.searched))

    async def show(self, text: str) -> None:
        """Shows ``text``; nothing where Slack does not take status lines."""
        if not self._thread_ts or (self._in_channel and not self._support.in_channels):
            return
        if await self._set(text):
            self._shown = True

    async def clear(self) -> None:
        """Clears the line (an empty status), if one was shown."""
        if self._shown:
            self._shown = not await self._set("")

    async def _set(self, status: str) -> bool:
        try:
            await self._client.assistant_threads_setStatus(channel_id=self._channel, thread_ts=self._thread_ts,
                                                           status=status)
        except SlackApiError as exc:
            if self._in_channel:
                self._support.refused_in_channel(error_code(exc))
            else:
                log.warning("assistant.threads.setStatus in %s/%s failed (%s)", self._channel, self._thread_ts,
                            error_code(exc))
            return False
        except TRANSPORT_ERRORS as exc:
            log.warning("assistant.threads.setStatus in %s/%s failed (%s)", self._channel, self._thread_ts,
                        error_code(exc))
            return False
        return True


class StatusSlackSend(SlackSend):
    """The ``send`` of a question's replies that also shows its stages in a :class:`ThreadStatus`
    (a :class:`~bot.neutral.StatusSend`, and a drafting ``send`` as :class:`SlackSend` is)."""

    def __init__(self, outbox: Outbox, target: Target, status: ThreadStatus) -> None:
        super().__init__(outbox, target)
        self._status = status

    async def show_stage(self, stage: Stage) -> None:
        await self._status.show_stage(stage)


class Memberships:
    """The channels each person is a member of; see the module docstring."""

    def __init__(self, client: AsyncWebClient, ttl_s: float = MEMBERSHIP_TTL_S, max_entries: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._known: Remembered[frozenset[str]] = Remembered(ttl_s, max_entries, clock)

    async def is_member(self, user: str, channel: str) -> bool:
        """Whether ``user`` is a member of ``channel``; False when Slack cannot say (logged)."""
        channels = self._known.get(user)
        if channels is None:
            try:
                channels = await self._channels_of(user)
            except TRANSPORT_ERRORS as exc:
                log.warning("users.conversations for %s failed (%s): not answering from a channel's material",
                            user, error_code(exc))
                return False
            self._known.put(user, channels)
        return channel in channels

    async def _channels_of(self, user: str) -> frozenset[str]:
        found: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_CONVERSATION_PAGES):
            response = await self._client.users_conversations(
                user=user, types="public_channel,private_channel", exclude_archived=True,
                limit=CONVERSATIONS_PAGE, cursor=cursor)
            found |= {str(c.get("id")) for c in response.get("channels") or () if isinstance(c, dict)}
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return frozenset(found)


class ChannelNames:
    """Channels' names (``conversations.info``), remembered for ``ttl_s``."""

    def __init__(self, client: AsyncWebClient, ttl_s: float = 600.0, max_entries: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._known: Remembered[str] = Remembered(ttl_s, max_entries, clock)

    async def name(self, channel: str) -> str:
        """The channel's name without ``#``; its id when Slack cannot say (logged, not remembered)."""
        known = self._known.get(channel)
        if known is not None:
            return known
        info = await conversation_info(self._client, channel, "naming it by its id")
        name = str(info.get("name") or "") if info else ""
        if not name:
            return channel
        self._known.put(channel, name)
        return name


class AssistantWeb:
    """What the assistant's flows ask Slack, for one client: the status lines' support in
    channels, memberships and channel names (each remembered as said above)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self.status_support = StatusSupport()
        self.memberships = Memberships(client)
        self.names = ChannelNames(client)

    @asynccontextmanager
    async def working(self, channel: str, thread_ts: str, searched: str = "") -> AsyncIterator[ThreadStatus]:
        """The status line of a thread while a question is worked on in the block: "reading"
        at once, the stages the bot shows meanwhile, cleared at the end whatever happened."""
        status = ThreadStatus(self.client, channel, thread_ts, self.status_support, searched)
        await status.show_stage(Stage.READING)
        try:
            yield status
        finally:
            await status.clear()
