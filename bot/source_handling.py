"""Sources from chat: uploaded files, pinned messages and threads, their edits, and unpins.

Contracts (a part of :class:`bot.handler.ChatHandler`):

- Ingestion is bounded before any loading or embedding: files and pins per person and
  hour (counted across every channel of the person's workspace), their bytes per channel and day (a duplicate, or anything that stores nothing,
  gives its bytes back), and optional caps on a channel's number of sources and stored
  text (``bot.limits``). The caps are read from the store just before ingesting, so two
  uploads at the same moment may pass a cap by one source. A refusal says which limit.
- With ``files.replace_same_name``, an upload takes the place of the channel's earlier
  files of that name.
- An edited message updates its source, if it is one; the threads of answers that cited
  the earlier text are told (at most :data:`CHANGED_NOTICES` of them). An edit (or a reply
  in a pinned thread) that rewrites a source counts against its editor's uploads allowance
  and the channel's byte budget like a new pin, before anything is embedded; refused, the
  source keeps its earlier text and the editor is told. An edit that changes nothing kept
  gives both back.
- A solved forum post (:class:`~bot.neutral.Solved`, its document made by
  :mod:`bot.forum_handling`) is stored within the same limits as a pin, counted against the
  person who marked it; marked again, it replaces its earlier version.
- Unpinning removes the sources a pin became only when ``bot.unpin_removes_source``
  is on and the person unpinning is an admin or the one who pinned it
  (:func:`bot.commands.may_remove_pin`); otherwise they stay, and the reply says
  who can remove them.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot import commands, replies
from bot.config import Config
from bot.coordination.shared_limits import Limiter
from bot.edit_order import EditOrder
from bot.engine_calls import AsyncEngine
from bot.ingestion import (
    SourceUpdate,
    adder_id,
    ingest_pin,
    ingest_replacing,
    ingest_upload,
    pin_document,
    pinned_sources,
    update_pin,
)
from bot.neutral import Person, Pin, Reply, ReplyKind, Send, Solved, Unpin, Upload
from bot.rate_limits import person_in_workspace
from raptor_engine import ChannelKey, Document

if TYPE_CHECKING:
    from bot.rebuilds.service import RebuildService
    from raptor_engine import Engine

log = logging.getLogger(__name__)

CHANGED_NOTICES = 10  # answer threads told about one changed source, at most


class SourceHandling:
    """Adds and removes the sources people give in chat; see the module docstring.
    ``per_person`` counts files and pins per person and hour, ``bytes_per_channel``
    their bytes per channel and day."""

    def __init__(self, engine: AsyncEngine, config: Config, scheduler: RebuildService, per_person: Limiter,
                 bytes_per_channel: Limiter) -> None:
        self._engine = engine
        self._config = config
        self._scheduler = scheduler
        self._per_person = per_person
        self._bytes = bytes_per_channel
        # Weak: a message's lock lives as long as an edit of it holds or awaits it.
        self._edit_locks: weakref.WeakValueDictionary[tuple[ChannelKey, str], asyncio.Lock] = \
            weakref.WeakValueDictionary()
        self._edits = EditOrder(engine)

    async def upload(self, upload: Upload, send: Send) -> None:
        """Stores an uploaded file; with ``files.replace_same_name``, in place of the channel's
        earlier files of that name (see :func:`ingest_upload`)."""
        replacing = self._config.files.replace_same_name
        await self._add(upload, upload.size or len(upload.data), upload.filename, send,
                        lambda engine: ingest_upload(engine, upload, replacing))

    async def pin(self, pin: Pin, send: Send) -> None:
        """Stores a pinned message (or thread); an edited one updates its source, if it is one."""
        if pin.edited:
            await self._pin_edited(pin, send)
            return
        document = pin_document(pin)  # a pin with no text is refused here, before it counts against any limit
        size = len(document.text.encode("utf-8"))
        await self._add(pin, size, document.title, send, lambda engine: SourceUpdate(ingest_pin(engine, pin)))

    async def solved(self, solved: Solved, document: Document, send: Send) -> None:
        """Stores a solved forum post's ``document`` in place of its earlier version, if any
        (see :func:`ingest_replacing`), within the limits, as a pin by the person who marked it."""
        size = len(document.text.encode("utf-8"))
        await self._add(solved, size, document.title, send,
                        lambda engine: ingest_replacing(engine, solved.channel, document))

    async def _pin_edited(self, pin: Pin, send: Send) -> None:
        """An edited message: its source, if it is one, takes the new text (see :func:`update_pin`).
        Nothing is said for a message that is no source, nor for an edit that changed nothing kept,
        nor for a pinned thread that grew by a reply (see ``Pin.grew``) but to its answers.
        Edits of one message are applied one at a time, in the order they were made (``Pin.revision``)."""
        key = pin.channel
        if not await self._engine.run(lambda engine: pinned_sources(engine, key, pin.external_id)):
            return  # no source: most edited messages are none, and cost nothing
        lock = self._edit_locks.get((key, pin.external_id)) or asyncio.Lock()
        self._edit_locks[(key, pin.external_id)] = lock  # kept while an edit of the message holds or awaits it
        async with lock:
            if await self._edits.stale(pin):
                log.info("channel %s: an edit of %s older than one applied already: dropped", key, pin.external_id)
                return
            await self._apply_edit(pin, send)

    async def _apply_edit(self, pin: Pin, send: Send) -> None:
        """:meth:`_pin_edited` for one edit, its turn come."""
        key = pin.channel
        document = pin_document(pin)
        size = len(document.text.encode("utf-8"))
        refusal = await self._rate_refusal(key, pin.person, size, document.title)
        if refusal is not None:
            log.info("channel %s: the edit of %s by %s refused by a limit", key, pin.external_id, pin.person.id)
            await send(refusal)
            return
        update = None
        try:
            update = await self._engine.run(lambda engine: update_pin(engine, pin))
        finally:
            if update is None or not update.replaced:  # nothing new stored: the edit costs nothing
                await self._per_person.refund(person_in_workspace(key, pin.person.id))
                await self._bytes.refund(key, size)
        if update is None or not update.replaced:
            return
        await self._edits.applied(pin)
        log.info("channel %s: source %s updated after %s %s (%d answers cite its earlier text)", pin.channel,
                 update.result.source.id[:12], "a reply to" if pin.grew else "an edit of", pin.external_id,
                 len(update.changed_answers))
        self._scheduler.watch(pin.channel)
        if not pin.grew:
            await send(Reply(ReplyKind.INFO, replies.updated_text(update.result, len(update.changed_answers))))
        await self._tell_changed_answers(update, send)

    async def _tell_changed_answers(self, update: SourceUpdate, send: Send) -> None:
        """Says in the thread of each answer that cited a replaced source's earlier text (and had
        not been told yet) that it cites material that changed after it was given: one line per
        thread, at most :data:`CHANGED_NOTICES` threads per change, so that one edit cannot flood
        a channel. Answers given outside a thread are counted in the change's own message."""
        threads = dict.fromkeys(a.thread for a in update.changed_answers if a.thread and not a.changed)
        notice = replies.changed_answer_notice(update.result.source.title)
        for thread in list(threads)[:CHANGED_NOTICES]:
            await send(Reply(ReplyKind.INFO, notice, thread=thread))

    async def _add(
        self, event: Upload | Pin | Solved, size: int, name: str, send: Send, ingest: Callable[[Engine], SourceUpdate]
    ) -> None:
        """Stores a file, a pin or a solved post of ``size`` bytes (``name`` is how refusals call it) by calling
        ``ingest`` in a worker thread, once the limits allow it; otherwise says which limit refused."""
        key = event.channel
        refusal = await self._refusal(key, event.person, size, name)
        if refusal is not None:
            log.info("channel %s: %s by %s refused by a limit", key, type(event).__name__.lower(), event.person.id)
            await send(refusal)
            return
        stored = False
        try:
            update = await self._engine.run(ingest)
            stored = not update.result.duplicate
        finally:
            if not stored:  # only what is stored spends the channel's budget (not a duplicate, not a rejected file)
                await self._bytes.refund(key, size)
        self._scheduler.watch(key)
        await send(Reply(ReplyKind.INFO, _added_text(update)))
        await self._tell_changed_answers(update, send)

    async def _refusal(self, key: ChannelKey, person: Person, size: int, name: str) -> Reply | None:
        """None when a new source of ``size`` bytes may be added now (and it is counted against the
        rate limits); else the reply saying which limit refused it (and nothing is counted)."""
        caps = self._config.bot.limits_for(str(key))
        max_stored = megabytes_to_bytes(caps.max_stored_mb_per_channel)
        if caps.max_sources_per_channel or max_stored:
            sources = await self._engine.sources(key)
            if caps.max_sources_per_channel and len(sources) >= caps.max_sources_per_channel:
                return Reply(ReplyKind.ERROR, replies.source_cap_text(name, caps.max_sources_per_channel))
            held = sum(source.chars for source in sources)
            if max_stored and held + size > max_stored:
                return Reply(ReplyKind.ERROR, replies.stored_cap_text(name, size, held, max_stored))
        return await self._rate_refusal(key, person, size, name)

    async def _rate_refusal(self, key: ChannelKey, person: Person, size: int, name: str) -> Reply | None:
        """None when ``person`` may add ``size`` bytes to the channel now (counted against their
        uploads allowance and the channel's byte budget); else the private reply saying which
        refused it (and nothing is counted)."""
        limits = self._config.bot.rate_limits_for(str(key))
        mine = person_in_workspace(key, person.id)
        # The channel's admins are trusted with many uploads; the channel's byte budget still holds for them.
        per_person = 0 if commands.may_manage(person, key, self._config.bot) else limits.uploads_per_user_per_hour
        wait = await self._per_person.try_acquire(mine, limit=per_person)
        if wait > 0:
            text = replies.upload_limit_text(name, limits.uploads_per_user_per_hour, wait)
            return Reply(ReplyKind.INFO, text, private=True)
        budget = megabytes_to_bytes(limits.upload_mb_per_channel_per_day)
        wait = await self._bytes.try_acquire(key, size, limit=budget)
        if wait > 0:
            await self._per_person.refund(mine)  # refused: it is not one of their uploads of the hour
            return Reply(ReplyKind.INFO, replies.upload_budget_text(name, size, budget, wait), private=True)
        return None

    async def unpin(self, unpin: Unpin, send: Send) -> None:
        """Says what becomes of the sources an unpinned message became, and removes them when allowed."""
        key = unpin.channel
        removes = self._config.bot.unpin_removes_source
        sources = await self._engine.run(lambda engine: pinned_sources(engine, key, unpin.external_id))
        if not removes or not sources:
            await send(Reply(ReplyKind.INFO, replies.unpinned_text(sources, removes)))
            return
        allowed = [
            s for s in sources if commands.may_remove_pin(unpin.person, adder_id(s.added_by), key, self._config.bot)
        ]
        kept = [s for s in sources if s not in allowed]
        for source in allowed:
            await self._engine.forget(key, source.id)
        if allowed:
            self._scheduler.watch(key)
        if kept:
            log.info("channel %s: unpin of %s by %s left %d source(s): not an admin nor the pinner",
                     key, unpin.external_id, unpin.person.id, len(kept))
        texts = ([replies.unpinned_text(allowed, removes)] if allowed else []) + (
            [replies.unpin_kept_text(kept)] if kept else []
        )
        await send(Reply(ReplyKind.INFO, "\n".join(texts)))


def _added_text(update: SourceUpdate) -> str:
    """What storing a file or pin did: added it, or replaced earlier files of its name."""
    if not update.replaced:
        return replies.added_text(update.result)
    return replies.replaced_text(update.result, len(update.replaced), len(update.changed_answers))


def megabytes_to_bytes(mb: float) -> int:
    """A size in MB of the configuration (binary, as ``files.max_mb``) in bytes; 0 stays 0 (no limit)."""
    return int(mb * replies.MEGABYTE)
