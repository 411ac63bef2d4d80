"""The neutral chat types: what arrives from a platform and what goes back.

Adapters translate their platform's payloads into these and render these
back; no platform payload crosses into ``bot/``. Every incoming event names
its channel (a :class:`ChannelKey`: platform, workspace, channel; the engine keys
its stores by the same value) and the person. Adapters import these from here,
never from the engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

from raptor_engine import ChannelKey as ChannelKey  # part of this module's surface


@dataclass(frozen=True, slots=True)
class Person:
    """Who sent an event. ``id`` is the platform's user id (stable; names are not).
    ``manages_channel`` is what the platform says: a Slack workspace admin or owner,
    a Discord member with Manage Messages in the channel (anyone, in a direct message),
    the person at the console. Configured admin ids add to it (``bot.commands.may_manage``)."""

    id: str
    name: str = ""
    manages_channel: bool = False

    @property
    def label(self) -> str:
        return self.name or self.id


@dataclass(frozen=True, slots=True)
class Question:
    """A question asked in a channel. ``thread`` is the platform's thread id (empty
    outside a thread); ``context`` holds earlier messages of that thread, oldest first,
    to make a follow-up question self-contained."""

    channel: ChannelKey
    person: Person
    text: str
    thread: str = ""
    context: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Command:
    """A command: ``name`` is one of :data:`bot.commands.COMMANDS` (or unknown: the
    handler answers with help), ``argument`` the rest of the line, stripped."""

    channel: ChannelKey
    person: Person
    name: str
    argument: str = ""
    thread: str = ""


@dataclass(frozen=True, slots=True)
class Upload:
    """A file shared in the channel. ``data`` is the file's bytes, already downloaded
    by the adapter; ``link`` points back to it (a permalink or a local path).
    ``size`` is the file's full size in bytes when the platform says it: adapters read
    at most one byte past the upload limit, so ``data`` alone may understate it."""

    channel: ChannelKey
    person: Person
    filename: str
    data: bytes
    link: str = ""
    external_id: str = ""
    size: int | None = None


@dataclass(frozen=True, slots=True)
class Pin:
    """A pinned message, or a pinned thread (``replies`` non-empty: root and replies
    become one source linked to the thread). ``external_id`` is the platform's id of
    the message, used again by :class:`Unpin`.

    ``edited``: the message was edited, and the platform does not say whether it is pinned.
    Its source, if it is one, takes the new text; a message that is no source is left alone
    and nothing is said (every edit in the channel arrives so).

    ``grew`` (with ``edited``): a reply was added to the thread the message starts. Its
    source takes the thread as it is now, quietly: a word from the bot for every reply in
    a pinned thread would be noise (answers citing it are still told).

    ``revision`` (with ``edited``): when the platform says the message was edited, in seconds
    since the epoch (0: it does not say). Edits of one message are applied in that order: one
    arriving after a newer one was applied is dropped."""

    channel: ChannelKey
    person: Person
    text: str
    external_id: str
    link: str = ""
    author: str = ""
    replies: tuple[str, ...] = ()
    edited: bool = False
    grew: bool = False
    revision: float = 0.0


@dataclass(frozen=True, slots=True)
class Unpin:
    """A message unpinned; ``external_id`` as in :class:`Pin` (or a source id prefix,
    from the console)."""

    channel: ChannelKey
    person: Person
    external_id: str


@dataclass(frozen=True, slots=True)
class Vote:
    """A 👍 (``up``) or 👎 on an answer, by the ``answer_id`` its reply carried."""

    channel: ChannelKey
    person: Person
    answer_id: str
    up: bool


@dataclass(frozen=True, slots=True)
class Feedback:
    """What was wrong with an answer, from the form a 👎 opens: ``reason`` (may be empty) and,
    optionally, the right answer (``correction``), which becomes a source of the channel
    when a channel admin gives it."""

    channel: ChannelKey
    person: Person
    answer_id: str
    reason: str
    correction: str = ""


@dataclass(frozen=True, slots=True)
class Solved:
    """A forum post marked solved by ``person``: its question and the answer accepted for it
    become one source of the forum's tree (see :mod:`bot.forum_handling`, which also says who
    may mark a post solved). ``thread`` is the platform's id of the post (a thread),
    ``author_id`` the id of the person who opened it; ``title`` and ``question`` are its title
    and opening message; ``link`` points to the post; ``external_id`` is what the source is
    kept under (marked again, the post's source takes the new text).

    The accepted answer is the kept answer ``answer_id`` (the bot's answer whose "Mark solved"
    was pressed) or, when no answer is named, ``answer`` as written by ``answerer`` (the
    post's latest answer, when a "Solved" tag was applied)."""

    channel: ChannelKey
    person: Person
    thread: str
    author_id: str
    title: str
    question: str
    external_id: str
    link: str = ""
    answer_id: str = ""
    answer: str = ""
    answerer: str = ""


Event = Question | Command | Upload | Pin | Unpin | Vote | Feedback | Solved


@dataclass(frozen=True, slots=True)
class Deleted:
    """Something deleted on the platform (a message, a file), or files taken out of a
    message by an edit: every source it became is forgotten, as ``forget`` does, and nobody
    is answered. A source of ``channel`` goes when its external id

    - is one of ``external_ids`` (when ``files_kept`` is given: only a file whose name is
      not in it, for files that share their message's id, such as a Discord pin's);
    - or starts with one of ``parts_of`` and a ``/`` (a part of that message, such as a
      Discord message's attachments, ``<channel>/<message>/<attachment>``), and is not in
      ``kept`` (the parts the message still has, after an edit).

    ``whole_workspace``: the platform did not say where it was (Slack's ``file_deleted``
    may not): every channel of ``channel``'s platform and workspace is looked at."""

    channel: ChannelKey
    external_ids: tuple[str, ...] = ()
    parts_of: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    files_kept: tuple[str, ...] | None = None
    whole_workspace: bool = False


@dataclass(frozen=True, slots=True)
class ChannelGone:
    """The bot can no longer serve a channel: it was archived or deleted, or the bot was
    removed from it (``reason`` says which, for the log). Its rebuilds stop being scheduled,
    and its material is forgotten after ``bot.retention.removed_channel_days`` unless a
    :class:`ChannelBack` comes first. ``whole_workspace``: every channel of ``channel``'s
    platform and workspace (the bot was removed from a Discord server)."""

    channel: ChannelKey
    reason: str
    whole_workspace: bool = False


@dataclass(frozen=True, slots=True)
class ChannelBack:
    """A channel the bot may serve again (unarchived, or the bot added back): a forget
    pending since a :class:`ChannelGone` is called off, and its rebuilds are scheduled again."""

    channel: ChannelKey


PlatformChange = Deleted | ChannelGone | ChannelBack
"""What happened on the platform that the bot follows without answering anyone
(``ChatHandler.follow``)."""


@dataclass(frozen=True, slots=True)
class SourceView:
    """A source the channel holds, as adapters see it: ``external_id`` is the platform's id
    it came from (a pinned message, a file), empty when it has none."""

    id: str
    title: str
    external_id: str = ""


class CitationKind(str, Enum):
    EXCERPT = "excerpt"  # a leaf chunk
    SUMMARY = "summary"  # a summary node, with its layer


@dataclass(frozen=True, slots=True)
class CitationView:
    """One numbered source under an answer."""

    number: int
    kind: CitationKind
    layer: int
    node_id: str
    title: str
    link: str
    quote: str
    # Shown beside it: "updated 3 days ago", and for a summary built before a source under it
    # changed, "may be outdated: built before “…” changed".
    notes: str = ""


class ReplyKind(str, Enum):
    ANSWER = "answer"
    INFO = "info"  # the result of a command, or a note (e.g. a source was added)
    PROGRESS = "progress"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file sent with a reply (the tree picture)."""

    filename: str
    data: bytes
    mime_type: str = "image/png"


@dataclass(frozen=True, slots=True)
class Reply:
    """What the bot says. ``private`` replies are meant for the person who asked only
    (ephemeral on Slack) where the platform allows it. ``reference`` is set on errors
    and matches the log line that tells the full story."""

    kind: ReplyKind
    text: str
    citations: tuple[CitationView, ...] = ()
    warning: str = ""
    attachments: tuple[Attachment, ...] = ()
    private: bool = False
    reference: str = ""
    thread: str = ""
    answer_id: str = ""  # answers only: the id feedback votes are stored under
    # Answers only: the text as the answerer wrote it (and a draft showed it while it was written),
    # when ``text`` differs from it by ⚠ marks; a draft that cannot be rewritten continues from it.
    written: str = ""


Send = Callable[[Reply], Awaitable[None]]
"""How the bot speaks to the channel an event came from; adapters provide it.
A send may happen long after the event (a rebuild's progress and result)."""


class AnswerDraft(Protocol):
    """An answer shown while a language model writes it, in one message that grows
    (see :class:`DraftingSend`). The handler paces the calls: :meth:`show` at most every
    :attr:`interval_s` seconds, never two at once, then :meth:`finish` once."""

    @property
    def interval_s(self) -> float:
        """The least time between two :meth:`show` calls the platform's limits allow (read
        before each; it may change, e.g. when a platform's streaming is refused and edits
        take its place)."""
        ...

    async def show(self, text: str) -> None:
        """Shows ``text``, the answer's text so far (the whole of it, never a delta: each
        call's text begins with the previous one's). Best effort: a call that the platform
        refuses or limits may be skipped (the next, or :meth:`finish`, carries everything)."""
        ...

    async def finish(self, reply: Reply) -> None:
        """Puts ``reply`` in the draft's place, complete and rendered exactly as ``send(reply)``
        would post it (an answer with its citations, or an error saying the answer broke
        off), so no half answer stays without notice. When nothing was shown, it is simply
        sent. Never raises for the platform's failures (they are reported, as by a ``Send``)."""
        ...


@runtime_checkable
class DraftingSend(Protocol):
    """A :data:`Send` that can also show an answer while it is being written. Adapters whose
    platform can edit or stream a message give one; to any other ``Send`` the handler gives
    the finished reply only."""

    async def __call__(self, reply: Reply) -> None: ...

    def draft(self, thread: str = "") -> AnswerDraft:
        """A new draft of an answer for ``thread`` (empty: where this ``Send`` posts). Nothing
        is posted until its first :meth:`AnswerDraft.show`."""
        ...


@dataclass(frozen=True, slots=True)
class SuggestedPrompt:
    """A prompt offered in a new assistant thread: ``title`` is shown, ``message`` is sent
    when the person picks it."""

    title: str
    message: str


class Scope(Enum):
    """What a question in an assistant thread is answered from (``bot.assistant_threads``):
    the tree of the channel viewed beside it (``VIEWED``), nothing, because the asker is not
    a member of that channel (``NOT_A_MEMBER``), or the conversation's own (``OWN``: no
    channel viewed)."""

    VIEWED = "viewed"
    NOT_A_MEMBER = "not_a_member"
    OWN = "own"


class Stage(Enum):
    """What the bot is doing with a question, for a status line (:class:`StatusSend`)."""

    READING = "reading"  # accepted, not yet searching
    SEARCHING = "searching"  # looking through the channel's tree
    WRITING = "writing"  # the answer is being written


@runtime_checkable
class StatusSend(Protocol):
    """A :data:`Send` that can also show what the bot is doing with a question, in a status
    line beside the conversation (Slack's ``assistant.threads.setStatus``). The adapter clears
    the line once the question is done, whatever its outcome."""

    async def __call__(self, reply: Reply) -> None: ...

    async def show_stage(self, stage: Stage) -> None:
        """Shows ``stage``; never raises (a status line that cannot be shown is no failure)."""
        ...


@dataclass(frozen=True, slots=True)
class ReplyAddress:
    """Where a reply can be posted later by any process serving the platform (a rebuild's
    progress and result, when another process ran it): the channel and the thread the
    request came from (empty: the channel itself). Plain strings, so it can be queued."""

    channel: ChannelKey
    thread: str = ""


Courier = Callable[[ReplyAddress], Send]
"""An adapter's way to speak to a channel it has no event from: given an address of its
platform, a ``Send`` that posts there. Adapters register one with the running bot."""
