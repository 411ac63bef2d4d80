"""What the bot says, as pure functions: engine results in, neutral replies and short texts out.

Nothing here calls the engine or a platform; every function is a value
transformation, so every message a person can see is written (and tested) in
one place. Texts are plain: adapters may add their platform's formatting.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from bot.chat import CitationKind, CitationView, Reply, ReplyKind
from bot.commands import COMMANDS
from bot.errors import explain
from bot.ingestion import adder_id, adder_name
from bot.schedule_status import ScheduleStatus
from raptor_engine.answering import quote
from raptor_engine.errors import DocumentRejected
from raptor_engine.loaders import SUPPORTED_SUFFIXES
from raptor_engine.tree import BuildProgress
from raptor_engine.types import (
    Answer,
    BuildReport,
    Citation,
    Node,
    NodeView,
    Source,
    TreeStats,
)

if TYPE_CHECKING:
    from raptor_engine.engine import IngestResult

log = logging.getLogger(__name__)

FILE_TYPES = ", ".join(SUPPORTED_SUFFIXES)
"""The file types the bot reads, for help texts: ``.txt, .md, .pdf, .html, .htm, .docx``."""

SHORT_ID = 10  # characters of a source id shown to people; enough to forget it by
MEGABYTE = 1024 * 1024  # as files.max_mb
NO_MATERIAL = (
    "This channel has no material yet: upload a file or pin a message, then ask again."
)
REBUILD_STARTED = (
    "Rebuild started. Questions are still answered from the current tree meanwhile; I'll say when it is done."
)
EMPTY_QUESTION = "Ask me a question about this channel's material, or type help for the commands."


# -- answers -----------------------------------------------------------------


def citation_view(citation: Citation) -> CitationView:
    """The neutral view of one citation: an excerpt (a leaf) or a summary (layer 1 and up)."""
    kind = CitationKind.EXCERPT if citation.layer == 0 else CitationKind.SUMMARY
    return CitationView(
        number=citation.number,
        kind=kind,
        layer=citation.layer,
        node_id=citation.node_id,
        title=citation.title,
        link=citation.link,
        quote=citation.quote,
    )


def answer_reply(answer: Answer, thread: str = "", answer_id: str = "") -> Reply:
    """The answer with its numbered citations, in the question's thread; the answer's warning is kept."""
    return Reply(
        ReplyKind.ANSWER,
        answer.text,
        citations=tuple(citation_view(c) for c in answer.citations),
        warning=answer.warning,
        thread=thread,
        answer_id=answer_id,
    )


# -- status ------------------------------------------------------------------


def status_text(stats: TreeStats, schedule: ScheduleStatus) -> str:
    """The channel's state in a few lines: sources, tree version and when it was built,
    nodes per layer, whether changes wait for a rebuild, and the rebuild schedule."""
    sources = _count(stats.sources, "source")
    if stats.version == 0:
        lines = [f"No tree built yet; {sources} in this channel."]
        if stats.sources:
            lines.append("Their excerpts can be asked about already; a rebuild adds the summaries.")
    else:
        lines = [
            f"{sources} in this channel; tree v{stats.version} built {when(stats.built_at)}.",
            "Nodes: " + layers_text(stats.nodes_per_layer) + ".",
        ]
        if stats.pending_sources:
            lines.append(
                f"{_count(stats.pending_sources, 'source')} added or removed since; "
                "the next rebuild brings the summaries up to date."
            )
        else:
            lines.append("Up to date with its sources.")
    lines.append(_schedule_line(schedule))
    return "\n".join(lines)


def layers_text(nodes_per_layer: dict[int, int]) -> str:
    """``15 excerpts (layer 0), 3 summaries (layer 1), 1 summary (layer 2)``."""
    parts = []
    for layer, count in sorted(nodes_per_layer.items()):
        noun = _count(count, "excerpt") if layer == 0 else _count(count, "summary", "summaries")
        parts.append(f"{noun} (layer {layer})")
    return ", ".join(parts) or "none"


def _schedule_line(schedule: ScheduleStatus) -> str:
    if schedule.running:
        return "A rebuild is running now" + (", and another is queued." if schedule.queued else ".")
    if schedule.queued:
        return "A rebuild is queued."
    if schedule.next_run is None:
        return "No rebuild is scheduled."
    return f"Next scheduled rebuild (if anything changed): {when(schedule.next_run)}."


# -- sources and nodes -------------------------------------------------------


def sources_text(sources: Sequence[Source]) -> str:
    """One line per source: short id, title, kind, who added it and when, size."""
    if not sources:
        return "No sources yet: upload a file or pin a message to add one."
    lines = [f"{_count(len(sources), 'source')}:"]
    for source in sources:
        by = f" by {adder_name(source.added_by)}" if source.added_by else ""
        on = f" on {when(source.added_at)}" if source.added_at else ""
        lines.append(
            f"{source.id[:SHORT_ID]}  “{source.title}” · {source.kind.value} · "
            f"added{by}{on} · {source.chars:,} characters"
        )
    return "\n".join(lines)


def node_text(view: NodeView) -> str:
    """A node's full text, where it comes from, then its parents and children one line
    each, so a cited summary can be opened down to its excerpts."""
    node = view.node
    lines = [f"{_node_kind(node)} {node.id} · {node.tokens} tokens · from “{node.title}”"]
    if node.link:
        lines.append(f"Link: {node.link}")
    lines += ["", node.text]
    for label, nodes in (("Summarised in", view.parents), ("Summarises", view.children)):
        if nodes:
            lines += ["", f"{label} ({len(nodes)}):"]
            lines += [f"  {n.id} · {_node_kind(n).lower()} · {quote(n.text, 100)}" for n in nodes]
    if view.children or view.parents:
        lines += ["", "Open any of them with: node ID"]
    return "\n".join(lines)


def _node_kind(node: Node) -> str:
    return "Excerpt" if node.layer == 0 else f"Summary (layer {node.layer})"


# -- sources added and removed -------------------------------------------------


def added_text(result: IngestResult) -> str:
    """What an upload or a pin did: a new source, or one that was already there."""
    title = result.source.title
    if result.duplicate:
        return f"“{title}” is already in this channel; nothing new was added."
    return (
        f"Added “{title}” ({_count(result.leaves, 'excerpt')}). "
        "You can ask about it now; its summaries come with the next rebuild."
    )


def forgot_text(source: Source) -> str:
    return f"Forgot “{source.title}” ({source.id[:SHORT_ID]}) and everything built from it."


def unpinned_text(sources: Sequence[Source], removes: bool) -> str:
    """The reply to an unpin: the sources removed, kept (when unpins do not remove), or none matched."""
    if not sources:
        return "That message was not one of this channel's sources, so there was nothing to remove."
    titles = ", ".join(f"“{s.title}”" for s in sources)
    if removes:
        return f"Removed {titles} and everything built from it, since it was unpinned."
    return (
        f"{titles} stays a source of this channel (unpinning does not remove sources here); "
        f"to remove it, use forget {sources[0].id[:SHORT_ID]}."
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


# -- commands, limits, errors --------------------------------------------------


def rebuild_failed_text(reference: str) -> str:
    """A rebuild failed for a reason nobody could foresee (a bug): the log holds ``reference``."""
    return f"The rebuild failed unexpectedly; the previous tree still answers (reference {reference})."


def progress_text(event: BuildProgress) -> str:
    """One line saying where a build is, e.g. ``Rebuilding: 40 of 120 summaries (layer 1)…``."""
    if event.stage == "embed":
        return f"Rebuilding: embedded {event.done:,} of {_count(event.total, 'excerpt')}…"
    if event.stage == "subtrees":
        built = f"Rebuilding: {event.done:,} of {_count(event.total, 'source tree')} built"
        if event.summaries:
            return f"{built}, {_count(event.summaries, 'summary', 'summaries')} written…"
        return f"{built}…"
    if event.stage == "cluster":
        return f"Rebuilding: clustering layer {event.layer}…"
    if event.stage == "summarise":
        return f"Rebuilding: {event.done:,} of {_count(event.total, 'summary', 'summaries')} (layer {event.layer})…"
    return f"Rebuilding: {event.stage}…"


def report_sentence(report: BuildReport) -> str:
    """The build report in one sentence, e.g. "Rebuilt: tree v3 from 15 sources, 1,152 nodes in
    6 layers (977 excerpts); 12 summaries written, 160 reused; 4 language-model calls, 3,100 tokens;
    18.9 s." The model part is left out when no model was called."""
    nodes = _count(sum(report.nodes_per_layer.values()), "node")
    layers = _count(len(report.nodes_per_layer), "layer")
    tree = f"Rebuilt: tree v{report.version} from {_count(report.sources, 'source')}, {nodes} in {layers}"
    summaries = _count(report.summaries_made, "summary", "summaries")
    parts = [
        f"{tree} ({_count(report.leaves, 'excerpt')})",
        f"{summaries} written, {report.summaries_reused:,} reused",
    ]
    if report.model_calls:
        tokens = report.prompt_tokens + report.completion_tokens
        parts.append(f"{_count(report.model_calls, 'language-model call')}, {_count(tokens, 'token')}")
    parts.append(f"{report.wall_seconds:.1f} s.")
    return "; ".join(parts)


def vote_text(up: bool, ups: int, downs: int) -> str:
    """Thanks for a vote, with the answer's tally."""
    return f"Thanks, your {'👍' if up else '👎'} is recorded (this answer: {ups} 👍, {downs} 👎)."


def help_text(unknown: str = "") -> str:
    """The commands, one line each; with ``unknown``, a first sentence naming the word not understood."""
    lines = []
    if unknown:
        lines.append(f"I don't know the command “{unknown}”. These are the ones I know:")
    else:
        lines.append("Ask me anything about the files and pinned messages of this channel. Commands:")
    width = max(len(spec.usage) for spec in COMMANDS.values())
    for spec in COMMANDS.values():
        note = " (channel admins only)" if spec.admin_only else ""
        lines.append(f"  {spec.usage.ljust(width)}  {spec.help}{note}")
    return "\n".join(lines)


def usage_text(name: str) -> str:
    """The reply to a command missing its argument."""
    spec = COMMANDS[name]
    return f"Usage: {spec.usage} ({spec.help})."


def refusal_text(name: str) -> str:
    """The reply to an admin-only command from someone who is not an admin here."""
    what = {"rebuild": "rebuild this channel's tree", "forget": "forget a source"}.get(name, f"run {name}")
    return f"Only this channel's admins can {what}; please ask one of them."


def question_limit_text(limit: int, wait_s: float) -> str:
    return (
        f"You have asked {_count(limit, 'question')} in the last minute, the most allowed; "
        f"please ask again {in_time(wait_s)}."
    )


def rebuild_limit_text(limit: int, wait_s: float) -> str:
    return (
        f"This channel has asked for {_count(limit, 'rebuild')} in the last hour, the most allowed; "
        f"you can ask again {in_time(wait_s)}."
    )


def upload_limit_text(name: str, limit: int, wait_s: float) -> str:
    """An upload or pin refused because its sender reached ``bot.rate_limits.uploads_per_user_per_hour``."""
    return (
        f"I did not add “{name}”: you have added {_count(limit, 'file or pin', 'files and pins')} "
        f"in the last hour, the most allowed. Please try again {in_time(wait_s)}."
    )


def upload_budget_text(name: str, size: int, budget: int, wait_s: float) -> str:
    """An upload or pin of ``size`` bytes refused by the channel's daily byte ``budget``
    (``bot.rate_limits.upload_mb_per_channel_per_day``); ``wait_s`` is infinite when it
    alone is larger than the budget."""
    if math.isinf(wait_s):
        return (
            f"I did not add “{name}”: at {megabytes(size)} it is more than this channel "
            f"may take in per day ({megabytes(budget)})."
        )
    return (
        f"I did not add “{name}” ({megabytes(size)}): this channel may take in {megabytes(budget)} "
        f"of files and pins per day, and that is used up. Please try again {in_time(wait_s)}."
    )


def source_cap_text(name: str, limit: int) -> str:
    """An upload or pin refused because the channel holds ``bot.limits.max_sources_per_channel`` sources."""
    return (
        f"I did not add “{name}”: this channel already holds {_count(limit, 'source')}, the most allowed. "
        "An admin can forget one to make room."
    )


def stored_cap_text(name: str, size: int, held: int, cap: int) -> str:
    """An upload or pin refused because the channel's sources would pass ``bot.limits.max_stored_mb_per_channel``."""
    return (
        f"I did not add “{name}” ({megabytes(size)}): this channel holds {megabytes(held)} of sources "
        f"and may hold at most {megabytes(cap)}. An admin can forget a source to make room."
    )


def error_text(error: Exception) -> str:
    """A known error's message as a sentence (they are written for people already;
    :func:`bot.errors.explain` adds the configuration key to change where one applies)."""
    if isinstance(error, DocumentRejected):
        return rejected_text(error)
    message = explain(error).strip() or type(error).__name__
    return message[0].upper() + message[1:]


def unexpected_text(reference: str) -> str:
    return (
        "Something went wrong on my side and I could not finish that. "
        f"Please try again; if it keeps happening, tell the bot's operator (reference {reference})."
    )


# -- small formatting helpers ----------------------------------------------------


def in_time(seconds: float) -> str:
    """``in 42 seconds``, ``in 3 minutes``, ``in 2 hours`` (rounded up: never too early)."""
    seconds = max(1, math.ceil(seconds))
    if seconds < 90:
        return f"in {_count(seconds, 'second')}"
    minutes = math.ceil(seconds / 60)
    if minutes < 90:
        return f"in {_count(minutes, 'minute')}"
    return f"in {_count(math.ceil(minutes / 60), 'hour')}"


def megabytes(size: int) -> str:
    """``100 MB``, ``2.5 MB``, ``12 KB``, ``1.2 KB`` (binary units, as ``files.max_mb``)."""
    value, unit = (size / MEGABYTE, "MB") if size >= MEGABYTE // 10 else (size / 1024, "KB")
    shown = f"{value:,.0f}" if value >= 10 else f"{value:.1f}".removesuffix(".0")
    return f"{shown} {unit}"


def when(moment: str | datetime) -> str:
    """An ISO-8601 string or a datetime as ``2024-05-01 14:03 UTC``; an unparsable string as is."""
    if isinstance(moment, str):
        if not moment:
            return "at an unknown time"
        try:
            parsed = datetime.fromisoformat(moment)
        except ValueError:
            return moment
        return when(parsed)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
