"""Questions to a channel: its material retrieved, and answered whole or as it is written.

Contract of :class:`Questions` (the engine is its one caller; ``Engine.retrieve``, ``answer``
and ``answer_stream`` state the public side): a question is retrieved against the channel's
served tree and its sources not yet built into it, with the served trees' BM25 indexes and the
fresh leaves kept in memory (``search_indexes.py``), and hits from sources not yet in the tree
titled and linked as their source. Retrieval runs in the foreground (rebuilds step aside while
it runs, ``background.py``); so does the offline answerer's work, while a language model's
answer is a wait, not work on our CPU. Raises ``NoMaterial`` for a channel with no source and
``ChannelError`` when the tree was built with another embedding model.

A question leaves nothing behind in a channel that holds no source: reading it opened its
collections and listed it in the registry, so they are dropped again (as after a forget of
its last source, ``ChannelWriters.drop_if_empty``) before ``NoMaterial`` is raised. A
question in a fresh direct conversation makes no channel the store lists for good.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace

from raptor_engine.answer_check import SUPPORT_THRESHOLD, Evidence, check_answer
from raptor_engine.answering import ExtractiveAnswerer
from raptor_engine.background import ForegroundGate
from raptor_engine.channel_writers import ChannelWriters
from raptor_engine.errors import ChannelError, NoMaterial
from raptor_engine.protocols import Answerer, AnswerStream, Embedder, StreamingAnswerer, SupportJudge
from raptor_engine.retrieval import Query, RetrievalSettings, Retrieved, retrieve_scoped
from raptor_engine.search_indexes import ChannelIndexes
from raptor_engine.store import TreeState
from raptor_engine.threads import in_thread
from raptor_engine.tree_vectors import TreeQueries
from raptor_engine.types import Answer, ChannelKey, Citation, Hit, Node, Source

EVIDENCE_LEAVES = 400  # excerpts read under one cited summary: a root may span a whole source


class Questions:
    """Retrieval and answers for the engine's channels. See the module docstring."""

    def __init__(
        self,
        writers: ChannelWriters,
        embedder: Embedder,
        answerer: Answerer,
        indexes: ChannelIndexes,
        gate: ForegroundGate,
        leaf_profile: str,
        settings: RetrievalSettings,
        support_threshold: float = SUPPORT_THRESHOLD,
        threads: Executor | None = None,
        judge: SupportJudge | None = None,
    ) -> None:
        """``writers`` opens a channel's store (and drops one a question finds empty);
        ``settings`` are used when a call gives none; ``support_threshold`` is the share of a
        sentence's words its cited nodes must hold (``judge``, where given, decides
        instead); ``threads`` runs the blocking steps of
        ``answer`` and ``answer_stream`` (None: the running loop's default executor)."""
        self._writers = writers
        self._embedder = embedder
        self._answerer = answerer
        self._indexes = indexes
        self._gate = gate
        self._leaf_profile = leaf_profile
        self._settings = settings
        self._support_threshold = support_threshold
        self._threads = threads
        self._judge = judge

    @property
    def streams(self) -> bool:
        """Whether the answerer gives answers as they are written."""
        return isinstance(self._answerer, StreamingAnswerer)

    def retrieve(self, key: ChannelKey, question: str, settings: RetrievalSettings | None) -> list[Hit]:
        """The nodes that best answer ``question``, best first, within the token budget."""
        with self._gate.foreground():
            return self._retrieval(key, question, settings).retrieved.hits

    async def answer(self, key: ChannelKey, question: str, settings: RetrievalSettings | None) -> Answer:
        """An answer to ``question`` from the channel's material, citing the nodes it used, its
        quotes verified and its sentences checked (``answer_check.py``); the offline answerer
        also hears the question's scope."""
        with self._gate.foreground():
            found = await in_thread(self._threads, self._retrieval, key, question, settings)
            hits, scope = found.retrieved.hits, found.retrieved.scope
            if isinstance(self._answerer, ExtractiveAnswerer):  # computes here: the rebuild keeps stepping aside
                answer = await in_thread(self._threads, self._answerer.answer_now, question, hits, scope)
                return await in_thread(self._threads, self._checked, found, question, answer)
        # A remote model's answer is a wait, not work on our CPU: the rebuild need not pause for it.
        answer = await self._answerer.answer(question, hits)
        return await in_thread(self._threads, self._checked, found, question, answer)

    async def answer_stream(self, key: ChannelKey, question: str, settings: RetrievalSettings | None) -> AnswerStream:
        """The answer as it is written; retrieval is done (and fails) here, the model is asked
        when the stream is read. An answerer that does not stream gives its whole answer as one piece."""
        if not isinstance(self._answerer, StreamingAnswerer):
            return _Answered(await self.answer(key, question, settings))
        with self._gate.foreground():
            found = await in_thread(self._threads, self._retrieval, key, question, settings)
        # As in answer(): a remote model's answer is a wait, not work on our CPU.
        stream = self._answerer.answer_stream(question, found.retrieved.hits)
        return _Checked(stream, lambda answer: in_thread(self._threads, self._checked, found, question, answer))

    def _checked(self, found: _Found, question: str, answer: Answer) -> Answer:
        """``answer`` checked against the nodes it cites (see ``answer_check.py``), with the tree
        and sources its retrieval read (not read again)."""
        if not answer.found or not answer.citations:
            return answer
        evidence = cited_evidence(found.tree, found.state, answer)
        checked = check_answer(answer, evidence, question, self._support_threshold, self._judge)
        changed = set(found.state.replaced.values()) if found.state else set()
        return dated(checked, found.sources, changed, added_since(found.state, found.sources))

    def _retrieval(self, key: ChannelKey, question: str, settings: RetrievalSettings | None) -> _Found:
        """The hits for ``question`` (titled) and its scope in the channel, with what was read to
        find them."""
        settings = settings or self._settings
        channel = self._writers.channel(key)
        state = channel.live_state()
        if state is not None and state.embedder_id != self._embedder.model_id:
            raise ChannelError(
                f"this channel's tree was built with the embedding model {state.embedder_id!r} but "
                f"{self._embedder.model_id!r} is configured now: rebuild the channel"
            )
        sources = {s.id: s for s in channel.list_sources()}
        if not sources:
            self._writers.drop_if_empty(key)  # what reading it created goes again: see the module docstring
            raise NoMaterial(f"the channel {key} has no material yet: add a file or a message, then ask again")
        pending = [source for sid, source in sources.items() if state is None or sid not in state.source_ids]
        query = Query(question, self._embedder.embed([question])[0])
        # The BM25 index serves the scope's word coverage too, so it is used even without hybrid ranking.
        indexes = self._indexes.for_question(key, channel, state, pending, self._leaf_profile)
        return _Found(retrieve_scoped(channel, state, query, settings, indexes), indexes.tree or channel, state,
                      list(sources.values()))


@dataclass(frozen=True, slots=True)
class _Found:
    """A question's retrieval, with what it searched the tree with, the served state and the
    sources it read: an answer's check needs them again."""

    retrieved: Retrieved
    tree: TreeQueries  # the served tree in memory where retrieval searched it there, else the channel's store
    state: TreeState | None
    sources: list[Source]


def cited_evidence(tree: TreeQueries, state: TreeState | None, answer: Answer,
                   limit: int = EVIDENCE_LEAVES) -> dict[str, Evidence]:
    """The :class:`Evidence` of each node ``answer`` cites: a leaf's text; a summary's text and
    the excerpts beneath it (at most ``limit`` of them), read from tree ``state`` (the one
    retrieval searched) layer by layer. A summary of a tree dropped since finds no excerpts,
    so its quote is not shown."""
    nodes = {hit.node.id: hit.node for hit in answer.hits}
    evidence: dict[str, Evidence] = {}
    for citation in answer.citations:
        node = nodes.get(citation.node_id)
        if node is None:
            continue
        if node.is_leaf:
            evidence[node.id] = Evidence(node.text)
            continue
        beneath = _leaves_beneath(tree, state.version, node, limit) if state is not None else []
        evidence[node.id] = Evidence(node.text, tuple(leaf.text for leaf in beneath), leaf=False)
    return evidence


def added_since(state: TreeState | None, sources: Sequence[Source]) -> list[Source]:
    """The sources added to the channel since tree ``state`` was built, newest first: in no
    tree, and no new version of one of its sources (those are ``TreeState.replaced``'s)."""
    if state is None:
        return []
    added = state.added_among(s.id for s in sources)
    return sorted((s for s in sources if s.id in added), key=lambda s: (s.added_at, s.id), reverse=True)


def dated(answer: Answer, sources: Sequence[Source], changed: set[str], added: Sequence[Source] = ()) -> Answer:
    """``answer`` with each citation's ``updated_at`` (when the newest of its node's sources was
    added: an edit is a new version, added when it was made) and the "may be outdated" marks
    of its summaries, ``outdated_by`` naming the source:

    - a summary standing for a source version it was not built from (``changed``: the served
      tree's replacements, see ``TreeState.replaced``): that source;
    - else a summary over several sources, when sources were ``added`` to the channel since
      (newest first), with ``outdated_by_addition``: the newest. A rebuild may put the new
      material into what such a summary says of the channel's material; a summary of one
      source stays true of it whatever joins the channel.
    """
    nodes = {hit.node.id: hit.node for hit in answer.hits}
    by_id = {source.id: source for source in sources}

    def marked(citation: Citation) -> Citation:
        node = nodes.get(citation.node_id)
        own = [by_id[sid] for sid in (node.source_ids if node else ()) if sid in by_id]
        moments = [source.added_at for source in own if source.added_at]
        citation = replace(citation, updated_at=max(moments, default=""))
        if citation.layer == 0 or node is None:
            return citation
        newer = [source.title for source in own if source.id in changed]
        if newer:
            return replace(citation, outdated_by=newer[0])
        if added and len(node.source_ids) > 1:
            return replace(citation, outdated_by=added[0].title, outdated_by_addition=True)
        return citation

    return replace(answer, citations=tuple(marked(c) for c in answer.citations))


def _leaves_beneath(tree: TreeQueries, version: int, summary: Node, limit: int) -> list[Node]:
    """The leaves under ``summary`` in tree ``version``, at most ``limit``: one read per layer."""
    leaves: list[Node] = []
    frontier = list(summary.children)
    seen: set[str] = set()
    while frontier and len(leaves) < limit:
        wanted = [node_id for node_id in dict.fromkeys(frontier) if node_id not in seen]
        seen.update(wanted)
        frontier = []
        for node in tree.get_nodes(version, wanted):
            if node.is_leaf:
                leaves.append(node)
            else:
                frontier += node.children
    return leaves[:limit]


class _Checked:
    """An :class:`AnswerStream` whose final answer is checked (quotes, supported sentences)
    once the model's stream ended; its pieces pass through unchanged."""

    def __init__(self, stream: AnswerStream, check: Callable[[Answer], Awaitable[Answer]]) -> None:
        self._stream = stream
        self._check = check
        self._answer: Answer | None = None

    @property
    def answer(self) -> Answer:
        if self._answer is None:
            raise RuntimeError("the answer stream has not ended yet")
        return self._answer

    async def __aiter__(self) -> AsyncIterator[str]:
        async for piece in self._stream:
            yield piece
        self._answer = await self._check(self._stream.answer)


class _Answered:
    """An :class:`AnswerStream` of an answer already made: its text as one piece."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer

    @property
    def answer(self) -> Answer:
        return self._answer

    async def __aiter__(self) -> AsyncIterator[str]:
        if self._answer.text:
            yield self._answer.text

