"""Sources: listed, added (from chat or the command line), refused, and removed.

A source is named to people by its title in quotes and, where they may need to
type it, its :func:`~bot.texts.words.short_id`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bot.ingestion import adder_id, adder_name
from bot.neutral import SourceView
from bot.texts.words import count, megabytes, short_id, when
from raptor_engine import SUPPORTED_SUFFIXES, DocumentRejected, Source

if TYPE_CHECKING:
    from raptor_engine import IngestResult

FILE_TYPES = ", ".join(SUPPORTED_SUFFIXES)
"""The file types the bot reads, for help texts: ``.txt, .md, .pdf, .html, .htm, .docx``."""


def sources_text(sources: Sequence[Source]) -> str:
    """A count, then one line per source: short id, title, kind, who added it and when, size."""
    if not sources:
        return "No sources yet: upload a file or pin a message to add one."
    lines = [f"{count(len(sources), 'source')}:"]
    for source in sources:
        by = f" by {adder_name(source.added_by)}" if source.added_by else ""
        on = f" on {when(source.added_at)}" if source.added_at else ""
        lines.append(
            f"{short_id(source.id)}  “{source.title}” · {source.kind.value} · "
            f"added{by}{on} · {count(source.chars, 'character')}"
        )
    return "\n".join(lines)


def source_choice_text(source: Source | SourceView, limit: int) -> str:
    """A source as a pick-list entry of at most ``limit`` characters: ``Title · SHORT-ID``,
    the title cut with "…" when the whole would be longer (the short id is never cut)."""
    tail = f" · {short_id(source.id)}"
    if len(source.title) + len(tail) <= limit:
        return source.title + tail
    return f"{source.title[: max(0, limit - len(tail) - 1)]}…{tail}"


def added_text(result: IngestResult) -> str:
    """What an upload or a pin did: a new source, or one that was already there."""
    title = result.source.title
    if result.duplicate:
        return f"“{title}” is already in this channel; nothing new was added."
    return (
        f"Added “{title}” ({count(result.leaves, 'excerpt')}). "
        "You can ask about it now; its summaries come with the next rebuild."
    )


def updated_text(result: IngestResult, changed_answers: int = 0) -> str:
    """What an edit of a pinned message, or a reply added to a pinned thread, did to its source,
    and how many answers given before cite its earlier text."""
    return (
        f"Updated “{result.source.title}”: it changed since it was pinned, and the new text "
        f"({count(result.leaves, 'excerpt')}) answers from now on; its summaries follow with the next rebuild."
        + _changed_answers_text(changed_answers)
    )


def replaced_text(result: IngestResult, replaced: int, changed_answers: int = 0) -> str:
    """What a file uploaded again under a name the channel holds did: it replaced the earlier file."""
    earlier = "the earlier file" if replaced == 1 else f"{replaced} earlier files"
    return (
        f"Replaced {earlier} named “{result.source.file_name}” with this one, “{result.source.title}” "
        f"({count(result.leaves, 'excerpt')}): it answers from now on; its summaries follow with the next rebuild."
        + _changed_answers_text(changed_answers)
    )


def _changed_answers_text(changed_answers: int) -> str:
    if not changed_answers:
        return ""
    return (f" {count(changed_answers, 'answer')} given before cited the earlier text: "
            "each now says it cites material that changed after it was given.")


def ingested_text(path: Path, result: IngestResult) -> str:
    """The command line's line per file ingested: ``notes.md: stored (12 excerpts) as ID “Title”``."""
    verb = "already stored" if result.duplicate else f"stored ({count(result.leaves, 'excerpt')})"
    return f"{path}: {verb} as {short_id(result.source.id)} “{result.source.title}”"


def sample_text(result: IngestResult, channel: str) -> str:
    """The demo's first line: the bundled sample, in which channel, and its excerpts."""
    excerpts = count(result.leaves, "excerpt") if result.leaves else "already there"
    return f"Sample document “{result.source.title}” in channel '{channel}' ({excerpts})."


def forgot_text(source: Source) -> str:
    """A source forgotten, with the tree parts built from it."""
    return f"Forgot “{source.title}” ({short_id(source.id)}) and everything built from it."


def unpinned_text(sources: Sequence[Source], removes: bool) -> str:
    """The reply to an unpin: the sources removed, kept (when unpins do not remove), or none matched."""
    if not sources:
        return "That message was not one of this channel's sources, so there was nothing to remove."
    titles = ", ".join(f"“{s.title}”" for s in sources)
    if removes:
        return f"Removed {titles} and everything built from it, since it was unpinned."
    return (
        f"{titles} stays a source of this channel (unpinning does not remove sources here); "
        f"to remove it, use forget {short_id(sources[0].id)}."
    )


def unpin_kept_text(kept: Sequence[Source]) -> str:
    """The reply to an unpin by someone who may not remove what the pin became: each
    source stays, and the reply says who can remove it (the admins, and the person who
    added it, by name, when the source records their id)."""
    lines = []
    for source in kept:
        pinner = adder_name(source.added_by) if adder_id(source.added_by) else ""
        who = f"{pinner}, who added it, or this channel's admins" if pinner else "this channel's admins"
        lines.append(f"“{source.title}” stays a source of this channel: only {who} can remove it.")
    return "\n".join(lines)


def rejected_text(error: DocumentRejected) -> str:
    """Why a file was not added, for the person who sent it."""
    return _not_added(error.filename, error.detail)


def too_large_text(filename: str, size: int, limit: int) -> str:
    """A file over ``files.max_mb`` refused before it was downloaded (``size`` and ``limit``
    in bytes), worded as the engine's own refusal of a file it reads."""
    return _not_added(filename, f"the file is {megabytes(size)}, over the limit of {megabytes(limit)}")


def _not_added(filename: str, why: str) -> str:
    return f"I could not add “{filename}”: {why}. Nothing was stored."
