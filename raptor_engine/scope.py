"""How broad a question is, and whether the channel holds anything about it.

Two judgements made per question, from evidence that retrieval gathers anyway
(the question's cosine to its best leaves, the channel's BM25 vocabulary, and
the centres of its sources kept with the summary map), so they cost no extra
model call:

**Breadth** (0 = a detail, 1 = the whole material) decides how much of the
token budget goes to summaries (see ``retrieval.py``). It is the larger of two
parts, each a clipped linear ramp:

- *form*: the share of the question's words (stop words aside) that speak of
  the material itself rather than of its content (:data:`META_WORDS`: "summary",
  "overview", "paper", "main", "points"…). It ramps from 0 at
  :data:`FORM_LOW` to 1 at :data:`FORM_HIGH`.
- *footprint*: how evenly the question matches many leaves, the mean cosine of
  its :data:`FOOTPRINT_LEAVES` best leaves over the best one. A detail sits in
  one or two leaves; a theme ("what did guests say about the staff") in many.
  It ramps from 0 at :data:`FOOTPRINT_LOW` to 1 at :data:`FOOTPRINT_HIGH`. A
  question asking for a time, place, person or number ("when did season 2
  start", "how many episodes") has no footprint part: it wants a detail, however
  evenly a long article about one subject matches it (on the Wikipedia dev set
  the footprint called 57 of 104 such questions themes; with this rule 9).

The *kind* follows: OVERVIEW when the form part is at least one half (the
channel's top summaries then join the candidates), else THEME when the breadth
is at least one half, else DETAIL; the offline answer leads with a summary
for the first two.

**Answerability**: the channel holds something about the question unless
more than half of the question's names (capitalised words inside a sentence)
are missing from the channel, and provided one of these holds:

- the *evidence* reaches :data:`ANSWERABLE_AT`: the best leaf's cosine, plus
  :data:`COVERAGE_WEIGHT` times the *coverage* (the idf-weighted share of the
  question's words that the channel's text uses, compared by stem; an absent
  word weighs the most an index word can), plus :data:`RELATEDNESS_WEIGHT`
  times the *relatedness* (the cosine to the centre of the nearest source, the
  mean of its layer-1 summaries: the question judged against the channel's
  material as a whole, not only its single best match). Before any source has
  summaries, the first two alone must reach
  :data:`ANSWERABLE_WITHOUT_SUMMARIES_AT`;
- the question is an overview by form (at least :data:`OVERVIEW_FORM` of its
  words are about the material), which any material answers.

A question answered in part, with at least :data:`PARTIAL_SHARE` of its
content words absent from the channel, lists them (``Scope.missing``). They are
absent in spelling only: the offline answerer names those whose part of the
question is far in meaning from what it answers with too (``unfound.py``).

Figures behind the constants (all-MiniLM-L6-v2; offline extractive
"coverage" summaries; one channel per document of the dev sets in
``shared/data``; recall = share of the gold answer's content words found in
the retrieved context):

- Form: the patent question scores 0.50, no QuALITY detail question more than
  0.33 (98 % below 0.5), review theme questions at most 0.2.
- Footprint: theme questions (reviews) have a median of 0.93 (5th percentile
  0.87); detail questions (QuALITY) a median of 0.83 (75th percentile 0.87).
- The four ramp ends were fitted together by a grid on recall. Through
  ``Engine.retrieve``: patents at 500 tokens 53.4 % (best flat baseline,
  BM25+dense fusion, 46.2 %) with 98 % of the context from summaries; reviews
  at 500 tokens 41.1 % (best flat, dense, 38.2 %); QuALITY at 2,000 tokens
  39.7 % (best flat, dense, 39.2 %). On a fresh build with the summariser of
  the time (``bench.retrieval``, repeated documents dropped): 51.4 % vs
  48.1 %, 41.3 % vs 39.0 %, 40.0 % vs 39.6 %; once summaries were made from
  the leaves beneath them and roots put first for an overview: 54.1 %,
  43.9 % and 40.4 % against the same baselines. Choosing summaries costs no
  more than it used to: ``retrieve`` p95 36-43 ms against 40-41 ms before.
- Answerability was fitted on two samples of answerable questions (each in its
  own document's channel) and off-topic ones (QuALITY and review questions
  asked in channels of the other sets): ``bench.answers``' 335 and 322, and an
  earlier sample of 360 and 536. The rule refuses 1.8 % and 1.7 % of the
  answerable and 90.1 % and 91.0 % of the off-topic questions; without the
  relatedness term the best threshold refused 1.2 % and 85.4 % (bench), and a
  cosine threshold alone 3.9 % and 91.2 % (earlier sample). Most refusals of
  answerable questions are questions about the text's form ("How many times
  does the word 'but' appear?"). In one channel of all 29 QuALITY and patent
  documents, none of their questions was refused and 42 % of the review
  questions were answered (some of its stories are set in hotels).

Deterministic: the same question, leaves and index give the same scope.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from raptor_engine.lexical import LexicalIndex, terms
from raptor_engine.types import Hit, Node
from raptor_engine.unit_vectors import unit, unit_rows

FORM_LOW = 0.25
FORM_HIGH = 0.5
FOOTPRINT_LEAVES = 10
FOOTPRINT_LOW = 0.88
FOOTPRINT_HIGH = 0.93
OVERVIEW_FORM = 0.5
COVERAGE_WEIGHT = 0.15
RELATEDNESS_WEIGHT = 1.0
ANSWERABLE_AT = 0.405
ANSWERABLE_WITHOUT_SUMMARIES_AT = 0.265
MISSING_NAMES_CUT = 0.5
MAX_MISSING_SHOWN = 4
PARTIAL_SHARE = 1 / 3

#: Words that speak of the material, or ask for an overview, rather than of the content.
#: English only; a word missing here only makes a question look narrower than it is. Verbs any
#: question uses ("does", "did", "describe", "propose", "say", "explain"...) are not here: they
#: made detail questions about a paper ("What does the paper propose for X?") look like overviews.
META_WORDS = frozenset(
    """
    abstract article articles author authors brief briefly conclude concludes conclusion conclusions document
    documents essay file files gist highlight highlights key main material materials overall overview paper papers
    point points purpose recap report reports story summarise summarize summarized summarizes summary summaries
    takeaway takeaways text texts theme themes thesis topic topics write
    """.split()  # noqa: SIM905 - a word list reads best as text
)

#: Questions asking for a time, a place, a person, a number or one of several things want a
#: detail, however evenly their words match the material (a long article about one subject
#: matches "when did season 2 start" in every excerpt).
_FACTOID = re.compile(
    r"\b(?:when|who|whom|whose|where|which|how\s+(?:many|much|long|old|far|often|big)|what\s+(?:year|date|time|day|"
    r"month|percentage|percent|number|amount|age|price|name))\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_WORDS = re.compile(r"[^\W_]+(?:['’][^\W\d_]+)?")
_APOSTROPHE = re.compile(r"['’]")


class ScopeKind(str, Enum):
    """What a question asks about: the whole material, a theme across it, or a detail."""

    OVERVIEW = "overview"
    THEME = "theme"
    DETAIL = "detail"


@dataclass(frozen=True, slots=True)
class Scope:
    """The judgement on one question; see the module docstring for the rule.

    ``breadth`` is in [0, 1]; ``missing`` lists the question's content words
    (meta words aside) that the channel's text never uses, in question order,
    when the question is answered only in part (see :func:`_unfound`).
    ``form``, ``footprint``, ``coverage``, ``best`` (the best leaf's cosine) and
    ``names_missing`` (the share of the question's names the channel lacks) are
    the evidence.
    """

    breadth: float
    kind: ScopeKind
    answerable: bool
    missing: tuple[str, ...] = ()
    form: float = 0.0
    footprint: float = 0.0
    coverage: float = 1.0
    best: float = 0.0
    names_missing: float = 0.0

    @property
    def broad(self) -> bool:
        """Whether the answer should lead with a summary (an overview or a theme)."""
        return self.kind is not ScopeKind.DETAIL


NOTHING = Scope(breadth=0.0, kind=ScopeKind.DETAIL, answerable=False)


def assess(
    question: str,
    leaf_scores: Sequence[float],
    lexical: LexicalIndex | None,
    relatedness: float | None = None,
) -> Scope:
    """The scope of ``question`` in a channel.

    ``leaf_scores`` are the cosines of the question to the channel's best
    leaves, best first (empty: the channel has no material, nothing is
    answerable); ``lexical`` the BM25 index of the channel's texts: the served
    tree's and those of sources added since it was built (None when there is
    nothing to index); ``relatedness``
    the question's cosine to the centre of the source nearest it
    (:meth:`SummaryMap.relatedness`; None when no source has summaries yet).
    """
    words = terms(question)
    form = sum(1 for word in words if word in META_WORDS) / len(words) if words else 1.0
    footprint = _footprint(leaf_scores)
    form_part = _ramp(form, FORM_LOW, FORM_HIGH)
    spread = 0.0 if _FACTOID.search(question) else _ramp(footprint, FOOTPRINT_LOW, FOOTPRINT_HIGH)
    breadth = max(form_part, spread)
    kind = ScopeKind.OVERVIEW if form_part >= 0.5 else ScopeKind.THEME if breadth >= 0.5 else ScopeKind.DETAIL
    if not leaf_scores:
        return Scope(breadth, kind, False, (), form, footprint, 0.0, 0.0)
    frequency = _frequencies(words, lexical)
    coverage = _coverage(words, frequency, lexical.size if lexical else 0)
    missing = [word for word in words if not frequency[word]]
    names = _names(question)
    # Names are compared by stem like every word; a missing name is strong evidence of another topic.
    name_frequency = _frequencies(names, lexical)
    names_missing = sum(1 for name in names if not name_frequency[name]) / len(names) if names else 0.0
    best = float(leaf_scores[0])
    if relatedness is None:
        evidence = best + COVERAGE_WEIGHT * coverage >= ANSWERABLE_WITHOUT_SUMMARIES_AT
    else:
        evidence = best + COVERAGE_WEIGHT * coverage + RELATEDNESS_WEIGHT * relatedness >= ANSWERABLE_AT
    answerable = names_missing <= MISSING_NAMES_CUT and (evidence or form >= OVERVIEW_FORM)
    unfound = _unfound(words, missing, kind)
    return Scope(breadth, kind, answerable, unfound, form, footprint, coverage, best, names_missing)


def _unfound(words: Sequence[str], missing: Sequence[str], kind: ScopeKind) -> tuple[str, ...]:
    """The missing content words worth telling: none for an overview (its words name the
    request, not the content), and only when at least :data:`PARTIAL_SHARE` of the content
    words are missing, so a single paraphrased word ("leave" for "left") is not reported."""
    content = [word for word in words if word not in META_WORDS]
    absent = [word for word in missing if word not in META_WORDS]
    if kind is ScopeKind.OVERVIEW or not content or len(absent) < PARTIAL_SHARE * len(content):
        return ()
    return tuple(absent[:MAX_MISSING_SHOWN])


def _ramp(value: float, low: float, high: float) -> float:
    return float(np.clip((value - low) / (high - low), 0.0, 1.0))


def _footprint(leaf_scores: Sequence[float]) -> float:
    """Mean cosine of the :data:`FOOTPRINT_LEAVES` best leaves over the best one (1: they all
    match as well). A channel with fewer leaves counts the missing ones as 0: a handful of
    leaves holds details, not a theme spread over many."""
    if not leaf_scores or leaf_scores[0] <= 0:
        return 0.0
    best = leaf_scores[:FOOTPRINT_LEAVES]
    return float(np.sum(best) / (FOOTPRINT_LEAVES * best[0]))


def _frequencies(words: Sequence[str], lexical: LexicalIndex | None) -> dict[str, int]:
    """How many of the channel's texts hold each word (by stem), by the index's count."""
    return dict(zip(words, lexical.frequencies(words) if lexical else [0] * len(words)))


def _coverage(words: Sequence[str], frequency: dict[str, int], size: int) -> float:
    """The idf-weighted share of ``words`` the channel uses; an absent word weighs as a word of no text."""
    if not words:
        return 1.0
    weights = {word: math.log1p((size - frequency[word] + 0.5) / (frequency[word] + 0.5)) for word in words}
    total = sum(weights.values())
    return sum(w for word, w in weights.items() if frequency[word]) / total if total > 0 else 1.0


def _names(question: str) -> list[str]:
    """The lower-cased names of the question: capitalised words not opening a sentence,
    cut at an apostrophe ("Korvin's" -> "korvin"), stop words aside."""
    names: list[str] = []
    for sentence in _SENTENCE_END.split(question.strip()):
        for token in _WORDS.findall(sentence)[1:]:
            word = _APOSTROPHE.split(token)[0]
            if word[:1].isupper():
                names += [term for term in terms(word) if term not in names]
    return names


# -- where broad questions find their summaries ------------------------------------


@dataclass(frozen=True, slots=True)
class SummaryMap:
    """The summaries of a served tree, in memory, to choose the ones for a scope without a
    store round trip (a tree's summaries are about a seventh of its nodes).

    ``nodes`` are every summary by id; ``vectors`` their unit embeddings (row
    ``rows[id]``); ``centrality`` the cosine of each to the centroid
    of its source (the mean of the source's layer-1 summaries, which together
    cover all its leaves), or of the whole channel for a summary over several
    sources: how representative of the material it is. ``tops`` are the
    channel's top summaries (its highest layer, when it spans several sources),
    then each source's root (its highest summary over that source alone),
    highest first.
    """

    nodes: dict[str, Node]
    vectors: np.ndarray
    centrality: dict[str, float]
    tops: tuple[str, ...]
    rows: dict[str, int]  # each summary's row in ``vectors``
    centroids: np.ndarray  # one unit row per source with layer-1 summaries: its centre
    centred: frozenset[str]  # the ids of those sources

    def is_summary(self, node_id: str) -> bool:
        return node_id in self.nodes

    def spanning(self) -> int:
        """How many summaries are over several sources (what a source added to the channel may change)."""
        return sum(1 for node in self.nodes.values() if len(node.source_ids) > 1)

    def ancestors(self, nodes: Sequence[Node]) -> list[str]:
        """The summaries above ``nodes`` (nodes' own parents first, then theirs), each once."""
        found: dict[str, None] = {}
        frontier = [parent for node in nodes for parent in node.parents]
        while frontier:
            above: list[str] = []
            for node_id in frontier:
                if node_id not in found and node_id in self.nodes:
                    found[node_id] = None
                    above += self.nodes[node_id].parents
            frontier = above
        return list(found)

    def hits(self, vector: np.ndarray, ids: Sequence[str]) -> list[Hit]:
        """The summaries ``ids`` (unknown ones skipped) as hits scored by cosine to ``vector``."""
        known = [node_id for node_id in ids if node_id in self.nodes]
        if not known:
            return []
        query = unit(vector)
        scores = self.vectors[[self.rows[node_id] for node_id in known]] @ query
        return [Hit(self.nodes[node_id], float(score)) for node_id, score in zip(known, scores)]

    def relatedness(self, vector: np.ndarray) -> float | None:
        """The cosine of ``vector`` to the nearest source centre; None without any."""
        if not len(self.centroids):
            return None
        return float(np.max(self.centroids @ unit(vector)))


_NO_ROWS = np.zeros((0, 0), dtype=np.float32)
EMPTY_MAP = SummaryMap({}, _NO_ROWS, {}, (), {}, _NO_ROWS, frozenset())


def summary_map(summaries: Sequence[Node], vectors: np.ndarray) -> SummaryMap:
    """The map of ``summaries`` (every node of layer 1 and up of one tree; ``vectors`` their
    embeddings, row for row)."""
    if not summaries:
        return EMPTY_MAP
    rows = unit_rows(vectors)
    first = [i for i, node in enumerate(summaries) if node.layer == 1]
    channel_centroid = unit(rows[first].mean(axis=0) if first else rows.mean(axis=0))
    by_source: dict[str, list[int]] = {}
    for i in first:
        if len(summaries[i].source_ids) == 1:
            by_source.setdefault(summaries[i].source_ids[0], []).append(i)
    centroids = {source: unit(rows[members].mean(axis=0)) for source, members in by_source.items()}
    centrality = {}
    for node, row in zip(summaries, rows):
        single = node.source_ids[0] if len(node.source_ids) == 1 else None
        centroid = centroids.get(single, channel_centroid) if single else channel_centroid
        centrality[node.id] = float(row @ centroid)
    rows_by_id = {node.id: row for row, node in enumerate(summaries)}
    nodes = {n.id: n for n in summaries}
    sources = sorted(centroids)
    centres = np.vstack([centroids[source] for source in sources]) if sources else np.zeros((0, rows.shape[1]))
    return SummaryMap(nodes, rows, centrality, _tops(summaries), rows_by_id, centres, frozenset(sources))


def _tops(summaries: Sequence[Node]) -> tuple[str, ...]:
    highest = max(node.layer for node in summaries)
    channel = sorted(n.id for n in summaries if n.layer == highest and len(n.source_ids) > 1)
    roots: dict[str, Node] = {}
    for node in summaries:
        if len(node.source_ids) == 1:
            held = roots.get(node.source_ids[0])
            if held is None or (node.layer, node.id) > (held.layer, held.id):
                roots[node.source_ids[0]] = node
    ordered = sorted(roots.values(), key=lambda n: (-n.layer, n.id))
    return tuple(dict.fromkeys([*channel, *(n.id for n in ordered)]))
