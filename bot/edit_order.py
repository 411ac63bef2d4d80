"""Edits of one message applied in the order they were made, whichever process handles them.

Contract of :class:`EditOrder`: :meth:`~EditOrder.stale` says whether an edit (a
:class:`~bot.neutral.Pin` with ``revision``) is older than one already applied to the same
message; :meth:`~EditOrder.applied` records that an edit was applied. The newest revision of
each message is kept in its channel's notes in the store (``edit_revision:<external id>``),
which every process of the bot reads, so an old edit delivered late, or to another replica, is
dropped rather than written over a newer text. An edit without a revision (the platform did
not say when it was made) is never stale. The read and the write are not one atomic step
across processes: two edits of one message handled at the same moment by two replicas could
still both be applied; within a process the caller serialises edits of one message.
"""

from __future__ import annotations

import logging

from bot.engine_calls import AsyncEngine
from bot.neutral import Pin

log = logging.getLogger(__name__)

NOTE_PREFIX = "edit_revision:"


class EditOrder:
    """The newest applied edit of each message; see the module docstring."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def stale(self, pin: Pin) -> bool:
        """Whether ``pin`` is an edit older than (or as old as) one applied to its message."""
        if pin.revision <= 0:
            return False
        notes = await self._engine.notes(pin.channel)
        return pin.revision <= _revision(notes.get(NOTE_PREFIX + pin.external_id))

    async def applied(self, pin: Pin) -> None:
        """Records ``pin`` as the newest edit applied to its message (nothing without a revision)."""
        if pin.revision > 0:
            await self._engine.set_note(pin.channel, NOTE_PREFIX + pin.external_id, repr(pin.revision))


def _revision(value: str | None) -> float:
    try:
        return float(value) if value else 0.0
    except ValueError:
        log.warning("an edit revision note holds %r, not a number: ignored", value)
        return 0.0
