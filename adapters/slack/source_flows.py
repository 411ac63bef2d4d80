"""Sources from Slack: shared files, pinned and unpinned messages, edited messages, and
pinned threads that grow.

Contract: a shared file arrives twice (its message and ``file_shared``), possibly at two
replicas, and is taken in once (``slack:file:<channel>:<file id>`` in the bot's delivery
ledger); a download that fails is reported to the person under a reference. A pinned
message becomes a source with its permalink, a pinned thread's root with its replies. An
edited message is handed over for its source, if it is one, to take the new text; an
edited reply, any new reply (:func:`thread_grew`) and a deleted one (:func:`reply_deleted`)
reach their thread's pinned source quietly. Notes go in a thread under the message, so the channel stays quiet.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from adapters.slack import translate, web as slack_web
from adapters.slack.core import HandlingCore
from adapters.slack.downloads import DownloadError
from adapters.slack.outbox import Target
from adapters.slack.translate import FileNotice, Origin, Pinned, SlackFile, Unpinned
from bot.errors import BotError, new_reference
from bot.neutral import Person, Reply, ReplyKind

log = logging.getLogger(__name__)


async def thread_grew(core: HandlingCore, reply: Origin, messages: list[dict[str, Any]]) -> None:
    """A reply was added to a thread: if the thread's root is a pinned source, the source
    takes the thread as it is now, replies included, quietly (see ``Pin.grew``)."""
    root_ts = reply.thread_ts
    root = next((m for m in messages if m.get("ts") == root_ts), None)
    if root is None:
        return
    origin = Origin(reply.team, reply.channel, reply.user, root_ts, root_ts)
    target = Target(reply.channel, reply.user, thread=root_ts)
    async with core.reporting(target, "a reply in a pinned thread"):
        text, thread_replies = translate.pinned_thread(messages, root_ts, core.identity)
        author = str(root.get("user") or "")
        person = await core.people.get(reply.user)
        label = (await core.people.get(author)).label if author else ""
        pinned = Pinned(origin, text=text, author=author, edited=True)
        grown = replace(translate.pin(pinned, person, text, "", label, thread_replies), grew=True)
        await core.handle(grown, target)


async def reply_deleted(core: HandlingCore, reply: Origin) -> None:
    """A reply of a thread was deleted: if the thread's root is a pinned source, the source
    takes the thread as it is now, without it (see :func:`thread_grew`)."""
    try:
        messages = await slack_web.thread_messages(core.client, reply.channel, reply.thread_ts)
    except slack_web.TRANSPORT_ERRORS as exc:
        log.warning("reading thread %s in %s after a deleted reply failed (%s): its source, if pinned, "
                    "keeps the reply until the thread changes again", reply.thread_ts, reply.channel,
                    slack_web.error_code(exc))
        return
    await thread_grew(core, reply, messages)


async def files_shared(core: HandlingCore, origin: Origin, files: tuple[SlackFile, ...]) -> None:
    """Files shared in a message: each taken in once, whatever replica or event brings it."""
    fresh = [f for f in files if await _first_sight(core, origin.channel, f.id)]
    if not fresh:
        return
    # Notes go in a thread under the file's message, so sharing stays quiet in the channel.
    target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
    async with core.reporting(target, "a shared file"):
        person = await core.people.get(origin.user)
        for file in fresh:
            await _upload(core, origin, person, file, target)


async def file_noticed(core: HandlingCore, notice: FileNotice) -> None:
    """A ``file_shared`` event: the file, described by ``files.info``, unless its message brought it."""
    origin = notice.origin
    if not await _first_sight(core, origin.channel, notice.file_id):
        return  # its message (subtype file_share) brought it already, here or on another replica
    target = Target(origin.channel, origin.user)
    async with core.reporting(target, "a shared file"):
        file = await slack_web.file_info(core.client, notice.file_id)
        if file is None:
            raise BotError(f"files.info gave no file for {notice.file_id}")
        person = await core.people.get(origin.user)
        await _upload(core, origin, person, file, target)


async def _first_sight(core: HandlingCore, channel: str, file_id: str) -> bool:
    """True the first time any replica takes the file shared in ``channel``: it arrives
    twice (its message and ``file_shared``), possibly at two replicas."""
    return await core.bot.first_delivery(f"slack:file:{channel}:{file_id}")


async def _upload(core: HandlingCore, origin: Origin, person: Person, file: SlackFile, target: Target) -> None:
    """Downloads ``file`` and hands it over as an upload, the working reaction on its message
    meanwhile; a failed download is reported to the person under a reference."""
    async with core.working(origin.channel, origin.ts):
        try:
            data = await core.downloader.fetch(file)
        except DownloadError as exc:
            reference = new_reference()
            log.warning("downloading file %s (%s) in %s failed: %s (reference %s)",
                        file.id, file.filename, origin.channel, exc.detail, reference)
            text = translate.download_failure_text(file.filename, exc.problem, reference)
            await core.outbox.deliver(target, Reply(ReplyKind.ERROR, text, reference=reference))
            return
        upload = translate.upload(origin, person, file, data)
        await core.handle(upload, target)


async def pin_added(core: HandlingCore, pinned: Pinned) -> None:
    """A pinned message (a thread's root with its replies), or an edited message."""
    if pinned.edited:
        await _edited(core, pinned)
        return
    origin = pinned.origin
    target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
    async with core.reporting(target, "a pinned message"):
        person = await core.people.get(origin.user)
        text, thread_replies = await _pinned_text(core, pinned)
        author = (await core.people.get(pinned.author)).label if pinned.author else ""
        link = pinned.permalink or await slack_web.permalink(core.client, origin.channel, origin.ts)
        pin = translate.pin(pinned, person, text, link, author, thread_replies)
        await core.handle(pin, target, origin.ts)


async def _edited(core: HandlingCore, pinned: Pinned) -> None:
    """An edited message, for the handler to update its source if it is one. No working
    reaction (most edited messages are no source); a thread's root is read again with its
    replies, as when it was pinned; its link stays the source's own. An edited reply
    also changes its thread: a pinned thread's source takes it (see :func:`thread_grew`)."""
    origin = pinned.origin
    target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
    async with core.reporting(target, "an edited message"):
        person = await core.people.get(origin.user)
        text, thread_replies = await _pinned_text(core, pinned) if origin.thread_ts else (pinned.text, ())
        pin = translate.pin(pinned, person, text, "", person.label, thread_replies)
        await core.handle(pin, target)
    if pinned.is_reply:
        try:
            messages = await slack_web.thread_messages(core.client, origin.channel, origin.thread_ts)
        except slack_web.TRANSPORT_ERRORS as exc:
            log.warning("reading thread %s in %s after an edited reply failed (%s): its source, if pinned, "
                        "keeps the earlier text", origin.thread_ts, origin.channel, slack_web.error_code(exc))
            return
        await thread_grew(core, origin, messages)


async def _pinned_text(core: HandlingCore, pinned: Pinned) -> tuple[str, tuple[str, ...]]:
    """The pinned message's text and, for a thread's root, its replies (read from Slack:
    the event carries neither the replies nor, always, the text)."""
    origin = pinned.origin
    root = origin.thread_ts if pinned.is_reply else origin.ts
    if pinned.is_reply and pinned.text:
        return pinned.text, ()
    messages = await slack_web.thread_messages(core.client, origin.channel, root)
    if pinned.is_reply:
        found = [m for m in messages if m.get("ts") == origin.ts]
        return (translate.plain_text(str(found[0].get("text") or ""), core.identity.user_id) if found else ""), ()
    text, thread = translate.pinned_thread(messages, origin.ts, core.identity)
    return text or pinned.text, thread


async def pin_removed(core: HandlingCore, unpinned: Unpinned) -> None:
    """An unpinned message, for the handler to say (or do) what becomes of its source."""
    origin = unpinned.origin
    target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
    async with core.reporting(target, "an unpinned message"):
        person = await core.people.get(origin.user)
        await core.handle(translate.unpin(unpinned, person), target)
