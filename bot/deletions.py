"""Deletions on the platform, followed: what people deleted is forgotten.

Contracts (a part of :class:`bot.handler.ChatHandler`, through ``follow``; nobody is answered):

- A :class:`~bot.neutral.Deleted` message or file: every source it became (see
  :func:`deleted_sources` for which) is forgotten exactly as the ``forget`` command does it
  (``Engine.forget``: every collection, cache and kept answer), and the channel's rebuild is
  scheduled, as after an unpin. Only channels the store holds are looked at: a deletion in a
  channel the bot never learned from costs one listing and stores nothing.
- A :class:`~bot.neutral.ChannelGone` channel stops being scheduled for rebuilds at once, and
  its material is forgotten after the retention period (:mod:`bot.retention`); a
  :class:`~bot.neutral.ChannelBack` one calls that off and is scheduled again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.config import Config
from bot.engine_calls import AsyncEngine
from bot.neutral import ChannelBack, ChannelGone, ChannelKey, Deleted
from bot.retention import ChannelRetention
from raptor_engine import ChannelError, Source, SourceKind

if TYPE_CHECKING:
    from bot.rebuilds.service import RebuildService

log = logging.getLogger(__name__)


class DeletionHandling:
    """Follows deletions and channels gone; see the module docstring."""

    def __init__(self, engine: AsyncEngine, config: Config, scheduler: RebuildService) -> None:
        self._engine = engine
        self._scheduler = scheduler
        self._retention = ChannelRetention(engine, config.bot)

    async def deleted(self, event: Deleted) -> None:
        """Forgets every source of what was deleted, in each channel it may be in."""
        for key in await self._channels(event.channel, event.whole_workspace):
            doomed = deleted_sources(await self._engine.sources(key), event)
            for source in doomed:
                try:
                    await self._engine.forget(key, source.id)
                except ChannelError:
                    continue  # forgotten meanwhile (another replica, the same deletion told twice)
                log.info("channel %s: source %s forgotten: %s %s was deleted", key, source.id[:12],
                         source.kind.value, source.external_id)
            if doomed:
                self._scheduler.watch(key)

    async def gone(self, event: ChannelGone) -> None:
        """Unschedules each channel concerned and marks its material to be forgotten."""
        for key in await self._channels(event.channel, event.whole_workspace):
            self._scheduler.unwatch(key)
            await self._retention.gone(key, event.reason)

    async def back(self, event: ChannelBack) -> None:
        """Calls off the channel's pending forget and schedules it again, if it was gone."""
        if await self._retention.back(event.channel):
            self._scheduler.watch(event.channel)

    async def _channels(self, key: ChannelKey, whole_workspace: bool) -> list[ChannelKey]:
        """The channels the store holds among ``key`` (or, with ``whole_workspace``, every
        channel of its platform and workspace)."""
        known = await self._engine.channels()
        if not whole_workspace:
            return [key] if key in known else []
        return [k for k in known if (k.platform, k.workspace) == (key.platform, key.workspace)]


def deleted_sources(sources: Sequence[Source], event: Deleted) -> list[Source]:
    """The sources ``event`` deleted (see :class:`~bot.neutral.Deleted`). Pure."""
    prefixes = tuple(f"{part}/" for part in event.parts_of)
    doomed = []
    for source in sources:
        external = source.external_id
        if not external:
            continue
        if external in event.external_ids:
            kept_file = (event.files_kept is not None
                         and (source.kind is not SourceKind.FILE or source.file_name in event.files_kept))
            if not kept_file:
                doomed.append(source)
        elif prefixes and external.startswith(prefixes) and external not in event.kept:
            doomed.append(source)
    return doomed
