"""Channels the bot can no longer serve: their material is forgotten after a retention period.

Contract of :class:`ChannelRetention` (stateless: everything it knows is in the store, so it
holds across restarts and replicas):

- :meth:`~ChannelRetention.gone` marks a channel the store holds with the note
  :data:`NOTE`, whose value is the moment (ISO 8601, UTC) its material is to be forgotten:
  ``bot.retention.removed_channel_days`` from now. A channel marked already keeps its
  earlier moment (an archive followed by a deletion does not put it off). With 0 days the
  material is forgotten at once. A channel the store never held is left alone: nothing to
  forget, and no note that would make it held.
- :meth:`~ChannelRetention.back` removes the note: nothing is forgotten.
- :meth:`~ChannelRetention.sweep`, run by the rebuild schedule's periodic pass, forgets the
  material of every channel whose moment has come: each of its sources as the ``forget``
  command does (every collection, cache and kept answer), after which the engine drops the
  channel whole, note included.
- :meth:`~ChannelRetention.pending` says which channels are marked, so that their rebuilds
  are not scheduled again after a restart.

Forgetting the same channel from two replicas at once is harmless: a source already
forgotten by the other is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from bot.config import BotConfig
from bot.engine_calls import AsyncEngine
from raptor_engine import ChannelError, ChannelKey, RaptorError

log = logging.getLogger(__name__)

NOTE = "forget_after"  # the store note of a channel the bot can no longer serve: when to forget it


def utc_now() -> datetime:
    return datetime.now(UTC)


class ChannelRetention:
    """Pending forgets of channels the bot can no longer serve; see the module docstring."""

    def __init__(self, engine: AsyncEngine, config: BotConfig, now: Callable[[], datetime] = utc_now) -> None:
        self._engine = engine
        self._config = config
        self._now = now

    async def gone(self, key: ChannelKey, reason: str) -> None:
        """Marks ``key`` to be forgotten after the retention period (at once with 0 days)."""
        if key not in await self._engine.channels():
            log.info("channel %s: %s; the bot holds nothing of it", key, reason)
            return
        days = self._config.retention.removed_channel_days
        if days == 0:
            log.info("channel %s: %s; forgetting its material now", key, reason)
            await self.forget_channel(key)
            return
        notes = await self._engine.notes(key)
        if NOTE in notes:
            log.info("channel %s: %s; its material is forgotten at %s already", key, reason, notes[NOTE])
            return
        deadline = (self._now() + timedelta(days=days)).isoformat(timespec="seconds")
        await self._engine.set_note(key, NOTE, deadline)
        log.info("channel %s: %s; its material is forgotten at %s unless it comes back", key, reason, deadline)

    async def back(self, key: ChannelKey) -> bool:
        """Calls off the channel's pending forget; True if one was pending."""
        if key not in await self._engine.channels() or NOTE not in await self._engine.notes(key):
            return False
        await self._engine.set_note(key, NOTE, None)
        log.info("channel %s: back; its material is kept", key)
        return True

    async def pending(self, keys: Iterable[ChannelKey]) -> set[ChannelKey]:
        """Those of ``keys`` marked to be forgotten. A channel whose notes cannot be read is
        not counted (logged): its rebuilds stay scheduled, which is harmless."""
        marked: set[ChannelKey] = set()
        for key in keys:
            try:
                if NOTE in await self._engine.notes(key):
                    marked.add(key)
            except RaptorError as exc:
                log.warning("channel %s: cannot read its notes to tell whether it is to be forgotten: %s", key, exc)
        return marked

    async def sweep(self) -> None:
        """Forgets the material of every channel whose moment has come. Never raises: a failure
        is logged, and the next pass tries again."""
        try:
            keys = await self._engine.channels()
        except RaptorError as exc:
            log.warning("cannot list the channels to forget those removed: %s", exc)
            return
        now = self._now()
        for key in keys:
            try:
                due = due_at(await self._engine.notes(key))
                if due is not None and due <= now:
                    log.info("channel %s: removed, and kept until %s: forgetting its material", key, due.isoformat())
                    await self.forget_channel(key)
            except RaptorError as exc:
                log.warning("channel %s: forgetting its material failed (the next pass tries again): %s", key, exc)

    async def forget_channel(self, key: ChannelKey) -> int:
        """Forgets every source of the channel as ``forget`` does; the engine then drops the
        channel whole. A channel left listed with no source (it never held one) loses its note.
        Returns how many sources went."""
        forgotten = 0
        for source in await self._engine.sources(key):
            try:
                await self._engine.forget(key, source.id)
                forgotten += 1
            except ChannelError:
                log.debug("channel %s: source %s forgotten meanwhile", key, source.id[:12])
        if key in await self._engine.channels():
            await self._engine.set_note(key, NOTE, None)
        log.info("channel %s: forgot its %d source(s)", key, forgotten)
        return forgotten


def due_at(notes: dict[str, str]) -> datetime | None:
    """When a channel's material is to be forgotten, from its notes; None when it is not
    (or the note cannot be read: logged, and the channel is kept)."""
    value = notes.get(NOTE)
    if value is None:
        return None
    try:
        due = datetime.fromisoformat(value)
    except ValueError:
        log.warning("a %s note that is no time (%r) is ignored", NOTE, value)
        return None
    return due if due.tzinfo is not None else due.replace(tzinfo=UTC)
