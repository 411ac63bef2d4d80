"""Answers to how a request was made: help, usage, refusals, rate limits, caps and errors."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bot.commands import COMMANDS
from bot.errors import explain, names_servers
from bot.texts.sources import rejected_text
from bot.texts.words import capitalised, count, in_time, megabytes
from raptor_engine import (
    DocumentRejected,
    ModelBadResponse,
    ModelRequestRejected,
    ModelTimeout,
    ModelUnavailable,
    StoreError,
    StoreTimeout,
    StoreUnavailable,
)


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


# -- rate limits and caps ------------------------------------------------------------

SHARED_CHANNEL = ("I don't answer in channels shared with other organisations: what I know here would be "
                  "shown to people outside this workspace. Ask me in one of its own channels.")
"""The one line a question or command gets in a channel shared with other organisations,
while ``slack.shared_channels`` is ``refuse``."""



def question_limit_text(limit: int, wait_s: float) -> str:
    """A question refused by ``bot.rate_limits.questions_per_user_per_minute``."""
    return (
        f"You have asked {count(limit, 'question')} in the last minute, the most allowed; "
        f"please ask again {in_time(wait_s)}."
    )


def model_budget_text(which: str, limit: int, wait_s: float) -> str:
    """Model work refused because the workspace used up ``bot.model_budget`` today: ``which``
    ceiling (``calls`` or ``tokens``) of ``limit``; a new day starts in ``wait_s`` seconds."""
    spent = count(limit, "language-model call") if which == "calls" else f"{limit:,} language-model tokens"
    return (
        f"This workspace has used its {spent} for today (UTC), the most allowed; "
        f"I can answer again after midnight UTC, {in_time(wait_s)}."
    )


def rebuild_limit_text(limit: int, wait_s: float) -> str:
    """A rebuild refused by ``bot.rate_limits.rebuilds_per_channel_per_hour``."""
    return (
        f"This channel has asked for {count(limit, 'rebuild')} in the last hour, the most allowed; "
        f"you can ask again {in_time(wait_s)}."
    )


def upload_limit_text(name: str, limit: int, wait_s: float) -> str:
    """An upload or pin refused because its sender reached ``bot.rate_limits.uploads_per_user_per_hour``."""
    return (
        f"I did not add “{name}”: you have added {count(limit, 'file or pin', 'files and pins')} "
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
        f"I did not add “{name}”: this channel already holds {count(limit, 'source')}, the most allowed. "
        "An admin can forget one to make room."
    )


def stored_cap_text(name: str, size: int, held: int, cap: int) -> str:
    """An upload or pin refused because the channel's sources would pass ``bot.limits.max_stored_mb_per_channel``."""
    return (
        f"I did not add “{name}” ({megabytes(size)}): this channel holds {megabytes(held)} of sources "
        f"and may hold at most {megabytes(cap)}. An admin can forget a source to make room."
    )


# -- errors --------------------------------------------------------------------------


def error_text(error: Exception, reference: str = "") -> str:
    """A known error's message as a sentence (they are written for people already;
    :func:`bot.errors.explain` adds the configuration key to change where one applies).
    A failure of the bot's own servers (:func:`bot.errors.names_servers`) is told by its
    kind alone, never by its message, which names the server; ``reference`` ties it to
    the log line that has the message."""
    if isinstance(error, DocumentRejected):
        return rejected_text(error)
    if names_servers(error):
        return server_failure_text(error, reference)
    return capitalised(explain(error).strip() or type(error).__name__)


def server_failure_text(error: Exception, reference: str) -> str:
    """A failure of the language model or of the document store, said without naming where
    either runs (a host, a URL, a port): the person cannot act on it, and the operator
    finds it in the log under ``reference``."""
    return (f"{_failed_server(error)}, so I could not finish that. Please try again later; if it keeps "
            f"happening, tell the bot's operator (reference {reference or '-'}).")


def _failed_server(error: Exception) -> str:
    """What failed, from the error's kind and the fields that name no place."""
    if isinstance(error, ModelTimeout):
        return "The language model did not answer in time"
    if isinstance(error, ModelUnavailable):
        return f"The language model failed (HTTP {error.status})" if error.status else \
            "The language model could not be reached"
    if isinstance(error, ModelRequestRejected):
        status = f" (HTTP {error.status})" if error.status else ""
        return f"The language model refused the request{status}"
    if isinstance(error, ModelBadResponse):
        return "The language model gave an unusable response"
    if isinstance(error, StoreTimeout):
        return "The document store (Chroma) did not answer in time"
    if isinstance(error, StoreUnavailable):
        return "The document store (Chroma) cannot be reached just now"
    if isinstance(error, StoreError):
        return "The document store (Chroma) failed"
    return "The embedding or language model failed"


def unexpected_text(reference: str) -> str:
    """Something failed for a reason nobody could foresee; the log holds ``reference``."""
    return (
        "Something went wrong on my side and I could not finish that. "
        f"Please try again; if it keeps happening, tell the bot's operator (reference {reference})."
    )


# -- the command line's questions about a channel with nothing to search -------------------

KNOWN_CHANNELS_SHOWN = 5  # known channels named when a question names an unknown one, at most


def unknown_channel_text(name: str, known: Sequence[str], shown: int = KNOWN_CHANNELS_SHOWN) -> str:
    """The command line's one line for a question about ``name``, a channel the store does not
    know: never used (a typo, or another data directory), or dropped when its last source was
    forgotten. Names the first ``shown`` of the ``known`` channels as ``--channel`` takes them,
    or, when there is none, how to add a file."""
    unknown = f"no channel {name!r} is known here (it never held a source, or its last one was forgotten)"
    if not known:
        return f"{unknown}, nor any other: add a file (python -m bot ingest --channel {name} FILE), then ask again"
    listed = ", ".join(known[:shown]) + (f" and {count(len(known) - shown, 'other')}" if len(known) > shown else "")
    return f"{unknown}; the known ones: {listed}"


def empty_channel_text(name: str, pins: bool) -> str:
    """The command line's one line for a question about ``name``, a known channel holding no
    source (none added yet, or all forgotten): nothing was searched; what to add. ``pins``:
    the channel is a chat channel, where a pinned message becomes a source too."""
    pin = " or pin a message in it" if pins else ""
    return (f"the channel {name!r} has no material yet: add a file (python -m bot ingest --channel {name} FILE)"
            f"{pin}, then ask again")
