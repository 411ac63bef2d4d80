"""The regression gate: a rebuilt tree is served only if it answers the channel's approved
questions about as well as the tree it replaces, and holds the leaves its sources should give.

Contract:

- :func:`approved_questions` is the channel's question set: every kept answer that found
  something and has more 👍 than 👎 (as ``python -m bot questions`` exports them), and every admin correction (a source of kind ``correction``: its question,
  expecting that source), newest first, at most :data:`SET_SIZE`, one entry per question text.
  Each question is kept with the *sources* its answer cited (source ids are content hashes), not
  with node ids, so re-chunking or re-clustering is not a regression; an edited source hands its
  answers on to its new version (``pass_answers_on``), and a forgotten one takes its answers
  with it, so a deliberate forget never blocks a rebuild.
- :func:`check_tree` asks each question of one tree version, with the channel's retrieval
  settings and that tree's own indexes (no fresh leaves), and counts a question found when one
  of its sources is among the first :data:`HIT_AT` hits (hit@5).
- :func:`judge` serves a new tree only when its hit@5 is at least the served tree's minus
  :data:`HIT_MARGIN`, and its leaves are at least :data:`LEAVES_KEPT` of those expected.
  Expected: for each source the served tree already held, the leaves it had there (a source's
  content never changes, so neither does its chunking); for a new source, the leaves its
  ingest cut. Without approved questions only the leaves count.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace as with_changes
from typing import Any

from raptor_engine.protocols import Embedder
from raptor_engine.retrieval import Query, RetrievalSettings, retrieve_scoped
from raptor_engine.search_indexes import tree_indexes
from raptor_engine.store import ChannelStore, TreeState
from raptor_engine.types import SourceKind

SET_SIZE = 200  # the newest approved questions checked
HIT_AT = 5  # a question is found when one of its sources is among this many first hits
HIT_MARGIN = 0.03  # the new tree's hit@5 may be this much under the served tree's
LEAVES_KEPT = 0.90  # the new tree must hold this share of the leaves expected
CORRECTION_QUESTION = "Question: "  # how a correction's text begins (see bot.ingestion)


@dataclass(frozen=True, slots=True)
class ApprovedQuestion:
    """A question of the set: its text, the sources its approved answer cited, and when."""

    text: str
    source_ids: frozenset[str]
    at: str


@dataclass(frozen=True, slots=True)
class QuestionResult:
    """One question asked of one tree: whether one of its sources came in the first hits,
    and the title of the first hit (what it found instead, when it did not)."""

    question: str
    found: bool
    first_hit: str


@dataclass(frozen=True, slots=True)
class GateCheck:
    """The set asked of one tree version."""

    version: int
    results: tuple[QuestionResult, ...]

    @property
    def found(self) -> int:
        return sum(1 for result in self.results if result.found)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def share(self) -> float:
        return self.found / self.total if self.total else 1.0


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """Whether a new tree may be served, with what was measured and, when not, why."""

    check: GateCheck
    served: GateCheck | None
    leaves_expected: int
    leaves_built: int
    passed: bool
    reason: str = ""
    forced: bool = False


def approved_questions(channel: ChannelStore, limit: int = SET_SIZE) -> list[ApprovedQuestion]:
    """The channel's question set, newest first (see the module docstring)."""
    found: list[ApprovedQuestion] = [
        ApprovedQuestion(record.question, frozenset(record.source_ids), record.answered_at)
        for record in channel.list_answers()
        if record.ups > record.downs and record.found and record.source_ids
    ]
    for source in channel.list_sources():
        if source.kind is SourceKind.CORRECTION:
            first_line = channel.source_text(source.id).split("\n", 1)[0]
            asked = first_line.removeprefix(CORRECTION_QUESTION).strip()
            if asked:
                found.append(ApprovedQuestion(asked, frozenset({source.id}), source.added_at))
    newest: dict[str, ApprovedQuestion] = {}
    for question in sorted(found, key=lambda q: q.at, reverse=True):
        newest.setdefault(_folded(question.text), question)
    return list(newest.values())[:limit]


def check_tree(
    channel: ChannelStore,
    state: TreeState,
    questions: Sequence[ApprovedQuestion],
    embedder: Embedder,
    settings: RetrievalSettings,
) -> GateCheck:
    """Each of ``questions`` asked of tree ``state`` as it would be served (see the module docstring)."""
    if not questions:
        return GateCheck(state.version, ())
    indexes = tree_indexes(channel, state)
    vectors = embedder.embed([question.text for question in questions])
    results = []
    for question, vector in zip(questions, vectors):
        hits = retrieve_scoped(channel, state, Query(question.text, vector), settings, indexes).hits[:HIT_AT]
        found = any(question.source_ids.intersection(hit.node.source_ids) for hit in hits)
        results.append(QuestionResult(question.text, found, hits[0].node.title if hits else ""))
    return GateCheck(state.version, tuple(results))


def expected_leaves(served_leaves: Counter[str], built_sources: Iterable[tuple[str, int]]) -> int:
    """The leaves a new tree should hold: for each ``(source id, leaves cut by its ingest)`` of
    the build, the served tree's count for that source where it held it, else the ingest's."""
    return sum(served_leaves.get(source_id[:12], cut) for source_id, cut in built_sources)


def leaves_per_source(channel: ChannelStore, state: TreeState | None) -> Counter[str]:
    """How many leaves tree ``state`` holds per source (by short id, as leaf ids begin)."""
    if state is None:
        return Counter()
    ids, _, _ = channel.node_texts(state.version)
    return Counter(node_id.rpartition(".")[0] for node_id in ids if _is_leaf_id(node_id))


def judge(check: GateCheck, served: GateCheck | None, expected: int, built: int, force: bool = False) -> GateVerdict:
    """Whether the tree ``check`` measured may be served (``force``: it is, whatever the
    figures, and the verdict says it was forced)."""
    verdict = GateVerdict(check, served, expected, built, True, forced=force)
    problems = []
    if expected and built < LEAVES_KEPT * expected:
        problems.append(f"it holds {built:,} of the {expected:,} excerpts its sources give")
    if served is not None and served.total and check.share < served.share - HIT_MARGIN:
        lost = served.found - check.found
        problems.append(f"{max(lost, 1)} of {check.total} approved questions no longer find their sources "
                        f"({check.found} do, against {served.found} with the tree served now)")
    if not problems or force:
        return with_changes(verdict, reason="; ".join(problems))
    return with_changes(verdict, passed=False, reason="; ".join(problems))


def _is_leaf_id(node_id: str) -> bool:
    head, _, ordinal = node_id.rpartition(".")
    return bool(head) and ordinal.isdigit() and len(head) == 12


def _folded(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


LAST_CHECK_NOTE = "gate.last_check"  # the served tree's check: what status shows, reused by the next build
HELD_BACK_NOTE = "gate.held_back"  # the build held back, with its reason, until the next build


@dataclass(frozen=True, slots=True)
class LastCheck:
    """The check of the tree served now, as kept in the channel's notes."""

    version: int
    found: int
    total: int
    at: str
    results: dict[str, bool]


class RegressionGate:
    """Checks a written, not yet served tree and keeps the channel's notes of it (see the
    module docstring). Runs on the build's thread: every call reads or writes the store."""

    def __init__(self, embedder: Embedder, settings: RetrievalSettings) -> None:
        self._embedder = embedder
        self._settings = settings

    def verdict(self, channel: ChannelStore, new: TreeState, served: TreeState | None, expected: int, built: int,
                force: bool) -> GateVerdict:
        """Whether ``new`` may replace ``served`` (see :func:`judge`)."""
        questions = approved_questions(channel)
        check = check_tree(channel, new, questions, self._embedder, self._settings)
        before = self._served_check(channel, served, questions) if served is not None else None
        return judge(check, before, expected, built, force)

    def served_now(self, channel: ChannelStore, verdict: GateVerdict, at: str) -> None:
        """Records that the verdict's tree is served: its check is the channel's last, and no build is held back."""
        check = verdict.check
        kept = {"version": check.version, "found": check.found, "total": check.total, "at": at,
                "results": {_folded(result.question): result.found for result in check.results}}
        channel.set_note(LAST_CHECK_NOTE, json.dumps(kept))
        channel.set_note(HELD_BACK_NOTE, None)

    def held_back(self, channel: ChannelStore, verdict: GateVerdict, sources: Sequence[str], at: str) -> bool:
        """Records the build held back, kept aside with its reason; whether the same sources
        were held back for the same reason last time (the channel was told then)."""
        signature = _signature(sources, verdict.reason)
        before = _loaded(channel.notes().get(HELD_BACK_NOTE))
        channel.set_note(HELD_BACK_NOTE, json.dumps({
            "version": verdict.check.version, "reason": verdict.reason, "signature": signature, "at": at,
            "found": verdict.check.found, "total": verdict.check.total}))
        return bool(before) and before.get("signature") == signature

    def _served_check(self, channel: ChannelStore, served: TreeState, questions: Sequence[ApprovedQuestion]) -> GateCheck:
        """The served tree's check: the last one kept for it, asking only questions new since."""
        known = last_check(channel)
        kept = known.results if known is not None and known.version == served.version else {}
        new = [question for question in questions if _folded(question.text) not in kept]
        fresh = {result.question: result for result in check_tree(channel, served, new, self._embedder,
                                                                    self._settings).results}
        results = tuple(fresh.get(q.text) or QuestionResult(q.text, kept[_folded(q.text)], "") for q in questions)
        return GateCheck(served.version, results)


def last_check(channel: ChannelStore) -> LastCheck | None:
    """The check of the served tree kept in the channel's notes, if any."""
    kept = _loaded(channel.notes().get(LAST_CHECK_NOTE))
    if not kept:
        return None
    return LastCheck(int(kept["version"]), int(kept["found"]), int(kept["total"]), str(kept["at"]),
                     {str(q): bool(f) for q, f in dict(kept.get("results") or {}).items()})


def held_back_reason(channel: ChannelStore) -> str:
    """Why the last build was held back (empty when it was not)."""
    return str(_loaded(channel.notes().get(HELD_BACK_NOTE)).get("reason") or "")


def _loaded(value: str | None) -> dict[str, Any]:
    if not value:
        return {}
    try:
        loaded = json.loads(value)
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _signature(sources: Sequence[str], reason: str) -> str:
    return hashlib.sha256(json.dumps([sorted(sources), reason]).encode()).hexdigest()[:16]
