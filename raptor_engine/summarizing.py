"""The offline summariser: the sentences that together cover a cluster's members.

RAPTOR asks a language model to summarise each cluster; with no model at hand
we extract sentences from the members. Picking the sentences most central to
the cluster (the previous selector) repeats the centroid's point several times
and drops what only some members say. Here the choice maximises *coverage* of
the cluster's distinct content under a token budget, the budgeted submodular
approach of Lin & Bilmes (2011, "A Class of Submodular Functions for Document
Summarization"):

- A sentence is the set of its **content words**: lowercase words of two or
  more letters or digits, minus English stop words (the words BM25 indexes,
  :mod:`raptor_engine.lexical`).
- A word weighs ``df * log(1 + n / df)``, where ``df`` is the number of the
  cluster's ``n`` members that use it: a shared word counts more than a word
  of one member, but less than in proportion (the idf-like factor), so
  ubiquitous words do not drown the members' own points; words of one member
  still count.
- The objective is the total weight of the words covered; a word counts once
  however many chosen sentences repeat it, which makes it submodular.
- Selection is greedy by cost-benefit ratio (new weight per token), while the
  budget allows. When the budget can hold one sentence of every member, it
  first takes sentences from members not yet represented, so a summary of
  five members does not come from one of them, then fills the rest from
  anywhere. When it cannot (a cluster of thirty chunks in 130 tokens), the
  ratio alone decides: forcing one sentence per member there spends the
  budget on weak sentences of many members, and measured worse at the top of
  the tree (``bench/summaries.py``). As in the paper the result is compared
  with the best single sentence that fits, and the better one is kept.
- A sentence most of whose content words are in one already chosen sentence
  is a near duplicate and never chosen.

The chosen sentences are given by member, then position in the member (the
members' order), so the summary reads in the order of its sources. No
randomness: the same texts give the same summary, byte for byte. When not even
one sentence fits the budget, the best one is cut at a word boundary. Cost: a
few milliseconds for a cluster of about thirty 100-token members (one batched
token count and a few sparse products per chosen sentence).

A build summarises every leaf once per layer above it (a summariser reading
leaves gets all the leaves under each cluster), so each summariser keeps the
sentences of the texts it read lately, with their content words and token
counts (:class:`_SentenceCache`): on 15 articles the repeated splitting and
token counting were two thirds of the summariser's time.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import CountVectorizer

from raptor_engine import defaults
from raptor_engine.chunking import sentences as sentences_of
from raptor_engine.lexical import WORD_PATTERN
from raptor_engine.protocols import TokenCounter

DEFAULT_SUMMARY_TOKENS = defaults.SUMMARY_TOKENS
# A root (the top of a source, or of the channel) gets this many times the budget: it is what
# a question about the whole material opens with. On the patents, one coverage extract of a
# document's leaves in 500 tokens held 57.7 % of the gold summary's content words; four
# 130-token summaries of its clusters, chosen as retrieval does, 50.7 % (bench.retrieval).
WHOLE_FACTOR = 3
# A candidate with this share of its content words inside one chosen sentence adds too little to read.
NEAR_DUPLICATE = 0.8
# Member texts whose sentences a summariser keeps (about a few KiB each): a build of a thousand
# leaves reads each of them once per layer, and a long-lived bot builds channel after channel.
CACHED_TEXTS = 4096

# The same analyser as the BM25 index (lower case, two or more word characters, English
# stop words removed), so a "word" means one thing across the engine.
_content_words = CountVectorizer(lowercase=True, stop_words="english", token_pattern=WORD_PATTERN).build_analyzer()


class ExtractiveSummarizer:
    """A :class:`~raptor_engine.protocols.Summarizer` that extracts the sentences covering a cluster.

    Contract of :meth:`summarize_now` (and :meth:`summarize`): the summary is
    whole sentences of the members, joined by one space, in member order then
    reading order, at most ``max_tokens`` tokens by ``counter`` (a single
    sentence cut at a word boundary when no sentence fits), no sentence twice;
    empty only when the members hold no text. Deterministic.
    """

    def __init__(self, counter: TokenCounter, max_tokens: int = DEFAULT_SUMMARY_TOKENS) -> None:
        self._counter = counter
        self._max_tokens = max_tokens
        self._sentences = _SentenceCache(counter, CACHED_TEXTS)

    @property
    def identity(self) -> str:
        """Names the selector and budget; part of the summary cache key, so a new
        selector never reuses summaries cached by an older one."""
        return f"extractive-coverage-v2/{self._max_tokens}/whole-x{WHOLE_FACTOR}"

    @property
    def reads_leaves(self) -> bool:
        """True: every summary covers the leaves beneath its cluster (see ``LeafSummarizer``)."""
        return True

    async def summarize(self, texts: Sequence[str]) -> str:
        """See the ``Summarizer`` protocol. CPU work runs in a worker thread."""
        return await asyncio.to_thread(self.summarize_now, texts)

    async def summarize_whole(self, texts: Sequence[str]) -> str:
        """A root's summary: as :meth:`summarize`, within ``WHOLE_FACTOR`` times the budget."""
        return await asyncio.to_thread(self.summarize_now, texts, WHOLE_FACTOR * self._max_tokens)

    def summarize_now(self, texts: Sequence[str], max_tokens: int | None = None) -> str:
        """The summary of ``texts`` within ``max_tokens`` (default: the summariser's budget),
        computed in the calling thread."""
        pool = _pool_of(texts, self._sentences)
        if not pool.sentences:
            return ""
        budget = max(self._max_tokens if max_tokens is None else max_tokens, 1)
        chosen = _best_of(pool, _greedy(pool, budget), budget)
        if not chosen:  # not one sentence fits: cut the most informative one
            return _cut(pool.sentences[_most_informative(pool)], budget, self._counter)
        return self._within_budget(pool, chosen, budget)

    def _within_budget(self, pool: _Pool, chosen: list[int], budget: int) -> str:
        """The chosen sentences (each within the budget) in reading order, checked as one text.

        Sentence counts add up for a WordPiece tokenizer; for one that does
        not, the last chosen (least useful) sentences are dropped until the
        joined text fits.
        """
        summary = " ".join(pool.sentences[i] for i in sorted(chosen))
        while len(chosen) > 1 and self._counter.count(summary) > budget:
            chosen = chosen[:-1]
            summary = " ".join(pool.sentences[i] for i in sorted(chosen))
        return summary


@dataclass(frozen=True, slots=True)
class _Pool:
    """The distinct sentences of a cluster, in member then reading order, with what selection needs.

    ``words`` is the binary sentence-by-content-word matrix (CSR), ``weights``
    the weight of each word, ``tokens`` each sentence's token count, and
    ``members`` the binary sentence-by-member matrix (a sentence repeated by
    several members belongs to each of them).
    """

    sentences: list[str]
    words: sparse.csr_matrix
    weights: np.ndarray
    tokens: np.ndarray
    members: sparse.csr_matrix

    @property
    def sizes(self) -> np.ndarray:
        """The number of distinct content words of each sentence."""
        return np.diff(self.words.indptr)


@dataclass(frozen=True, slots=True)
class _Sentence:
    """One sentence of a member text, with its content words and its token count (at least 1)."""

    text: str
    words: frozenset[str]
    tokens: int


class _SentenceCache:
    """The sentences of the last ``size`` member texts read, by text (least recently used
    dropped first). Thread-safe: summaries are made on several threads at once. The values
    are what :func:`chunking.sentences`, the content-word analyser and the counter give, so a
    summary is the same whether its members were cached or not."""

    def __init__(self, counter: TokenCounter, size: int) -> None:
        self._counter = counter
        self._size = size
        self._texts: OrderedDict[str, tuple[_Sentence, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, texts: Sequence[str]) -> list[tuple[_Sentence, ...]]:
        """The sentences of each of ``texts``; those not cached are split and counted now,
        in one batched token count."""
        with self._lock:
            known = {text: self._texts[text] for text in texts if text in self._texts}
            for text in known:
                self._texts.move_to_end(text)
        new = {text: sentences_of(text) for text in texts if text not in known}
        if new:
            distinct = list(dict.fromkeys(s for split in new.values() for s in split))
            counts = dict(zip(distinct, self._counter.count_many(distinct), strict=True))
            for text, split in new.items():
                known[text] = tuple(_Sentence(s, frozenset(_content_words(s)), max(counts[s], 1)) for s in split)
            with self._lock:
                self._texts.update((text, known[text]) for text in new)
                while len(self._texts) > self._size:
                    self._texts.popitem(last=False)
        return [known[text] for text in texts]


def _pool_of(texts: Sequence[str], cache: _SentenceCache) -> _Pool:
    """Splits the members into distinct sentences and computes their words, weights and counts."""
    sentences: list[_Sentence] = []
    first_seen: dict[str, int] = {}
    owners: list[list[int]] = []
    for member, split in enumerate(cache.of(texts)):
        for sentence in split:
            index = first_seen.setdefault(sentence.text, len(sentences))
            if index == len(sentences):
                sentences.append(sentence)
                owners.append([])
            if not owners[index] or owners[index][-1] != member:
                owners[index].append(member)
    # Columns in sorted word order: the same texts give the same matrices, run after run.
    vocabulary = {word: i for i, word in enumerate(sorted(set().union(*(s.words for s in sentences))))}
    words = _incidence([[vocabulary[w] for w in s.words] for s in sentences], len(vocabulary))
    members = _incidence(owners, len(texts))
    tokens = np.asarray([s.tokens for s in sentences], dtype=np.int64)
    return _Pool([s.text for s in sentences], words, _word_weights(words, members), tokens, members)


def _incidence(rows: list[list[int]], columns: int) -> sparse.csr_matrix:
    """A binary CSR matrix with a one at ``(r, c)`` for each ``c`` in ``rows[r]``."""
    indptr = np.cumsum([0, *(len(row) for row in rows)])
    indices = np.fromiter((c for row in rows for c in sorted(row)), dtype=np.int64, count=int(indptr[-1]))
    data = np.ones(len(indices), dtype=np.float64)
    return sparse.csr_matrix((data, indices, indptr), shape=(len(rows), columns))


def _word_weights(words: sparse.csr_matrix, members: sparse.csr_matrix) -> np.ndarray:
    """``df * log(1 + n / df)`` per word: ``df`` of the ``n`` members that have words use it."""
    uses = (members.T @ words).tocsr()  # member-by-word: how many of a member's sentences use the word
    df = np.bincount(uses.indices, minlength=words.shape[1]).astype(np.float64)
    n = max(int(np.count_nonzero(np.diff(uses.indptr))), 1)
    return df * np.log1p(n / np.maximum(df, 1.0))


def _greedy(pool: _Pool, budget: int) -> list[int]:
    """Sentence indices in the order chosen: best new weight per token first (members not yet
    represented before the others when every member can be), until nothing that fits adds a new word."""
    every_member = _room_for_every_member(pool, budget)
    count = len(pool.sentences)
    open_ = np.ones(count, dtype=bool)  # neither chosen nor a near duplicate of a chosen one
    uncovered_words = np.ones(pool.words.shape[1], dtype=np.float64)
    unrepresented = np.ones(pool.members.shape[1], dtype=np.float64)
    chosen: list[int] = []
    used = 0
    while True:
        gains = pool.words @ (pool.weights * uncovered_words)
        eligible = open_ & (pool.tokens <= budget - used) & (gains > 0)
        fresh = eligible & (pool.members @ unrepresented > 0) if every_member else eligible
        candidates = fresh if fresh.any() else eligible
        if not candidates.any():
            return chosen
        # argmax returns the first of equal ratios: ties go to reading order.
        best = int(np.argmax(np.where(candidates, gains / pool.tokens, -np.inf)))
        chosen.append(best)
        used += int(pool.tokens[best])
        uncovered_words[_row(pool.words, best)] = 0.0
        unrepresented[_row(pool.members, best)] = 0.0
        open_ &= ~_near_duplicates(pool, best)
        open_[best] = False


def _room_for_every_member(pool: _Pool, budget: int) -> bool:
    """Whether the shortest sentences with content words of every member that has one fit together."""
    informative = pool.sizes > 0
    by_member = pool.members.tocsc()
    total = 0
    for member in range(by_member.shape[1]):
        own = _row(by_member, member)  # CSC: the member's sentences
        own = own[informative[own]]
        if own.size:
            total += int(pool.tokens[own].min())
    return total <= budget


def _row(matrix: sparse.csr_matrix | sparse.csc_matrix, index: int) -> np.ndarray:
    """The column indices of the ones in row ``index`` of a CSR matrix, or the row indices
    in column ``index`` of a CSC one (no scipy slicing: it is slow)."""
    return matrix.indices[matrix.indptr[index] : matrix.indptr[index + 1]]


def _near_duplicates(pool: _Pool, chosen: int) -> np.ndarray:
    """Which sentences have at least ``NEAR_DUPLICATE`` of their content words in sentence ``chosen``."""
    in_chosen = np.zeros(pool.words.shape[1], dtype=np.float64)
    in_chosen[_row(pool.words, chosen)] = 1.0
    shared = pool.words @ in_chosen
    sizes = pool.sizes
    return (sizes > 0) & (shared >= NEAR_DUPLICATE * sizes)


def _best_of(pool: _Pool, chosen: list[int], budget: int) -> list[int]:
    """``chosen``, or the best single sentence that fits when it alone covers more weight
    (the check that gives the greedy cost-benefit rule its guarantee)."""
    singles = pool.words @ pool.weights
    fitting = np.flatnonzero(pool.tokens <= budget)
    if fitting.size == 0:
        return chosen
    best = int(fitting[np.argmax(singles[fitting])])
    if not chosen:
        return [best]
    covered = np.unique(np.concatenate([_row(pool.words, i) for i in chosen]))
    return [best] if singles[best] > pool.weights[covered].sum() else chosen


def _most_informative(pool: _Pool) -> int:
    """The sentence with the most word weight (the first of equals)."""
    return int(np.argmax(pool.words @ pool.weights))


def _cut(sentence: str, budget: int, counter: TokenCounter) -> str:
    """The longest run of whole words from the start of ``sentence`` within ``budget`` tokens.

    A first word alone over the budget (a long URL) is cut at characters.
    """
    words = sentence.split()
    counts = counter.count_many(words)
    keep, total = 0, 0
    for tokens in counts:
        if total + tokens > budget:
            break
        total += tokens
        keep += 1
    # Word counts add up for WordPiece; the loop guards tokenizers that merge across spaces.
    while keep > 0 and counter.count(" ".join(words[:keep])) > budget:
        keep -= 1
    if keep > 0:
        return " ".join(words[:keep])
    return _cut_characters(words[0], budget, counter)


def _cut_characters(word: str, budget: int, counter: TokenCounter) -> str:
    """The longest prefix of ``word`` within ``budget`` tokens (at least one character)."""
    low, high = 1, len(word)
    while low < high:  # binary search: counts grow with the prefix
        middle = math.ceil((low + high) / 2)
        if counter.count(word[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return word[:low]
