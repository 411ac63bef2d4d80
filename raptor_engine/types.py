"""Plain data types shared by every part of the engine.

All are frozen dataclasses: values, not objects with behaviour. Ids are
strings; layers are integers with 0 for leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


@dataclass(frozen=True, slots=True)
class ChannelKey:
    """Identifies one channel: the unit of isolation of every tree.

    ``platform`` is e.g. ``"slack"``, ``"discord"`` or ``"console"``;
    ``workspace`` the Slack team or Discord guild; ``channel`` its channel id.
    """

    platform: str
    workspace: str
    channel: str

    def __str__(self) -> str:
        return f"{self.platform}/{self.workspace}/{self.channel}"

    @classmethod
    def parse(cls, text: str) -> ChannelKey:
        """The inverse of ``str(key)``: ``platform/workspace/channel``, three non-empty parts.
        Raises ``ValueError`` for anything else."""
        parts = text.split("/")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{text!r} is not platform/workspace/channel")
        return cls(*parts)


class SourceKind(str, Enum):
    """Where a source came from."""

    FILE = "file"
    MESSAGE = "message"
    THREAD = "thread"
    CORRECTION = "correction"  # the right answer to a question, given by a channel admin as feedback


@dataclass(frozen=True, slots=True)
class Document:
    """Text offered to a channel as a new source, before it is stored.

    ``link`` points back to the file or message (a permalink, a jump URL or a
    local path); ``added_by`` names who added it, ``added_at`` is ISO-8601 UTC.
    ``external_id`` is the platform's id of the message or file, used to find
    the source again on unpin; empty when there is none. ``file_name`` is the name
    of the file it was loaded from (how a file uploaded again is recognised); empty
    for a message.
    """

    text: str
    title: str
    kind: SourceKind = SourceKind.FILE
    link: str = ""
    added_by: str = ""
    added_at: str = ""
    external_id: str = ""
    file_name: str = ""


@dataclass(frozen=True, slots=True)
class Source:
    """A stored source: a document with its content-hash id and sizes."""

    id: str
    title: str
    kind: SourceKind
    link: str
    added_by: str
    added_at: str
    chars: int
    external_id: str = ""
    file_name: str = ""  # the uploaded file's name; empty for messages and sources stored before it was kept


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a source's text of about ``max_tokens`` tokens.

    ``text == source_text[start:end]``: spans index the source text, so
    punctuation and newlines are those of the original.
    """

    source_id: str
    ordinal: int
    text: str
    start: int
    end: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a channel's tree.

    Leaves (layer 0) carry the span of their source; summaries carry the ids of
    the nodes they summarise (``children``). ``source_ids`` lists every source
    the node covers, the one covering most of it first; ``title`` and ``link``
    are that first source's.
    """

    id: str
    layer: int
    text: str
    tokens: int
    children: tuple[str, ...] = ()
    parents: tuple[str, ...] = ()
    source_ids: tuple[str, ...] = ()
    title: str = ""
    link: str = ""
    ordinal: int = -1
    start: int = -1
    end: int = -1

    @property
    def is_leaf(self) -> bool:
        return self.layer == 0


class RetrievalMode(str, Enum):
    """How nodes are chosen for a question."""

    COLLAPSED = "collapsed"
    TRAVERSAL = "traversal"
    LEAVES = "leaves"


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved node and its relevance score (higher is better, at most 1)."""

    node: Node
    score: float


@dataclass(frozen=True, slots=True)
class Citation:
    """A numbered reference from an answer to the node that supports it."""

    number: int
    node_id: str
    layer: int
    title: str
    link: str
    quote: str
    updated_at: str = ""  # when its source was added or last edited (the newest, for a summary): ISO-8601 UTC
    # A summary built before a source under it changed (kept because it quotes none of the text that
    # went), or, for a summary over several sources, before a source was added beside them: that
    # source's title, for the "may be outdated" mark; empty otherwise.
    outdated_by: str = ""
    outdated_by_addition: bool = False  # ``outdated_by`` was added since, not changed

    @property
    def kind(self) -> str:
        """``"excerpt"`` for a leaf, ``"summary"`` for any higher node."""
        return "excerpt" if self.layer == 0 else "summary"


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer with its citations; ``found`` is False when nothing relevant was found.

    ``warning`` is shown beside the answer when it could not be checked (for
    instance a model's answer that cites nothing); empty otherwise. ``unsupported`` and
    ``unverified_quotes`` are set by ``answer_check.check_answer``.
    """

    text: str
    citations: tuple[Citation, ...]
    hits: tuple[Hit, ...]
    found: bool
    warning: str = ""
    unsupported: tuple[str, ...] = ()  # sentences of ``text`` the cited nodes do not support
    unverified_quotes: int = 0  # citations whose quote was not verbatim in the source: shown unquoted


@dataclass(frozen=True, slots=True)
class BuildReport:
    """What a rebuild did: sizes, time per stage (seconds) and reuse of earlier work."""

    version: int
    sources: int
    leaves: int
    nodes_per_layer: dict[int, int]
    stage_seconds: dict[str, float]
    leaves_embedded: int
    leaves_reused: int
    summaries_made: int
    summaries_reused: int
    built_at: str
    model_calls: int = 0  # language-model requests (summaries, and embeddings over an API)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0  # wall time of those requests, summed over requests
    elapsed_seconds: float = 0.0  # wall time of the whole rebuild (stages overlap, so their sum is more)
    approved_found: int = 0  # the channel's approved questions whose sources the new tree finds (hit@5)
    approved_total: int = 0
    forced_over: str = ""  # served with --force although the regression gate would have held it back: why

    @property
    def total_seconds(self) -> float:
        return sum(self.stage_seconds.values())

    @property
    def wall_seconds(self) -> float:
        """How long the rebuild took: ``elapsed_seconds`` when measured, else the stages' sum."""
        return self.elapsed_seconds or self.total_seconds


@dataclass(frozen=True, slots=True)
class TreeStats:
    """The state of a channel's tree as it is served now.

    ``version`` is 0 and ``built_at`` empty when no tree was built yet.
    ``pending_sources`` counts sources added, changed or removed since the served build;
    ``changed_sources`` those of them that are new versions of a source of the build (an
    edited message, a file uploaded again), each counted once however often it changed.
    """

    channel: ChannelKey
    version: int
    built_at: str
    sources: int
    nodes_per_layer: dict[int, int] = field(default_factory=dict)
    pending_sources: int = 0
    changed_sources: int = 0
    # The regression gate's last check of the served tree (see regression_gate.py): its approved
    # questions finding their sources, of all (both 0 before any check), and why the last build
    # was held back (empty when it was not).
    approved_found: int = 0
    approved_total: int = 0
    held_back: str = ""
    # Summaries kept since a source under them changed (they quote none of the text it lost):
    # cited with a "may be outdated" mark until the next rebuild.
    outdated_summaries: int = 0


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node with its children and parents, for inspecting the tree."""

    node: Node
    children: tuple[Node, ...]
    parents: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """An answer given in a channel, kept with its question and people's votes on it.

    ``votes`` maps a voter's id to +1 or -1 (a voter's last vote counts);
    ``source_ids`` are the sources its citations came from (forgetting one of
    them removes the record); ``found`` is False for an answer saying the channel's
    material does not hold it; ``reasons`` maps a voter's id to what they said was wrong;
    ``changed`` is True once a source it cites was replaced by a new version (an edited
    message, a file uploaded again): what it quotes may no longer be what the channel says.
    """

    answer_id: str
    question: str
    text: str
    asked_by: str
    answered_at: str
    source_ids: tuple[str, ...] = ()
    votes: dict[str, int] = field(default_factory=dict)
    found: bool = True
    reasons: dict[str, str] = field(default_factory=dict)
    changed: bool = False
    thread: str = ""  # where the answer was given (the chat's thread id; "" when not in a thread)

    @property
    def ups(self) -> int:
        return sum(1 for v in self.votes.values() if v > 0)

    @property
    def downs(self) -> int:
        return sum(1 for v in self.votes.values() if v < 0)
