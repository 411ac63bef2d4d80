"""A workspace's daily ceiling of language-model calls and tokens (``bot.model_budget``).

Contracts:

- What a workspace's answers and rebuilds spent is counted per UTC day (``platform/workspace``
  and the date): a new day starts at UTC midnight with nothing spent.
- :meth:`ModelBudget.reached` says, before model work starts, whether the workspace has used
  up a ceiling today; work already under way finishes and is counted, so a day may end a
  little over its ceiling, never by more than what was under way when it was reached.
- With coordination, every process counts in one Redis hash per workspace and day; while Redis is unreachable, each process counts on its own, as
  one process does without coordination (:class:`LocalSpending`). Each day's hash is dropped
  :data:`KEPT_S` after its last addition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from bot import replies
from bot.config import ModelBudgetConfig
from bot.coordination.link import CoordinationDown, RedisLink
from bot.errors import BotError
from raptor_engine import ChannelKey, ModelUsage

log = logging.getLogger(__name__)

KEPT_S = 2 * 24 * 3600  # a day's counts outlive their last addition by this much (its day is over by then)
# KEYS[1] the workspace's hash of the day; ARGV: calls, tokens, seconds the hash is kept.
_ADD = """
redis.call('HINCRBY', KEYS[1], 'calls', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 0
"""

Today = Callable[[], datetime]
"""The current moment, timezone-aware (tests pass their own)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class ModelBudgetReached(BotError):
    """Model work not started: its workspace used up a daily ceiling (the message says which)."""


@dataclass(frozen=True, slots=True)
class Spent:
    """A workspace's model calls and tokens on one UTC day."""

    calls: int = 0
    tokens: int = 0


class Spending(Protocol):
    """What workspaces spent per UTC day, kept somewhere (this process, or Redis)."""

    async def spent(self, workspace: str, day: date) -> Spent: ...

    async def add(self, workspace: str, day: date, calls: int, tokens: int) -> None: ...


class LocalSpending:
    """This process's counts. Only today's are kept: an earlier day's go when a new day is counted."""

    def __init__(self) -> None:
        self._day: date | None = None
        self._spent: dict[str, Spent] = {}

    async def spent(self, workspace: str, day: date) -> Spent:
        return self._spent.get(workspace, Spent()) if day == self._day else Spent()

    async def add(self, workspace: str, day: date, calls: int, tokens: int) -> None:
        if day != self._day:
            self._day, self._spent = day, {}
        before = self._spent.get(workspace, Spent())
        self._spent[workspace] = Spent(before.calls + calls, before.tokens + tokens)


class SharedSpending:
    """Counts in Redis, shared by every process; locally while Redis is unreachable. It talks
    to Redis with the blocking client in a thread, so any event loop may call it (a worker runs
    each job on a loop of its own)."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._local = LocalSpending()

    async def spent(self, workspace: str, day: date) -> Spent:
        try:
            values = await asyncio.to_thread(self._link.run_sync,
                                             lambda r: r.hmget(self._key(workspace, day), "calls", "tokens"))
        except CoordinationDown:
            return await self._local.spent(workspace, day)
        calls, tokens = (int(value or 0) for value in values)
        return Spent(calls, tokens)

    async def add(self, workspace: str, day: date, calls: int, tokens: int) -> None:
        key = self._key(workspace, day)
        try:
            await asyncio.to_thread(self._link.run_sync, lambda r: r.eval(_ADD, 1, key, calls, tokens, KEPT_S))
        except CoordinationDown:
            await self._local.add(workspace, day, calls, tokens)

    def _key(self, workspace: str, day: date) -> str:
        return self._link.key("model-budget", workspace, day.isoformat())


class ModelBudget:
    """The daily ceiling of ``config`` over what ``spending`` keeps; see the module docstring."""

    def __init__(self, config: ModelBudgetConfig, spending: Spending, now: Today = utc_now) -> None:
        self._config = config
        self._spending = spending
        self._now = now

    async def reached(self, key: ChannelKey) -> str:
        """Which ceiling the workspace of ``key`` used up today (``"calls"`` or ``"tokens"``), or
        empty when model work may go on (always, without a ceiling)."""
        if not self._config.enabled:
            return ""
        spent = await self._spending.spent(_workspace(key), self._now().date())
        calls, tokens = self._config.calls_per_workspace_per_day, self._config.tokens_per_workspace_per_day
        if calls and spent.calls >= calls:
            return "calls"
        if tokens and spent.tokens >= tokens:
            return "tokens"
        return ""

    def refusal(self, which: str) -> str:
        """What a person reads when ``which`` ceiling (from :meth:`reached`) refused model work."""
        limit = (self._config.calls_per_workspace_per_day if which == "calls"
                 else self._config.tokens_per_workspace_per_day)
        now = self._now()
        midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
        return replies.model_budget_text(which, limit, (midnight - now).total_seconds())

    async def record(self, key: ChannelKey, usage: ModelUsage) -> None:
        """Counts ``usage`` against the workspace of ``key`` today (nothing without a ceiling,
        or for work that made no model call)."""
        if not self._config.enabled or not (usage.calls or usage.tokens):
            return
        workspace = _workspace(key)
        await self._spending.add(workspace, self._now().date(), usage.calls, usage.tokens)
        log.debug("workspace %s: %d model call(s), %d token(s) counted against today's ceiling",
                  workspace, usage.calls, usage.tokens)


def _workspace(key: ChannelKey) -> str:
    """The workspace a channel belongs to, as budgets are kept: ``platform/workspace``."""
    return f"{key.platform}/{key.workspace}"
