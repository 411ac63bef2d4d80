"""Choosing the nodes that answer a question, through Chroma's index.

Three modes, as in the paper:

- *collapsed* (default): every layer serves the question, in the measure its
  scope asks for (see ``scope.py``). The leaves are ranked by cosine, fused
  with a BM25 ranking of the leaves when ``hybrid`` is on (their scores
  standardised and mixed, see ``fusion.py``), so exact words count as well as
  meaning. The candidate summaries are those above the question's
  best leaves (their parents, grandparents… up to the root), ranked by cosine
  plus :data:`CENTRALITY_WEIGHT` times their centrality, and for an overview
  the channel's top summaries and each source's root too. Then:

  - a *detail* question gets its leaves in rank order, with a share of the
    budget equal to its breadth (below one half) for summaries;
  - a *theme* or an *overview* gets **budgeted word coverage**: leaves and
    summaries compete on one score, the weight of the words they add that the
    context does not hold yet. A word weighs the relevance (reciprocal rank) of
    the candidates using it, summaries' relevance scaled by the breadth, blended
    in the measure of the breadth with the share of the whole material using it:
    an overview covers what the material says most, a theme what its best
    passages say. Repeats add nothing, so an extractive summary never spends
    budget on sentences already chosen, and a root covering a source usually
    comes first. Summaries lead the context, then leaves. From
    :data:`THEME_EVIDENCE_FROM` tokens a theme first keeps its best-ranked
    leaves within :data:`THEME_EVIDENCE` of the budget (see :func:`_theme`).
  - an *overview of a channel holding one document* gets that coverage within
    :data:`OVERVIEW_GIST` tokens, the gist, then the document's opening in its
    own order with the rest of the budget: its title, abstract or
    introduction, where its authors say what it is.

  Measured with ``python -m bench.retrieval`` on the five dev sets at 500 and
  2,000 tokens (figures in docs/benchmarks.md): coverage lifted
  every broad set over the budget share it replaced (patents at 2,000 tokens
  +6.3 points, reviews +6.1 and +1.4), where it cost financial detail questions
  10 points when applied to details, so details keep their rank order.
- *traversal*: the top layer first, then only the children of the nodes
  chosen, ``per_layer`` nodes at each layer down to the leaves;
- *leaves*: leaves only, the flat baseline.

Leaves of sources added since the served build (not yet in any tree) are
searched too, so new material is found before the next rebuild. Every mode
also judges the question's scope, which tells the answerer whether the channel
holds anything about it.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from raptor_engine import defaults
from raptor_engine.budget import cost, fill_budget
from raptor_engine.fusion import fused_order
from raptor_engine.lexical import LexicalIndex
from raptor_engine.scope import Scope, ScopeKind, SummaryMap, assess
from raptor_engine.search_indexes import FreshLeaves, SearchIndexes
from raptor_engine.store import ChannelStore, TreeState
from raptor_engine.store.leaves import leaf_id
from raptor_engine.tree_vectors import TreeQueries, nearest_leaves
from raptor_engine.types import Hit, RetrievalMode

DEFAULT_BUDGET = defaults.BUDGET
DEFAULT_TOP_K = defaults.TOP_K
DEFAULT_PER_LAYER = defaults.PER_LAYER
MAX_SUMMARY_OVERLAP = 0.5  # collapsed: a summary repeating more of chosen sentences is skipped
_MENTION = re.compile(r"<@!?\w+>|@[\w.-]+")
# Coverage weighs a candidate at rank r by 1 / (RRF_K + r + 1): reciprocal-rank fusion's damping
# constant (Cormack et al., 2009). The leaves are no longer fused by rank (fusion.py); the flat
# baseline of bench.retrieval still is, with this constant.
RRF_K = 60
# A theme question's context at THEME_EVIDENCE_FROM tokens or more starts with its best-ranked
# leaves within THEME_EVIDENCE of the budget, then coverage (see _theme).
THEME_EVIDENCE = 0.25
THEME_EVIDENCE_FROM = 1000
# An overview of one document: the gist (summaries and leaves by coverage) within OVERVIEW_GIST
# tokens, then the document's opening, where its authors say what it is (title, abstract,
# summary, introduction). Fitted on the fit half of the patents (bench.retrieval, 2,000 tokens,
# 750 against 1,000: +0.5 there, -0.3 on the other half); see _opening for the figures.
OVERVIEW_GIST = 750
CENTRALITY_WEIGHT = 2.0  # summaries: cosine + this x centrality (1 and 3 did worse on patents)
ANCESTOR_LEAVES = 40  # summaries are sought above this many best leaves


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """How many nodes and tokens a retrieval may return."""

    mode: RetrievalMode = RetrievalMode.COLLAPSED
    budget: int = DEFAULT_BUDGET
    top_k: int = DEFAULT_TOP_K
    per_layer: int = DEFAULT_PER_LAYER
    hybrid: bool = True


@dataclass(frozen=True, slots=True)
class Query:
    """A question as retrieval needs it: its text (for BM25) and its embedding."""

    text: str
    vector: np.ndarray


@dataclass(frozen=True, slots=True)
class Retrieved:
    """The hits for a question, in rank order, and the question's scope in the channel."""

    hits: list[Hit]
    scope: Scope


def retrieve_scoped(
    store: ChannelStore,
    state: TreeState | None,
    query: Query,
    settings: RetrievalSettings,
    indexes: SearchIndexes,
) -> Retrieved:
    """The hits for a query within ``settings.budget`` tokens, and its scope.

    ``state`` is the served tree (None before the first build); ``indexes`` what
    the question is searched with besides Chroma: BM25 over the served tree and
    the leaves of sources not yet in it (hybrid ranking and the scope's word
    coverage), the tree's :class:`SummaryMap`, and those fresh leaves (searched
    here by meaning and by words, so new material is found before the next
    rebuild). Each hit's score is its cosine similarity to the question. In
    collapsed mode, broad questions get their summaries first, detail
    questions their leaves first.
    """
    pool = settings.top_k * 2
    vector = query.vector
    tree: TreeQueries = indexes.tree or store  # the served tree's vectors in memory, when kept
    tree_leaves = nearest_leaves(tree, state.version, vector, pool) if state else []
    fresh = indexes.fresh.nearest(vector, pool)
    leaves = _merge_by_score(tree_leaves, fresh)
    summaries = indexes.summaries
    scores = sorted((hit.score for hit in leaves), reverse=True)
    related = _relatedness(vector, leaves, summaries)
    # The scope is the question's own: earlier thread messages put before it (see bot.question_handling)
    # help find the passages, but their words are not what is asked about.
    # A mention left in the text ("@Raptor") names the bot, not the material.
    asked = _MENTION.sub(" ", (query.text.strip().splitlines() or [""])[-1])
    scope = assess(asked, scores, indexes.lexical, related)
    if settings.mode is RetrievalMode.LEAVES:
        return Retrieved(fill_budget(leaves, settings.budget, settings.top_k), scope)
    if settings.mode is RetrievalMode.TRAVERSAL and state is not None:
        ranked = _merge_by_score(_by_score(_traverse(tree, state, vector, settings.per_layer)), fresh)
        return Retrieved(fill_budget(ranked, settings.budget, settings.top_k), scope)
    if settings.hybrid and indexes.lexical is not None:
        words = [(i, s) for i, s in indexes.lexical.top(query.text, pool * 2) if not summaries.is_summary(i)][:pool]
        leaves = _fuse(tree, state, indexes.fresh, query, leaves, words)
    if scope.kind is ScopeKind.DETAIL:
        return Retrieved(_collapsed(query, settings, scope, leaves, summaries), scope)
    if scope.kind is ScopeKind.THEME:
        return Retrieved(_theme(query, settings, scope, leaves, summaries, indexes.lexical), scope)
    subject = _subject(leaves, summaries) if scope.kind is ScopeKind.OVERVIEW else None
    if subject is None or settings.budget <= OVERVIEW_GIST:
        return Retrieved(_covering(query, settings, scope, leaves, summaries, indexes.lexical), scope)
    gist = _covering(query, replace(settings, budget=OVERVIEW_GIST), scope, leaves, summaries, indexes.lexical)
    return Retrieved(gist + _opening(tree, state, indexes.fresh, query, subject, gist, settings), scope)


def _relatedness(vector: np.ndarray, leaves: list[Hit], summaries: SummaryMap) -> float | None:
    """The question's cosine to the nearest source centre (see ``scope.py``). A source with no
    summary of its own (a pinned message, one not built yet) is its own centre: its best leaf."""
    centred = summaries.relatedness(vector)
    if centred is None:
        return None
    centred_sources = summaries.centred
    alone = [hit.score for hit in leaves if not (hit.node.source_ids and hit.node.source_ids[0] in centred_sources)]
    return max([centred, *alone])


def _collapsed(
    query: Query, settings: RetrievalSettings, scope: Scope, leaves: list[Hit], summaries: SummaryMap
) -> list[Hit]:
    """Summaries within ``breadth x budget`` tokens, then leaves in what is left."""
    chosen: list[Hit] = []
    share = round(scope.breadth * settings.budget)
    if share > 0 and summaries.nodes:
        ranked = _summaries_for(query, scope, leaves, summaries)
        chosen = fill_budget(ranked, share, settings.top_k, MAX_SUMMARY_OVERLAP)
    taken = {hit.node.id for hit in chosen}
    left = settings.budget - sum(cost(hit.node) for hit in chosen)
    room = settings.top_k - len(chosen)
    rest = fill_budget([h for h in leaves if h.node.id not in taken], left, room) if room > 0 else []
    return chosen + rest if scope.kind is not ScopeKind.DETAIL else rest + chosen


def _theme(
    query: Query,
    settings: RetrievalSettings,
    scope: Scope,
    leaves: list[Hit],
    summaries: SummaryMap,
    lexical: LexicalIndex | None,
) -> list[Hit]:
    """A theme question's context: from :data:`THEME_EVIDENCE_FROM` tokens, the best-ranked
    leaves within :data:`THEME_EVIDENCE` of the budget first, then :func:`_covering` with the
    rest (its summaries lead the context, the evidence follows, then its leaves).

    Why: coverage chooses by the words the candidates share, so a passage holding the one
    fact asked for can lose to passages about the subject in general. A question judged a
    theme may want a detail after all ("what are the most points scored in an NBA quarter"
    matches a list article evenly); its best evidence is then kept at the price of a quarter
    of the budget. Below that budget coverage needs all of it (reviews at 500 tokens lost
    0.7 points with the evidence kept).
    """
    if settings.budget < THEME_EVIDENCE_FROM:
        return _covering(query, settings, scope, leaves, summaries, lexical)
    evidence = fill_budget(leaves, round(THEME_EVIDENCE * settings.budget), settings.top_k)
    taken = {hit.node.id for hit in evidence}
    rest = replace(
        settings,
        budget=settings.budget - sum(cost(hit.node) for hit in evidence),
        top_k=settings.top_k - len(evidence),
    )
    covered = _covering(query, rest, scope, [hit for hit in leaves if hit.node.id not in taken], summaries, lexical)
    return [hit for hit in covered if hit.node.layer > 0] + evidence + [hit for hit in covered if hit.node.layer == 0]


def _covering(
    query: Query,
    settings: RetrievalSettings,
    scope: Scope,
    leaves: list[Hit],
    summaries: SummaryMap,
    lexical: LexicalIndex | None,
) -> list[Hit]:
    """A broad question's context: budgeted word coverage over the ranked leaves and the
    candidate summaries, summaries first. See the module docstring.

    Words are the columns of the channel's BM25 index (``lexical``, which holds every
    candidate's text), so weights and coverage are arrays, not dictionaries of words."""
    pool = [*leaves, *_summaries_for(query, scope, leaves, summaries)]
    if not pool:
        return []
    relevance = [1.0 / (RRF_K + rank + 1) for rank in range(len(leaves))]
    relevance += [scope.breadth / (RRF_K + rank + 1) for rank in range(len(pool) - len(leaves))]
    # Without an index (nothing of the channel indexed) the candidates' own words are counted.
    index = lexical or LexicalIndex([hit.node.id for hit in pool], [hit.node.text for hit in pool])
    weights, words = _word_weights([index.columns_of_node(hit.node.id, hit.node.text) for hit in pool], index.width, relevance,
                                   scope.breadth, lexical)
    chosen = _greedy_cover(pool, words, weights, settings)
    return [hit for hit in chosen if hit.node.layer > 0] + [hit for hit in chosen if hit.node.layer == 0]


def _word_weights(
    columns: Sequence[np.ndarray], width: int, relevance: Sequence[float], breadth: float, lexical: LexicalIndex | None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """How much each candidate word is worth covering: the share of the candidates' relevance
    held by the candidates using it, blended, in the measure of ``breadth``, with the share
    of the whole material using it (an overview is about what the material says most).

    ``columns`` are each candidate's words as index columns, all below ``width``. Returns the
    weight of each word the candidates use, and each candidate's words as positions in that array."""
    lengths = np.fromiter(map(len, columns), dtype=np.int64, count=len(columns))
    shares = np.asarray(relevance, dtype=np.float64) / (sum(relevance) or 1.0)
    held, positions = _distinct(np.concatenate(columns), width)
    # bincount adds in the candidates' order, as the sum word by word did: the same weights.
    weights: np.ndarray = np.bincount(positions, weights=np.repeat(shares, lengths), minlength=len(held))
    if lexical is not None and lexical.size and breadth > 0:
        weights = (1 - breadth) * weights + breadth * lexical.stem_frequencies(held) / lexical.size
    ends = np.cumsum(lengths).tolist()
    return weights, [positions[end - length:end] for end, length in zip(ends, lengths.tolist())]


def _distinct(values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for values in ``[0, width)``: the distinct
    values ascending, and each value's place among them. Marked in an array of ``width``
    instead of sorted: a broad question's candidates hold some ten thousand words of a
    channel's few tens of thousands, and the sort took a third of its coverage."""
    if width > 8 * values.size:  # a sparse few of a large vocabulary: sorting them costs less
        return np.unique(values, return_inverse=True)
    present = np.zeros(width, dtype=bool)
    present[values] = True
    held = np.flatnonzero(present)
    place = np.zeros(width, dtype=np.intp)
    place[held] = np.arange(held.size)
    return held, place[values]


def _greedy_cover(
    pool: Sequence[Hit], words: Sequence[np.ndarray], weights: np.ndarray, settings: RetrievalSettings
) -> list[Hit]:
    """Budgeted maximum coverage, greedily: the candidate adding the most weight of words not yet
    covered, while one fits (``settings.budget`` tokens, ``settings.top_k`` nodes). A candidate
    adding nothing new is never taken, so a repeat spends no budget. ``words``: each candidate's
    words as positions in ``weights``.

    Lazy greedy (Minoux, 1978): a candidate's gain only shrinks as words get covered, so the
    gains are kept in a heap and only the top one is recomputed until it stays on top.
    """
    # fsum: exact whatever the order, so the choice does not hang on how a sum was rounded.
    heap = [(-math.fsum(weights[held].tolist()), i) for i, held in enumerate(words)]
    heapq.heapify(heap)
    costs = [cost(hit.node) for hit in pool]
    smallest = min(costs)
    chosen: list[Hit] = []
    taken: set[str] = set()
    covered = np.zeros(len(weights), dtype=bool)
    used = 0
    while heap and len(chosen) < settings.top_k and used + smallest <= settings.budget:
        _, i = heapq.heappop(heap)
        hit = pool[i]
        if hit.node.id in taken or used + costs[i] > settings.budget:
            continue  # taken already (a node can be a candidate twice), or it no longer fits: never will
        held = words[i]
        gain = math.fsum(weights[held[~covered[held]]].tolist())
        if gain <= 0:
            continue
        if heap and gain < -heap[0][0]:
            heapq.heappush(heap, (-gain, i))  # stale: another may now add more
            continue
        chosen.append(hit)
        taken.add(hit.node.id)
        covered[held] = True
        used += costs[i]
    return chosen


def _subject(leaves: Sequence[Hit], summaries: SummaryMap) -> str | None:
    """The one document an overview is about, if the channel holds one: every candidate leaf
    is of that source and no other source has summaries. In a channel holding several
    documents an overview is of them all, and each one's root serves it (measured: giving a
    channel of 14 patents the openings of its best-ranked sources cost 4.6 points)."""
    sources = {hit.node.source_ids[0] for hit in leaves if hit.node.source_ids}
    if len(sources) != 1 or not summaries.centred <= sources:
        return None
    return next(iter(sources))


def _opening(
    store: TreeQueries,
    state: TreeState | None,
    fresh: FreshLeaves,
    query: Query,
    source: str,
    gist: Sequence[Hit],
    settings: RetrievalSettings,
) -> list[Hit]:
    """The first leaves of ``source`` in its own order, not in ``gist``, within what ``gist``
    leaves of ``settings`` (tokens and nodes), each scored by its cosine to the question.

    Why: a document's opening is where its authors summarise it (the lead of news, an
    abstract, a report's findings, a patent's field and summary), which a summary built by
    coverage of its frequent words does not reproduce. Measured with ``bench.retrieval`` on
    one-document channels at 2,000 tokens: patents (the dev set's overview questions) from
    75.9 to 80.3 points of gold-word recall, over BM25's 78.1; 500 tokens and the other
    sets' questions (themes and details) unchanged, QuALITY's ten overview questions -0.1.
    """
    room = settings.top_k - len(gist)
    left = settings.budget - sum(cost(hit.node) for hit in gist)
    if room <= 0 or left <= 0:
        return []
    taken = {hit.node.id for hit in gist}
    wanted = [leaf_id(source, ordinal) for ordinal in range(len(taken) + room)]
    found = _scored(store, state, fresh, query, wanted)
    in_order = [found[node_id] for node_id in wanted if node_id in found and node_id not in taken]
    return fill_budget(in_order, left, room)


def _scored(store: TreeQueries, state: TreeState | None, fresh: FreshLeaves, query: Query,
            ids: Sequence[str]) -> dict[str, Hit]:
    """The nodes ``ids`` that exist, as hits scored by their cosine to the question: from the
    fresh leaves, the others from the served tree (one Chroma query restricted to their ids)."""
    found = {hit.node.id: hit for hit in fresh.scored(query.vector, ids)}
    missing = [node_id for node_id in ids if node_id not in found]
    if missing and state is not None:
        found |= {hit.node.id: hit for hit in store.query_tree(state.version, query.vector, len(missing), ids=missing)}
    return found


def _summaries_for(query: Query, scope: Scope, leaves: list[Hit], summaries: SummaryMap) -> list[Hit]:
    """The candidate summaries, best first, by cosine plus ``CENTRALITY_WEIGHT`` x centrality:
    the summaries above the best leaves and, for an overview, the channel's top summaries.

    An overview takes the tops (the channel's highest layer and each source's
    root, ranked among themselves as above) before anything else: the offline
    summariser makes a root from all its source's leaves, in a larger budget
    (``summarizing.WHOLE_FACTOR``), so it is the best single text about the
    whole, and over several sources every source is represented.
    """
    tops = list(summaries.tops) if scope.kind is ScopeKind.OVERVIEW else []
    first = set(tops)
    above = summaries.ancestors([hit.node for hit in leaves[:ANCESTOR_LEAVES]])
    wanted = list(dict.fromkeys([*tops, *above]))
    hits = summaries.hits(query.vector, wanted)

    def rank(hit: Hit) -> tuple[int, float, str]:
        value = hit.score + CENTRALITY_WEIGHT * summaries.centrality.get(hit.node.id, 0.0)
        return (0 if hit.node.id in first else 1, -value, hit.node.id)

    return sorted(hits, key=rank)


def _fuse(
    store: TreeQueries,
    state: TreeState | None,
    fresh: FreshLeaves,
    query: Query,
    dense: list[Hit],
    lexical: list[tuple[str, float]],
) -> list[Hit]:
    """Dense and BM25 rankings of the same leaves fused into one by their scores (``fusion.py``).

    Leaves found only lexically get their cosine from the fresh leaves or from
    Chroma (one query restricted to their ids), so every hit keeps a comparable score.
    """
    known = {hit.node.id: hit for hit in dense}
    known |= _scored(store, state, fresh, query, [node_id for node_id, _ in lexical if node_id not in known])
    ids = sorted(known)
    order = fused_order(ids, [known[node_id].score for node_id in ids], dict(lexical))
    return [known[node_id] for node_id in order]


def _by_score(hits: Sequence[Hit]) -> list[Hit]:
    return sorted(hits, key=lambda h: (-h.score, h.node.id))


def _merge_by_score(ranked: list[Hit], fresh: list[Hit]) -> list[Hit]:
    """``ranked`` in its order, with each of ``fresh`` (best first) placed before the
    first ranked hit it scores higher than."""
    if not fresh:
        return ranked
    merged: list[Hit] = []
    pending = _by_score(fresh)
    for hit in ranked:
        while pending and pending[0].score > hit.score:
            merged.append(pending.pop(0))
        merged.append(hit)
    return merged + pending


def _traverse(store: TreeQueries, state: TreeState, vector: np.ndarray, per_layer: int) -> list[Hit]:
    """Top-down: the best nodes of the top layer, then the best of their children, to the leaves.

    Subtrees of different heights hang under the channel's layers, so children
    are chosen by id, whatever their layer; each step goes at least one layer
    down, so there are at most as many steps as layers.
    """
    top = max(state.nodes_per_layer, default=0)
    chosen = store.query_tree(state.version, vector, per_layer, where={"layer": top})
    selected = list(chosen)
    for _ in range(top):
        children = sorted({child for hit in chosen for child in hit.node.children})
        if not children:
            break
        chosen = store.query_tree(state.version, vector, per_layer, ids=children)
        selected += chosen
    return selected
