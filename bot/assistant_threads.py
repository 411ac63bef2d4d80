"""An AI assistant's threads, platform-neutral: what a new thread suggests, what a question
there is answered from, its title, and the channel each thread is viewed beside.

Platforms with an assistant side panel (Slack's assistant container) open a *thread* per
conversation and say which channel the person is viewing beside it. The adapter reads
that; the decisions are here, reached through ``Assistant.assistant_threads``:

* :meth:`AssistantThreads.prompts`: at least three prompts for every new thread; when the
  person views a channel that has a tree and they are a member of it, two about that channel
  lead (wording in :mod:`bot.texts.assistant`);
* :func:`scope`: a question is answered from the viewed channel's tree only when the asker
  is a member of that channel (:attr:`~bot.neutral.Scope.VIEWED`); otherwise it is answered from nothing
  and says why (:attr:`~bot.neutral.Scope.NOT_A_MEMBER`); with no channel viewed, the conversation's own
  material answers, as for any direct message (:attr:`~bot.neutral.Scope.OWN`);
* :func:`thread_title`: the thread is titled from its first question, at most
  :data:`MAX_TITLE_CHARS` characters;
* the viewed channel of each thread, and whether it had its first question, are kept in
  :class:`SharedThreadState` (Redis) when processes are coordinated, so any replica that
  gets the next event knows them; in :class:`LocalThreadState` (this process) otherwise.
  Without Redis for a moment, the shared state falls back to this process's memory. The
  viewed channel kept is the latest event's by the event's own time, not by the order the
  events were handled in (they are handled concurrently, and replicas handle them apart).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Protocol

from bot import replies
from bot.coordination.link import CoordinationDown, RedisLink
from bot.engine_calls import AsyncEngine
from bot.neutral import Scope, SuggestedPrompt
from raptor_engine import ChannelKey, RaptorError

log = logging.getLogger(__name__)

MAX_TITLE_CHARS = 60
THREAD_TTL_S = 30 * 24 * 3600  # a thread's state is kept this long after it was last set
LOCAL_THREADS = 10_000  # threads one process remembers


def scope(viewed: str, member: bool) -> Scope:
    """The scope of a question asked beside the channel id ``viewed`` (empty: none) by a
    person who is (``member``) or is not a member of it."""
    if not viewed:
        return Scope.OWN
    return Scope.VIEWED if member else Scope.NOT_A_MEMBER


def thread_title(question: str) -> str:
    """A thread's title from its first question: one line, at most :data:`MAX_TITLE_CHARS`
    characters, cut at a word with an ellipsis when longer."""
    line = " ".join(question.split())
    if len(line) <= MAX_TITLE_CHARS:
        return line
    cut = line[: MAX_TITLE_CHARS - 1]
    if " " in cut[MAX_TITLE_CHARS // 2:]:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,.;:") + "…"


class ThreadState(Protocol):
    """Where each thread's viewed channel and first question are kept; ``thread`` is a
    platform-qualified thread id."""

    async def set_viewed(self, thread: str, channel: str, at: str = "") -> None:
        """Keeps ``channel`` as viewed beside ``thread`` as of ``at`` (the event's time, a Slack
        ``ts``), unless a view of a later time is kept already. An event without a time is
        kept, as before events were ordered, and any timed event after it replaces it."""
        ...

    async def viewed(self, thread: str) -> str: ...

    async def first_question(self, thread: str) -> bool:
        """True the first time it is asked for ``thread`` (then remembered), else False."""
        ...

    async def set_answered(self, thread: str, channel: str) -> None:
        """Keeps that ``thread``'s latest answer came from ``channel``'s tree: a click on it (a
        vote, a summary's children, the 👎 form) is about that channel's material."""
        ...

    async def answered(self, thread: str) -> str: ...


VIEWED, ANSWERED, ASKED = "viewed", "answered", "asked"  # what is kept of each thread


def event_time(at: str) -> float | None:
    """An event's time (a Slack ``ts``, "1712345678.000100") as a number; None for an event
    without one, or with one that is not a number."""
    try:
        return float(at) if at else None
    except ValueError:
        return None


def timed_view(at: str, channel: str) -> str:
    """A view as kept, in memory and in Redis alike: ``<time>|<channel>``, an untimed event's
    as of time 0 (any timed event replaces it)."""
    return f"{at if event_time(at) is not None else '0'}|{channel}"


def later_view_kept(kept: str, at: str) -> bool:
    """Whether ``kept`` (a :func:`timed_view`, or an older version's plain channel id) is of a
    later time than an event at ``at``; an untimed event is never older than what is kept."""
    time = event_time(at)
    if time is None or "|" not in kept:
        return False
    return (event_time(kept.partition("|")[0]) or 0.0) > time


def viewed_channel(kept: str) -> str:
    """The channel of a kept view (an older version's plain channel id as it is)."""
    return kept.rpartition("|")[2]


class LocalThreadState:
    """The threads of this process, the last :data:`LOCAL_THREADS` of each kind of value."""

    def __init__(self, size: int = LOCAL_THREADS) -> None:
        self._size = size
        self._kept: dict[str, OrderedDict[str, str]] = {what: OrderedDict() for what in (VIEWED, ANSWERED, ASKED)}

    def put(self, what: str, thread: str, value: str) -> None:
        """Keeps ``value`` as the thread's ``what``; the oldest thread goes past the bound."""
        kept = self._kept[what]
        kept[thread] = value
        kept.move_to_end(thread)
        while len(kept) > self._size:
            kept.popitem(last=False)

    def get(self, what: str, thread: str) -> str:
        return self._kept[what].get(thread, "")

    async def set_viewed(self, thread: str, channel: str, at: str = "") -> None:
        if not later_view_kept(self.get(VIEWED, thread), at):
            self.put(VIEWED, thread, timed_view(at, channel))

    async def viewed(self, thread: str) -> str:
        return viewed_channel(self.get(VIEWED, thread))

    async def set_answered(self, thread: str, channel: str) -> None:
        self.put(ANSWERED, thread, channel)

    async def answered(self, thread: str) -> str:
        return self.get(ANSWERED, thread)

    async def first_question(self, thread: str) -> bool:
        if self.get(ASKED, thread):
            return False
        self.put(ASKED, thread, "1")
        return True


# KEYS[1]: the thread's viewed key; ARGV: the event's time ("" for none), the view to keep
# (a timed_view), the time to live (s). The same decision as later_view_kept, atomically.
_SET_VIEWED = """
local at = tonumber(ARGV[1])
local kept = redis.call('GET', KEYS[1])
if at and kept then
  local time = tonumber(string.match(kept, '^([^|]*)|'))
  if time and time > at then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
return 1
"""


class SharedThreadState:
    """The threads every replica sees, in Redis for :data:`THREAD_TTL_S`; this process's
    memory while Redis cannot be reached (the link logs the outage)."""

    def __init__(self, link: RedisLink, ttl_s: int = THREAD_TTL_S) -> None:
        self._link = link
        self._ttl_s = ttl_s
        self._local = LocalThreadState()

    async def set_viewed(self, thread: str, channel: str, at: str = "") -> None:
        """Kept in Redis as ``<time>|<channel>`` by one script, which leaves a later time's view
        in place (a value without ``|``, from a version before events were ordered, is older)."""
        await self._local.set_viewed(thread, channel, at)
        timed = at if event_time(at) is not None else ""
        try:
            await self._link.run(lambda r: r.eval(_SET_VIEWED, 1, self._link.key("assistant", VIEWED, thread),
                                                  timed, timed_view(at, channel), self._ttl_s))
        except CoordinationDown:
            pass

    async def viewed(self, thread: str) -> str:
        return viewed_channel(await self._get(VIEWED, thread))

    async def set_answered(self, thread: str, channel: str) -> None:
        await self._put(ANSWERED, thread, channel)

    async def answered(self, thread: str) -> str:
        return await self._get(ANSWERED, thread)

    async def _put(self, what: str, thread: str, value: str) -> None:
        """Kept here and in Redis (here alone while Redis cannot be reached)."""
        self._local.put(what, thread, value)
        try:
            await self._link.run(lambda r: r.set(self._link.key("assistant", what, thread), value, ex=self._ttl_s))
        except CoordinationDown:
            pass

    async def _get(self, what: str, thread: str) -> str:
        """The value kept in Redis; this process's own while Redis cannot be reached."""
        try:
            value = await self._link.run(lambda r: r.get(self._link.key("assistant", what, thread)))
        except CoordinationDown:
            return self._local.get(what, thread)
        return str(value or "")

    async def first_question(self, thread: str) -> bool:
        try:
            fresh = await self._link.run(
                lambda r: r.set(self._link.key("assistant", ASKED, thread), "1", nx=True, ex=self._ttl_s))
        except CoordinationDown:
            return await self._local.first_question(thread)
        return bool(fresh)


class AssistantThreads:
    """The decisions and the state of assistant threads (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, state: ThreadState) -> None:
        self._engine = engine
        self.state = state

    @staticmethod
    def scope(viewed: str, member: bool) -> Scope:
        """See :func:`scope`."""
        return scope(viewed, member)

    @staticmethod
    def title(question: str) -> str:
        """See :func:`thread_title`."""
        return thread_title(question)

    async def prompts(self, viewed: ChannelKey | None = None, name: str = "", member: bool = False) -> list[SuggestedPrompt]:
        """The prompts of a new thread: two about ``viewed`` (named ``name``) first, when the
        person is a ``member`` of it and it has a tree; then the general ones, four at most
        in all (Slack shows at most four)."""
        prompts = [SuggestedPrompt(title, message) for title, message in replies.GENERAL_PROMPTS]
        if viewed is not None and member and name and await self._has_tree(viewed):
            about = [SuggestedPrompt(title, message) for title, message in replies.channel_prompts(name)]
            prompts = about + prompts
        return prompts[:4]

    async def _has_tree(self, key: ChannelKey) -> bool:
        """Whether the channel has a built tree; False (logged) when the store cannot say."""
        try:
            stats = await self._engine.stats(key)
        except RaptorError as exc:
            log.info("channel %s: no tree to suggest prompts about (%s)", key, exc)
            return False
        return stats.version > 0
