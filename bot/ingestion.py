"""Uploads and pins become sources: the translation of :class:`Upload` and :class:`Pin`
into engine calls and :class:`Document` values.

The functions that call the engine are blocking (they embed): the handler runs
them in a worker thread. A pinned thread (a pin with replies) becomes ONE
source of kind ``THREAD``: the root and its replies joined as one text, so its
excerpts keep the conversation's order.

Who added a source is stored in its ``added_by`` as the person's name *and*
platform id (:func:`added_by`): names are shown to people, but only the id
says who may remove a pin again (a display name can be shared or changed).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bot.errors import BotError
from bot.neutral import Person, Pin, Upload
from raptor_engine import AnswerRecord, ChannelKey, Document, Source, SourceKind

if TYPE_CHECKING:
    from raptor_engine import Engine, IngestResult

log = logging.getLogger(__name__)

TITLE_WORDS = 8  # a pin's title is its first words...
TITLE_CHARS = 60  # ...cut to at most this many characters
MIN_ID_PREFIX = 6  # as Engine.find_source: shorter prefixes match too much
_MESSAGE_KINDS = (SourceKind.MESSAGE, SourceKind.THREAD)  # what a pinned message's own text is stored as
_ADDED_BY = re.compile(r"(?P<name>.*?) ?\(id (?P<id>[^()]+)\)", re.DOTALL)


def ingest_upload(engine: Engine, upload: Upload, replace_same_name: bool = False) -> SourceUpdate:
    """Loads the uploaded file and stores it as a source of its channel (blocking); with
    ``replace_same_name``, the channel's earlier files of that name are then replaced by it
    (see :func:`replace_versions`): a file uploaded again with new content stands in for
    its old version.

    Raises ``DocumentRejected`` (with the reason, for the person) when the file
    cannot be used; nothing is stored then.
    """
    result = engine.ingest_bytes(
        upload.channel, upload.data, upload.filename, upload.link, added_by(upload.person), upload.external_id,
        size=upload.size,
    )
    name = result.source.file_name
    if not replace_same_name or not name:
        return SourceUpdate(result)
    earlier = [s for s in engine.sources(upload.channel) if s.kind is SourceKind.FILE and s.file_name == name]
    return replace_versions(engine, upload.channel, result, earlier)


def ingest_pin(engine: Engine, pin: Pin) -> IngestResult:
    """Stores a pinned message or thread as a source of its channel (blocking).
    Raises ``BotError`` when the pin holds no text at all."""
    return engine.ingest(pin.channel, pin_document(pin))


def pin_document(pin: Pin) -> Document:
    """The document a pin becomes: a MESSAGE, or a THREAD (root and replies as one text)
    when it has replies. ``added_at`` is left empty for the engine to stamp."""
    text = thread_text(pin.text, pin.replies)
    if not text.strip():
        raise BotError("That pinned message has no text, so there is nothing to add.")
    kind = SourceKind.THREAD if pin.replies else SourceKind.MESSAGE
    return Document(
        text=text,
        title=pin_title(pin.text or text, pin.author, kind),
        kind=kind,
        link=pin.link,
        added_by=added_by(pin.person),
        added_at="",
        external_id=pin.external_id,
    )


@dataclass(frozen=True, slots=True)
class SourceUpdate:
    """A source stored, and what it replaced: its earlier versions (none for a new source),
    and the kept answers that cited them (now marked as citing changed material)."""

    result: IngestResult
    replaced: tuple[Source, ...] = ()
    changed_answers: tuple[AnswerRecord, ...] = ()


def update_pin(engine: Engine, pin: Pin) -> SourceUpdate | None:
    """An edited message's new text in place of its source (blocking); None when the message
    is no source of its channel. The new text is stored first, under the same external id and
    still credited to whoever pinned it (who may unpin it stays the same) and linked as before
    when ``pin`` brings no link; then it replaces the earlier versions (see
    :func:`replace_versions`): if storing fails, the old text keeps answering. The same text
    again (an edit that changed nothing we keep, a link unfurled) is a ``duplicate`` and
    changes nothing; the message's files, sources of their own, stay as they are. Raises
    ``BotError`` when the message has no text any more."""
    # The message's files are sources under its external id too: they are not its text.
    earlier = [s for s in engine.sources(pin.channel, external_id=pin.external_id) if s.kind in _MESSAGE_KINDS]
    if not earlier:
        return None
    document = replace(pin_document(pin), added_by=earlier[-1].added_by, link=pin.link or earlier[-1].link)
    return replace_versions(engine, pin.channel, engine.ingest(pin.channel, document), earlier)


def replace_versions(engine: Engine, key: ChannelKey, result: IngestResult, earlier: Sequence[Source]) -> SourceUpdate:
    """Every source of ``earlier`` other than the newly stored one replaced by it (blocking; see
    ``Engine.replace_source``): forgotten, its answers passed on and marked changed."""
    replaced = [s for s in earlier if s.id != result.source.id]
    answers = [a for old in replaced for a in engine.replace_source(key, old.id, result.source.id)]
    return SourceUpdate(result, tuple(replaced), tuple(answers))


def ingest_replacing(engine: Engine, key: ChannelKey, document: Document) -> SourceUpdate:
    """Stores ``document`` as a source of ``key`` in place of the channel's earlier sources of
    its external id (blocking; see :func:`replace_versions`): stored first, so if that fails
    the earlier version keeps answering. The same text again is a ``duplicate`` that changes
    nothing."""
    earlier = engine.sources(key, external_id=document.external_id)
    return replace_versions(engine, key, engine.ingest(key, document), earlier)


CORRECTION_TITLE_CHARS = 80


def ingest_correction(engine: Engine, key: ChannelKey, record: AnswerRecord, correction: str,
                      person: Person) -> IngestResult:
    """A channel admin's right answer to a kept answer's question, stored as a source of kind
    CORRECTION (blocking): the question and the right answer as one text, so that the same
    question finds it, titled "Correction: <question>", under the external id
    ``correction:<answer id>`` (a later correction of the same answer is another source).
    Raises ``DocumentRejected`` for a text with nothing in it."""
    question = " ".join(record.question.split())
    title = question if len(question) <= CORRECTION_TITLE_CHARS else question[: CORRECTION_TITLE_CHARS - 1] + "…"
    text = f"Question: {question}\nAnswer: {correction.strip()}"
    document = Document(text, f"Correction: {title}", SourceKind.CORRECTION, "", added_by(person), "",
                        f"correction:{record.answer_id}")
    return engine.ingest(key, document)


def added_by(person: Person) -> str:
    """What a source stores as ``added_by``: the person's name with their platform id,
    ``Ana (id U0123)``, or ``(id U0123)`` for a person with no name. Pure."""
    return f"{person.name} (id {person.id})" if person.name else f"(id {person.id})"


def adder_id(stored: str) -> str:
    """The platform id in a stored ``added_by`` (see :func:`added_by`); empty when it holds
    none (sources stored before ids were kept hold a name only, which proves nothing)."""
    match = _ADDED_BY.fullmatch(stored)
    return match.group("id") if match else ""


def adder_name(stored: str) -> str:
    """The name to show for a stored ``added_by``: the person's name, else their id;
    an older ``added_by`` (a name only) as it is."""
    match = _ADDED_BY.fullmatch(stored)
    if match is None:
        return stored
    return match.group("name") or match.group("id")


def thread_text(root: str, replies: Sequence[str]) -> str:
    """The root message and its replies, in order, one paragraph each (blank ones dropped)."""
    return "\n\n".join(part.strip() for part in (root, *replies) if part.strip())


def pin_title(text: str, author: str = "", kind: SourceKind = SourceKind.MESSAGE) -> str:
    """A title from the first words of the text, with the author when known:
    ``Ana: Deploys are frozen on Fridays until the…`` or ``Thread by Ana: …``."""
    words = " ".join(text.split()[:TITLE_WORDS])
    shortened = len(text.split()) > TITLE_WORDS or len(words) > TITLE_CHARS
    if len(words) > TITLE_CHARS:
        words = words[:TITLE_CHARS].rsplit(" ", 1)[0] or words[:TITLE_CHARS]
    words += "…" if shortened else ""
    if kind is SourceKind.THREAD:
        return f"Thread by {author}: {words}" if author else f"Thread: {words}"
    return f"{author}: {words}" if author else words


def pinned_sources(engine: Engine, key: ChannelKey, reference: str) -> list[Source]:
    """The sources an unpin refers to (blocking); see :func:`match_pinned`."""
    return match_pinned(engine.sources(key), reference)


def match_pinned(sources: Sequence[Source], reference: str) -> list[Source]:
    """Every source whose external id equals ``reference`` (one message pinned, edited and
    pinned again is several sources of the same message); failing that, the one source
    whose id starts with it (the console unpins by source id). Empty when nothing, or
    several sources by id prefix, match. Pure."""
    reference = reference.strip()
    if not reference:
        return []
    matches = [s for s in sources if s.external_id == reference]
    if matches:
        return matches
    if len(reference) >= MIN_ID_PREFIX:
        by_id = [s for s in sources if s.id.startswith(reference.lower())]
        if len(by_id) == 1:
            return by_id
        if by_id:
            log.info("unpin %r matches %d sources by id prefix; none removed", reference, len(by_id))
    return []
